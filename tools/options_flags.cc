// tools/options_flags.cc -- see options_flags.h. The table is kTable below; each row's parser is
// a small function next to it.
#include "tools/options_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "memest/memest.h"

namespace memest::cli {
namespace {

// ---------------------------------------------------------------------------------------------
// Defaults in help texts, from memest::DescribeOptions().

std::string Normalize(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == '-' || ch == '.' || ch == ' ' || ch == '/') {
      out += '_';
    } else {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
  }
  while (!out.empty() && out.front() == '_') out.erase(out.begin());
  return out;
}

// The OptionDoc for an Options field: exact name match, else a doc whose name ends in the key
// ("allocator.expandable_segments" for "expandable_segments").
const OptionDoc* FindDoc(const std::vector<OptionDoc>& docs, const std::vector<const char*>& keys) {
  for (const char* key : keys) {
    for (const auto& d : docs) {
      if (Normalize(d.name) == key) return &d;
    }
  }
  for (const char* key : keys) {
    const std::string suffix = std::string("_") + key;
    for (const auto& d : docs) {
      const std::string n = Normalize(d.name);
      if (n.size() > suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        return &d;
      }
    }
  }
  return nullptr;
}

// A decimal written with a fixed six places (std::to_string of a double: "0.000000",
// "0.010000") in its shortest form ("0", "0.01"); any other text unchanged.
std::string ReadableNumber(const std::string& text) {
  if (text.find('.') == std::string::npos) return text;
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) return text;
  return fmt::format("{}", v);
}

std::string DefaultText(const OptionDoc& d) {
  std::string value = d.default_value.empty() ? "unset" : d.default_value;
  if (value.size() >= 2 && value.front() == '(' && value.back() == ')') {
    value = value.substr(1, value.size() - 2);
  }
  return ReadableNumber(value);
}

// ---------------------------------------------------------------------------------------------
// Parsers of the table's rows. Each reads its own flag from `all` and sets one part of Options.

// Prefixes a failed parse with its flag.
template <typename T>
Result<T> ForFlag(const char* flag, Result<T> parsed) {
  if (parsed.ok()) return parsed;
  return InvalidArgument(fmt::format("{}: {}", flag, parsed.status().message()));
}

// An integer flag into `*out` when the user gave it.
Status ApplyInteger(const OptionFlags& all, const char* long_name, int64_t min, int64_t* out) {
  if (!all.Given(long_name)) return Status::Ok();
  MEMEST_ASSIGN_OR_RETURN(*out,
                          ParseInteger(std::string("--") + long_name, all.Text(long_name), min));
  return Status::Ok();
}

Status ApplyBatch(const OptionFlags& all, Options* o) {
  if (!all.Given("batch")) return Status::Ok();
  int64_t batch = 0;
  MEMEST_RETURN_IF_ERROR(ApplyInteger(all, "batch", 1, &batch));
  o->batch = batch;
  return Status::Ok();
}

Result<std::pair<std::string, int64_t>> ParseDim(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument(
        fmt::format("--dim '{}': expected NAME=VALUE, e.g. --dim seq=128", text));
  }
  const std::string name = text.substr(0, eq);
  Result<int64_t> v = ParseInteger("--dim " + name, text.substr(eq + 1), 0);
  if (!v.ok()) return v.status();
  return std::make_pair(name, *v);
}

Status ApplyDims(const OptionFlags& all, Options* o) {
  for (const auto& arg : all.Texts("dim")) {
    MEMEST_ASSIGN_OR_RETURN(auto dim, ParseDim(arg));
    if (o->dims.count(dim.first)) {
      return InvalidArgument(fmt::format("--dim {} given twice", dim.first));
    }
    o->dims[dim.first] = dim.second;
  }
  return Status::Ok();
}

Status ApplyMode(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(o->mode, ForFlag("--mode", ParseMode(all.Text("mode"))));
  return Status::Ok();
}

Status ApplyOptimizer(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(o->optimizer,
                          ForFlag("--optimizer", ParseOptimizer(all.Text("optimizer"))));
  return Status::Ok();
}

Status ApplyOptimizerImpl(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(
      o->optimizer_impl,
      ForFlag("--optimizer-impl", ParseOptimizerImpl(all.Text("optimizer-impl"))));
  return Status::Ok();
}

Status ApplyWeightDecay(const OptionFlags& all, Options* o) {
  o->weight_decay = all.Number("weight-decay");
  return Status::Ok();
}

Status ApplyPrecision(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(o->precision,
                          ForFlag("--precision", ParsePrecision(all.Text("precision"))));
  return Status::Ok();
}

// "ce" is accepted for cross-entropy (docs/measurement.md spells it so).
Status ApplyLoss(const OptionFlags& all, Options* o) {
  const std::string& text = all.Text("loss");
  MEMEST_ASSIGN_OR_RETURN(o->loss,
                          ForFlag("--loss", ParseLoss(text == "ce" ? "cross-entropy" : text)));
  return Status::Ok();
}

