// tools/memest_main.cc -- the `memest` command-line tool.
//
//   memest MODEL.onnx [--batch N] [--dim name=value]... [--mode train|infer]
//   [--optimizer ...]
//          [--weight-decay X] [--precision ...] [--loss ...] [--gpu NAME]
//          [--expandable-segments]
//          [--backend NAME|all] [--max-batch] [-o table|json|csv|md] [--json]
//   memest --list-backends | --list-gpus
//
// Results go to stdout; diagnostics, warnings and errors go to stderr. Exit
// codes (docs/cli.md):
//   0  the estimate fits the GPU (or a --list-* / --help / --version request)
//   1  it does not fit (with --backend all: any backend with a result says so)
//   2  usage error: bad flag or value (an integer out of range is never
//      clamped), a training-only flag with --mode infer, unknown GPU or
//      backend, an unwritable --timeline file, unbound symbolic dim
//   3  bad model: missing or unreadable file, not ONNX, truncated, invalid
//      graph, overflow
//   4  backend unavailable, unsupported model for the backend, a failed write
//      to stdout, or internal error
// Option defaults shown by --help come from memest::DescribeOptions(), i.e.
// from a default-constructed memest::Options; this file never repeats them.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "symbolic/symbolic.h"
#include "symbolic/timeline_writer.h"
#include "tools/report.h"

#ifndef MEMEST_VERSION
#define MEMEST_VERSION "unknown"
#endif

