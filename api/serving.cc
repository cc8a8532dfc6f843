// api/serving.cc -- see memest/serving.h for the policy.
#include "memest/serving.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/checked.h"
#include "base/json_fields.h"
#include "memest/json.h"
#include "memory/context.h"

namespace memest {
namespace {

using base::SatAdd;
using base::SatMul;
using Json = nlohmann::ordered_json;

constexpr int64_t kMaxServingSize = int64_t{1} << 24;  // tokens, sequences, block size, length

// Bytes per (row x vocabulary element) of the dummy sampler run at its peak (memest/serving.h).
constexpr uint64_t SamplerBytesPerElement(VllmSampler s) {
  return s == VllmSampler::kSort ? 2 + 4 + 4 + 8 + 8 + 12 : 2 + 4 + 4 + 4;
}

Status ValidateServing(const ServingOptions& s) {
  if (!(s.gpu_memory_utilization > 0 && s.gpu_memory_utilization <= 1)) {
    return InvalidArgument("gpu_memory_utilization must be in (0, 1], got " +
                           std::to_string(s.gpu_memory_utilization));
  }
  auto in_range = [](int64_t v, int64_t low) { return v >= low && v <= kMaxServingSize; };
  if (!in_range(s.max_model_len, 1)) {
    return InvalidArgument("max_model_len must be in [1, 2^24], got " +
                           std::to_string(s.max_model_len));
  }
  if (!in_range(s.block_size, 1) || !in_range(s.max_num_batched_tokens, 0) ||
      !in_range(s.max_num_seqs, 0)) {
    return InvalidArgument(
        "block_size must be in [1, 2^24] and max_num_batched_tokens, max_num_seqs in [0, 2^24] "
        "(0: vLLM's default)");
  }
  if (s.sequence_dim.empty()) return InvalidArgument("the sequence dim has no name");
  return Status::Ok();
}

// `vllm serve`'s defaults (EngineArgs.get_batch_defaults, OPENAI_API_SERVER).
void ResolveDefaults(const GpuProfile& gpu, ServingEstimate* s, const ServingOptions& o) {
  const bool large = gpu.total_memory.bytes >= (uint64_t{70} << 30) &&
                     base::ToLowerAscii(gpu.display_name).find("a100") == std::string::npos;
  s->max_num_batched_tokens =
      o.max_num_batched_tokens > 0 ? o.max_num_batched_tokens : (large ? 8192 : 2048);
  s->max_num_seqs = o.max_num_seqs > 0 ? o.max_num_seqs : (large ? 1024 : 256);
}

// The vocabulary (the first output's last dim) and the hidden size (the last dim of the LM
// head's input) of a bound decoder graph; 0 when not found.
void ReadHeadSizes(const core::BoundGraph& b, ServingEstimate* s) {
  const core::Graph& g = *b.graph;
  if (g.outputs.empty() || g.outputs.front() < 0) return;
  const int logits = g.outputs.front();
  const auto& shape = b.shapes[static_cast<size_t>(logits)];
  if (shape && !shape->empty()) s->vocab = shape->back();
  const int producer = g.value(logits).producer;
  if (producer < 0) return;
  const core::Node& head = g.node(producer);
  if ((head.op_type != "MatMul" && head.op_type != "Gemm") || head.inputs.empty()) return;
  const auto& in = b.shapes[static_cast<size_t>(head.inputs[0])];
  if (in && !in->empty()) s->hidden = in->back();
}

}  // namespace

Result<ServingEstimate> EstimateServing(const Estimator& estimator, const Model& model,
                                        const Options& options, const ServingOptions& serving) {
  MEMEST_RETURN_IF_ERROR(ValidateServing(serving));
  MEMEST_ASSIGN_OR_RETURN(const GpuProfile gpu, ResolveGpuProfile(options));
  ServingEstimate s;
  ResolveDefaults(gpu, &s, serving);
  Options fwd = options;
  fwd.mode = Mode::kInfer;
  fwd.batch = 1;
  fwd.dims[serving.sequence_dim] = s.max_num_batched_tokens;
  fwd.paged_kv_cache = true;
  fwd.attention =
      fwd.precision == Precision::kFp32 ? Attention::kSdpaMemEfficient : Attention::kSdpaFlash;
  MEMEST_RETURN_IF_ERROR(Validate(fwd));
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<memory::EstimationContext> ctx,
                          memory::EstimationContext::Make(model, fwd));
  const memory::KvCache& kv = ctx->kv_cache();
  for (int id : kv.values()) {
    if (ctx->bound().graph->value(id).kind == core::ValueKind::kDataInput) {
      return InvalidArgument("serving needs the prefill graph, without past_key_values inputs ('" +
                             ctx->bound().graph->value(id).name +
                             "'): memest-zoo hf --phase prefill --logits last");
    }
  }
  ReadHeadSizes(ctx->bound(), &s);
  s.layers = kv.layers();
  s.kv_bytes_per_token = kv.bytes_per_token();
  s.non_torch = ctx->stack().library_memory.bytes;
  MEMEST_ASSIGN_OR_RETURN(s.forward, estimator.Run(model, fwd));