// A flag of two words, `yes` or `no`, into *out (true for `yes`).
Status ApplyTwoWords(const OptionFlags& all, std::string_view name, std::string_view yes,
                     std::string_view no, bool* out) {
  const std::string& text = all.Text(name);
  if (text == yes || text == no) {
    *out = text == yes;
    return Status::Ok();
  }
  return InvalidArgument(fmt::format("--{} '{}': expected {} or {}", name, text, yes, no));
}

Status ApplyRelu(const OptionFlags& all, Options* o) {
  return ApplyTwoWords(all, "relu", "in-place", "out-of-place", &o->inplace_relu);
}

Status ApplyOutputs(const OptionFlags& all, Options* o) {
  return ApplyTwoWords(all, "outputs", "held", "dropped", &o->outputs_held);
}

Status ApplyGpu(const OptionFlags& all, Options* o) {
  o->gpu = all.Text("gpu");
  return Status::Ok();
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// --gpu-file: a GPU given whole (Options::custom_gpu). --gpu names a profile of the file (else of
// the built-in table); without --gpu, the file's first profile.
Status ApplyGpuFile(const OptionFlags& all, Options* o) {
  const std::string& file = all.Text("gpu-file");
  if (file.empty()) return Status::Ok();
  Result<std::vector<GpuProfile>> profiles = LoadGpuProfiles(file);
  if (!profiles.ok()) return profiles.status().WithContext("--gpu-file");
  const GpuProfile* pick = all.Given("gpu") ? nullptr : &profiles->front();
  for (const GpuProfile& p : *profiles) {
    if (!pick && Lower(p.name) == Lower(all.Text("gpu"))) pick = &p;
  }
  if (pick) {
    o->custom_gpu = std::make_shared<const GpuProfile>(*pick);
    o->gpu = pick->name;
  }
  return Status::Ok();
}

// --capacity: the GPU (--gpu, --gpu-file) with this much usable memory.
Status ApplyCapacity(const OptionFlags& all, Options* o) {
  const std::string& text = all.Text("capacity");
  if (text.empty()) return Status::Ok();
  const std::optional<uint64_t> bytes = ParseByteSize(text);
  if (!bytes || *bytes == 0) {
    return InvalidArgument(fmt::format(
        "--capacity {}: expected bytes above 0 with an optional unit (23.5GiB, 40960MiB)", text));
  }
  Result<GpuProfile> base = ResolveGpuProfile(*o);
  if (!base.ok()) return base.status().WithContext("--gpu " + o->gpu);
  o->custom_gpu = std::make_shared<const GpuProfile>(WithCapacity(*base, *bytes));
  return Status::Ok();
}

Status ApplyAttention(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(o->attention, ParseAttention(all.Text("attention")));
  return Status::Ok();
}

Status ApplyTrainable(const OptionFlags& all, Options* o) {
  o->trainable = all.Text("trainable");
  return Status::Ok();
}

Status ApplyFreeze(const OptionFlags& all, Options* o) {
  o->freeze = all.Text("freeze");
  return Status::Ok();
}

Status ApplyWeightDtype(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(o->weight_dtype,
                          ForFlag("--weight-dtype", ParseWeightDtype(all.Text("weight-dtype"))));
  return Status::Ok();
}

Status ApplyKvCacheDtype(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(
      o->kv_cache_dtype,
      ForFlag("--kv-cache-dtype", ParseKvCacheDtype(all.Text("kv-cache-dtype"))));
  return Status::Ok();
}

Status ApplyStack(const OptionFlags& all, Options* o) {
  o->stack = all.Text("stack");
  return Status::Ok();
}

Status ApplyStackFile(const OptionFlags& all, Options* o) {
  const std::string& file = all.Text("stack-file");
  if (file.empty()) return Status::Ok();
  Result<StackProfile> stack = LoadStackProfile(file);
  if (!stack.ok()) return stack.status().WithContext("--stack-file");
  o->custom_stack = std::make_shared<const StackProfile>(std::move(stack).value());
  return Status::Ok();
}

Status ApplyFitOn(const OptionFlags& all, Options* o) {
  MEMEST_ASSIGN_OR_RETURN(o->fit.on, ParseFitOn(all.Text("fit-on")));
  return Status::Ok();
}

// "5%" (a share of the GPU's usable memory) or bytes with an optional unit ("512MiB", "2GiB",
// "1000000"). Empty: no margin.
Status ApplySafetyMargin(const OptionFlags& all, Options* o) {
  const std::string& text = all.Text("safety-margin");
  if (text.empty()) return Status::Ok();
  const auto bad = [&] {
    return InvalidArgument(fmt::format(
        "--safety-margin {}: expected a percentage below 100 (5%) or bytes (512MiB, 2GiB)", text));
  };
  if (text.back() == '%') {
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(text, &used);
    } catch (const std::exception&) {
      return bad();
    }
    if (used + 1 != text.size() || !std::isfinite(value) || value < 0 || value >= 100) {
      return bad();
    }
    o->fit.margin_fraction = value / 100.0;
    return Status::Ok();
  }
  const std::optional<uint64_t> bytes = ParseByteSize(text);
  if (!bytes) return bad();
  o->fit.margin_bytes = *bytes;
  return Status::Ok();
}

