// tools/eval/eval_main.cc -- `memest-eval`: scores every available estimator backend (all but
// `measurement`, unless named) against measured rows.
//
//   memest-eval [--rows FILE|DIR]... [--gpumemnet [--gpumemnet-data DIR]] [--backend NAME]...
//               [--format md|csv|json] [--out FILE] [--plots DIR] [--doc]
//               [--limit N] [--sample N [--seed S]] [--predictions FILE.csv]
//
// Inputs are measured rows (docs/measured-row-schema.md): JSONL files (a folder means every
// *.jsonl below it), and/or GPUMemNet's 6,000 rows rebuilt in memory (--gpumemnet). Rows with the
// same id, status and peaks are evaluated once. Output: the accuracy tables (tools/eval/report.h)
// on stdout or --out; with --plots the SVGs; with --doc the whole docs/accuracy.md page.
// Exit codes: 0 done, 2 usage error, 3 bad input (unreadable or malformed rows, missing data),
// 4 internal error. Progress and warnings go to stderr.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "learned/learned.h"
#include "memest/memest.h"
#include "tools/eval/evaluate.h"
#include "tools/eval/heldout.h"
#include "tools/eval/plots.h"
#include "tools/eval/report.h"
#include "tools/eval/rows.h"

#ifndef MEMEST_VERSION
#define MEMEST_VERSION "unknown"
#endif

namespace memest::eval {
namespace {

namespace fs = std::filesystem;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitInput = 3;
constexpr int kExitInternal = 4;

struct Args {
  std::vector<std::string> rows;
  bool gpumemnet = false;
  std::string gpumemnet_data;
  std::vector<std::string> backends;
  std::string root = ".";
  std::string format = "md";
  std::string out;
  std::string plots;
  bool doc = false;
  std::string command = "bash scripts/accuracy.sh";
  int64_t limit = 0;
  int64_t sample = 0;
  uint64_t seed = 1;
  std::string cpu_profile;              // "" = DefaultCpuProfile()
  std::vector<std::string> gpu_stacks;  // [PROFILE=]STACK
  bool allow_sha_mismatch = false;
  std::string predictions;
  bool quiet = false;
};

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        m.erase(0, m.find_first_not_of(' '));
        return m;
      }
    }
  }
  return "unknown CPU";
}

// Files named by --rows: a file as is; a folder: every *.jsonl below it, sorted.
Result<std::vector<std::string>> ExpandRows(const std::vector<std::string>& args,
                                            std::vector<std::string>* notes) {
  std::vector<std::string> files;
  for (const std::string& a : args) {
    std::error_code ec;
    if (fs::is_directory(a, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(a, ec); !ec && it != fs::end(it);
           it.increment(ec)) {
        if (it->is_regular_file() && it->path().extension() == ".jsonl") {
          found.push_back(it->path().string());
        }
      }
      if (ec) return NotFound("cannot list '" + a + "': " + ec.message());
      std::sort(found.begin(), found.end());
      if (found.empty()) notes->push_back("`" + a + "`: no *.jsonl file in this folder");
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(a, ec)) {
      files.push_back(a);
    } else {
      return NotFound("rows file '" + a + "' does not exist");
    }
  }
  return files;
}

