#include "memest/options.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "base/checked.h"
#include "base/name_pattern.h"

namespace memest {

uint64_t FitPolicy::MarginBytes(uint64_t capacity) const {
  const double share = std::clamp(margin_fraction, 0.0, 1.0);
  return base::SatAdd(static_cast<uint64_t>(share * static_cast<double>(capacity)), margin_bytes);
}

std::optional<uint64_t> AllocatorSettings::ReservedLimit(uint64_t total_memory) const {
  if (!memory_fraction) return std::nullopt;
  const double f = std::clamp(*memory_fraction, 0.0, 1.0);
  return static_cast<uint64_t>(f * static_cast<double>(total_memory));
}

namespace {

template <typename E, size_t N>
Result<E> ParseEnum(std::string_view s, const char* what,
                    const std::pair<const char*, E> (&table)[N]) {
  std::string names;
  for (const auto& [name, value] : table) {
    if (s == name) return value;
    if (!names.empty()) names += "|";
    names += name;
  }
  return InvalidArgument(std::string("unknown ") + what + " '" + std::string(s) + "' (expected " +
                         names + ")");
}

constexpr std::pair<const char*, Mode> kModes[] = {{"train", Mode::kTrain},
                                                   {"infer", Mode::kInfer}};
constexpr std::pair<const char*, Optimizer> kOptimizers[] = {
    {"sgd", Optimizer::kSgd},           {"momentum", Optimizer::kMomentum},
    {"adam", Optimizer::kAdam},         {"adamw", Optimizer::kAdamW},
    {"adam8bit", Optimizer::kAdam8bit}, {"adamw8bit", Optimizer::kAdamW8bit}};
constexpr std::pair<const char*, OptimizerImpl> kOptimizerImpls[] = {
    {"foreach", OptimizerImpl::kForeach},
    {"single-tensor", OptimizerImpl::kSingleTensor},
    {"fused", OptimizerImpl::kFused}};
constexpr std::pair<const char*, Precision> kPrecisions[] = {{"fp32", Precision::kFp32},
                                                             {"amp-fp16", Precision::kAmpFp16},
                                                             {"amp-bf16", Precision::kAmpBf16},
                                                             {"bf16", Precision::kBf16}};
constexpr std::pair<const char*, Loss> kLosses[] = {
    {"auto", Loss::kAuto}, {"cross-entropy", Loss::kCrossEntropy}, {"mse", Loss::kMse}};
constexpr std::pair<const char*, Attention> kAttention[] = {
    {"eager", Attention::kEager},
    {"sdpa-math", Attention::kSdpaMath},
    {"sdpa-flash", Attention::kSdpaFlash},
    {"sdpa-mem-efficient", Attention::kSdpaMemEfficient},
    {"auto", Attention::kAuto}};
constexpr std::pair<const char*, WeightDtype> kWeightDtypes[] = {
    {"auto", WeightDtype::kAuto}, {"fp16", WeightDtype::kFp16},
    {"bf16", WeightDtype::kBf16}, {"int8", WeightDtype::kInt8},
    {"nf4", WeightDtype::kNf4},   {"nf4-dq", WeightDtype::kNf4DoubleQuant}};
constexpr std::pair<const char*, KvCacheDtype> kKvCacheDtypes[] = {{"auto", KvCacheDtype::kAuto},
                                                                   {"fp16", KvCacheDtype::kFp16},
                                                                   {"bf16", KvCacheDtype::kBf16},
                                                                   {"fp8", KvCacheDtype::kFp8},
                                                                   {"int8", KvCacheDtype::kInt8}};
constexpr std::pair<const char*, Sharding> kShardings[] = {
    {"none", Sharding::kNone},
    {"zero1", Sharding::kZero1},
    {"zero2", Sharding::kZero2},
    {"zero3", Sharding::kZero3},
    {"fsdp-full", Sharding::kFsdpFull},
    {"fsdp-grad-op", Sharding::kFsdpGradOp},
    {"fsdp-hybrid", Sharding::kFsdpHybrid},
    {"fsdp-no-shard", Sharding::kFsdpNoShard}};
constexpr std::pair<const char*, FitOn> kFitOn[] = {{"point", FitOn::kPoint},
                                                    {"upper", FitOn::kUpper}};

template <typename E, size_t N>
const char* NameOf(E e, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, value] : table) {
    if (value == e) return name;
  }
  return "?";
}

}  // namespace