Status ApplyAllowUnknownShapes(const OptionFlags& all, Options* o) {
  o->allow_unknown_shapes = all.Switch("allow-unknown-shapes");
  return Status::Ok();
}

Status ApplyExpandableSegments(const OptionFlags& all, Options* o) {
  o->allocator.expandable_segments = all.Switch("expandable-segments");
  return Status::Ok();
}

// A share in (0, 1] (Validate checks the range). Empty: no limit.
Status ApplyMemoryFraction(const OptionFlags& all, Options* o) {
  const std::string& text = all.Text("memory-fraction");
  if (text.empty()) return Status::Ok();
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || !(value > 0 && value <= 1)) {
    return InvalidArgument(
        fmt::format("--memory-fraction {}: expected a share in (0, 1], e.g. 0.5", text));
  }
  o->allocator.memory_fraction = value;
  return Status::Ok();
}

Status ApplyMicroBatches(const OptionFlags& all, Options* o) {
  return ApplyInteger(all, "micro-batches", 1, &o->micro_batches);
}

// --checkpoint blocks | SEGMENTS: every repeated block, or checkpoint_sequential's segments.
Status ApplyCheckpoint(const OptionFlags& all, Options* o) {
  if (all.Given("checkpoint") && all.Text("checkpoint") == "blocks") {
    o->checkpoint_blocks = true;
    return Status::Ok();
  }
  return ApplyInteger(all, "checkpoint", 0, &o->checkpoint_segments);
}

// The many-GPU rows (memest::Parallelism, options.h). The degrees themselves are checked by
// memest::Validate; CheckParallelFlags checks the rows against each other.

Status ApplyWorldSize(const OptionFlags& all, Options* o) {
  o->parallel.world_size = all.Integer("world-size");
  return Status::Ok();
}

Status ApplyDp(const OptionFlags& all, Options* o) {
  o->parallel.dp = all.Integer("dp");
  return Status::Ok();
}

Status ApplyTp(const OptionFlags& all, Options* o) {
  o->parallel.tp = all.Integer("tp");
  return Status::Ok();
}

Status ApplyPp(const OptionFlags& all, Options* o) {
  o->parallel.pp = all.Integer("pp");
  return Status::Ok();
}

// --zero N: DeepSpeed ZeRO stage N; one way to shard, so not with --fsdp.
Status ApplyZero(const OptionFlags& all, Options* o) {
  const std::string& zero = all.Text("zero");
  if (!zero.empty() && !all.Text("fsdp").empty()) {
    return InvalidArgument("--zero and --fsdp are two ways to shard: give one");
  }
  if (zero.empty()) return Status::Ok();
  const std::string names[] = {"none", "zero1", "zero2", "zero3"};
  if (zero.size() != 1 || zero[0] < '0' || zero[0] > '3') {
    return InvalidArgument("--zero " + zero + ": expected 0, 1, 2 or 3");
  }
  MEMEST_ASSIGN_OR_RETURN(o->parallel.sharding, ParseSharding(names[zero[0] - '0']));
  return Status::Ok();
}

Status ApplyFsdp(const OptionFlags& all, Options* o) {
  const std::string& fsdp = all.Text("fsdp");
  if (fsdp.empty()) return Status::Ok();
  Result<Sharding> sharding = ParseSharding("fsdp-" + fsdp);
  if (!sharding.ok()) {
    return InvalidArgument("--fsdp " + fsdp + ": expected full, grad-op, hybrid or no-shard");
  }
  o->parallel.sharding = *sharding;
  return Status::Ok();
}

Status ApplyFsdpUnit(const OptionFlags& all, Options* o) {
  o->parallel.fsdp_unit = all.Text("fsdp-unit");
  return Status::Ok();
}

Status ApplySequenceParallel(const OptionFlags& all, Options* o) {
  o->parallel.sequence_parallel = all.Switch("sequence-parallel");
  return Status::Ok();
}

Status ApplyOffloadOptimizer(const OptionFlags& all, Options* o) {
  o->parallel.offload_optimizer = all.Switch("offload-optimizer");
  return Status::Ok();
}

Status ApplyOffloadParams(const OptionFlags& all, Options* o) {
  o->parallel.offload_params = all.Switch("offload-params");
  return Status::Ok();
}

Status ApplyBucketCapMb(const OptionFlags& all, Options* o) {
  o->parallel.bucket_cap_mb = all.Number("bucket-cap-mb");
  return Status::Ok();
}

Status ApplyGradientAsBucketView(const OptionFlags& all, Options* o) {
  o->parallel.gradient_as_bucket_view = all.Switch("gradient-as-bucket-view");
  return Status::Ok();
}

// 0 (the flag's own default) keeps the library's default.
Status ApplyNcclBuffsize(const OptionFlags& all, Options* o) {
  if (all.Unsigned("nccl-buffsize") > 0) o->parallel.nccl_buffsize = all.Unsigned("nccl-buffsize");
  return Status::Ok();
}

// 0 (the flag's own default) keeps the library's default.
Status ApplyNcclChannels(const OptionFlags& all, Options* o) {
  if (all.Integer("nccl-channels") != 0) o->parallel.nccl_channels = all.Integer("nccl-channels");
  return Status::Ok();
}

