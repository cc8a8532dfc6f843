// memest/serving.h -- serving a decoder with vLLM: how much memory its KV cache gets on a GPU,
// how many tokens that holds, and how many requests of a length run at once -- the question a
// serving deployment or an inference scheduler asks before starting a server.
//
// Policy (docs/serving.md; vLLM's V1 engine, vllm/v1/worker/gpu_worker.py
// determine_available_memory and vllm/v1/core/kv_cache_utils.py, as of v0.11 to v0.20):
//  * requested = the GPU's total memory (cudaMemGetInfo) x gpu_memory_utilization. The CUDA
//    context and other processes' memory are not subtracted from it: vLLM's baseline snapshot
//    is taken after them.
//  * Non-KV memory = the weights + the activation peak of the start-up profile run + memory
//    outside PyTorch the run adds (the stack's library memory; 0 on an uncalibrated stack).
//  * The profile run: a forward pass over N = max_num_batched_tokens tokens (the graph bound at
//    batch 1, seq N, its KV cache tensors paged -- Options::paged_kv_cache -- and attention
//    costed as the fused kernel: vLLM's dummy run has no attention metadata and runs none), then
//    the dummy sampler on R = min(max_num_seqs, N) rows of the vocabulary V: the bf16 logits
//    (2 B per element) and their fp32 copy (4), and on PyTorch's top-k/top-p sort path the sorted
//    values (4), indices (8), the segmented sort's reverse indices (8) and CUB's key/value
//    buffers (12): 38 B per element (FlashInfer's sampler: 2 + 4 + 4 + 4 = 14); beside it the
//    forward's hidden states [N, H] and [R, H] x 2 of last hidden states and noise in bf16, and
//    the cuBLAS workspace. The activation peak is the larger of the two.
//  * available = requested - non-KV (negative: the server does not start). Blocks =
//    floor(available / (block_size x KV bytes per token)) (memory/kv_cache.h), tokens = blocks x
//    block_size, concurrency = blocks / ceil(max_model_len / block_size). The server starts
//    only if one request of max_model_len fits (vLLM raises "larger than the maximum number of
//    tokens that can be stored in KV cache").
//  * Not modelled: CUDA-graph capture memory (not subtracted by vLLM before v0.21), vLLM's
//    rotary cos/sin cache in the weights (max_position_embeddings x rotary_dim x 2 B), tensor
//    parallelism, sliding-window and hybrid models' KV groups, multimodal encoder caches.
#ifndef MEMEST_SERVING_H_
#define MEMEST_SERVING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "memest/estimate.h"
#include "memest/estimator.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest {

enum class VllmSampler {
  kSort,       // PyTorch's top-k/top-p sort path (vLLM's default from v0.11.1 to early 2026)
  kFlashInfer  // FlashInfer's sampling kernels (default before v0.11.1 and again since PR #40376)
};

struct ServingOptions {
  double gpu_memory_utilization = 0.9;
  int64_t max_model_len = 0;  // required: the longest request (prompt + output) in tokens
  // 0: vLLM's default for the GPU -- `vllm serve` on a GPU of >= 70 GiB that is not an A100:
  // 8192 tokens and 1024 sequences; elsewhere 2048 and 256 (EngineArgs.get_batch_defaults).
  int64_t max_num_batched_tokens = 0;
  int64_t max_num_seqs = 0;
  int64_t block_size = 16;
  // The graph's sequence dim (dim_param), bound to max_num_batched_tokens for the profile run.
  std::string sequence_dim = "seq";
  // The sort path is the larger: the safe default when the vLLM build is not known.
  VllmSampler sampler = VllmSampler::kSort;
};

struct ServingEstimate {
  uint64_t total_memory = 0;  // the GPU's (cudaMemGetInfo)
  uint64_t requested = 0;     // total x gpu_memory_utilization
  uint64_t weights = 0;
  uint64_t forward_peak = 0;  // the profile forward's peak above the weights
  uint64_t sampler_peak = 0;  // the dummy sampler run's peak above the weights
  uint64_t activation_peak = 0;
  uint64_t non_torch = 0;
  int64_t kv_available = 0;  // requested - weights - activation_peak - non_torch
  uint64_t kv_bytes_per_token = 0;
  uint64_t block_bytes = 0;
  int64_t blocks = 0;
  int64_t tokens = 0;
  double max_concurrency = 0;          // requests of max_model_len at once
  bool starts = false;                 // one max_model_len request fits
  int64_t max_num_batched_tokens = 0;  // the values used (defaults resolved)
  int64_t max_num_seqs = 0;
  int64_t vocab = 0;
  int64_t hidden = 0;
  int layers = 0;
  Estimate forward;  // the profile forward's estimate
  std::vector<Diagnostic> diagnostics;
};

// The serving answer for `model`, a decoder's prefill graph (input_ids [batch, seq] -> logits
// first, then present.<i>.key/value; memest-zoo hf --phase prefill --logits last) on the GPU of
// `options` (its precision, weight and KV cache dtypes, stack; mode is set to infer).
// InvalidArgument for serving options out of range or a graph without a KV cache or with past
// inputs; the estimator's errors otherwise.
[[nodiscard]] Result<ServingEstimate> EstimateServing(const Estimator& estimator,
                                                      const Model& model, const Options& options,
                                                      const ServingOptions& serving);

// A memest.serve/1 object (docs/json-schema.md).
std::string ServingToJson(const ServingEstimate& s, const ServingOptions& serving);

}  // namespace memest

#endif  // MEMEST_SERVING_H_