namespace memest::cli {
namespace {

constexpr int kExitFits = 0;
constexpr int kExitDoesNotFit = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBadModel = 3;
constexpr int kExitInternal = 4;

// The CLI's own defaults (not memest::Options fields).
constexpr char kDefaultBackend[] = "analytical";
constexpr char kAllBackends[] = "all";

// Which library call produced a Status; the same code can mean different things
// (NotFound from LoadModel is a missing file, from FindGpuProfile an unknown
// name).
enum class Stage { kSetup, kLoad, kEstimate };

int ExitCodeFor(const Status& s, Stage stage) {
  switch (s.code()) {
    case ErrorCode::kOk:
      return kExitFits;
    case ErrorCode::kInvalidArgument:
      return stage == Stage::kLoad ? kExitBadModel : kExitUsage;
    case ErrorCode::kNotFound:
      return stage == Stage::kLoad ? kExitBadModel : kExitUsage;
    case ErrorCode::kUnboundDim:
      return kExitUsage;
    case ErrorCode::kInvalidModel:
    case ErrorCode::kOverflow:
      return kExitBadModel;
    case ErrorCode::kUnsupported:
      return stage == Stage::kLoad ? kExitBadModel : kExitInternal;
    case ErrorCode::kUnavailable:
    case ErrorCode::kInternal:
      return kExitInternal;
  }
  return kExitInternal;
}

void PrintError(const std::string& message) {
  std::cerr << "memest: error: " << message << '\n';
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

std::string DefaultText(const OptionDoc& d) {
  std::string value = d.default_value.empty() ? "unset" : d.default_value;
  if (value.size() >= 2 && value.front() == '(' && value.back() == ')') {
    value = value.substr(1, value.size() - 2);
  }
  return value;
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
        "4 backend unavailable or internal error.\n"
        "Results go to stdout; diagnostics and errors to stderr. Defaults come "
        "from memest::DescribeOptions(). See docs/cli.md.";
    return out;
  }

 private:
  std::vector<OptionDoc> docs_;
  std::set<const OptionDoc*> used_;
};

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

// Parses an integer flag into `*out` when the user gave it; prints the error
// and returns false on a bad value.
bool ParseIntegerFlag(const CLI::Option* opt, const std::string& text, int64_t min, int64_t* out) {
  if (opt->count() == 0) return true;
  Result<int64_t> v = ParseInteger(opt->get_name(), text, min);
  if (!v.ok()) {
    PrintError(v.status().message());
    return false;
  }
  *out = *v;
  return true;
}

Result<std::pair<std::string, int64_t>> ParseDim(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument(fmt::format(
        "--dim '{}': expected NAME=VALUE, e.g. --dim seq=128", text));
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

// The errno of opening `path` for reading (0 when it opens). O_NONBLOCK: a
// FIFO must not hang the error path.
int OpenErrno(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  ::close(fd);
  return 0;
}

// Prints why the model did not load and returns the exit code. LoadModel says
// not_found for a file that exists but cannot be opened too; errno tells them
// apart, so an unreadable file is reported as such, with the reason.
int ReportLoadFailure(const Status& s, const std::string& path) {
  std::string message = s.message();
  std::string code = ErrorCodeName(s.code());
  if (s.code() == ErrorCode::kNotFound) {
    if (const int err = OpenErrno(path); err != 0 && err != ENOENT) {
      message = fmt::format("cannot be read: {}", std::strerror(err));
      code = "unreadable";
    }
  }
  if (message.find(path) == std::string::npos) message = path + ": " + message;
  PrintError(fmt::format("cannot load model: {} ({})", message, code));
  return ExitCodeFor(s, Stage::kLoad);
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

// Simulates the step with the symbolic backend and writes its timeline to
// `path`. A failed write carries errno's reason; `title` may hold any bytes.
Status WriteTimelineFile(const Model& model, const Options& options, const std::string& title,
                         const std::string& path) {
  MEMEST_ASSIGN_OR_RETURN(symbolic::Simulation sim,
                          symbolic::SimulateModel(model, options, /*record_events=*/true));
  errno = 0;
  Status written = symbolic::WriteTimeline(sim, path, ReplaceInvalidUtf8(title));
  const int err = errno;
  if (written.ok() || err == 0) return written;
  return Status(written.code(), written.message() + ": " + std::strerror(err));
}

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

void PrintDiagnostics(const std::vector<Diagnostic>& ds,
                      std::string_view backend) {
  for (const auto& d : ds)
    std::cerr << "memest: " << FormatDiagnostic(d, backend) << '\n';
}

// ---------------------------------------------------------------------------------------------

int RunCli(int argc, char** argv) {
  const Options defaults;
  HelpDefaults help(DescribeOptions());

  std::string model_path;
  std::string batch_text;
  std::vector<std::string> dim_args;
  std::string mode = ToString(defaults.mode);
  std::string optimizer = ToString(defaults.optimizer);
  std::string optimizer_impl = ToString(defaults.optimizer_impl);
  std::string checkpoint_text;
  double weight_decay = defaults.weight_decay;
  std::string precision = ToString(defaults.precision);
  std::string loss = ToString(defaults.loss);
  std::string gpu_name = defaults.gpu;
  bool expandable = defaults.allocator.expandable_segments;
  std::string micro_batches_text;
  std::string backend = kDefaultBackend;
  bool max_batch = false;
  std::string output = ToString(Format::kTable);
  bool json = false;
  bool list_backends = false;
  bool list_gpus = false;
  bool show_coverage = false;
  std::string timeline_path;

  CLI::App app{
      "memest -- predicts the peak GPU memory of one training step (or "
      "inference) of an ONNX "
      "model, and whether it fits a GPU."};
  app.name("memest");
  app.add_option("model", model_path, "the ONNX model file")
      ->type_name("MODEL.onnx");
  CLI::Option* batch_opt =
      app.add_option(
             "-b,--batch", batch_text,
             help.With("binds the leading symbolic dim (batch) of every data input", {"batch"}))
          ->type_name("N");
  app.add_option("-d,--dim", dim_args,
                 help.With("binds a named symbolic dim, e.g. --dim seq=128 "
                           "(repeatable; wins over --batch)",
                           {"dims", "dim"}))
      ->type_name("NAME=VALUE");
  app.add_option("--mode", mode,
                 help.With("train: one training step; infer: one forward pass",
                           {"mode"}))
      ->type_name("train|infer");
  std::vector<const CLI::Option*> training_only;
  training_only.push_back(app.add_option("--optimizer", optimizer,
                                         help.With("optimizer of the training step", {"optimizer"}))
                              ->type_name("sgd|momentum|adam|adamw"));
  training_only.push_back(
      app.add_option("--optimizer-impl", optimizer_impl,
                     help.With("how torch.optim runs the step (foreach=False is single-tensor, "
                               "fused=True is fused)",
                               {"optimizer_impl"}))
          ->type_name("foreach|single-tensor|fused"));
  training_only.push_back(
      app.add_option("--weight-decay", weight_decay,
                     help.With("weight decay (L2 for sgd/momentum/adam, decoupled for adamw)",
                               {"weight_decay"}))
          ->type_name("X"));
  app.add_option("--precision", precision,
                 help.With("numeric precision", {"precision"}))
      ->type_name("fp32|amp-fp16|amp-bf16|bf16");
  training_only.push_back(
      app.add_option("--loss", loss, help.With("loss on the first output in training", {"loss"}))
          ->type_name("auto|cross-entropy|mse"));
  app.add_option("--gpu", gpu_name,
                 help.With("GPU profile (see --list-gpus)", {"gpu"}))
      ->type_name("NAME");
  app.add_flag(
      "--expandable-segments", expandable,
      help.With("PyTorch caching allocator with expandable_segments:True",
                {"expandable_segments", "allocator_expandable_segments"}));
  CLI::Option* micro_batches_opt =
      app.add_option("--micro-batches", micro_batches_text,
                     help.With("gradient accumulation: micro-batches per optimizer step "
                               "(--batch must divide)",
                               {"micro_batches"}))
          ->type_name("K");
  training_only.push_back(micro_batches_opt);
  CLI::Option* checkpoint_opt =
      app.add_option("--checkpoint", checkpoint_text,
                     help.With("activation checkpointing: checkpoint_sequential with this many "
                               "segments (0: off)",
                               {"checkpoint_segments"}))
          ->type_name("SEGMENTS");
  training_only.push_back(checkpoint_opt);
  app.add_option(
         "--backend", backend,
         fmt::format("estimator backend (see --list-backends), or 'all' for "
                     "one column per backend; "
                     "the verdict is then the conservative one (default: {})",
                     kDefaultBackend))
      ->type_name("NAME|all");
  app.add_flag("--max-batch", max_batch,
               "print the largest batch that fits the GPU (and the estimate at "
               "that batch); "
               "--batch is ignored");
  CLI::Option* output_opt =
      app.add_option("-o,--output", output,
                     fmt::format("output format (default: {})",
                                 ToString(Format::kTable)))
          ->type_name("table|json|csv|md");
  app.add_flag("--json", json, "same as -o json");
  app.add_flag("--list-backends", list_backends,
               "list the estimator backends and whether they are available");
  app.add_flag("--list-gpus", list_gpus, "list the GPU profiles");
  app.add_flag("--show-coverage", show_coverage,
               "list the ONNX operators the per-op rule table lacks (and, with MODEL, the "
               "model's op types without a rule)");
  app.add_option("--timeline", timeline_path,
                 "write the symbolic backend's simulated step (bytes over allocation "
                 "events, phases, peak) to FILE: .json, .csv, .svg or .html")
      ->type_name("FILE");
  app.set_version_flag("-V,--version", std::string("memest ") + MEMEST_VERSION);
  app.footer(help.Footer());

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    PrintError(std::string(e.what()) + " (run memest --help for usage)");
    return kExitUsage;
  }

  // Output format.
  Format format = Format::kTable;
  {
    Result<Format> f = ParseFormat(output);
    if (!f.ok()) {
      PrintError("-o: " + f.status().message());
      return kExitUsage;
    }
    format = *f;
    if (json) {
      if (output_opt->count() > 0 && format != Format::kJson) {
        PrintError(fmt::format("--json conflicts with -o {}", output));
        return kExitUsage;
      }
      format = Format::kJson;
    }
  }

  if (list_backends || list_gpus) {
    if (list_backends) PrintResult(RenderBackends(ListBackends(), format, MEMEST_VERSION));
    if (list_backends && list_gpus && format == Format::kTable) PrintResult("\n");
    if (list_gpus) PrintResult(RenderGpus(GpuProfiles(), format, MEMEST_VERSION));
    return kExitFits;
  }
  if (show_coverage) {
    const OpCoverage all = RuleCoverage();
    if (model_path.empty()) {
      PrintResult(RenderCoverage(all, nullptr, "", format, MEMEST_VERSION));
      return kExitFits;
    }
    Result<std::shared_ptr<const Model>> m = LoadModel(model_path);
    if (!m.ok()) return ReportLoadFailure(m.status(), model_path);
    const ModelCoverage mc = RuleCoverage(**m);
    PrintResult(RenderCoverage(all, &mc, model_path, format, MEMEST_VERSION));
    return kExitFits;
  }
  if (model_path.empty()) {
    PrintError("missing MODEL.onnx (run memest --help for usage)");
    return kExitUsage;
  }

  // Options.
  Options options;
  {
    struct {
      const char* flag;
      Status status;
    } parsed[] = {{"--mode", Status::Ok()},
                  {"--optimizer", Status::Ok()},
                  {"--precision", Status::Ok()},
                  {"--loss", Status::Ok()},
                  {"--optimizer-impl", Status::Ok()}};
    auto m = ParseMode(mode);
    auto o = ParseOptimizer(optimizer);
    auto p = ParsePrecision(precision);
    auto l = ParseLoss(loss);
    auto oi = ParseOptimizerImpl(optimizer_impl);
    parsed[4].status = oi.status();
    parsed[0].status = m.status();
    parsed[1].status = o.status();
    parsed[2].status = p.status();
    parsed[3].status = l.status();
    for (const auto& x : parsed) {
      if (!x.status.ok()) {
        PrintError(fmt::format("{}: {}", x.flag, x.status.message()));
        return kExitUsage;
      }
    }
    options.mode = *m;
    options.optimizer = *o;
    options.precision = *p;
    options.loss = *l;
    options.optimizer_impl = *oi;
  }
  if (Status s = CheckInferenceFlags(options.mode, training_only); !s.ok()) {
    PrintError(s.message());
    return kExitUsage;
  }
  int64_t batch = 0;
  if (!ParseIntegerFlag(batch_opt, batch_text, 1, &batch) ||
      !ParseIntegerFlag(micro_batches_opt, micro_batches_text, 1, &options.micro_batches) ||
      !ParseIntegerFlag(checkpoint_opt, checkpoint_text, 0, &options.checkpoint_segments)) {
    return kExitUsage;
  }
  if (batch_opt->count() > 0) {
    if (max_batch) {
      std::cerr << "memest: warning: --batch is ignored with --max-batch\n";
    } else {
      options.batch = batch;
    }
  }
  for (const auto& arg : dim_args) {
    auto d = ParseDim(arg);
    if (!d.ok()) {
      PrintError(d.status().message());
      return kExitUsage;
    }
    if (options.dims.count(d->first)) {
      PrintError(fmt::format("--dim {} given twice", d->first));
      return kExitUsage;
    }
    options.dims[d->first] = d->second;
  }
  options.weight_decay = weight_decay;
  options.gpu = gpu_name;
  options.allocator.expandable_segments = expandable;
  if (Status s = Validate(options); !s.ok()) {
    PrintError(s.message());
    return ExitCodeFor(s, Stage::kSetup);
  }

  // GPU profile.
  Result<GpuProfile> gpu = FindGpuProfile(options.gpu);
  if (!gpu.ok()) {
    PrintError(fmt::format("--gpu {}: {} (see memest --list-gpus)", options.gpu,
                           gpu.status().message()));
    return ExitCodeFor(gpu.status(), Stage::kSetup);
  }

  // Backends.
  const std::vector<BackendInfo> infos = ListBackends();
  std::vector<std::string> names;
  if (backend == kAllBackends) {
    for (const auto& b : infos) names.push_back(b.name);
  } else {
    const bool known =
        std::any_of(infos.begin(), infos.end(),
                    [&](const BackendInfo& b) { return b.name == backend; });
    if (!known) {
      std::vector<std::string> all;
      for (const auto& b : infos) all.push_back(b.name);
      PrintError(
          fmt::format("--backend {}: unknown backend (known: {}, or all)",
                      backend, fmt::join(all, ", ")));
      return kExitUsage;
    }
    names.push_back(backend);
  }
  std::vector<BackendResult> results;
  std::vector<std::unique_ptr<Estimator>> estimators;
  for (const auto& name : names) {
    Result<std::unique_ptr<Estimator>> e = MakeEstimator(name);
    BackendResult r;
    r.backend = name;
    if (!e.ok()) {
      if (e.status().code() == ErrorCode::kNotFound) {
        PrintError(fmt::format("--backend {}: {}", name, e.status().message()));
        return kExitUsage;
      }
      r.status = e.status();
      if (names.size() == 1) {
        PrintError(e.status().message());
        return ExitCodeFor(e.status(), Stage::kSetup);
      }
      // Report an unavailable backend by its registry reason, not the
      // sentence MakeEstimator wraps around it.
      for (const auto& info : infos) {
        if (info.name == name && !info.available && !info.reason.empty() &&
            r.status.code() == ErrorCode::kUnavailable) {
          r.status = Unavailable(info.reason);
        }
      }
      estimators.push_back(nullptr);
    } else {
      estimators.push_back(std::move(e).value());
    }
    results.push_back(std::move(r));
  }

  if (!timeline_path.empty()) {
    if (auto f = symbolic::TimelineFormatFor(timeline_path); !f.ok()) {
      PrintError(f.status().message());
      return kExitUsage;
    }
    if (Status s = CheckWritable(timeline_path); !s.ok()) {
      PrintError("--timeline " + s.message());
      return kExitUsage;
    }
  }

  // Model.
  Result<std::shared_ptr<const Model>> loaded = LoadModel(model_path);
  if (!loaded.ok()) return ReportLoadFailure(loaded.status(), model_path);
  const Model& model = **loaded;
  const ModelSummary& summary = model.summary();
  PrintDiagnostics(summary.diagnostics, "");

  // Estimates.
  const int64_t limit = int64_t{1} << 24;
  for (size_t i = 0; i < results.size(); ++i) {
    BackendResult& r = results[i];
    if (!estimators[i]) continue;
    if (max_batch) {
      Result<MaxBatchResult> mb =
          FindMaxBatch(*estimators[i], model, options, limit);
      if (!mb.ok()) {
        r.status = mb.status();
        continue;
      }
      r.max_batch = mb->batch;
      r.max_batch_evaluations = mb->evaluations;
      r.estimate = mb->at_batch;
    } else {
      Result<Estimate> e = estimators[i]->Run(model, options);
      if (!e.ok()) {
        r.status = e.status();
        continue;
      }
      r.estimate = std::move(e).value();
    }
    r.fit = CheckFit(r.estimate, *gpu);
  }

  // Failures on stderr (unavailable backends of --backend all included).
  bool any_ok = false;
  for (const auto& r : results) {
    any_ok |= r.status.ok();
    if (r.status.ok()) continue;
    if (r.status.code() == ErrorCode::kUnavailable) {
      std::cerr << fmt::format("memest: {}: unavailable: {}\n", r.backend,
                               r.status.message());
    } else {
      PrintError(fmt::format("{}: {}", r.backend, r.status.ToString()));
    }
  }

  if (!timeline_path.empty()) {
    Options timeline_options = options;
    for (const auto& r : results) {
      if (max_batch && r.status.ok() && r.max_batch > 0) timeline_options.batch = r.max_batch;
    }
    const std::string title =
        fmt::format("{} -- {} batch {}", model_path, ToString(timeline_options.mode),
                    timeline_options.batch.value_or(0));
    if (Status s = WriteTimelineFile(model, timeline_options, title, timeline_path); !s.ok()) {
      PrintError("timeline: " + s.ToString());
      return ExitCodeFor(s, Stage::kEstimate);
    }
    std::cerr << "memest: timeline written to " << timeline_path << '\n';
  }

  Report report;
  report.memest_version = MEMEST_VERSION;
  report.model_path = model_path;
  report.model = summary;
  report.options = options;
  report.gpu = *gpu;
  report.backend_request = backend;
  report.results = results;
  report.max_batch_mode = max_batch;
  report.max_batch_limit = limit;
  // A table of nothing but failures helps nobody; programs still get their
  // document.
  if (any_ok || format == Format::kJson || format == Format::kCsv) {
    PrintResult(RenderReport(report, format));
  }
  for (const auto& r : results) {
    if (r.status.ok())
      PrintDiagnostics(r.estimate.diagnostics,
                       results.size() > 1 ? r.backend : "");
  }

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
      return ExitCodeFor(r.status, Stage::kEstimate);
    }
  }
  return kExitInternal;  // every backend unavailable
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