Status ApplyGpusPerNode(const OptionFlags& all, Options* o) {
  o->parallel.gpus_per_node = all.Integer("gpus-per-node");
  return Status::Ok();
}

// A many-GPU row given for one GPU: dp x tp x pp against a world size of 1, or any row that
// describes many GPUs without --world-size.
Status CheckParallelFlags(const Parallelism& p, bool many_gpu_flags) {
  if (many_gpu_flags && p.world_size == 1 && (p.dp > 1 || p.tp > 1 || p.pp > 1)) {
    return InvalidArgument(
        "dp x tp x pp must equal the world size: " + std::to_string(p.dp > 0 ? p.dp : 1) + " x " +
        std::to_string(p.tp) + " x " + std::to_string(p.pp) + " != 1 (give --world-size)");
  }
  if (p.world_size == 1 && many_gpu_flags) return ManyGpuFlagsNeedAWorld();
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// The table.

// One row of the table (a call keeps the rows compact where a braced list would not).
OptionFlag Row(const char* names, const char* type_name, const char* help,
               std::vector<const char*> doc_keys, FlagValue value, bool training_only,
               std::string (*initial)(const Options&),
               Status (*apply)(const OptionFlags&, Options*), const char* group = nullptr,
               FlagStage stage = FlagStage::kParse) {
  return OptionFlag{names, type_name, help, std::move(doc_keys), value, training_only, initial,
                    apply, group,     stage};
}

constexpr bool kTraining = true;
constexpr bool kAnyMode = false;

std::string TrueOrFalse(bool b) { return b ? "true" : "false"; }

const std::vector<OptionFlag>& Table() {
  static const std::vector<OptionFlag> table = {
      Row("-b,--batch", "N", "binds the leading symbolic dim (batch) of every data input",
          {"batch"}, FlagValue::kText, kAnyMode, nullptr, ApplyBatch),
      Row("-d,--dim", "NAME=VALUE",
          "binds a named symbolic dim, e.g. --dim seq=128 (repeatable; wins over --batch)",
          {"dims", "dim"}, FlagValue::kTexts, kAnyMode, nullptr, ApplyDims),
      Row(
          "--mode", "train|infer", "train: one training step; infer: one forward pass", {"mode"},
          FlagValue::kText, kAnyMode,
          [](const Options& d) { return std::string(ToString(d.mode)); }, ApplyMode),
      Row(
          "--optimizer", "sgd|momentum|adam|adamw|adam8bit|adamw8bit",
          "optimizer of the training step", {"optimizer"}, FlagValue::kText, kTraining,
          [](const Options& d) { return std::string(ToString(d.optimizer)); }, ApplyOptimizer),
      Row(
          "--optimizer-impl", "foreach|single-tensor|fused",
          "how torch.optim runs the step (foreach=False is single-tensor, fused=True is fused)",
          {"optimizer_impl"}, FlagValue::kText, kTraining,
          [](const Options& d) { return std::string(ToString(d.optimizer_impl)); },
          ApplyOptimizerImpl),
      Row(
          "--weight-decay", "X", "weight decay (L2 for sgd/momentum/adam, decoupled for adamw)",
          {"weight_decay"}, FlagValue::kNumber, kTraining,
          [](const Options& d) { return fmt::format("{}", d.weight_decay); }, ApplyWeightDecay),
      Row(
          "--precision", "fp32|amp-fp16|amp-bf16|bf16", "numeric precision", {"precision"},
          FlagValue::kText, kAnyMode,
          [](const Options& d) { return std::string(ToString(d.precision)); }, ApplyPrecision),
      Row(
          "--loss", "auto|cross-entropy|mse",
          "loss on the first output in training (ce: cross-entropy)", {"loss"}, FlagValue::kText,
          kTraining, [](const Options& d) { return std::string(ToString(d.loss)); }, ApplyLoss),
      Row(
          "--outputs", "held|dropped",
          "training: the loop holds the model's outputs (logits) through backward, or drops them "
          "once the loss is computed (transformers' Trainer); dropped: analytical and symbolic "
          "backends",
          {"outputs_held"}, FlagValue::kText, kTraining,
          [](const Options& d) { return std::string(d.outputs_held ? "held" : "dropped"); },
          ApplyOutputs),
      Row(
          "--relu", "in-place|out-of-place",
          "a ReLU right after a convolution or batch norm writes into its input, as torchvision's "
          "and timm's nn.ReLU(inplace=True) do (the same bytes kept for backward; other blocks "
          "asked of the allocator), or makes a new tensor, as the graph is written",
          {"inplace_relu"}, FlagValue::kText, kAnyMode,
          [](const Options& d) {
            return std::string(d.inplace_relu ? "in-place" : "out-of-place");
          },
          ApplyRelu),
      Row(
          "--gpu", "NAME", "GPU profile (see --list-gpus)", {"gpu"}, FlagValue::kText, kAnyMode,
          [](const Options& d) { return d.gpu; }, ApplyGpu),
      Row("--gpu-file", "FILE.json",
          "GPU profiles in the built-in table's format (docs/gpu-profiles.md) for GPUs memest does "
          "not list; --gpu picks one (default: the file's first)",
          {}, FlagValue::kText, kAnyMode, nullptr, ApplyGpuFile, nullptr, FlagStage::kResolve),
      Row("--capacity", "BYTES",
          "the GPU's usable memory, overriding the profile's (a MIG slice, a limit the scheduler "
          "imposes): bytes with an optional unit, e.g. 23.5GiB",
          {}, FlagValue::kText, kAnyMode, nullptr, ApplyCapacity, nullptr, FlagStage::kResolve),
      Row(
          "--attention", "eager|sdpa-math|sdpa-flash|sdpa-mem-efficient|auto",
          "how attention runs: as the graph is written (eager, sdpa-math) or as a fused SDPA "
          "kernel that never stores the attention matrix (sdpa-flash, sdpa-mem-efficient; auto: "
          "PyTorch's choice for the GPU and precision)",
          {"attention"}, FlagValue::kText, kAnyMode,
          [](const Options& d) { return std::string(ToString(d.attention)); }, ApplyAttention),
      Row("--trainable", "REGEX",
          "only parameters whose initializer name matches this regular expression train (searched, "
          "like re.search)",
          {"trainable"}, FlagValue::kText, kTraining, nullptr, ApplyTrainable),
      Row("--freeze", "REGEX",
          "parameters whose initializer name matches this regular expression are frozen: no "
          "gradient, no optimizer state",
          {"freeze"}, FlagValue::kText, kTraining, nullptr, ApplyFreeze),
      Row(
          "--weight-dtype", "auto|fp16|bf16|int8|nf4|nf4-dq",
          "storage of the parameters that do not train (frozen ones; all in inference): half "
          "precision, or bitsandbytes int8 / 4-bit NormalFloat (nf4-dq: with double quantization) "
          "for Linear weights",
          {"weight_dtype"}, FlagValue::kText, kAnyMode,
          [](const Options& d) { return std::string(ToString(d.weight_dtype)); }, ApplyWeightDtype),
      Row(
          "--kv-cache-dtype", "auto|fp16|bf16|fp8|int8",
          "storage of the graph's key/value cache (past_key_values.* inputs, present.* outputs; "
          "inference): fp8/int8 take 1 byte per element",
          {"kv_cache_dtype"}, FlagValue::kText, kAnyMode,
          [](const Options& d) { return std::string(ToString(d.kv_cache_dtype)); },
          ApplyKvCacheDtype),
      Row(
          "--stack", "NAME",
          "software-stack profile: CUDA context, library memory, convolution workspaces, residual "
          "band (see --list-gpus)",
          {"stack"}, FlagValue::kText, kAnyMode, [](const Options& d) { return d.stack; },
          ApplyStack),
      Row("--stack-file", "FILE.json",
          "a stack profile file written by memest calibrate (wins over --stack)", {},
          FlagValue::kText, kAnyMode, nullptr, ApplyStackFile, nullptr, FlagStage::kResolve),
      Row(
          "--fit-on", "point|upper",
          "what decides 'fits' and the exit code: the top of the estimate's interval where it has "
          "one (upper), or the point estimate",
          {"fit_on"}, FlagValue::kText, kAnyMode,
          [](const Options& d) { return std::string(ToString(d.fit.on)); }, ApplyFitOn),
      Row("--safety-margin", "PCT|BYTES",
          "memory kept free on top of the judged peak: a percentage of the GPU (5%) or bytes "
          "(512MiB, 2GiB) (default: 0)",
          {}, FlagValue::kText, kAnyMode, nullptr, ApplySafetyMargin),
      Row(
          "--allow-unknown-shapes", "",
          "estimate even when some tensor's shape cannot be inferred, counting it conservatively "
          "(default: refuse, exit 3)",
          {"allow_unknown_shapes"}, FlagValue::kSwitch, kAnyMode,
          [](const Options& d) { return TrueOrFalse(d.allow_unknown_shapes); },
          ApplyAllowUnknownShapes),
      Row(
          "--expandable-segments", "", "PyTorch caching allocator with expandable_segments:True",
          {"expandable_segments", "allocator_expandable_segments"}, FlagValue::kSwitch, kAnyMode,
          [](const Options& d) { return TrueOrFalse(d.allocator.expandable_segments); },
          ApplyExpandableSegments),
      Row("--memory-fraction", "F",
          "torch.cuda.set_per_process_memory_fraction(F): the caching allocator reserves at most "
          "F x the GPU's total memory, releasing its cache and retrying before it runs out",
          {"memory_fraction", "allocator_memory_fraction"}, FlagValue::kText, kAnyMode, nullptr,
          ApplyMemoryFraction),
      Row("--micro-batches", "K",
          "gradient accumulation: micro-batches per optimizer step (--batch must divide)",
          {"micro_batches"}, FlagValue::kText, kTraining, nullptr, ApplyMicroBatches),
      Row("--checkpoint", "blocks|SEGMENTS",
          "activation checkpointing: 'blocks' checkpoints every repeated block (a decoder layer, "
          "as transformers' gradient_checkpointing_enable does); a number is "
          "checkpoint_sequential with that many segments, at most the graph's node count (0: off)",
          {"checkpoint_segments", "checkpoint_blocks"}, FlagValue::kText, kTraining, nullptr,
          ApplyCheckpoint),
      Row(
          "--world-size", "N", "GPUs of the job: dp x tp x pp", {"world_size"}, FlagValue::kInteger,
          kAnyMode, [](const Options& d) { return std::to_string(d.parallel.world_size); },
          ApplyWorldSize, kManyGpuGroup),
      Row(
          "--dp", "N", "data-parallel degree", {"dp / tp / pp"}, FlagValue::kInteger, kAnyMode,
          [](const Options& d) { return std::to_string(d.parallel.dp); }, ApplyDp, kManyGpuGroup),
      Row(
          "--tp", "N",
          "tensor-parallel degree: Megatron column/row splits of Linear layers, attention heads "
          "and vocabulary",
          {}, FlagValue::kInteger, kAnyMode,
          [](const Options& d) { return std::to_string(d.parallel.tp); }, ApplyTp, kManyGpuGroup),
      Row(
          "--pp", "N",
          "pipeline stages, 1F1B over --micro-batches micro-batches; the graph's repeated blocks "
          "are cut evenly",
          {}, FlagValue::kInteger, kAnyMode,
          [](const Options& d) { return std::to_string(d.parallel.pp); }, ApplyPp, kManyGpuGroup),
      Row("--zero", "0|1|2|3",
          "DeepSpeed ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters partitioned over "
          "the data-parallel ranks (0: DDP)",
          {"sharding"}, FlagValue::kText, kAnyMode, nullptr, ApplyZero, kManyGpuGroup),
      Row("--fsdp", "full|grad-op|hybrid|no-shard",
          "PyTorch FSDP2 sharding: full (reshard after forward), grad-op (keep parameters "
          "unsharded until backward), hybrid (shard within a node), no-shard",
          {}, FlagValue::kText, kAnyMode, nullptr, ApplyFsdp, kManyGpuGroup),
      Row("--fsdp-unit", "REGEX",
          "FSDP wrap unit: the text this regular expression matches in a parameter's name names "
          "its unit (default: the graph's repeated blocks)",
          {}, FlagValue::kText, kAnyMode, nullptr, ApplyFsdpUnit, kManyGpuGroup),
      Row(
          "--sequence-parallel", "", "Megatron sequence parallelism (with --tp)",
          {"sequence_parallel"}, FlagValue::kSwitch, kAnyMode,
          [](const Options& d) { return TrueOrFalse(d.parallel.sequence_parallel); },
          ApplySequenceParallel, kManyGpuGroup),
      Row(
          "--offload-optimizer", "",
          "optimizer state, master weights and gradient partitions in host memory",
          {"offload_optimizer / offload_params"}, FlagValue::kSwitch, kAnyMode,
          [](const Options& d) { return TrueOrFalse(d.parallel.offload_optimizer); },
          ApplyOffloadOptimizer, kManyGpuGroup),
      Row(
          "--offload-params", "", "parameter shards in host memory (--zero 3 or --fsdp)", {},
          FlagValue::kSwitch, kAnyMode,
          [](const Options& d) { return TrueOrFalse(d.parallel.offload_params); },
          ApplyOffloadParams, kManyGpuGroup),
      Row(
          "--bucket-cap-mb", "MB", "DDP gradient bucket size in MiB", {"bucket_cap_mb"},
          FlagValue::kNumber, kAnyMode,
          [](const Options& d) { return fmt::format("{}", d.parallel.bucket_cap_mb); },
          ApplyBucketCapMb, kManyGpuGroup),
      Row(
          "--gradient-as-bucket-view", "",
          "DDP gradients are views into the buckets (no second copy)", {}, FlagValue::kSwitch,
          kAnyMode,
          [](const Options& d) { return TrueOrFalse(d.parallel.gradient_as_bucket_view); },
          ApplyGradientAsBucketView, kManyGpuGroup),
      Row("--nccl-buffsize", "BYTES",
          "NCCL_BUFFSIZE in bytes, per channel and communicator (with --nccl-channels)",
          {"nccl_buffsize x channels"}, FlagValue::kUnsigned, kAnyMode, nullptr, ApplyNcclBuffsize,
          kManyGpuGroup),
      Row("--nccl-channels", "N", "NCCL channels per communicator", {}, FlagValue::kInteger,
          kAnyMode, nullptr, ApplyNcclChannels, kManyGpuGroup),
      Row(
          "--gpus-per-node", "N", "GPUs per node: the shard group of --fsdp hybrid (default: 8)",
          {}, FlagValue::kInteger, kAnyMode,
          [](const Options& d) { return std::to_string(d.parallel.gpus_per_node); },
          ApplyGpusPerNode, kManyGpuGroup),
  };
  return table;
}

// "-b,--batch" -> "batch".
std::string LongName(const char* names) {
  const std::string all = names;
  const size_t at = all.find("--");
  return at == std::string::npos ? all : all.substr(at + 2, all.find(',', at) - at - 2);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string HelpDefaults::With(std::string text, const std::vector<const char*>& keys,
                               const std::string& shown) {
  if (const OptionDoc* d = FindDoc(docs_, keys)) {
    used_.insert(d);
    text += " (default: " + (shown.empty() ? DefaultText(*d) : shown) + ")";
  }
  return text;
}

std::string HelpDefaults::Unclaimed() const {
  std::string out;
  for (const auto& d : docs_) {
    if (used_.count(&d)) continue;
    if (out.empty()) out = "Other estimation options (no flag; library defaults):\n";
    out += fmt::format("  {} = {}  {}\n", d.name, DefaultText(d), d.help);
  }
  if (!out.empty()) out += '\n';
  return out;
}

const std::vector<OptionFlag>& OptionFlagTable() { return Table(); }

Status ManyGpuFlagsNeedAWorld() {
  return InvalidArgument(
      "the many-GPU flags (--zero, --fsdp, --tp, --pp, --dp, --sequence-parallel, --offload-*, "
      "--per-rank) need --world-size > 1");
}

const std::vector<std::string>& MeasureOptionFlagNames() {
  // The Options fields the LibTorch harness executes (measurement/executor.h).
  static const std::vector<std::string> names = {"batch",        "dim",       "mode", "optimizer",
                                                 "weight-decay", "precision", "loss", "checkpoint"};
  return names;
}

namespace {

// A text flag's default as the flag spells it (empty: the option's documented value is shown).
std::string ShownDefault(const OptionFlag& flag) {
  static const Options defaults;
  return flag.value == FlagValue::kText && flag.initial ? flag.initial(defaults) : "";
}

}  // namespace

OptionFlags::OptionFlags(const std::vector<std::string>& names) {
  const Options defaults;
  for (const OptionFlag& flag : Table()) {
    std::string long_name = LongName(flag.names);
    if (!names.empty() && std::find(names.begin(), names.end(), long_name) == names.end()) {
      continue;
    }
    auto slot = std::make_unique<Slot>();
    slot->flag = &flag;
    slot->long_name = std::move(long_name);
    const std::string initial = flag.initial ? flag.initial(defaults) : "";
    slot->text = initial;
    slot->on = initial == "true";
    if (flag.value == FlagValue::kNumber) slot->number = std::stod(initial);
    if (flag.value == FlagValue::kInteger && !initial.empty()) slot->integer = std::stoll(initial);
    if (flag.value == FlagValue::kUnsigned && !initial.empty()) {
      slot->unsigned_value = std::stoull(initial);
    }
    slots_.push_back(std::move(slot));
  }
}

void OptionFlags::AddTo(CLI::App& app, HelpDefaults& help) {
  for (const auto& slot : slots_) {
    const OptionFlag& flag = *slot->flag;
    const std::string text = help.With(flag.help, flag.doc_keys, ShownDefault(flag));
    switch (flag.value) {
      case FlagValue::kText:
        slot->option = app.add_option(flag.names, slot->text, text);
        break;
      case FlagValue::kTexts:
        slot->option = app.add_option(flag.names, slot->texts, text);
        break;
      case FlagValue::kNumber:
        slot->option = app.add_option(flag.names, slot->number, text);
        break;
      case FlagValue::kInteger:
        slot->option = app.add_option(flag.names, slot->integer, text);
        break;
      case FlagValue::kUnsigned:
        slot->option = app.add_option(flag.names, slot->unsigned_value, text);
        break;
      case FlagValue::kSwitch:
        slot->option = app.add_flag(flag.names, slot->on, text);
        break;
    }
    if (*flag.type_name != '\0') slot->option->type_name(flag.type_name);
    if (flag.group != nullptr) slot->option->group(flag.group);
  }
}

namespace {

const char* KindName(FlagValue v) {
  switch (v) {
    case FlagValue::kText:
      return "text";
    case FlagValue::kTexts:
      return "texts";
    case FlagValue::kNumber:
      return "number";
    case FlagValue::kInteger:
      return "integer";
    case FlagValue::kUnsigned:
      return "unsigned";
    case FlagValue::kSwitch:
      return "switch";
  }
  return "?";
}

// "-b,--batch" -> ["-b", "--batch"].
std::vector<std::string> Spellings(std::string_view names) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    const size_t comma = std::min(names.find(',', start), names.size());
    out.emplace_back(names.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::string OptionFlags::DescribeJson(HelpDefaults& help) const {
  const Options defaults;
  nlohmann::ordered_json flags = nlohmann::ordered_json::array();
  for (const auto& slot : slots_) {
    const OptionFlag& flag = *slot->flag;
    nlohmann::ordered_json j;
    j["flag"] = "--" + slot->long_name;
    j["names"] = Spellings(flag.names);
    j["value"] = *flag.type_name == '\0' ? nlohmann::ordered_json() : flag.type_name;
    j["kind"] = KindName(flag.value);
    j["default"] =
        flag.initial ? nlohmann::ordered_json(flag.initial(defaults)) : nlohmann::ordered_json();
    j["help"] = help.With(flag.help, flag.doc_keys, ShownDefault(flag));
    j["training_only"] = flag.training_only;
    j["group"] = flag.group ? nlohmann::ordered_json(flag.group) : nlohmann::ordered_json();
    flags.push_back(std::move(j));
  }
  return flags.dump(2);
}

Status OptionFlags::ApplyTo(Options* options, bool refuse_training_in_inference) const {
  for (const FlagStage stage : {FlagStage::kParse, FlagStage::kResolve}) {
    for (const auto& slot : slots_) {
      if (slot->flag->stage == stage) MEMEST_RETURN_IF_ERROR(slot->flag->apply(*this, options));
    }
    if (stage == FlagStage::kParse && refuse_training_in_inference) {
      MEMEST_RETURN_IF_ERROR(CheckTrainingOnly(options->mode));
    }
  }
  if (!Offers("world-size")) return Status::Ok();
  bool many_gpu_flags = false;
  for (const char* name :
       {"zero", "fsdp", "sequence-parallel", "offload-optimizer", "offload-params"}) {
    many_gpu_flags =
        many_gpu_flags ||
        (Find(name).flag->value == FlagValue::kSwitch ? Switch(name) : !Text(name).empty());
  }
  const Parallelism& p = options->parallel;
  many_gpu_flags = many_gpu_flags || p.tp > 1 || p.pp > 1 || p.dp > 0;
  return CheckParallelFlags(p, many_gpu_flags);
}

Status OptionFlags::CheckTrainingOnly(Mode mode) const {
  if (mode != Mode::kInfer) return Status::Ok();
  std::vector<std::string> given;
  for (const auto& slot : slots_) {
    if (slot->flag->training_only && Given(slot->long_name)) {
      given.push_back("--" + slot->long_name);
    }
  }
  if (given.empty()) return Status::Ok();
  return InvalidArgument(fmt::format(
      "{} conflict{} with --mode infer: {} only to training (drop {} or use --mode train)",
      fmt::join(given, ", "), given.size() == 1 ? "s" : "",
      given.size() == 1 ? "it applies" : "they apply", given.size() == 1 ? "it" : "them"));
}

const OptionFlags::Slot& OptionFlags::Find(std::string_view long_name) const {
  for (const auto& slot : slots_) {
    if (slot->long_name == long_name) return *slot;
  }
  // A name outside the table is a programming error in this file's callers.
  std::fprintf(stderr, "memest: internal error: no flag --%.*s in the options table\n",
               static_cast<int>(long_name.size()), long_name.data());
  std::abort();
}

OptionFlags::Slot& OptionFlags::Find(std::string_view long_name) {
  return const_cast<Slot&>(std::as_const(*this).Find(long_name));
}

bool OptionFlags::Offers(std::string_view long_name) const {
  for (const auto& slot : slots_) {
    if (slot->long_name == long_name) return true;
  }
  return false;
}

bool OptionFlags::Given(std::string_view long_name) const {
  const Slot& slot = Find(long_name);
  return slot.option != nullptr && slot.option->count() > 0;
}

const std::string& OptionFlags::Text(std::string_view long_name) const {
  return Find(long_name).text;
}

void OptionFlags::SetText(std::string_view long_name, std::string text) {
  Find(long_name).text = std::move(text);
}

const std::vector<std::string>& OptionFlags::Texts(std::string_view long_name) const {
  return Find(long_name).texts;
}

double OptionFlags::Number(std::string_view long_name) const { return Find(long_name).number; }

int64_t OptionFlags::Integer(std::string_view long_name) const { return Find(long_name).integer; }

uint64_t OptionFlags::Unsigned(std::string_view long_name) const {
  return Find(long_name).unsigned_value;
}

bool OptionFlags::Switch(std::string_view long_name) const { return Find(long_name).on; }

std::vector<std::string> OptionFlags::Names() const {
  std::vector<std::string> names;
  for (const auto& slot : slots_) names.push_back(slot->long_name);
  return names;
}

Result<int64_t> ParseInteger(std::string_view what, const std::string& text, int64_t min) {
  const std::string range =
      fmt::format("an integer from {} to {}", min, std::numeric_limits<int64_t>::max());
  if (text.empty()) {
    return InvalidArgument(fmt::format("{}: the value is empty; expected {}", what, range));
  }
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && v < min)) {
    return InvalidArgument(fmt::format("{}: {} is out of range; expected {}", what, text, range));
  }
  if (ec != std::errc() || ptr != end) {
    return InvalidArgument(
        fmt::format("{}: '{}' is not an integer; expected {}", what, text, range));
  }
  return v;
}

std::optional<uint64_t> ParseByteSize(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (!std::isfinite(value) || value < 0) return std::nullopt;
  const std::string unit = text.substr(used);
  const std::pair<const char*, double> units[] = {
      {"", 1.0}, {"B", 1.0}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (const auto& [name, scale] : units) {
    if (unit != name) continue;
    const double bytes = value * scale;
    if (bytes >= 1e18) return std::nullopt;
    return static_cast<uint64_t>(bytes);
  }
  return std::nullopt;
}

}  // namespace memest::cli
