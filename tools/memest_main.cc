// tools/memest_main.cc -- the `memest` command-line tool.
//
//   memest MODEL.onnx [--batch N] [--dim name=value]... [--mode train|infer]
//          [--optimizer ...] [--optimizer-impl ...] [--weight-decay X] [--micro-batches K]
//          [--checkpoint SEGMENTS] [--precision ...] [--loss ...] [--gpu NAME]
//          [--expandable-segments] [--memory-fraction F] [--backend NAME[,NAME...]|all]
//          [--max-batch]
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
// The estimation options' flags come from one table shared with memest-measure
// (tools/options_flags.h); the defaults --help shows come from memest::DescribeOptions(), i.e.
// from a default-constructed memest::Options; this file never repeats them.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
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
#include "tools/options_flags.h"
#include "tools/pack_command.h"
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
// Flags.

// The footer of --help: the documented options no flag claimed, the exit codes, where the
// defaults come from.
std::string HelpFooter(const HelpDefaults& help) {
  return help.Unclaimed() +
         "Exit codes: 0 fits, 1 does not fit, 2 usage error, 3 bad model, "
         "4 backend failed on the model or internal error.\n"
         "Results go to stdout; diagnostics and errors to stderr. Defaults come "
         "from memest::DescribeOptions(). See docs/cli.md.";
}

// The command line as given: the estimation options' flags (tools/options_flags.h), raw texts of
// the program's own flags, and the options whose presence matters.
struct Flags {
  std::string model_path;
  std::string hf_config;  // --hf-config: the model is built from this config.json
  std::string phase = "train";
  std::string logits = "all";
  std::string before_decode = "auto";
  OptionFlags options;  // every flag of the options table
  std::string backend = kDefaultBackend;
  bool max_batch = false;
  std::string max_dim;  // --max-dim NAME
  std::string output = ToString(Format::kTable);
  bool json = false;
  bool list_backends = false;
  bool list_gpus = false;
  bool list_flags = false;
  bool show_coverage = false;
  std::string timeline_path;
  bool quiet = false;
  bool verbose = false;
  bool per_rank = false;  // --per-rank: one row per group of ranks

  CLI::Option* phase_opt = nullptr;
  CLI::Option* logits_opt = nullptr;
  CLI::Option* before_decode_opt = nullptr;
  CLI::Option* output_opt = nullptr;
  CLI::Option* backend_opt = nullptr;
};

// MODEL.onnx or --hf-config (memest's own), then the options table's flags.
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
  f.before_decode_opt =
      app.add_option("--before-decode", f.before_decode,
                     help.With("with --hf-config --phase decode: what ran before the step in the "
                               "process. prefill: the prefill of its past (--dim past), on the "
                               "same caching allocator, as generate() runs it (the LM head on the "
                               "last position); prefill-emptied: the same, then "
                               "torch.cuda.empty_cache(); nothing: a fresh allocator; auto: "
                               "prefill for the backends that model it (symbolic), nothing for "
                               "the others",
                               {"prefill"}))
          ->type_name("auto|prefill|prefill-emptied|nothing");
  f.options.AddTo(app, help);
  app.add_flag("--per-rank", f.per_rank,
               "print one row per group of ranks that hold the same memory (pipeline stage)")
      ->group(kManyGpuGroup);
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
  app.add_flag("--list-flags", f.list_flags,
               "print the estimation flags as JSON (names, value, default, help), for tools");
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
// Options.

