// tools/serve_command.cc -- see tools/serve_command.h.
#include "tools/serve_command.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>

#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "memest/memest.h"
#include "tools/exit_codes.h"
#include "tools/report.h"

namespace memest::cli {
namespace {

struct ServeFlags {
  std::string model_path, hf_config, gpu = Options{}.gpu, stack, precision = "bf16";
  std::string weight_dtype = "auto", kv_cache_dtype = "auto", sampler = "sort";
  std::string backend = "symbolic", output = "table", gpu_file;
  ServingOptions serving;
};

void AddFlags(CLI::App* app, ServeFlags* f) {
  app->add_option("model", f->model_path, "a decoder's prefill graph (ONNX)")->type_name("MODEL");
  app->add_option("--hf-config", f->hf_config,
                  "a Hugging Face config.json instead: its prefill graph is built in memory");
  app->add_option("--gpu", f->gpu, "GPU profile (memest --list-gpus)")->capture_default_str();
  app->add_option("--gpu-file", f->gpu_file, "GPU profiles of your own (docs/gpu-profiles.md)");
  app->add_option("--stack", f->stack, "software stack: its library memory is vLLM's non-torch");
  app->add_option("--max-model-len", f->serving.max_model_len,
                  "the longest request, prompt + output, in tokens")
      ->required();
  app->add_option("--gpu-memory-utilization", f->serving.gpu_memory_utilization,
                  "vLLM's gpu_memory_utilization")
      ->capture_default_str();
  app->add_option("--max-num-seqs", f->serving.max_num_seqs,
                  "vLLM's max_num_seqs (default: vLLM's for the GPU)");
  app->add_option("--max-num-batched-tokens", f->serving.max_num_batched_tokens,
                  "vLLM's max_num_batched_tokens (default: vLLM's for the GPU)");
  app->add_option("--block-size", f->serving.block_size, "KV cache block size in tokens")
      ->capture_default_str();
  app->add_option("--seq-dim", f->serving.sequence_dim, "the graph's sequence dim")
      ->capture_default_str();
  app->add_option("--precision", f->precision, "the model's dtype: bf16 (vLLM's auto) or fp32")
      ->capture_default_str();
  app->add_option("--weight-dtype", f->weight_dtype, "auto | fp16 | bf16 | int8 | nf4 | nf4-dq")
      ->capture_default_str();
  app->add_option("--kv-cache-dtype", f->kv_cache_dtype, "auto | fp16 | bf16 | fp8 | int8")
      ->capture_default_str();
  app->add_option("--sampler", f->sampler,
                  "vLLM's sampler path: sort (PyTorch, the larger) or flashinfer")
      ->capture_default_str();
  app->add_option("--backend", f->backend, "estimator backend for the profile forward")
      ->capture_default_str();
  app->add_option("-o,--output", f->output, "table or json")->capture_default_str();
}

Result<Options> OptionsFrom(const ServeFlags& f) {
  Options o;
  o.mode = Mode::kInfer;
  o.gpu = f.gpu;
  o.stack = f.stack;
  MEMEST_ASSIGN_OR_RETURN(o.precision, ParsePrecision(f.precision));
  MEMEST_ASSIGN_OR_RETURN(o.weight_dtype, ParseWeightDtype(f.weight_dtype));
  MEMEST_ASSIGN_OR_RETURN(o.kv_cache_dtype, ParseKvCacheDtype(f.kv_cache_dtype));
  if (!f.gpu_file.empty()) {
    MEMEST_ASSIGN_OR_RETURN(std::vector<GpuProfile> gpus, LoadGpuProfiles(f.gpu_file));
    const GpuProfile* pick = &gpus.front();
    for (const GpuProfile& g : gpus) {
      if (g.name == f.gpu) pick = &g;
    }
    o.custom_gpu = std::make_shared<const GpuProfile>(*pick);
  }
  return o;
}

// The model: MODEL.onnx, or --hf-config's prefill graph with the LM head on the last position.
Result<std::shared_ptr<const Model>> LoadServed(const ServeFlags& f, std::string* display) {
  if (f.hf_config.empty() == f.model_path.empty()) {
    return InvalidArgument("give a model or --hf-config, one of them");
  }
  if (f.hf_config.empty()) {
    *display = f.model_path;
    return LoadModel(f.model_path);
  }
  zoo::HfGraphOptions options;
  options.phase = zoo::HfGraphOptions::kPrefill;
  options.logits_last_only = true;
  options.source = f.hf_config;
  MEMEST_ASSIGN_OR_RETURN(const nlohmann::json config, zoo::LoadHfConfig(f.hf_config));
  MEMEST_ASSIGN_OR_RETURN(zoo::HfModel built, zoo::BuildHfModel(config, options));
  *display = fmt::format("{} ({}, prefill, last logits)", f.hf_config, built.architecture);
  return LoadModelFromBytes(zoo::SerializeModel(built.model), ".", *display);
}

std::string Table(const ServingEstimate& s, const ServingOptions& o, const std::string& model,
                  const std::string& gpu) {
  std::string out = fmt::format("model:  {}\n", model);
  out += fmt::format(
      "setup:  vLLM on {} | gpu_memory_utilization {} | max_model_len {} | block {} | "
      "max_num_batched_tokens {} | max_num_seqs {}\n\n",
      gpu, o.gpu_memory_utilization, o.max_model_len, o.block_size, s.max_num_batched_tokens,
      s.max_num_seqs);
  auto line = [&](const std::string& what, uint64_t bytes, const std::string& note = "") {
    out += fmt::format("{:<28} {:>12}  {}\n", what, FormatBytes(bytes), note);
  };
  line("GPU total", s.total_memory);
  line("requested (x utilization)", s.requested);
  line("weights", s.weights);
  line("activation peak", s.activation_peak,
       fmt::format("(forward {}, sampler {})", FormatBytes(s.forward_peak),
                   FormatBytes(s.sampler_peak)));
  line("outside PyTorch", s.non_torch);
  out += fmt::format("{:<28} {:>12}\n", "KV cache available", FormatSignedBytes(s.kv_available));
  out += fmt::format("\nKV cache: {} per token ({} layers), blocks of {}: {} blocks, {} tokens\n",
                     FormatBytes(s.kv_bytes_per_token), s.layers, FormatBytes(s.block_bytes),
                     s.blocks, s.tokens);
  out += fmt::format("maximum concurrency for {} tokens per request: {:.2f}x\n", o.max_model_len,
                     s.max_concurrency);
  out += s.starts ? fmt::format("result: the server starts ({} requests of {} tokens at once)\n",
                                static_cast<int64_t>(s.max_concurrency), o.max_model_len)
                  : fmt::format(
                        "result: the server does NOT start: one request of {} tokens needs {} "
                        "of KV cache\n",
                        o.max_model_len,
                        FormatBytes(static_cast<uint64_t>((o.max_model_len + o.block_size - 1) /
                                                          o.block_size) *
                                    s.block_bytes));
  return out;
}

}  // namespace

int RunServe(int argc, char** argv) {
  CLI::App app{
      "memest serve -- the KV cache a vLLM server gets on a GPU: memory, tokens, and requests of "
      "--max-model-len tokens at once (docs/serving.md). Exit 0 when the server starts, 1 when "
      "one request does not fit."};
  app.name("memest serve");
  ServeFlags f;
  AddFlags(&app, &f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  auto fail = [](const Status& s, int code) {
    std::cerr << "memest serve: error: " << s.ToString() << '\n';
    return code;
  };
  if (f.output != "table" && f.output != "json") {
    return fail(InvalidArgument("-o " + f.output + ": expected table or json"), kExitUsage);
  }
  if (f.sampler != "sort" && f.sampler != "flashinfer") {
    return fail(InvalidArgument("--sampler " + f.sampler + ": expected sort or flashinfer"),
                kExitUsage);
  }
  f.serving.sampler = f.sampler == "sort" ? VllmSampler::kSort : VllmSampler::kFlashInfer;
  Result<Options> options = OptionsFrom(f);
  if (!options.ok()) return fail(options.status(), kExitUsage);
  Result<std::unique_ptr<Estimator>> est = MakeEstimator(f.backend);
  if (!est.ok()) return fail(est.status(), kExitUsage);
  std::string display;
  Result<std::shared_ptr<const Model>> model = LoadServed(f, &display);
  if (!model.ok()) return fail(model.status(), ExitCodeFor(model.status()));
  Result<ServingEstimate> s = EstimateServing(**est, **model, *options, f.serving);
  if (!s.ok()) return fail(s.status(), ExitCodeFor(s.status()));
  const Result<GpuProfile> gpu = ResolveGpuProfile(*options);
  std::cout << (f.output == "json" ? ServingToJson(*s, f.serving) + "\n"
                                   : Table(*s, f.serving, display, gpu.ok() ? gpu->name : f.gpu));
  for (const Diagnostic& d : s->diagnostics) {
    if (d.severity == Severity::kWarning) std::cerr << FormatDiagnostic(d, "") << '\n';
  }
  return s->starts ? kExitFits : kExitDoesNotFit;
}

}  // namespace memest::cli