std::string Num(size_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string Opt(std::optional<uint64_t> v) { return v ? std::to_string(*v) : ""; }

std::string PredictionsCsv(const Evaluation& ev) {
  std::string out =
      "source,line,id,model,family,split,status,device,profile,backend,estimate,"
      "predicted_allocated,predicted_reserved,predicted_device,measured_tensor,"
      "measured_allocated,measured_reserved,measured_device,fits,micros\n";
  for (size_t i = 0; i < ev.rows.size(); ++i) {
    const MeasuredRow& r = ev.rows[i];
    const RowOutcome& o = ev.outcomes[i];
    for (size_t b = 0; b < ev.backends.size(); ++b) {
      std::string estimate = "ok", pa, pr, pd, fits, micros;
      if (!o.setup.ok()) {
        estimate = std::string("not_evaluated:") + ErrorCodeName(o.setup.code());
      } else if (!o.predictions[b].status.ok()) {
        estimate = ErrorCodeName(o.predictions[b].status.code());
      } else {
        const Prediction& p = o.predictions[b];
        pa = std::to_string(p.estimate.peak_allocated);
        pr = std::to_string(p.estimate.peak_reserved);
        pd = std::to_string(p.estimate.peak_device);
        if (p.fits) fits = *p.fits ? "1" : "0";
        micros = fmt::format("{:.1f}", p.micros);
      }
      std::string device = r.device_name;
      std::replace(device.begin(), device.end(), ',', ' ');
      out += fmt::format(
          "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.source, r.line, r.id,
          r.model_path, r.family, r.used_for.empty() ? "held-out" : "used", ToString(r.status),
          device, o.profile, ev.backends[b], estimate, pa, pr, pd, Opt(r.peaks.tensor),
          Opt(r.peaks.allocated), Opt(r.peaks.reserved), Opt(r.peaks.device), fits, micros);
    }
  }
  return out;
}

Status WriteFile(const std::string& path, const std::string& text) {
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return NotFound("cannot write '" + path + "'");
  out << text;
  out.close();
  if (!out) return Internal("write to '" + path + "' failed");
  return Status::Ok();
}

int Fail(const Status& s, int code) {
  std::cerr << "memest-eval: " << s.ToString() << "\n";
  return code;
}

// The backends to evaluate: the named ones, or every available one. Unavailable ones go to
// *unavailable (reported, not evaluated). InvalidArgument / NotFound: a usage error.
Status SelectBackends(const Args& args, std::vector<std::string>* backends,
                      std::vector<BackendInfo>* unavailable) {
  for (const BackendInfo& b : ListBackends()) {
    const bool named =
        std::find(args.backends.begin(), args.backends.end(), b.name) != args.backends.end();
    if (!args.backends.empty() && !named) continue;
    // The measurement backend is the truth's own instrument: scoring it means re-running every
    // row (6,000 GPUMemNet trainings). It is evaluated only when named.
    if (args.backends.empty() && b.name == "measurement") continue;
    if (b.available) {
      backends->push_back(b.name);
    } else {
      unavailable->push_back(b);
    }
  }
  for (const std::string& name : args.backends) {
    if (name == "all") {
      return InvalidArgument("--backend all: leave --backend out to evaluate every backend");
    }
    Result<std::unique_ptr<Estimator>> e = MakeEstimator(name);
    if (!e.ok() && e.status().code() == ErrorCode::kNotFound) return e.status();
  }
  for (const BackendInfo& b : *unavailable) {
    if (args.quiet) break;
    std::cerr << "memest-eval: backend '" << b.name << "' is unavailable (" << b.reason
              << "); not evaluated\n";
  }
  return Status::Ok();
}

// The measured rows: --rows files (each noted with its counts) and, with --gpumemnet or any
// gpumemnet: model path, GPUMemNet's rows rebuilt in memory with their graphs' bytes.
struct LoadedRows {
  std::vector<MeasuredRow> rows;
  std::map<int, std::string> gmn_bytes;
  std::map<int, RowAttrs> gmn_attrs;
};

Status ReadRows(const Args& args, LoadedRows* out, std::vector<std::string>* notes) {
  std::vector<MeasuredRow>& rows = out->rows;
  Result<std::vector<std::string>> files = ExpandRows(args.rows, notes);
  if (!files.ok()) return files.status();
  for (const std::string& f : *files) {
    Result<std::vector<MeasuredRow>> r = ReadMeasuredRows(f);
    if (!r.ok()) return r.status();
    int64_t ok = 0, oom = 0, err = 0;
    for (const MeasuredRow& row : *r) {
      ok += row.status == RowStatus::kOk;
      oom += row.status == RowStatus::kOom;
      err += row.status == RowStatus::kError;
    }
    notes->push_back(
        fmt::format("`{}`: {} rows ({} ok, {} oom, {} error)", f, Num(r->size()), ok, oom, err));
    rows.insert(rows.end(), std::make_move_iterator(r->begin()), std::make_move_iterator(r->end()));
  }
  const bool any_gpumemnet_path = std::any_of(rows.begin(), rows.end(), [](const MeasuredRow& r) {
    return r.model_path.rfind("gpumemnet:", 0) == 0;
  });
  if (!args.gpumemnet && !any_gpumemnet_path) return Status::Ok();
  Result<GpumemnetData> data = LoadGpumemnet(args.gpumemnet_data, args.root);
  if (!data.ok()) return data.status();
  if (args.gpumemnet) {
    notes->push_back(fmt::format(
        "GPUMemNet: {} rows rebuilt in memory from `{}` (datasets/gpumemnet/ importer; model "
        "paths `gpumemnet:<row>`)",
        Num(data->rows.size()), fs::path(data->dir).lexically_normal().string()));
    rows.insert(rows.end(), std::make_move_iterator(data->rows.begin()),
                std::make_move_iterator(data->rows.end()));
  }
  out->gmn_bytes = std::move(data->bytes);
  out->gmn_attrs = std::move(data->attrs);
  return Status::Ok();
}

// The same measurement given twice (e.g. GPUMemNet in memory and as a JSONL file): same id,
// status and peaks, evaluated once. Repeated measurements of one configuration (same id, other
// peaks) stay.
void DropRepeatedRows(std::vector<MeasuredRow>* rows, std::vector<std::string>* notes) {
  std::set<std::string> seen;
  std::vector<MeasuredRow> unique;
  int64_t dropped = 0;
  auto peak = [](std::optional<uint64_t> v) { return v ? std::to_string(*v) : "null"; };
  for (MeasuredRow& r : *rows) {
    const std::string key =
        fmt::format("{}|{}|{}|{}|{}|{}", r.id, ToString(r.status), peak(r.peaks.tensor),
                    peak(r.peaks.allocated), peak(r.peaks.reserved), peak(r.peaks.device));
    if (!r.id.empty() && !seen.insert(key).second) {
      ++dropped;
      continue;
    }
    unique.push_back(std::move(r));
  }
  *rows = std::move(unique);
  if (dropped > 0) {
    notes->push_back(
        fmt::format("{} rows given twice (same id, status and peaks) evaluated once", dropped));
  }
}

// --sample (a seeded random subset, in file order) and then --limit (the first rows).
void PickRows(const Args& args, std::vector<MeasuredRow>* rows, std::vector<std::string>* notes) {
  if (args.sample > 0 && static_cast<size_t>(args.sample) < rows->size()) {
    // Partial Fisher-Yates with a fixed generator: the same seed picks the same rows everywhere.
    std::mt19937_64 gen(args.seed);
    std::vector<size_t> idx(rows->size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    for (size_t i = 0; i < static_cast<size_t>(args.sample); ++i) {
      const size_t j = i + static_cast<size_t>(gen() % (idx.size() - i));
      std::swap(idx[i], idx[j]);
    }
    idx.resize(static_cast<size_t>(args.sample));
    std::sort(idx.begin(), idx.end());
    std::vector<MeasuredRow> picked;
    for (size_t i : idx) picked.push_back(std::move((*rows)[i]));
    notes->push_back(fmt::format("random sample of {} of {} rows (seed {})", Num(picked.size()),
                                 Num(rows->size()), args.seed));
    *rows = std::move(picked);
  }
  if (args.limit > 0 && static_cast<size_t>(args.limit) < rows->size()) {
    notes->push_back(fmt::format("limited to the first {} of {} rows",
                                 Num(static_cast<size_t>(args.limit)), Num(rows->size())));
    rows->resize(static_cast<size_t>(args.limit));
  }
}

// The evaluator's configuration; --stack PROFILE=STACK names must be known stacks.
Result<EvalConfig> MakeConfig(const Args& args, const std::vector<std::string>& backends) {
  EvalConfig config;
  config.backends = backends;
  config.root = args.root;
  config.gpumemnet_dir = args.gpumemnet_data;
  config.cpu_profile = args.cpu_profile.empty() ? DefaultCpuProfile() : args.cpu_profile;
  for (const std::string& s : args.gpu_stacks) {
    const size_t eq = s.find('=');
    const std::string profile = eq == std::string::npos ? "" : s.substr(0, eq);
    const std::string stack = eq == std::string::npos ? s : s.substr(eq + 1);
    Result<StackProfile> known = ResolveStack(stack);
    if (!known.ok()) return InvalidArgument("--stack " + s + ": " + known.status().message());
    config.gpu_stacks[profile] = stack;
  }
  config.allow_sha_mismatch = args.allow_sha_mismatch;
  return config;
}

// The tables in the chosen format.
std::string Render(const Args& args, Format format, const Summary& summary) {
  switch (format) {
    case Format::kMd: {
      RenderOptions ro;
      ro.doc = args.doc;
      ro.command = args.command;
      if (!args.plots.empty()) {
        fs::path plots = fs::absolute(args.plots);
        fs::path base =
            args.out.empty() ? fs::current_path() : fs::absolute(args.out).parent_path();
        ro.plots_dir = plots.lexically_relative(base).string();
        if (ro.plots_dir.empty()) ro.plots_dir = plots.string();
      }
      return RenderMarkdown(summary, ro);
    }
    case Format::kCsv:
      return RenderCsv(summary);
    case Format::kJson:
    default:
      return RenderJson(summary);
  }
}

// The tables (stdout or --out), the plots (--plots) and every row's predictions (--predictions).
Status WriteOutputs(const Args& args, const std::string& text, const Evaluation& ev) {
  if (args.out.empty()) {
    std::cout << text;
  } else {
    MEMEST_RETURN_IF_ERROR(WriteFile(args.out, text));
  }
  if (!args.plots.empty()) {
    for (const auto& [name, svg] : MakePlots(ev)) {
      MEMEST_RETURN_IF_ERROR(WriteFile((fs::path(args.plots) / name).string(), svg));
    }
  }
  if (!args.predictions.empty()) {
    MEMEST_RETURN_IF_ERROR(WriteFile(args.predictions, PredictionsCsv(ev)));
  }
  return Status::Ok();
}

int Run(const Args& args) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<Format> format = ParseFormat(args.format);
  if (!format.ok()) return Fail(format.status(), kExitUsage);
  if (args.rows.empty() && !args.gpumemnet) {
    return Fail(InvalidArgument("no input: give --rows FILE and/or --gpumemnet"), kExitUsage);
  }
  if (args.doc && *format != Format::kMd) {
    return Fail(InvalidArgument("--doc writes markdown; drop --format or use --format md"),
                kExitUsage);
  }
  std::vector<std::string> backends;
  std::vector<BackendInfo> unavailable;
  if (Status s = SelectBackends(args, &backends, &unavailable); !s.ok()) {
    return Fail(s, kExitUsage);
  }
  LoadedRows loaded;
  std::vector<std::string> notes;
  if (Status s = ReadRows(args, &loaded, &notes); !s.ok()) return Fail(s, kExitInput);
  std::vector<MeasuredRow>& rows = loaded.rows;
  DropRepeatedRows(&rows, &notes);
  PickRows(args, &rows, &notes);
  // The learned backend's training rows (held-out discipline, tools/eval/heldout.h).
  if (std::find(backends.begin(), backends.end(), "learned") != backends.end()) {
    std::vector<RowAttrs> attrs;
    attrs.reserve(rows.size());
    for (const MeasuredRow& r : rows) attrs.push_back(AttrsOf(r, loaded.gmn_attrs));
    const TrainingMarks marks =
        MarkLearnedTrainingRows(learned::ShippedWeightsJson(), attrs, &rows);
    if (!marks.note.empty()) notes.push_back(marks.note);
  }

  Result<EvalConfig> config = MakeConfig(args, backends);
  if (!config.ok()) return Fail(config.status(), kExitUsage);
  Result<std::unique_ptr<Evaluator>> evaluator = Evaluator::Create(*config);
  if (!evaluator.ok()) return Fail(evaluator.status(), kExitUsage);
  (*evaluator)->AddGpumemnetBytes(std::move(loaded.gmn_bytes));
  const size_t total = rows.size();
  Evaluation ev = (*evaluator)->EvaluateAll(std::move(rows), [&](size_t done, size_t n) {
    if (!args.quiet && (done % 1000 == 0 || done == n)) {
      std::cerr << "memest-eval: " << done << " / " << n << " rows\n";
    }
  });
  for (BackendInfo& b : DropUnavailable(&ev)) {
    if (!args.quiet) {
      std::cerr << "memest-eval: backend '" << b.name << "' answered unavailable for every row ("
                << b.reason << "); left out of the tables\n";
    }
    unavailable.push_back(std::move(b));
  }
  Summary summary = Aggregate(ev);
  summary.unavailable = unavailable;
  summary.cpu_profile = config->cpu_profile;
  summary.machine = fmt::format("{}, {} hardware threads, one thread used", CpuModel(),
                                std::thread::hardware_concurrency());
  summary.notes = notes;
  if (Status s = WriteOutputs(args, Render(args, *format, summary), ev); !s.ok()) {
    return Fail(s, kExitInput);
  }
  if (!args.quiet) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << fmt::format("memest-eval: {} rows x {} backends in {:.1f} s\n", total,
                             backends.size(), secs);
  }
  return kExitOk;
}

}  // namespace
}  // namespace memest::eval