// memest::Options from the flags, validated.
Result<Options> BuildOptions(const Flags& f) {
  if (f.max_batch && !f.max_dim.empty()) {
    return InvalidArgument("--max-batch and --max-dim search different dims: give one");
  }
  if (f.max_dim == "batch") {
    return InvalidArgument(
        "--max-dim batch: use --max-batch (it binds the leading dim of every "
        "data input)");
  }
  Options options;
  MEMEST_RETURN_IF_ERROR(f.options.ApplyTo(&options, /*refuse_training_in_inference=*/true));
  if (f.max_batch && options.batch) {
    PrintWarning("--batch is ignored with --max-batch");
    options.batch.reset();
  }
  if (f.per_rank && !options.parallel.enabled()) return ManyGpuFlagsNeedAWorld();
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

// --before-decode on a decode graph: the prefill graph of the same config (the LM head on the last
// position, as generate() computes it in its prefill), for Options::prefill; nullopt for
// `nothing` and for other phases.
Result<std::optional<DecodePrefill>> HfPrefill(const Flags& f) {
  if (f.phase != "decode" || f.before_decode == "nothing") return std::optional<DecodePrefill>();
  zoo::HfGraphOptions options;
  options.phase = zoo::HfGraphOptions::kPrefill;
  options.logits_last_only = true;
  options.source = f.hf_config;
  options.name = "prefill";  // the stem of a weights file never written
  MEMEST_ASSIGN_OR_RETURN(const nlohmann::json config, zoo::LoadHfConfig(f.hf_config));
  MEMEST_ASSIGN_OR_RETURN(zoo::HfModel built, zoo::BuildHfModel(config, options));
  DecodePrefill p;
  MEMEST_ASSIGN_OR_RETURN(p.model, LoadModelFromBytes(zoo::SerializeModel(built.model), ".",
                                                      f.hf_config + " (prefill)"));
  p.cache_emptied = f.before_decode == "prefill-emptied";
  return std::optional<DecodePrefill>(std::move(p));
}

// The model to estimate: MODEL.onnx, or the graph of --hf-config. `display` is how the report
// names it. Prints why it failed and sets `exit_code` on an error.
// The loaded model is never freed: the process ends right after the report, and destroying a
// large graph's many small allocations costs more than the OS takes to drop the pages (about 6 %
// of `memest chain100k.onnx` on a 100,000-node chain, as clang's -disable-free skips freeing its
// AST). A global keeps it reachable, so leak checkers do not report it.
void KeepUntilExit(std::shared_ptr<const Model> model) {
  static auto* const kept = new std::shared_ptr<const Model>();
  *kept = std::move(model);
}

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
    for (const CLI::Option* o : {f->phase_opt, f->logits_opt, f->before_decode_opt}) {
      if (o->count() > 0) return InvalidArgument(o->get_name() + " needs --hf-config");
    }
    return Status::Ok();
  }
  if (f->before_decode != "auto" && f->before_decode != "prefill" &&
      f->before_decode != "prefill-emptied" && f->before_decode != "nothing") {
    return InvalidArgument(
        "--before-decode: expected auto, prefill, prefill-emptied or nothing, "
        "not '" +
        f->before_decode + "'");
  }
  if (f->before_decode_opt->count() > 0 && f->phase != "decode") {
    return InvalidArgument("--before-decode applies to --phase decode, not " + f->phase);
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
    if (!f->options.Given("mode")) {
      f->options.SetText("mode", ToString(Mode::kInfer));
    } else if (f->options.Text("mode") != ToString(Mode::kInfer)) {
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
  // --before-decode auto: options.prefill only for the backends that model it.
  bool prefill_where_modelled = false;
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
    Options options = plan.options;
    if (plan.prefill_where_modelled && !estimator.supports().prefill) options.prefill.reset();
    if (!searched.empty()) {
      Result<MaxBatchResult> mb = searched == "batch"
                                      ? FindMaxBatch(estimator, model, options, limit)
                                      : FindMaxDim(estimator, model, options, searched, limit);
      if (!mb.ok()) {
        r.status = mb.status();
        continue;
      }
      r.max_batch = mb->batch;
      r.max_batch_evaluations = mb->evaluations;
      r.max_batch_traces = mb->traces;
      r.max_batch_replays = mb->replays;
      r.max_batch_replayed_requests = mb->replayed_requests;
      r.estimate = mb->at_batch;
    } else {
      Result<Estimate> e = estimator.Run(model, options);
      if (!e.ok()) {
        r.status = e.status();
        continue;
      }
      r.estimate = std::move(e).value();
    }
    r.fit = CheckFit(r.estimate, plan.gpu, options);
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
  report.per_rank = f.per_rank;
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
  HelpDefaults help(DescribeOptions());
  Flags f;
  CLI::App app{
      "memest -- predicts the peak GPU memory of one training step (or inference) of an ONNX "
      "model, and whether it fits a GPU."};
  app.name("memest");
  AddEstimationFlags(app, f, help);
  AddOutputFlags(app, f);
  app.footer(HelpFooter(help));
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
  if (f.list_flags) {
    PrintResult(f.options.DescribeJson(help) + "\n");
    return kExitFits;
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
  KeepUntilExit(loaded);
  const Model& model = *loaded;
  // --before-decode auto builds the prefill only when a backend of the plan models it.
  plan.prefill_where_modelled = f.before_decode == "auto";
  const bool modelled = std::any_of(plan.estimators.begin(), plan.estimators.end(),
                                    [](const auto& e) { return e->supports().prefill; });
  if (!f.hf_config.empty() && (modelled || !plan.prefill_where_modelled)) {
    Result<std::optional<DecodePrefill>> prefill = HfPrefill(f);
    if (!prefill.ok()) {
      PrintError(
          fmt::format("--hf-config {} (prefill): {}", f.hf_config, prefill.status().ToString()));
      return kExitBadModel;
    }
    plan.options.prefill = std::move(prefill).value();
  }
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