  s.total_memory = gpu.total_memory.bytes;
  s.requested = static_cast<uint64_t>(
      std::floor(static_cast<double>(s.total_memory) * serving.gpu_memory_utilization));
  s.weights = s.forward.breakdown.weights;
  s.forward_peak = s.forward.peak_allocated > s.weights ? s.forward.peak_allocated - s.weights : 0;
  const uint64_t n = static_cast<uint64_t>(s.max_num_batched_tokens);
  const uint64_t r = std::min(n, static_cast<uint64_t>(s.max_num_seqs));
  const uint64_t v = static_cast<uint64_t>(s.vocab), h = static_cast<uint64_t>(s.hidden);
  s.sampler_peak = SatAdd(SatAdd(SatMul(SatMul(r, v), SamplerBytesPerElement(serving.sampler)),
                                 SatAdd(SatMul(SatMul(n, h), 2), SatMul(SatMul(r, h), 4))),
                          gpu.cublas_workspace.bytes);
  s.activation_peak = std::max(s.forward_peak, s.sampler_peak);
  const uint64_t non_kv = SatAdd(SatAdd(s.weights, s.activation_peak), s.non_torch);
  s.kv_available =
      s.requested >= non_kv
          ? static_cast<int64_t>(s.requested - non_kv)
          : -static_cast<int64_t>(std::min<uint64_t>(non_kv - s.requested, uint64_t{1} << 62));
  s.block_bytes = SatMul(static_cast<uint64_t>(serving.block_size), s.kv_bytes_per_token);
  if (s.kv_available > 0 && s.block_bytes > 0) {
    s.blocks = static_cast<int64_t>(static_cast<uint64_t>(s.kv_available) / s.block_bytes);
  }
  s.tokens = s.blocks * serving.block_size;
  const int64_t per_request = (serving.max_model_len + serving.block_size - 1) / serving.block_size;
  s.max_concurrency = static_cast<double>(s.blocks) / static_cast<double>(per_request);
  s.starts = s.blocks >= per_request;

  s.diagnostics = s.forward.diagnostics;
  if (s.vocab == 0 || s.hidden == 0) {
    s.diagnostics.push_back({Severity::kWarning, "serving_head_unknown",
                             "the graph's first output is not the LM head's logits [.., vocab] of "
                             "a MatMul: the dummy sampler run is not counted",
                             "", ""});
  }
  if (!ctx->stack().library_memory.calibrated) {
    s.diagnostics.push_back(
        {Severity::kInfo, "serving_non_torch",
         "memory outside PyTorch the profile run adds is the stack's library memory (" +
             std::to_string(s.non_torch) +
             " B, not calibrated); vLLM logs about 0.1 GiB on one GPU",
         "", ""});
  }
  return s;
}

std::string ServingToJson(const ServingEstimate& s, const ServingOptions& o) {
  Json j = {{"schema", "memest.serve/1"}};
  j["options"] = {{"gpu_memory_utilization", o.gpu_memory_utilization},
                  {"max_model_len", o.max_model_len},
                  {"max_num_batched_tokens", s.max_num_batched_tokens},
                  {"max_num_seqs", s.max_num_seqs},
                  {"block_size", o.block_size},
                  {"sampler", o.sampler == VllmSampler::kSort ? "sort" : "flashinfer"}};
  j["memory"] = {{"total", s.total_memory},        {"requested", s.requested},
                 {"weights", s.weights},           {"forward_peak", s.forward_peak},
                 {"sampler_peak", s.sampler_peak}, {"activation_peak", s.activation_peak},
                 {"non_torch", s.non_torch},       {"kv_available", s.kv_available}};
  j["kv_cache"] = {{"bytes_per_token", s.kv_bytes_per_token},
                   {"block_bytes", s.block_bytes},
                   {"blocks", s.blocks},
                   {"tokens", s.tokens},
                   {"layers", s.layers},
                   {"max_concurrency", s.max_concurrency},
                   {"starts", s.starts}};
  j["model"] = {{"vocab", s.vocab}, {"hidden", s.hidden}};
  j["forward"] = Json::parse(EstimateToJson(s.forward));
  j["diagnostics"] = base::DiagnosticsJson(s.diagnostics);
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace memest