Result<Mode> ParseMode(std::string_view s) { return ParseEnum(s, "mode", kModes); }
Result<Optimizer> ParseOptimizer(std::string_view s) {
  return ParseEnum(s, "optimizer", kOptimizers);
}
Result<OptimizerImpl> ParseOptimizerImpl(std::string_view s) {
  if (s == "single") return OptimizerImpl::kSingleTensor;  // memest-measure's spelling
  return ParseEnum(s, "optimizer implementation", kOptimizerImpls);
}
Result<Precision> ParsePrecision(std::string_view s) {
  return ParseEnum(s, "precision", kPrecisions);
}
Result<Loss> ParseLoss(std::string_view s) { return ParseEnum(s, "loss", kLosses); }
Result<FitOn> ParseFitOn(std::string_view s) { return ParseEnum(s, "fit-on", kFitOn); }
Result<Attention> ParseAttention(std::string_view s) {
  return ParseEnum(s, "attention", kAttention);
}
const char* ToString(Mode m) { return NameOf(m, kModes); }
const char* ToString(Optimizer o) { return NameOf(o, kOptimizers); }
const char* ToString(OptimizerImpl i) { return NameOf(i, kOptimizerImpls); }
const char* ToString(Precision p) { return NameOf(p, kPrecisions); }
const char* ToString(Loss l) { return NameOf(l, kLosses); }
const char* ToString(FitOn f) { return NameOf(f, kFitOn); }
const char* ToString(Attention a) { return NameOf(a, kAttention); }
Result<WeightDtype> ParseWeightDtype(std::string_view s) {
  return ParseEnum(s, "weight dtype", kWeightDtypes);
}
const char* ToString(WeightDtype w) { return NameOf(w, kWeightDtypes); }
Result<KvCacheDtype> ParseKvCacheDtype(std::string_view s) {
  if (s == "fp8_e4m3" || s == "fp8_e5m2") return KvCacheDtype::kFp8;  // vLLM's spellings
  return ParseEnum(s, "KV cache dtype", kKvCacheDtypes);
}
const char* ToString(KvCacheDtype k) { return NameOf(k, kKvCacheDtypes); }

Result<Sharding> ParseSharding(std::string_view s) { return ParseEnum(s, "sharding", kShardings); }
const char* ToString(Sharding s) { return NameOf(s, kShardings); }

namespace {

// The degrees of Options::parallel (the graph-dependent checks -- tensor parallelism against the
// head count and hidden sizes, pipeline stages against the layers -- are memory/parallel.cc's).
Status ValidateParallelism(const Options& o) {
  const Parallelism& p = o.parallel;
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (p.world_size < 1) return InvalidArgument("world size must be >= 1, got " + n(p.world_size));
  if (p.tp < 1 || p.pp < 1 || p.dp < 0) {
    return InvalidArgument("parallel degrees must be >= 1: dp=" + n(p.dp) + " tp=" + n(p.tp) +
                           " pp=" + n(p.pp));
  }
  constexpr int64_t kMaxWorld = int64_t{1} << 20;
  if (p.world_size > kMaxWorld || p.tp > kMaxWorld || p.pp > kMaxWorld || p.dp > kMaxWorld) {
    return InvalidArgument("parallel degrees are limited to " + n(kMaxWorld) + " GPUs");
  }
  const int64_t dp = p.DataParallel();
  if (dp < 1 || dp * p.tp * p.pp != p.world_size) {
    return InvalidArgument(
        "dp x tp x pp must equal the world size: " + (p.dp > 0 ? n(p.dp) : std::string("dp")) +
        " x " + n(p.tp) + " x " + n(p.pp) + " != " + n(p.world_size));
  }
  if (!p.enabled()) return Status::Ok();
  if (o.mode != Mode::kTrain) {
    return InvalidArgument("--world-size > 1 is modelled for training only");
  }
  const bool zero = IsZero(p.sharding);
  if (p.sharding != Sharding::kNone && dp < 2) {
    return InvalidArgument(std::string("sharding ") + ToString(p.sharding) +
                           " needs a data-parallel degree >= 2, got dp=" + n(dp));
  }
  if (p.offload_params && !GathersUnits(p.sharding)) {
    return InvalidArgument("parameter offload needs --zero 3 or an FSDP sharding");
  }
  if (p.offload_optimizer && p.sharding == Sharding::kNone) {
    return InvalidArgument("optimizer offload needs --zero 1/2/3 or --fsdp");
  }
  if (zero && (o.optimizer == Optimizer::kAdam8bit || o.optimizer == Optimizer::kAdamW8bit)) {
    return InvalidArgument(std::string("ZeRO's partitioned optimizer wraps torch.optim's adam, ") +
                           "adamw, sgd or momentum, not bitsandbytes' " + ToString(o.optimizer));
  }
  if (!std::isfinite(p.bucket_cap_mb) || p.bucket_cap_mb <= 0 || p.bucket_cap_mb > 1e6) {
    return InvalidArgument("bucket_cap_mb must be in (0, 1e6]");
  }
  if (p.nccl_buffsize == 0 || p.nccl_buffsize > (uint64_t{1} << 34) || p.nccl_channels < 1 ||
      p.nccl_channels > 64) {
    return InvalidArgument("NCCL buffsize must be in (0, 16 GiB] and channels in [1, 64]");
  }
  if (p.gpus_per_node < 1) return InvalidArgument("gpus per node must be >= 1");
  if (p.zero_sub_group_size == 0) return InvalidArgument("ZeRO sub_group_size must be >= 1");
  if (p.fsdp_unit.size() > 256) return InvalidArgument("fsdp_unit: expression over 256 characters");
  if (!p.fsdp_unit.empty()) {
    MEMEST_RETURN_IF_ERROR(base::NamePattern::Compile(p.fsdp_unit, "fsdp_unit").status());
  }
  if (o.micro_batches < p.pp && p.pp > 1) {
    return InvalidArgument("a pipeline of " + n(p.pp) + " stages needs at least " + n(p.pp) +
                           " micro-batches (--micro-batches), got " + n(o.micro_batches));
  }
  return Status::Ok();
}

}  // namespace

