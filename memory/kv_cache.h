// memory/kv_cache.h -- an exported decoder's key/value cache (Options::kv_cache_dtype,
// Options::paged_kv_cache), stated once for every backend and for EstimateServing.
//
// Policy (docs/memory-model.md §10):
//  * Which values: graph inputs named past_key_values.<i>.key / .value and graph outputs named
//    present.<i>.key / .value (the names Hugging Face optimum's ONNX export and memest-zoo hf
//    give the cache), each [batch, kv_heads, tokens, head_dim].
//  * kv_cache_dtype: every cache element in that many bytes (fp16/bf16 2, fp8/int8 1; vLLM's
//    fp8 cache keeps one scalar scale per layer, nothing per element); auto: as the precision
//    says (the dtype's size under fp32, 2 bytes under amp-fp16/amp-bf16/bf16, where keys and
//    values come out of lower-precision matmuls).
//  * paged_kv_cache: the cache is one pool allocated before any request (vLLM's KV cache
//    blocks); the graph's past inputs and present outputs are views of it, 0 bytes of their own,
//    and a present output does not keep the tensor it was computed in alive to the end of the
//    step (its keys and values are written into the pool's blocks): KeptOutputs().
//  * Lifetime: a past tensor is released after its last reader, not held to the end of the step:
//    transformers' DynamicCache (the default cache) replaces each layer's keys and values with
//    torch.cat([old, new]) and drops the old tensors (cache_utils.py, DynamicLayer.update), so in
//    a decode step layer i's past and present exist together only around layer i's Concat.
//    Measured: datasets/h100-lm-torch211 calls 11 and 18. The present outputs are held to the end
//    (the cache keeps them). Other data inputs (the token ids, an input batch) are held by the
//    caller to the end: released_at_last_use() says which inputs are not.
//  * A graph without a cache given either option is InvalidArgument: never a silent no-op.
#ifndef MEMEST_MEMORY_KV_CACHE_H_
#define MEMEST_MEMORY_KV_CACHE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/bind.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::memory {

class KvCache {
 public:
  KvCache() = default;
  [[nodiscard]] static Result<KvCache> Make(const core::BoundGraph& graph, const Options& options);

  // The cache's value ids (past inputs, then present outputs).
  const std::vector<int>& values() const { return values_; }
  // Whether the step releases value `id` after its last reader (a past tensor, see the policy
  // above) rather than the caller holding it to the end.
  bool released_at_last_use(int id) const {
    return !released_.empty() && released_[static_cast<size_t>(id)];
  }
  bool releases_any() const { return !released_.empty(); }
  // Whether the graph reads a past cache (past_key_values.* inputs): a decode step; a graph that
  // only makes one (present.* outputs) is a prefill.
  bool reads_past() const { return reads_past_; }
  bool empty() const { return values_.empty(); }
  // Per value id, the bytes the options give a cache tensor (nullopt: as sized otherwise);
  // empty when neither option is set.
  const std::vector<std::optional<uint64_t>>& stored_bytes() const { return stored_; }
  // One token of one sequence, keys and values of every layer, in the cache's dtype: the sum over
  // the present outputs (else the past inputs) of kv_heads x head_dim x element bytes.
  uint64_t bytes_per_token() const { return bytes_per_token_; }
  // Layers: present (else past) tensors / 2.
  int layers() const { return layers_; }
  bool paged() const { return paged_; }

 private:
  std::vector<int> values_;
  std::vector<bool> released_;
  std::vector<std::optional<uint64_t>> stored_;
  uint64_t bytes_per_token_ = 0;
  int layers_ = 0;
  bool paged_ = false;
  bool reads_past_ = false;
};

// The past input a present output fills in the next step: "present.3.key" ->
// "past_key_values.3.key" (the names of the policy above); empty for any other name.
[[nodiscard]] std::string PastNameOf(std::string_view present);

// The graph outputs whose storage the step keeps until it ends: every output but the present
// tensors of a paged cache. Both backends keep these (and their roots) alive to the end.
[[nodiscard]] std::vector<int> KeptOutputs(const core::Graph& graph, const KvCache& kv);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_KV_CACHE_H_
