// tools/pack_command.cc -- see tools/pack_command.h.
#include "tools/pack_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "tools/exit_codes.h"
#include "tools/report.h"

namespace memest::cli {
namespace {

using Json = nlohmann::ordered_json;

// "a.onnx:batch=32,precision=amp-bf16,dim.seq=512" -> path and options (the library's strict JSON
// reader names any unknown key).
Result<PackJob> ParseJob(const std::string& spec) {
  PackJob job;
  job.name = spec;
  const size_t colon = spec.find(".onnx:");
  const std::string path = colon == std::string::npos ? spec : spec.substr(0, colon + 5);
  Json options = Json::object();
  if (colon != std::string::npos) {
    std::string rest = spec.substr(colon + 6);
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t comma = std::min(rest.find(',', start), rest.size());
      const std::string kv = rest.substr(start, comma - start);
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        return InvalidArgument("job '" + spec + "': '" + kv + "' is not KEY=VALUE");
      }
      const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
      Json v = Json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded() || v.is_object() || v.is_array()) v = value;  // a bare word
      if (key.rfind("dim.", 0) == 0) {
        options["dims"][key.substr(4)] = v;
      } else {
        options[key] = v;
      }
      start = comma + 1;
    }
  }
  Result<Options> o = OptionsFromJson(options.dump());
  if (!o.ok()) return o.status().WithContext("job '" + spec + "'");
  job.options = *o;
  Result<std::shared_ptr<const Model>> model = LoadModel(path);
  if (!model.ok()) return model.status().WithContext("job '" + spec + "'");
  job.model = *model;
  return job;
}

// The main CLI's mapping, at the estimate stage for every step (a job's missing model file is
// a usage error here, its malformed model exit 3).
int ExitFor(const Status& s) { return ExitCodeFor(s); }

}  // namespace

int RunPack(int argc, char** argv) {
  CLI::App app{
      "memest pack -- whether jobs fit on one GPU together (each process with its own CUDA "
      "context; --mps: one shared context), or with --gpus M how they go onto M GPUs "
      "(first-fit and best-fit decreasing). Jobs: MODEL.onnx[:KEY=VALUE,...] with the JSON "
      "options' keys, e.g. a.onnx:batch=32,precision=amp-bf16 or b.onnx:batch=8,dim.seq=512. "
      "See docs/embedding.md."};
  app.name("memest pack");
  std::string gpu_name = Options{}.gpu, backend = "analytical", output = "table";
  int64_t gpus = 0;
  bool mps = false;
  double margin_percent = 0;
  std::vector<std::string> specs;
  app.add_option("jobs", specs, "the jobs")->required()->type_name("JOB");
  app.add_option("--gpu", gpu_name, "GPU profile (memest --list-gpus)")->capture_default_str();
  app.add_option("--gpus", gpus, "place the jobs on this many GPUs instead of checking one")
      ->type_name("M");
  app.add_flag("--mps", mps, "the jobs run as NVIDIA MPS clients (one shared CUDA context)");
  app.add_option("--backend", backend, "estimator backend")->capture_default_str();
  app.add_option("--safety-margin", margin_percent, "percent of the GPU kept free")
      ->type_name("PCT");
  app.add_option("-o,--output", output, "table or json")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto fail = [](const Status& s, int code) {
    std::cerr << "memest pack: error: " << s.message() << '\n';
    return code;
  };
  if (output != "table" && output != "json") {
    return fail(InvalidArgument("-o " + output + ": expected table or json"), 2);
  }
  if (!(margin_percent >= 0 && margin_percent < 100)) {
    return fail(InvalidArgument("--safety-margin must be a percentage in [0, 100)"), 2);
  }
  Result<GpuProfile> gpu = FindGpuProfile(gpu_name);
  if (!gpu.ok()) return fail(gpu.status(), 2);
  Result<std::unique_ptr<Estimator>> est = MakeEstimator(backend);
  if (!est.ok()) return fail(est.status(), 2);
  std::vector<PackJob> jobs;
  for (const std::string& spec : specs) {
    Result<PackJob> job = ParseJob(spec);
    if (!job.ok()) return fail(job.status(), ExitFor(job.status()));
    jobs.push_back(std::move(job).value());
  }
  FitPolicy policy;
  policy.margin_fraction = margin_percent / 100.0;
  const GpuSharing sharing = mps ? GpuSharing::kMps : GpuSharing::kProcesses;
  bool ok = false;
  std::string text, json;
  if (gpus == 0) {
    Result<Colocation> c = CheckColocation(**est, jobs, *gpu, sharing, policy);
    if (!c.ok()) return fail(c.status(), ExitFor(c.status()));
    ok = c->fits;
    json = ColocationToJson(*c, *gpu, sharing);
    for (const PackedJob& j : c->jobs) {
      text += fmt::format("{:<48} {:>12}\n", j.name, FormatBytes(j.judged));
    }
    text += fmt::format("together{} {:>12} of {} usable on {}: {} (headroom {})\n",
                        mps ? " (MPS)" : "", FormatBytes(c->total), FormatBytes(c->capacity),
                        gpu->name, c->fits ? "fit" : "do NOT fit", FormatSignedBytes(c->headroom));
  } else {
    Result<Placement> p = PlaceJobs(**est, jobs, *gpu, gpus, sharing, policy);
    if (!p.ok()) return fail(p.status(), ExitFor(p.status()));
    ok = p->unplaced.empty();
    json = PlacementToJson(*p, *gpu, sharing);
    size_t used = 0;
    for (size_t g = 0; g < p->gpus.size(); ++g) {
      if (p->gpus[g].empty()) continue;
      ++used;
      std::string line;
      for (size_t j : p->gpus[g]) line += (line.empty() ? "" : ", ") + p->jobs[j].name;
      text += fmt::format("gpu {:<3} {:>12}  {}\n", g, FormatBytes(p->used[g]), line);
    }
    for (size_t j : p->unplaced) {
      text += fmt::format("unplaced {:>12}  {}\n", FormatBytes(p->jobs[j].judged), p->jobs[j].name);
    }
    text += fmt::format("{} of {} jobs placed on {} GPU(s) of {} ({})\n",
                        jobs.size() - p->unplaced.size(), jobs.size(), used, gpus, p->heuristic);
  }
  std::cout << (output == "json" ? json : text);
  return ok ? 0 : 1;
}

}  // namespace memest::cli