Result<GpuProfile> ResolveGpuProfile(const Options& o) {
  if (o.custom_gpu) return *o.custom_gpu;
  return FindGpuProfile(o.gpu);
}

Status Validate(const Options& o) {
  MEMEST_RETURN_IF_ERROR(ValidateParallelism(o));
  if (o.custom_gpu && o.custom_gpu->usable_memory.bytes == 0) {
    return InvalidArgument("GPU profile '" + o.custom_gpu->name + "' has no usable memory");
  }
  if (o.batch && *o.batch < 1) {
    return InvalidArgument("batch must be >= 1, got " + std::to_string(*o.batch));
  }
  for (const auto& [name, value] : o.dims) {
    if (name.empty()) return InvalidArgument("dim binding with an empty name");
    if (value < 0) {
      return InvalidArgument("dim '" + name + "' must be >= 0, got " + std::to_string(value));
    }
  }
  if (!std::isfinite(o.weight_decay) || o.weight_decay < 0) {
    return InvalidArgument("weight decay must be a finite value >= 0");
  }
  if (o.allocator.max_split_size && *o.allocator.max_split_size < (uint64_t{20} << 20)) {
    // memory-model.md §1.2: parseMaxSplitSize requires >= kLargeBuffer (20 MiB).
    return InvalidArgument("allocator max_split_size must be >= 20 MiB");
  }
  if (const auto& f = o.allocator.memory_fraction; f && !(*f > 0 && *f <= 1)) {
    // c10/cuda/CUDACachingAllocator.cpp setMemoryFraction checks 0 <= fraction <= 1; 0 would
    // leave the allocator nothing, so it is refused here.
    return InvalidArgument("allocator memory_fraction must be in (0, 1]");
  }
  if (o.gpu.empty()) return InvalidArgument("GPU profile name is empty");
  if (!std::isfinite(o.fit.margin_fraction) || o.fit.margin_fraction < 0 ||
      o.fit.margin_fraction >= 1) {
    return InvalidArgument("safety margin must be a share in [0, 1) of the GPU's memory");
  }
  if (o.micro_batches < 1) return InvalidArgument("micro_batches must be >= 1");
  if (o.micro_batches > 1 && o.batch && *o.batch % o.micro_batches != 0) {
    return InvalidArgument("batch " + std::to_string(*o.batch) + " is not divisible into " +
                           std::to_string(o.micro_batches) + " micro-batches");
  }
  if (o.checkpoint_segments < 0) return InvalidArgument("checkpoint_segments must be >= 0");
  if (o.checkpoint_blocks && o.checkpoint_segments > 1) {
    return InvalidArgument(
        "checkpoint_blocks and checkpoint_segments > 1 are two ways to cut the graph for "
        "activation checkpointing: give one");
  }
  for (const auto& [name, expr] :
       {std::pair{"trainable", &o.trainable}, std::pair{"freeze", &o.freeze}}) {
    if (expr->size() > 256) {
      return InvalidArgument(std::string(name) + ": expression over 256 characters");
    }
    MEMEST_RETURN_IF_ERROR(base::NamePattern::Compile(*expr, name).status());
  }
  if (o.attention == Attention::kSdpaFlash && o.precision == Precision::kFp32) {
    // sdp_utils.cpp: flash attention takes fp16/bf16 only; forcing it on fp32 raises "No
    // available kernel".
    return InvalidArgument(
        "flash attention runs in fp16/bf16 only: use --precision amp-fp16, "
        "amp-bf16 or bf16, or --attention sdpa-mem-efficient");
  }
  const bool eight_bit =
      o.optimizer == Optimizer::kAdam8bit || o.optimizer == Optimizer::kAdamW8bit;
  if (eight_bit && o.optimizer_impl != OptimizerImpl::kForeach) {
    // bitsandbytes runs one kernel per parameter; torch.optim's foreach/fused switch is not there.
    return InvalidArgument(std::string("--optimizer-impl ") + ToString(o.optimizer_impl) +
                           " does not apply to bitsandbytes' " + ToString(o.optimizer) +
                           " (one kernel per parameter)");
  }
  const bool half_storage =
      o.weight_dtype == WeightDtype::kFp16 || o.weight_dtype == WeightDtype::kBf16;
  if (half_storage) {
    const bool fp16 = o.weight_dtype == WeightDtype::kFp16;
    const bool matches =
        fp16 ? o.precision == Precision::kAmpFp16
             : o.precision == Precision::kAmpBf16 || o.precision == Precision::kBf16;
    if (!matches) {
      // F.linear on an fp32 input and a half weight raises a dtype error; under the other
      // half type autocast would cast every use.
      return InvalidArgument(std::string("weight dtype ") + ToString(o.weight_dtype) +
                             " needs a compute of the same type: use --precision " +
                             (fp16 ? "amp-fp16" : "amp-bf16 or bf16") + ", not " +
                             ToString(o.precision));
    }
  }
  if ((o.kv_cache_dtype != KvCacheDtype::kAuto || o.paged_kv_cache) && o.mode != Mode::kInfer) {
    // A training step recomputes keys and values; a cache is kept by generation only.
    return InvalidArgument("a KV cache dtype or paged KV cache applies to --mode infer only");
  }
  if (o.prefill) {
    if (o.mode != Mode::kInfer) {
      return InvalidArgument("a prefill before the step applies to --mode infer (a decode step)");
    }
    if (o.prefill->model == nullptr) return InvalidArgument("the prefill has no model");
    if (o.prefill->seq_dim.empty() || o.prefill->past_dim.empty()) {
      return InvalidArgument("the prefill needs the names of its seq dim and the step's past dim");
    }
  }
  if (o.optimizer_impl == OptimizerImpl::kFused && o.optimizer != Optimizer::kAdam &&
      o.optimizer != Optimizer::kAdamW) {
    // torch.optim has fused kernels for Adam and AdamW only (memory-model.md §4.3).
    return InvalidArgument(std::string("the fused implementation exists for adam and adamw, not ") +
                           ToString(o.optimizer));
  }
  return Status::Ok();
}