int main(int argc, char** argv) {
  using memest::eval::Args;
  Args args;
  CLI::App app{"memest-eval " MEMEST_VERSION
               ": scores every available memest backend against measured rows "
               "(docs/measured-row-schema.md) and writes the accuracy tables"};
  app.add_option("--rows", args.rows,
                 "measured-row JSONL file, or a folder of *.jsonl files (repeatable)");
  app.add_flag("--gpumemnet", args.gpumemnet,
               "add GPUMemNet's 6,000 A100 rows, rebuilt in memory by the datasets/gpumemnet "
               "importer");
  app.add_option("--gpumemnet-data", args.gpumemnet_data,
                 "folder of GPUMemNet's CSVs (default: <root>/datasets/gpumemnet)");
  app.add_option("--backend", args.backends,
                 "evaluate only this backend (repeatable; default: every available backend)");
  app.add_option("--root", args.root, "repository root for relative model paths")
      ->capture_default_str();
  app.add_option("--format", args.format, "md | csv | json")->capture_default_str();
  app.add_option("--out", args.out, "write the tables here instead of stdout");
  app.add_option("--plots", args.plots, "write SVG plots (scatter_*.svg, errors_*.svg) here");
  app.add_flag("--doc", args.doc,
               "write the whole docs/accuracy.md page (headline, published figures, plots, "
               "tables, license)");
  app.add_option("--command", args.command, "regenerating command named at the top of --doc")
      ->capture_default_str();
  app.add_option("--limit", args.limit, "evaluate only the first N rows (after --sample)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sample", args.sample, "evaluate a random sample of N rows")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", args.seed, "seed of --sample")->capture_default_str();
  app.add_option("--cpu-profile", args.cpu_profile,
                 "GPU profile used to predict CPU rows (decides the cuBLAS workspaces counted); "
                 "default: \"cpu\" when that profile exists, else a100-40gb");
  app.add_option("--stack", args.gpu_stacks,
                 "[PROFILE=]STACK: the software stack CUDA rows of GPU profile PROFILE (of every "
                 "profile, without PROFILE=) are predicted with (memest --list-gpus); repeatable; "
                 "default: the default stack");
  app.add_flag("--allow-sha-mismatch", args.allow_sha_mismatch,
               "evaluate rows whose model file no longer has the sha256 they were measured on");
  app.add_option("--predictions", args.predictions,
                 "also write one CSV line per row and backend (predicted and measured bytes)");
  app.add_flag("--quiet,-q", args.quiet, "no progress on stderr");
  app.set_version_flag("--version", "memest-eval " MEMEST_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : memest::eval::kExitUsage;
  }
  try {
    return memest::eval::Run(args);
  } catch (const std::exception& e) {
    std::cerr << "memest-eval: internal error: " << e.what() << "\n";
    return memest::eval::kExitInternal;
  }
}
