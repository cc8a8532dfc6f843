// tools/memest_main.cc -- the `memest` command-line tool.
//
//   memest MODEL.onnx [--batch N] [--dim name=value]... [--mode train|infer]
//          [--optimizer ...] [--optimizer-impl ...] [--weight-decay X] [--micro-batches K]
//          [--checkpoint SEGMENTS] [--precision ...] [--loss ...] [--gpu NAME]
//          [--expandable-segments] [--backend NAME[,NAME...]|all] [--max-batch]
//          [--timeline FILE] [-o table|json|csv|md] [--json] [-q|-v]
//   memest --hf-config config.json [--phase train|prefill|decode] [--logits all|last] ...
//          (the graph of a Hugging Face config, built in memory: datasets/zoo/hf.h)
//   memest --list-backends | --list-gpus | --show-coverage [MODEL.onnx]
//
// Results go to stdout; diagnostics, warnings and errors go to stderr (-q: errors only; -v: info
// diagnostics too). Exit codes (docs/cli.md):
//   0  the estimate fits the GPU (or a --list-* / --show-coverage / --help / --version request)
//   1  it does not fit (with several backends: any backend with a result says so)
//   2  usage error: bad or mistyped flag or value (an integer out of range is never clamped), a
//      training-only flag with --mode infer, unknown GPU or backend, a named backend this build
//      lacks (measurement: use memest-measure), --checkpoint above the graph's node count, an
//      unwritable --timeline file, unbound symbolic dim
//   3  bad model (missing or unreadable file, not ONNX, truncated, invalid graph, overflow) or a
//      model memest refuses to estimate (unsupported: shapes no rule can size, named)
//   4  a backend unavailable while running, a failed write to stdout, or an internal error
// Option defaults shown by --help come from memest::DescribeOptions(), i.e. from a
// default-constructed memest::Options; this file never repeats them.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "memest/memest.h"
#include "tools/calibrate_command.h"
#include "tools/exit_codes.h"
#include "tools/pack_command.h"
#include "tools/parallel_flags.h"
#include "tools/report.h"
#include "tools/serve_command.h"

#ifndef MEMEST_VERSION
#define MEMEST_VERSION "unknown"
#endif