std::vector<OptionDoc> DescribeOptions() {
  const Options d;
  auto fmt_double = [](double v) {
    std::string s = std::to_string(v);
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  auto opt_int = [](const std::optional<int64_t>& v) {
    return v ? std::to_string(*v) : std::string("(unset: the model's batch dim must be bound)");
  };
  std::string wd = std::to_string(d.weight_decay);
  return {
      {"mode", ToString(d.mode), "train: one training step; infer: one forward pass, no grad"},
      {"batch", opt_int(d.batch), "binds the leading symbolic dim of every data input"},
      {"dims", d.dims.empty() ? "(none)" : "(set)", "name=value bindings for named dims"},
      {"optimizer", ToString(d.optimizer),
       "sgd | momentum | adam | adamw | adam8bit | adamw8bit (bitsandbytes)"},
      {"optimizer_impl", ToString(d.optimizer_impl),
       "foreach | single-tensor | fused: how torch.optim runs the step (its temporaries)"},
      {"weight_decay", wd, "L2 for sgd/momentum/adam (adds a temporary), decoupled for adamw"},
      {"precision", ToString(d.precision), "fp32 | amp-fp16 | amp-bf16 | bf16"},
      {"loss", ToString(d.loss), "auto: cross-entropy for [N,C] logits, else mse"},
      {"gpu", d.gpu, "GPU profile (capacity, compute capability, cuBLAS workspace)"},
      {"stack", d.stack.empty() ? "(the default stack, pytorch2-lazy)" : d.stack,
       "software stack (CUDA context, library memory, conv workspaces, residual band)"},
      {"fit_on", ToString(d.fit.on),
       "upper: 'fits' judges the top of the interval where there is one; point: the estimate"},
      {"safety_margin", "0", "kept free on top of the judged peak (share of memory or bytes)"},
      {"expandable_segments", d.allocator.expandable_segments ? "true" : "false",
       "PyTorch allocator expandable_segments"},
      {"memory_fraction", "(unset: no limit)",
       "torch.cuda.set_per_process_memory_fraction: the allocator reserves at most this share "
       "of the GPU"},
      {"micro_batches", std::to_string(d.micro_batches),
       "gradient accumulation: micro-batches per optimizer step (batch must divide)"},
      {"checkpoint_segments", std::to_string(d.checkpoint_segments),
       "activation checkpointing as checkpoint_sequential with this many segments (0: off)"},
      {"outputs_held", d.outputs_held ? "true" : "false",
       "training: the loop holds the model's outputs through backward (false: dropped once the "
       "loss is computed, as transformers' Trainer does)"},
      {"checkpoint_blocks", d.checkpoint_blocks ? "true" : "false",
       "activation checkpointing of every repeated block (transformers' gradient "
       "checkpointing)"},
      {"library_workspaces", d.library_workspaces ? "true" : "false",
       "count cuBLAS workspaces (false: compare with the CPU harness)"},
      {"fused_kernels", d.fused_kernels ? "true" : "false",
       "cost exported LayerNorm/GroupNorm/GELU/SiLU/Mish chains as PyTorch's fused kernels (false: "
       "op by op)"},
      {"inplace_relu", d.inplace_relu ? "true" : "false",
       "a ReLU after a Conv or BatchNormalization writes into its input (false: out of place)"},
      {"attention", ToString(d.attention),
       "eager | sdpa-math | sdpa-flash | sdpa-mem-efficient | auto: what attention saves"},
      {"trainable", d.trainable.empty() ? "(every parameter)" : d.trainable,
       "regex searched in initializer names: only matching parameters train"},
      {"freeze", d.freeze.empty() ? "(none)" : d.freeze,
       "regex searched in initializer names: matching parameters are frozen"},
      {"weight_dtype", ToString(d.weight_dtype),
       "auto | fp16 | bf16 | int8 | nf4 | nf4-dq: storage of the parameters that do not train"},
      {"kv_cache_dtype", ToString(d.kv_cache_dtype),
       "auto | fp16 | bf16 | fp8 | int8: storage of the graph's past/present key-value cache"},
      {"paged_kv_cache", d.paged_kv_cache ? "true" : "false",
       "the KV cache is a pool sized apart (vLLM): past/present tensors take no memory"},
      {"prefill", d.prefill ? "(set)" : "(none)",
       "inference, decode step: the prefill of its past ran just before it on the same allocator "
       "(kept, or with the cache emptied)"},
      {"allow_unknown_shapes", d.allow_unknown_shapes ? "true" : "false",
       "estimate even when some tensor's shape cannot be inferred (default: refuse)"},
      {"world_size", std::to_string(d.parallel.world_size),
       "GPUs of the job (= dp x tp x pp); the estimate is the worst rank's"},
      {"dp / tp / pp", "world_size / 1 / 1",
       "data-, tensor- (Megatron column/row) and pipeline- (1F1B) parallel degrees"},
      {"sharding", ToString(d.parallel.sharding),
       "none (DDP) | zero1 | zero2 | zero3 | fsdp-full | fsdp-grad-op | fsdp-hybrid | "
       "fsdp-no-shard"},
      {"sequence_parallel", d.parallel.sequence_parallel ? "true" : "false",
       "Megatron sequence parallelism (with tp > 1)"},
      {"offload_optimizer / offload_params", "false / false",
       "optimizer state (and master weights) / parameters kept in host memory"},
      {"bucket_cap_mb", fmt_double(d.parallel.bucket_cap_mb),
       "DDP gradient bucket size; gradient_as_bucket_view false by default"},
      {"nccl_buffsize x channels",
       std::to_string(d.parallel.nccl_buffsize) + " x " + std::to_string(d.parallel.nccl_channels),
       "NCCL buffers per communicator: channels x 3 connections x (buffsize + LL128 + LL)"},
  };
}

}  // namespace memest