namespace memest::cli {
namespace {

// The CLI's own defaults (not memest::Options fields).
constexpr char kDefaultBackend[] = "analytical";
// `--backend all`: every available estimator. The measurement backend executes the model (it can
// take minutes and needs LibTorch), so it runs only when named.
constexpr char kAllBackends[] = "all";
constexpr char kMeasurementBackend[] = "measurement";
// The only backend that records a timeline (--timeline); also the table's backend when
// --timeline is given without --backend, so that both agree.
constexpr char kTimelineBackend[] = "symbolic";

// ---------------------------------------------------------------------------------------------
// stderr. Errors always; warnings and notes unless -q; info diagnostics only with -v.

enum class Verbosity { kQuiet, kNormal, kVerbose };
Verbosity verbosity = Verbosity::kNormal;

void PrintResult(const std::string& text);
void PrintError(const std::string& message) { std::cerr << "memest: error: " << message << '\n'; }

void PrintWarning(const std::string& message) {
  if (verbosity != Verbosity::kQuiet) std::cerr << "memest: warning: " << message << '\n';
}

void PrintNote(const std::string& message) {
  if (verbosity != Verbosity::kQuiet) std::cerr << "memest: " << message << '\n';
}

void PrintInfo(const std::string& message) {
  if (verbosity == Verbosity::kVerbose) std::cerr << "memest: info: " << message << '\n';
}

void PrintDiagnostics(const std::vector<Diagnostic>& ds, std::string_view backend) {
  for (const auto& d : ds) {
    const bool show = d.severity == Severity::kWarning ? verbosity != Verbosity::kQuiet
                                                       : verbosity == Verbosity::kVerbose;
    if (show) std::cerr << "memest: " << FormatDiagnostic(d, backend) << '\n';
  }
}

// ---------------------------------------------------------------------------------------------
// "Did you mean": the closest known name to a mistyped one.

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 0; i < a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i + 1;
    for (size_t j = 0; j < b.size(); ++j) {
      const size_t above = row[j + 1];
      row[j + 1] = std::min({above + 1, row[j] + 1, diagonal + (a[i] == b[j] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `word`, when it is a plausible typo: at most two edits, and at least
// three characters of `word` per edit (so "-x" suggests nothing).
std::optional<std::string> Closest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t d = EditDistance(word, c);
    if (d < best_distance) {
      best = &c;
      best_distance = d;
    }
  }
  if (best == nullptr || best_distance == 0 || best_distance > 2 ||
      best_distance * 3 > word.size()) {
    return std::nullopt;
  }
  return *best;
}

// Every spelling of every flag of `app` ("--batch", "-b", ...).
std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

// The error for arguments no flag took, with a suggestion for each mistyped flag.
std::string UnexpectedArguments(const std::vector<std::string>& extras,
                                const std::vector<std::string>& flags) {
  std::string message = fmt::format("unexpected argument{}: {}", extras.size() == 1 ? "" : "s",
                                    fmt::join(extras, " "));
  for (const std::string& e : extras) {
    if (e.size() < 2 || e[0] != '-') continue;
    const std::string flag = e.substr(0, e.find('='));
    if (auto s = Closest(flag, flags)) message += fmt::format("; did you mean {}?", *s);
  }
  return message;
}

// ---------------------------------------------------------------------------------------------
// --help text from memest::DescribeOptions().

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

// The OptionDoc for an Options field: exact name match, else a doc whose name
// ends in the key ("allocator.expandable_segments" for "expandable_segments").
const OptionDoc* FindDoc(const std::vector<OptionDoc>& docs,
                         std::initializer_list<const char*> keys) {
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

// Help texts with the defaults of memest::DescribeOptions() appended; the
// footer lists the documented options no flag has claimed, so every default
// the library documents shows up in --help exactly once.
class HelpDefaults {
 public:
  explicit HelpDefaults(std::vector<OptionDoc> docs) : docs_(std::move(docs)) {}

  std::string With(std::string text, std::initializer_list<const char*> keys) {
    if (const OptionDoc* d = FindDoc(docs_, keys)) {
      used_.insert(d);
      text += " (default: " + DefaultText(*d) + ")";
    }
    return text;
  }

  std::string Footer() const {
    std::string out;
    for (const auto& d : docs_) {
      if (used_.count(&d)) continue;
      if (out.empty()) {
        out = "Other estimation options (no flag; library defaults):\n";
      }
      out += fmt::format("  {} = {}  {}\n", d.name, DefaultText(d), d.help);
    }
    if (!out.empty()) out += '\n';
    out +=
        "Exit codes: 0 fits, 1 does not fit, 2 usage error, 3 bad model, "
        "4 backend failed on the model or internal error.\n"
        "Results go to stdout; diagnostics and errors to stderr. Defaults come "
        "from memest::DescribeOptions(). See docs/cli.md.";
    return out;
  }

 private:
  std::vector<OptionDoc> docs_;
  std::set<const OptionDoc*> used_;
};

// ---------------------------------------------------------------------------------------------
// Flags.

// The command line as given: raw texts (parsed and range-checked later) and the options whose
// presence matters.
struct Flags {
  explicit Flags(const Options& d)
      : mode(ToString(d.mode)),
        optimizer(ToString(d.optimizer)),
        optimizer_impl(ToString(d.optimizer_impl)),
        weight_decay(d.weight_decay),
        precision(ToString(d.precision)),
        loss(ToString(d.loss)),
        gpu_name(d.gpu),
        stack_name(d.stack),
        attention(ToString(d.attention)),
        weight_dtype(ToString(d.weight_dtype)),
        kv_cache_dtype(ToString(d.kv_cache_dtype)),
        fit_on(ToString(d.fit.on)),
        expandable(d.allocator.expandable_segments) {}

  std::string model_path;
  std::string hf_config;  // --hf-config: the model is built from this config.json
  std::string phase = "train";
  std::string logits = "all";
  std::string batch_text;
  std::vector<std::string> dim_args;
  std::string mode;
  std::string optimizer;
  std::string optimizer_impl;
  std::string checkpoint_text;
  double weight_decay;
  std::string precision;
  std::string loss;
  std::string gpu_name;
  std::string gpu_file;
  std::string capacity;
  std::string stack_name;
  std::string attention;
  std::string weight_dtype;
  std::string kv_cache_dtype;
  std::string trainable;
  std::string freeze;
  std::string stack_file;
  std::string fit_on;
  std::string safety_margin;
  bool expandable;
  bool allow_unknown_shapes = false;
  std::string micro_batches_text;
  std::string backend = kDefaultBackend;
  bool max_batch = false;
  std::string max_dim;  // --max-dim NAME
  std::string output = ToString(Format::kTable);
  bool json = false;
  bool list_backends = false;
  bool list_gpus = false;
  bool show_coverage = false;
  std::string timeline_path;
  bool quiet = false;
  bool verbose = false;
  ParallelFlags parallel;

  CLI::Option* batch_opt = nullptr;
  CLI::Option* mode_opt = nullptr;
  CLI::Option* phase_opt = nullptr;
  CLI::Option* logits_opt = nullptr;
  CLI::Option* gpu_opt = nullptr;
  CLI::Option* micro_batches_opt = nullptr;
  CLI::Option* checkpoint_opt = nullptr;
  CLI::Option* output_opt = nullptr;
  CLI::Option* backend_opt = nullptr;
  std::vector<const CLI::Option*> training_only;  // flags that only describe a training step
};

void AddEstimationFlags(CLI::App& app, Flags& f, HelpDefaults& help) {
  app.add_option("model", f.model_path, "the ONNX model file")->type_name("MODEL.onnx");
  app.add_option("--hf-config", f.hf_config,
                 "instead of MODEL.onnx: the weightless graph of a Hugging Face config.json "
                 "(llama, mistral, mixtral, qwen2, qwen3, gemma, phi, phi3, gpt2, gpt_neox, "
                 "falcon, bert, roberta, t5; docs/hf-config.md), built in memory; bind its dims "
                 "with --dim seq=N (decode: also --dim past=N; t5: --dim tgt_seq=N)")
      ->type_name("config.json");
  f.phase_opt = app.add_option("--phase", f.phase,
                               "with --hf-config: train (the training forward), prefill or "
                               "decode (inference with the KV cache; implies --mode infer) "
                               "(default: train)")
                    ->type_name("train|prefill|decode");
  f.logits_opt = app.add_option("--logits", f.logits,
                                "with --hf-config: the LM head on all positions or on the last "
                                "one only, as a serving engine computes it (default: all)")
                     ->type_name("all|last");
  f.batch_opt = app.add_option("-b,--batch", f.batch_text,
                               help.With("binds the leading symbolic dim (batch) of every data "
                                         "input",
                                         {"batch"}))
                    ->type_name("N");
  app.add_option("-d,--dim", f.dim_args,
                 help.With("binds a named symbolic dim, e.g. --dim seq=128 (repeatable; wins over "
                           "--batch)",
                           {"dims", "dim"}))
      ->type_name("NAME=VALUE");
  f.mode_opt =
      app.add_option("--mode", f.mode,
                     help.With("train: one training step; infer: one forward pass", {"mode"}))
          ->type_name("train|infer");
  auto training = [&](CLI::Option* o) {
    f.training_only.push_back(o);
    return o;
  };
  training(app.add_option("--optimizer", f.optimizer,
                          help.With("optimizer of the training step", {"optimizer"}))
               ->type_name("sgd|momentum|adam|adamw|adam8bit|adamw8bit"));
  training(app.add_option("--optimizer-impl", f.optimizer_impl,
                          help.With("how torch.optim runs the step (foreach=False is "
                                    "single-tensor, fused=True is fused)",
                                    {"optimizer_impl"}))
               ->type_name("foreach|single-tensor|fused"));
  training(app.add_option("--weight-decay", f.weight_decay,
                          help.With("weight decay (L2 for sgd/momentum/adam, decoupled for adamw)",
                                    {"weight_decay"}))
               ->type_name("X"));
  app.add_option("--precision", f.precision, help.With("numeric precision", {"precision"}))
      ->type_name("fp32|amp-fp16|amp-bf16|bf16");
  training(app.add_option(
                  "--loss", f.loss,
                  help.With("loss on the first output in training (ce: cross-entropy)", {"loss"}))
               ->type_name("auto|cross-entropy|mse"));
  f.gpu_opt =
      app.add_option("--gpu", f.gpu_name, help.With("GPU profile (see --list-gpus)", {"gpu"}))
          ->type_name("NAME");
  app.add_option("--gpu-file", f.gpu_file,
                 "GPU profiles in the built-in table's format (docs/gpu-profiles.md) for GPUs "
                 "memest does not list; --gpu picks one (default: the file's first)")
      ->type_name("FILE.json");
  app.add_option("--capacity", f.capacity,
                 "the GPU's usable memory, overriding the profile's (a MIG slice, a limit the "
                 "scheduler imposes): bytes with an optional unit, e.g. 23.5GiB")
      ->type_name("BYTES");
  app.add_option("--attention", f.attention,
                 help.With("how attention runs: as the graph is written (eager, sdpa-math) or as "
                           "a fused SDPA kernel that never stores the attention matrix "
                           "(sdpa-flash, sdpa-mem-efficient; auto: PyTorch's choice for the GPU "
                           "and precision)",
                           {"attention"}))
      ->type_name("eager|sdpa-math|sdpa-flash|sdpa-mem-efficient|auto");
  training(app.add_option("--trainable", f.trainable,
                          help.With("only parameters whose initializer name matches this regular "
                                    "expression train (searched, like re.search)",
                                    {"trainable"}))
               ->type_name("REGEX"));
  training(app.add_option("--freeze", f.freeze,
                          help.With("parameters whose initializer name matches this regular "
                                    "expression are frozen: no gradient, no optimizer state",
                                    {"freeze"}))
               ->type_name("REGEX"));
  app.add_option("--weight-dtype", f.weight_dtype,
                 help.With("storage of the parameters that do not train (frozen ones; all in "
                           "inference): half precision, or bitsandbytes int8 / 4-bit NormalFloat "
                           "(nf4-dq: with double quantization) for Linear weights",
                           {"weight_dtype"}))
      ->type_name("auto|fp16|bf16|int8|nf4|nf4-dq");
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 help.With("storage of the graph's key/value cache (past_key_values.* inputs, "
                           "present.* outputs; inference): fp8/int8 take 1 byte per element",
                           {"kv_cache_dtype"}))
      ->type_name("auto|fp16|bf16|fp8|int8");
  app.add_option("--stack", f.stack_name,
                 help.With("software-stack profile: CUDA context, library memory, convolution "
                           "workspaces, residual band (see --list-gpus)",
                           {"stack"}))
      ->type_name("NAME");
  app.add_option("--stack-file", f.stack_file,
                 "a stack profile file written by memest calibrate (wins over --stack)")
      ->type_name("FILE.json");
  app.add_option("--fit-on", f.fit_on,
                 help.With("what decides 'fits' and the exit code: the top of the estimate's "
                           "interval where it has one (upper), or the point estimate",
                           {"fit_on"}))
      ->type_name("point|upper");
  app.add_option("--safety-margin", f.safety_margin,
                 "memory kept free on top of the judged peak: a percentage of the GPU (5%) or "
                 "bytes (512MiB, 2GiB) (default: 0)")
      ->type_name("PCT|BYTES");
  app.add_flag("--allow-unknown-shapes", f.allow_unknown_shapes,
               help.With("estimate even when some tensor's shape cannot be inferred, counting it "
                         "conservatively (default: refuse, exit 3)",
                         {"allow_unknown_shapes"}));
  app.add_flag("--expandable-segments", f.expandable,
               help.With("PyTorch caching allocator with expandable_segments:True",
                         {"expandable_segments", "allocator_expandable_segments"}));
  f.micro_batches_opt =
      training(app.add_option("--micro-batches", f.micro_batches_text,
                              help.With("gradient accumulation: micro-batches per optimizer step "
                                        "(--batch must divide)",
                                        {"micro_batches"}))
                   ->type_name("K"));
  f.checkpoint_opt = training(
      app.add_option("--checkpoint", f.checkpoint_text,
                     help.With("activation checkpointing: checkpoint_sequential with this many "
                               "segments, at most the graph's node count (0: off)",
                               {"checkpoint_segments"}))
          ->type_name("SEGMENTS"));
}

void AddOutputFlags(CLI::App& app, Flags& f) {
  f.backend_opt =
      app.add_option("--backend", f.backend,
                     fmt::format("estimator backend (see --list-backends), a comma list "
                                 "(analytical,symbolic), or 'all' for every estimator; the "
                                 "measurement backend executes the model and runs only when "
                                 "named; several backends give one column each and the "
                                 "conservative verdict (default: {}; {} with --timeline)",
                                 kDefaultBackend, kTimelineBackend))
          ->type_name("NAME[,NAME...]|all");
  app.add_flag("--max-batch", f.max_batch,
               "print the largest batch that fits the GPU (and the estimate at that batch); "
               "--batch is ignored");
  app.add_option("--max-dim", f.max_dim,
                 "print the largest value of a named symbolic dim (e.g. seq) that fits the GPU, "
                 "with --batch and the other --dim values as given")
      ->type_name("NAME");
  f.output_opt =
      app.add_option("-o,--output", f.output,
                     fmt::format("output format (default: {})", ToString(Format::kTable)))
          ->type_name("table|json|csv|md");
  app.add_flag("--json", f.json, "same as -o json");
  app.add_flag("--list-backends", f.list_backends,
               "list the estimator backends and whether they are available");
  app.add_flag("--list-gpus", f.list_gpus, "list the GPU profiles");
  app.add_flag("--show-coverage", f.show_coverage,
               "list the ONNX operators the per-op rule table lacks (and, with MODEL, the "
               "model's op types without a rule)");
  app.add_option("--timeline", f.timeline_path,
                 "write the symbolic backend's simulated step (bytes over allocation events, "
                 "phases, peak) to FILE: .json, .csv, .svg or .html; the table then uses the "
                 "symbolic backend too unless --backend names another (stderr says so)")
      ->type_name("FILE");
  app.add_flag("-q,--quiet", f.quiet, "no warnings or notes on stderr (errors still are)");
  app.add_flag("-v,--verbose", f.verbose, "info diagnostics on stderr too");
  app.set_version_flag("-V,--version", std::string("memest ") + MEMEST_VERSION);
}

// Parses the command line. Returns the exit code when the run ends here (help, version, a usage
// error), nullopt to go on.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  app.allow_extras();  // reported below, with a "did you mean"
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    PrintResult(app.help());  // through PrintResult, so a failed write keeps its errno
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    PrintResult(app.help("", CLI::AppFormatMode::All));
    return 0;
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    PrintError(std::string(e.what()) + " (run memest --help for usage)");
    return kExitUsage;
  }
  if (const std::vector<std::string> extras = app.remaining(); !extras.empty()) {
    PrintError(UnexpectedArguments(extras, FlagNames(app)) + " (run memest --help for usage)");
    return kExitUsage;
  }
  return std::nullopt;
}

Result<Format> OutputFormat(const Flags& f) {
  Result<Format> format = ParseFormat(f.output);
  if (!format.ok()) return InvalidArgument("-o: " + format.status().message());
  if (!f.json) return format;
  if (f.output_opt->count() > 0 && *format != Format::kJson) {
    return InvalidArgument(fmt::format("--json conflicts with -o {}", f.output));
  }
  return Format::kJson;
}

// ---------------------------------------------------------------------------------------------
// Argument helpers.

// Parses a decimal integer in [min, 2^63-1]. `what` names the flag in the
// error, which always states the accepted range: the value is never clamped.
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

// Parses an integer flag into `*out` when the user gave it.
Status ParseIntegerFlag(const CLI::Option* opt, const std::string& text, int64_t min,
                        int64_t* out) {
  if (opt->count() == 0) return Status::Ok();
  MEMEST_ASSIGN_OR_RETURN(*out, ParseInteger(opt->get_name(), text, min));
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

// Flags that only describe a training step. With --mode infer they would be
// ignored, so giving one is a mistake the user should hear about.
Status CheckInferenceFlags(Mode mode, const std::vector<const CLI::Option*>& training) {
  if (mode != Mode::kInfer) return Status::Ok();
  std::vector<std::string> given;
  for (const CLI::Option* o : training) {
    if (o->count() > 0) given.push_back(o->get_name());
  }
  if (given.empty()) return Status::Ok();
  return InvalidArgument(fmt::format(
      "{} conflict{} with --mode infer: {} only to training (drop {} or use "
      "--mode train)",
      fmt::join(given, ", "), given.size() == 1 ? "s" : "",
      given.size() == 1 ? "it applies" : "they apply", given.size() == 1 ? "it" : "them"));
}

// Prefixes a failed parse with its flag.
template <typename T>
Result<T> ForFlag(const char* flag, Result<T> parsed) {
  if (parsed.ok()) return parsed;
  return InvalidArgument(fmt::format("{}: {}", flag, parsed.status().message()));
}

// The enum-valued flags. "ce" is accepted for cross-entropy, as memest-measure does.
Status ParseEnumFlags(const Flags& f, Options* o) {
  const std::string loss = f.loss == "ce" ? "cross-entropy" : f.loss;
  MEMEST_ASSIGN_OR_RETURN(o->mode, ForFlag("--mode", ParseMode(f.mode)));
  MEMEST_ASSIGN_OR_RETURN(o->optimizer, ForFlag("--optimizer", ParseOptimizer(f.optimizer)));
  MEMEST_ASSIGN_OR_RETURN(o->precision, ForFlag("--precision", ParsePrecision(f.precision)));
  MEMEST_ASSIGN_OR_RETURN(o->loss, ForFlag("--loss", ParseLoss(loss)));
  MEMEST_ASSIGN_OR_RETURN(o->optimizer_impl,
                          ForFlag("--optimizer-impl", ParseOptimizerImpl(f.optimizer_impl)));
  MEMEST_ASSIGN_OR_RETURN(o->weight_dtype,
                          ForFlag("--weight-dtype", ParseWeightDtype(f.weight_dtype)));
  MEMEST_ASSIGN_OR_RETURN(o->kv_cache_dtype,
                          ForFlag("--kv-cache-dtype", ParseKvCacheDtype(f.kv_cache_dtype)));
  return Status::Ok();
}

Status ParseDims(const std::vector<std::string>& args, Options* o) {
  for (const auto& arg : args) {
    MEMEST_ASSIGN_OR_RETURN(auto dim, ParseDim(arg));
    if (o->dims.count(dim.first)) {
      return InvalidArgument(fmt::format("--dim {} given twice", dim.first));
    }
    o->dims[dim.first] = dim.second;
  }
  return Status::Ok();
}

// Bytes with an optional unit: "1000000", "512MiB", "23.5GiB" (KiB, MiB, GiB, B). nullopt when
// the text is not that, or is 10^18 bytes or more.
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

// --safety-margin: "5%" (a share of the GPU's usable memory) or bytes with an optional unit
// ("512MiB", "2GiB", "1000000"). Empty: no margin.
Status ParseSafetyMargin(const std::string& text, FitPolicy* fit) {
  if (text.empty()) return Status::Ok();
  const auto bad = [&] {
    return InvalidArgument(fmt::format(
        "--safety-margin {}: expected a percentage below 100 (5%) or bytes (512MiB, 2GiB)", text));
  };
  if (!text.empty() && text.back() == '%') {
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
    fit->margin_fraction = value / 100.0;
    return Status::Ok();
  }
  const std::optional<uint64_t> bytes = ParseByteSize(text);
  if (!bytes) return bad();
  fit->margin_bytes = *bytes;
  return Status::Ok();
}

// --gpu-file and --capacity: a GPU given whole (Options::custom_gpu). --gpu names a profile of the
// file (else of the built-in table); without --gpu, the file's first profile.
Status ApplyGpuFlags(const Flags& f, Options* options) {
  if (!f.gpu_file.empty()) {
    Result<std::vector<GpuProfile>> profiles = LoadGpuProfiles(f.gpu_file);
    if (!profiles.ok()) return profiles.status().WithContext("--gpu-file");
    auto lower = [](std::string s) {
      std::transform(s.begin(), s.end(), s.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      return s;
    };
    const GpuProfile* pick = f.gpu_opt->count() == 0 ? &profiles->front() : nullptr;
    for (const GpuProfile& p : *profiles) {
      if (!pick && lower(p.name) == lower(f.gpu_name)) pick = &p;
    }
    if (pick) {
      options->custom_gpu = std::make_shared<const GpuProfile>(*pick);
      options->gpu = pick->name;
    }
  }
  if (!f.capacity.empty()) {
    const std::optional<uint64_t> bytes = ParseByteSize(f.capacity);
    if (!bytes || *bytes == 0) {
      return InvalidArgument(fmt::format(
          "--capacity {}: expected bytes above 0 with an optional unit (23.5GiB, 40960MiB)",
          f.capacity));
    }
    Result<GpuProfile> base = ResolveGpuProfile(*options);
    if (!base.ok()) return base.status().WithContext("--gpu " + options->gpu);
    options->custom_gpu = std::make_shared<const GpuProfile>(WithCapacity(*base, *bytes));
  }
  return Status::Ok();
}

// memest::Options from the flags, validated.
Result<Options> BuildOptions(const Flags& f) {
  Options options;
  MEMEST_RETURN_IF_ERROR(ParseEnumFlags(f, &options));
  MEMEST_RETURN_IF_ERROR(CheckInferenceFlags(options.mode, f.training_only));
  int64_t batch = 0;
  MEMEST_RETURN_IF_ERROR(ParseIntegerFlag(f.batch_opt, f.batch_text, 1, &batch));
  MEMEST_RETURN_IF_ERROR(
      ParseIntegerFlag(f.micro_batches_opt, f.micro_batches_text, 1, &options.micro_batches));
  MEMEST_RETURN_IF_ERROR(
      ParseIntegerFlag(f.checkpoint_opt, f.checkpoint_text, 0, &options.checkpoint_segments));
  if (f.batch_opt->count() > 0) {
    if (f.max_batch) {
      PrintWarning("--batch is ignored with --max-batch");
    } else {
      options.batch = batch;
    }
  }
  MEMEST_RETURN_IF_ERROR(ParseDims(f.dim_args, &options));
  if (f.max_batch && !f.max_dim.empty()) {
    return InvalidArgument("--max-batch and --max-dim search different dims: give one");
  }
  if (f.max_dim == "batch") {
    return InvalidArgument(
        "--max-dim batch: use --max-batch (it binds the leading dim of every "
        "data input)");
  }
  options.weight_decay = f.weight_decay;
  options.gpu = f.gpu_name;
  MEMEST_RETURN_IF_ERROR(ApplyGpuFlags(f, &options));
  options.stack = f.stack_name;
  options.trainable = f.trainable;
  options.freeze = f.freeze;
  MEMEST_ASSIGN_OR_RETURN(options.attention, ParseAttention(f.attention));
  MEMEST_ASSIGN_OR_RETURN(options.fit.on, ParseFitOn(f.fit_on));
  MEMEST_RETURN_IF_ERROR(ParseSafetyMargin(f.safety_margin, &options.fit));
  if (!f.stack_file.empty()) {
    Result<StackProfile> stack = LoadStackProfile(f.stack_file);
    if (!stack.ok()) return stack.status().WithContext("--stack-file");
    options.custom_stack = std::make_shared<const StackProfile>(std::move(stack).value());
  }
  options.allocator.expandable_segments = f.expandable;
  options.allow_unknown_shapes = f.allow_unknown_shapes;
  MEMEST_RETURN_IF_ERROR(ApplyParallelFlags(f.parallel, &options));
  MEMEST_RETURN_IF_ERROR(Validate(options));
  return options;
}

// --checkpoint cuts the node order into segments; with more segments than nodes
// checkpoint_sequential has nothing to cut and core/checkpoint.h turns it off. That would be a
// silent no-op, so it is a usage error.
Status CheckCheckpointSegments(const Options& o, const ModelSummary& summary) {
  if (o.checkpoint_segments <= summary.node_count) return Status::Ok();
  return InvalidArgument(
      fmt::format("--checkpoint {}: the graph has {} node{}, so at most {} segments (0 or 1: no "
                  "checkpointing)",
                  o.checkpoint_segments, summary.node_count, summary.node_count == 1 ? "" : "s",
                  summary.node_count));
}

// ---------------------------------------------------------------------------------------------
// Backends.

std::vector<std::string> BackendNames(const std::vector<BackendInfo>& infos, bool available) {
  std::vector<std::string> names;
  for (const auto& b : infos) {
    if (b.available == available) names.push_back(b.name);
  }
  return names;
}

// The error for a name that is no backend: the valid names and, for a typo, the closest one.
Status UnknownBackend(const std::string& name, const std::vector<BackendInfo>& infos) {
  std::vector<std::string> known;
  for (const auto& b : infos) known.push_back(b.name);
  known.push_back(kAllBackends);
  std::string message = fmt::format("--backend {}: unknown backend '{}'", name, name);
  if (auto s = Closest(name, known)) message += fmt::format("; did you mean '{}'?", *s);
  message += fmt::format(" (valid: {}, {}, or a comma list of them",
                         fmt::join(BackendNames(infos, true), ", "), kAllBackends);
  const std::vector<std::string> missing = BackendNames(infos, false);
  if (!missing.empty()) {
    message += fmt::format("; not in this build: {}", fmt::join(missing, ", "));
  }
  return InvalidArgument(message + ")");
}

// The error for a backend named on the command line that this build does not have.
Status NamedBackendUnavailable(const BackendInfo& b) {
  std::string message = fmt::format("--backend {}: not available in this memest: {}", b.name,
                                    b.reason.empty() ? "no reason given" : b.reason);
  if (b.name == kMeasurementBackend && b.reason.find("memest-measure") == std::string::npos) {
    message += " (to measure a model, run memest-measure; see docs/measurement.md)";
  }
  return InvalidArgument(message);
}

// The backends a --backend request names, in ListBackends() order. `all` is every available
// backend but measurement (which executes the model); other names must exist and be available.
// Estimators `all` skips as unavailable are named in `*skipped`.
Result<std::vector<std::string>> ResolveBackends(const std::string& request,
                                                 const std::vector<BackendInfo>& infos,
                                                 std::vector<std::string>* skipped) {
  if (request.empty() || request.back() == ',') {
    return InvalidArgument(fmt::format("--backend '{}': empty backend name", request));
  }
  std::set<std::string> chosen;
  std::stringstream items(request);
  for (std::string name; std::getline(items, name, ',');) {
    if (name.empty()) {
      return InvalidArgument(fmt::format("--backend '{}': empty backend name", request));
    }
    if (name == kAllBackends) {
      for (const auto& b : infos) {
        if (b.name == kMeasurementBackend) continue;
        if (b.available) {
          chosen.insert(b.name);
        } else if (std::find(skipped->begin(), skipped->end(), b.name) == skipped->end()) {
          skipped->push_back(b.name);
        }
      }
      continue;
    }
    auto it = std::find_if(infos.begin(), infos.end(),
                           [&](const BackendInfo& b) { return b.name == name; });
    if (it == infos.end()) return UnknownBackend(name, infos);
    if (!it->available) return NamedBackendUnavailable(*it);
    chosen.insert(name);
  }
  std::vector<std::string> names;
  for (const auto& b : infos) {
    if (chosen.count(b.name)) names.push_back(b.name);
  }
  return names;
}

// "batch 8", or the --dim bindings when no batch is set.
std::string BatchWords(const Options& o) {
  if (o.batch) return fmt::format("batch {}", *o.batch);
  std::vector<std::string> dims;
  for (const auto& [name, value] : o.dims) dims.push_back(fmt::format("{}={}", name, value));
  return dims.empty() ? "the model's own shapes" : fmt::format("{}", fmt::join(dims, " "));
}

// One estimator per name. (The measurement backend runs in memest-measure only: this program
// never registers it, so ResolveBackends has refused it by now.)
Result<std::vector<std::unique_ptr<Estimator>>> MakeEstimators(
    const std::vector<std::string>& names) {
  std::vector<std::unique_ptr<Estimator>> estimators;
  for (const auto& name : names) {
    Result<std::unique_ptr<Estimator>> e = MakeEstimator(name);
    if (!e.ok()) return e.status().WithContext("--backend " + name);
    estimators.push_back(std::move(e).value());
  }
  return estimators;
}

// ---------------------------------------------------------------------------------------------
// Files.

// The errno of opening `path` for reading (0 when it opens). O_NONBLOCK: a
// FIFO must not hang the error path.
int OpenErrno(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

// Prints why the model did not load and returns the exit code. LoadModel's message names the
// path and the reason; it says not_found for a file that exists but cannot be opened too, which
// the label tells apart by asking the file system again (errno), never the message.
int ReportLoadFailure(const Status& s, const std::string& path) {
  std::string code = ErrorCodeName(s.code());
  if (s.code() == ErrorCode::kNotFound) {
    if (const int err = OpenErrno(path); err != 0 && err != ENOENT) code = "unreadable";
  }
  PrintError(fmt::format("cannot load model: {} ({})", s.message(), code));
  return ExitCodeFor(s);
}

// --hf-config: builds the config's graph (datasets/zoo/hf.h) and loads it like a file. The model
// line names the config, the module and the phase. A config that does not build is a bad model
// (exit 3); a phase the family lacks is a usage error (exit 2).
Result<std::shared_ptr<const Model>> LoadHfModel(const Flags& f, std::string* display) {
  zoo::HfGraphOptions options;
  MEMEST_ASSIGN_OR_RETURN(options.phase, zoo::ParsePhase(f.phase));
  options.logits_last_only = f.logits == "last";
  options.source = f.hf_config;
  std::string stem = f.hf_config.substr(f.hf_config.find_last_of('/') + 1);
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0) {
    stem.resize(stem.size() - 5);
  }
  options.name = stem;
  MEMEST_ASSIGN_OR_RETURN(const nlohmann::json config, zoo::LoadHfConfig(f.hf_config));
  MEMEST_ASSIGN_OR_RETURN(zoo::HfModel built, zoo::BuildHfModel(config, options));
  for (const std::string& note : built.notes) PrintNote("note: " + f.hf_config + ": " + note);
  *display = fmt::format("{} ({}, {}{})", f.hf_config, built.architecture,
                         zoo::PhaseName(built.phase), f.logits == "last" ? ", last logits" : "");
  return LoadModelFromBytes(zoo::SerializeModel(built.model), ".", *display);
}

// The model to estimate: MODEL.onnx, or the graph of --hf-config. `display` is how the report
// names it. Prints why it failed and sets `exit_code` on an error.
std::shared_ptr<const Model> LoadInput(const Flags& f, std::string* display, int* exit_code) {
  *display = f.model_path;
  if (f.hf_config.empty()) {
    Result<std::shared_ptr<const Model>> m = LoadModel(f.model_path);
    if (m.ok()) return *m;
    *exit_code = ReportLoadFailure(m.status(), f.model_path);
    return nullptr;
  }
  Result<std::shared_ptr<const Model>> m = LoadHfModel(f, display);
  if (m.ok()) return *m;
  const Status& s = m.status();
  PrintError(fmt::format("--hf-config {}: {}", f.hf_config, s.ToString()));
  *exit_code = s.code() == ErrorCode::kInvalidArgument ? kExitUsage : kExitBadModel;
  return nullptr;
}

// --hf-config against MODEL.onnx, --phase/--logits without it, and --phase against --mode. A
// prefill or decode graph is inference: --mode defaults to infer for it.
Status CheckHfFlags(Flags* f) {
  if (f->hf_config.empty()) {
    for (const CLI::Option* o : {f->phase_opt, f->logits_opt}) {
      if (o->count() > 0) return InvalidArgument(o->get_name() + " needs --hf-config");
    }
    return Status::Ok();
  }
  if (!f->model_path.empty()) {
    return InvalidArgument(fmt::format("--hf-config {} replaces MODEL.onnx ({}): give one",
                                       f->hf_config, f->model_path));
  }
  MEMEST_RETURN_IF_ERROR(zoo::ParsePhase(f->phase).status().WithContext("--phase"));
  if (f->logits != "all" && f->logits != "last") {
    return InvalidArgument("--logits: expected all or last, not '" + f->logits + "'");
  }
  if (f->phase != "train") {
    if (f->mode_opt->count() == 0) {
      f->mode = ToString(Mode::kInfer);
    } else if (f->mode != ToString(Mode::kInfer)) {
      return InvalidArgument(fmt::format(
          "--phase {} is an inference graph (KV cache): use --mode infer or --phase train",
          f->phase));
    }
  }
  return Status::Ok();
}

// Checks that `path` can be opened for writing before any estimate runs (a
// missing folder, a read-only one, a directory); a file the check creates is
// removed again.
Status CheckWritable(const std::string& path) {
  struct stat st {};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return InvalidArgument(fmt::format("{}: cannot be written: {}", path, std::strerror(err)));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return Status::Ok();
}

// A --timeline path must have a known extension and be writable.
Status CheckTimelinePath(const std::string& path) {
  if (path.empty()) return Status::Ok();
  MEMEST_RETURN_IF_ERROR(TimelineFormatFor(path).status());
  if (Status s = CheckWritable(path); !s.ok()) return InvalidArgument("--timeline " + s.message());
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// The timeline (--timeline): always the symbolic backend's simulation.

// The options the timeline simulates: the table's, and with --max-batch the symbolic result's
// maximum (the conservative maximum of the table when symbolic is not in it; batch 1 when not
// even that fits, as the table then shows batch 1).
Options TimelineOptions(const Options& options, const std::vector<BackendResult>& results,
                        const std::string& searched) {
  Options o = options;
  if (searched.empty()) return o;
  std::optional<int64_t> best = ConservativeMaxBatch(results);
  for (const auto& r : results) {
    if (r.backend == kTimelineBackend && r.status.ok() && r.max_batch) best = r.max_batch;
  }
  const int64_t value = std::max<int64_t>(best.value_or(1), 1);
  if (searched == "batch") {
    o.batch = value;
  } else {
    o.dims[searched] = value;
  }
  return o;
}

// Simulates the step with the symbolic backend and writes its timeline to
// `path`. A failed write carries errno's reason; the title names the backend.
Result<TimelineInfo> WriteTimelineFile(const Model& model, const Options& options,
                                       const std::string& model_path, const std::string& path) {
  const std::string title =
      fmt::format("{} -- {} {} -- drawn by the {} backend", model_path, ToString(options.mode),
                  BatchWords(options), kTimelineBackend);
  MEMEST_RETURN_IF_ERROR(WriteTimeline(model, options, path, ReplaceInvalidUtf8(title)));
  TimelineInfo info;
  info.path = path;
  info.backend = kTimelineBackend;
  info.batch = options.batch;
  return info;
}

// Says on stderr where the timeline went and, when the table is not (only) the symbolic
// backend's, that the two come from different backends.
void NoteTimeline(const TimelineInfo& t, const std::vector<BackendResult>& results) {
  PrintNote(fmt::format("timeline written to {} (drawn by the {} backend)", t.path, t.backend));
  std::vector<std::string> table;
  for (const auto& r : results) table.push_back(r.backend);
  if (table.size() == 1 && table.front() == t.backend) return;
  PrintNote(fmt::format(
      "note: timeline drawn by the {} backend (the only one with a timeline); the table is {}",
      t.backend, fmt::join(table, ", ")));
}

// ---------------------------------------------------------------------------------------------
// Estimates and the report.

// The errno of the first failed write of results to stdout (0: none seen).
int stdout_errno = 0;

// Writes results to stdout and flushes them at once, so that a failed write is
// seen while errno still holds its reason.
void PrintResult(const std::string& text) {
  errno = 0;
  std::cout << text << std::flush;
  if (!std::cout.good() && stdout_errno == 0) stdout_errno = errno;
}

// Flushes stdout. A failed write (a full disk, /dev/full) must not pass for
// success: it is reported and turns exit codes 0 and 1 into 4.
int FinishStdout(int code) {
  errno = 0;
  std::cout.flush();
  const bool flushed = std::fflush(stdout) == 0;
  const int err = stdout_errno != 0 ? stdout_errno : errno;
  if (flushed && std::cout.good() && !std::ferror(stdout)) return code;
  std::cerr << "memest: error: cannot write the results to stdout"
            << (err != 0 ? std::string(": ") + std::strerror(err) : "") << '\n';
  return code >= kExitUsage ? code : kExitInternal;
}

// --list-backends, --list-gpus, --show-coverage: the exit code when one was asked for.
std::optional<int> RunListings(const Flags& f, Format format) {
  if (f.list_backends || f.list_gpus) {
    if (f.list_backends) PrintResult(RenderBackends(ListBackends(), format, MEMEST_VERSION));
    if (f.list_backends && f.list_gpus && format == Format::kTable) PrintResult("\n");
    if (f.list_gpus) {
      PrintResult(RenderGpus(GpuProfiles(), StackProfiles(), format, MEMEST_VERSION));
    }
    return kExitFits;
  }
  if (!f.show_coverage) return std::nullopt;
  const OpCoverage all = RuleCoverage();
  if (f.model_path.empty() && f.hf_config.empty()) {
    PrintResult(RenderCoverage(all, nullptr, "", format, MEMEST_VERSION));
    return kExitFits;
  }
  std::string display;
  int code = kExitInternal;
  const std::shared_ptr<const Model> m = LoadInput(f, &display, &code);
  if (m == nullptr) return code;
  const ModelCoverage mc = RuleCoverage(*m);
  PrintResult(RenderCoverage(all, &mc, display, format, MEMEST_VERSION));
  return kExitFits;
}

// Everything an estimate run needs before the model is loaded.
struct Plan {
  Options options;
  GpuProfile gpu;
  StackProfile stack;
  std::string backend_request;  // after defaults: what Report::backend_request records
  std::vector<std::string> backends;
  std::vector<std::unique_ptr<Estimator>> estimators;
};

Status PreparePlan(const Flags& f, Plan* plan) {
  MEMEST_ASSIGN_OR_RETURN(plan->options, BuildOptions(f));
  Result<GpuProfile> gpu = ResolveGpuProfile(plan->options);
  if (!gpu.ok()) {
    return Status(gpu.status().code(), fmt::format("--gpu {}: {} (see memest --list-gpus)",
                                                   plan->options.gpu, gpu.status().message()));
  }
  plan->gpu = *gpu;
  if (plan->options.custom_stack) {
    plan->stack = *plan->options.custom_stack;
  } else {
    Result<StackProfile> stack = ResolveStack(plan->options.stack);
    if (!stack.ok()) {
      return Status(stack.status().code(),
                    fmt::format("--stack {}: {} (see memest --list-gpus)", plan->options.stack,
                                stack.status().message()));
    }
    plan->stack = *stack;
  }
  plan->backend_request = f.backend;
  if (!f.timeline_path.empty() && f.backend_opt->count() == 0) {
    plan->backend_request = kTimelineBackend;
    PrintInfo(fmt::format("--timeline without --backend: the table is the {} backend's too",
                          kTimelineBackend));
  }
  std::vector<std::string> skipped;
  MEMEST_ASSIGN_OR_RETURN(plan->backends,
                          ResolveBackends(plan->backend_request, ListBackends(), &skipped));
  for (const auto& name : skipped) {
    PrintWarning(
        fmt::format("--backend {}: {} is not available in this build (see memest "
                    "--list-backends)",
                    kAllBackends, name));
  }
  MEMEST_ASSIGN_OR_RETURN(plan->estimators, MakeEstimators(plan->backends));
  return CheckTimelinePath(f.timeline_path);
}

// Runs every estimator on the model, or its search for the largest fitting value of `searched`
// ("batch": FindMaxBatch; a dim name: FindMaxDim; empty: no search).
std::vector<BackendResult> RunBackends(const Plan& plan, const Model& model,
                                       const std::string& searched, int64_t limit) {
  std::vector<BackendResult> results;
  for (size_t i = 0; i < plan.backends.size(); ++i) {
    BackendResult& r = results.emplace_back();
    r.backend = plan.backends[i];
    const Estimator& estimator = *plan.estimators[i];
    if (!searched.empty()) {
      Result<MaxBatchResult> mb = searched == "batch"
                                      ? FindMaxBatch(estimator, model, plan.options, limit)
                                      : FindMaxDim(estimator, model, plan.options, searched, limit);
      if (!mb.ok()) {
        r.status = mb.status();
        continue;
      }
      r.max_batch = mb->batch;
      r.max_batch_evaluations = mb->evaluations;
      r.estimate = mb->at_batch;
    } else {
      Result<Estimate> e = estimator.Run(model, plan.options);
      if (!e.ok()) {
        r.status = e.status();
        continue;
      }
      r.estimate = std::move(e).value();
    }
    r.fit = CheckFit(r.estimate, plan.gpu, plan.options.fit);
  }
  return results;
}

void PrintFailures(const std::vector<BackendResult>& results) {
  for (const auto& r : results) {
    if (r.status.ok()) continue;
    if (r.status.code() == ErrorCode::kUnavailable) {
      PrintError(fmt::format("{}: unavailable: {}", r.backend, r.status.message()));
    } else {
      PrintError(fmt::format("{}: {}", r.backend, r.status.ToString()));
    }
  }
}

int VerdictExitCode(const std::vector<BackendResult>& results) {
  switch (OverallVerdict(results)) {
    case Verdict::kFits:
      return kExitFits;
    case Verdict::kDoesNotFit:
      return kExitDoesNotFit;
    case Verdict::kError:
      break;
  }
  for (const auto& r : results) {
    if (!r.status.ok() && r.status.code() != ErrorCode::kUnavailable) {
      return ExitCodeFor(r.status);
    }
  }
  return kExitInternal;  // every backend unavailable
}

// Estimates, the timeline, the report; returns the exit code.
int EstimateAndReport(const Flags& f, const Plan& plan, const Model& model,
                      const std::string& model_name, Format format) {
  const int64_t limit = int64_t{1} << 24;
  const std::string searched = f.max_batch ? "batch" : f.max_dim;
  const std::vector<BackendResult> results = RunBackends(plan, model, searched, limit);
  PrintFailures(results);

  Report report;
  if (!f.timeline_path.empty()) {
    Result<TimelineInfo> t = WriteTimelineFile(
        model, TimelineOptions(plan.options, results, searched), model_name, f.timeline_path);
    if (!t.ok()) {
      PrintError("timeline: " + t.status().ToString());
      return ExitCodeFor(t.status());
    }
    NoteTimeline(*t, results);
    report.timeline = *t;
  }

  report.memest_version = MEMEST_VERSION;
  report.model_path = model_name;
  report.model = model.summary();
  report.options = plan.options;
  report.gpu = plan.gpu;
  report.stack = plan.stack;
  report.backend_request = plan.backend_request;
  report.results = results;
  report.max_batch_mode = !searched.empty();
  report.per_rank = f.parallel.per_rank;
  if (!searched.empty()) report.max_dim = searched;
  report.max_batch_limit = limit;
  // A table of nothing but failures helps nobody; programs still get their document.
  const bool any_ok = std::any_of(results.begin(), results.end(),
                                  [](const BackendResult& r) { return r.status.ok(); });
  if (any_ok || format == Format::kJson || format == Format::kCsv) {
    PrintResult(RenderReport(report, format));
  }
  for (const auto& r : results) {
    if (r.status.ok())
      PrintDiagnostics(r.estimate.diagnostics, results.size() > 1 ? r.backend : "");
  }
  return VerdictExitCode(results);
}

// ---------------------------------------------------------------------------------------------

int RunCli(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "calibrate")
    return RunCalibrate(argc - 1, argv + 1);
  if (argc >= 2 && std::string_view(argv[1]) == "pack") return RunPack(argc - 1, argv + 1);
  if (argc >= 2 && std::string_view(argv[1]) == "serve") return RunServe(argc - 1, argv + 1);
  const Options defaults;
  HelpDefaults help(DescribeOptions());
  Flags f(defaults);
  CLI::App app{
      "memest -- predicts the peak GPU memory of one training step (or inference) of an ONNX "
      "model, and whether it fits a GPU."};
  app.name("memest");
  AddEstimationFlags(app, f, help);
  AddParallelFlags(app, f.parallel,
                   [&help](std::string text, std::initializer_list<const char*> keys) {
                     return help.With(std::move(text), keys);
                   });
  AddOutputFlags(app, f);
  app.footer(help.Footer());
  if (std::optional<int> code = ParseCommandLine(app, argc, argv)) return *code;
  if (f.quiet && f.verbose) {
    PrintError("--quiet conflicts with --verbose");
    return kExitUsage;
  }
  verbosity = f.quiet ? Verbosity::kQuiet : f.verbose ? Verbosity::kVerbose : Verbosity::kNormal;

  const Result<Format> format = OutputFormat(f);
  if (!format.ok()) {
    PrintError(format.status().message());
    return kExitUsage;
  }
  if (Status s = CheckHfFlags(&f); !s.ok()) {
    PrintError(s.message());
    return kExitUsage;
  }
  if (std::optional<int> code = RunListings(f, *format)) return *code;
  if (f.model_path.empty() && f.hf_config.empty()) {
    PrintError("missing MODEL.onnx or --hf-config (run memest --help for usage)");
    return kExitUsage;
  }
  Plan plan;
  if (Status s = PreparePlan(f, &plan); !s.ok()) {
    PrintError(s.message());
    return ExitCodeFor(s);
  }

  std::string model_name;
  int load_code = kExitInternal;
  const std::shared_ptr<const Model> loaded = LoadInput(f, &model_name, &load_code);
  if (loaded == nullptr) return load_code;
  const Model& model = *loaded;
  PrintDiagnostics(model.summary().diagnostics, "");
  if (Status s = CheckCheckpointSegments(plan.options, model.summary()); !s.ok()) {
    PrintError(s.message());
    return kExitUsage;
  }
  return EstimateAndReport(f, plan, model, model_name, *format);
}

}  // namespace
}  // namespace memest::cli

int main(int argc, char** argv) {
  int code = 4;
  try {
    code = memest::cli::RunCli(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "memest: internal error: " << e.what() << '\n';
  } catch (...) {
    std::cerr << "memest: internal error: unknown exception\n";
  }
  return memest::cli::FinishStdout(code);
}
