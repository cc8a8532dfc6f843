// ops/value_facts.h -- per-value facts every backend derives once dims are bound.
//
// From a BoundGraph and the options' precision, computed once (immutable afterwards):
//   * requires_grad: ops::RequiresGrad (trainable parameters and what is computed from them);
//   * gets_gradient: a trainable parameter that backward reaches from a loss on the graph's first
//     output (memory-model.md §4.2): torch.optim steps, and gives state to, only the parameters
//     whose .grad is not None after backward, so one that feeds other outputs alone gets neither
//     a gradient nor optimizer state, though it requires grad. Where a node that backward reaches
//     has a subgraph (If/Loop/Scan), whose reads of outer values are not its inputs, every value
//     that requires grad counts as reached (as RequiresGrad assumes they are read);
//   * low: the value is fp16/bf16 at run time (AMP: produced by a lower-precision op or by a
//     pass-through op on low inputs, memory-model.md §5.2/5.3; bf16: every fp32 value);
//   * root: the value that owns the storage (a view's source, transitively; memory-model.md §3.1
//     views);
//   * bytes: run-time bytes (halved when low); for a value whose shape is unknown, the largest
//     known tensor its producer touches (a conservative guess, listed in fallback_ops).
//   * layout: whether a value is contiguous at run time, and so whether a view op really is a
//     view (memory-model.md §3.1 views; 3.2 table, mm/bmm/matmul row: "reshape/expand ... may copy
//     (new allocation, then saved)"). Policy:
//       - outputs of non-view ops are contiguous; views carry strides: Transpose permutes
//         them, Slice/Split keep them, Expand broadcasts with stride 0;
//       - Reshape/Flatten/Squeeze/Unsqueeze are views when PyTorch's view rule finds strides
//         for the new shape (each run of mutually contiguous input dims covered by whole output
//         dims), else reshape copies: a new, contiguous tensor;
//       - MatMul with a non-contiguous operand of rank >= 3 folds it with reshape (a copy), and
//         the copy is what bmm/mm saves: Saved() reports it as an extra tensor of its bytes.
#ifndef MEMEST_OPS_VALUE_FACTS_H_
#define MEMEST_OPS_VALUE_FACTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/bind.h"
#include "memest/options.h"
#include "ops/fusion.h"
#include "ops/rules.h"

namespace memest::ops {

// Everything a ValueFacts reads besides the bound graph (the constructor's arguments below); the
// key under which the bound graph keeps them (ValueFacts::Shared), compared field by field.
struct ValueFactsInputs {
  Precision precision = Precision::kFp32;
  FusionChoices fusion;
  std::vector<bool> trainable;
  std::vector<std::optional<uint64_t>> stored_bytes;
  std::vector<uint32_t> shard_divisor;
  bool operator==(const ValueFactsInputs&) const = default;
};

class ValueFacts {
 public:
  // `fusion`: which exported chains run as PyTorch's fused kernels (ops/fusion.h).
  // `trainable`: the parameters that require grad, per value id (frozen ones do not); empty:
  // the loader's Value::trainable. `stored_bytes`: per value id, the bytes of a value stored other
  // than its dtype says (a quantized parameter, memory/weight_storage.h; a KV cache tensor,
  // memory/kv_cache.h); nullopt or empty: as its dtype says.
  // `shard_divisor`: per value id, the number of tensor-parallel ranks the value is split over
  // (memory/parallel.h); every byte count below is one rank's share, ceil(bytes / divisor).
  ValueFacts(const core::BoundGraph& graph, Precision precision, const FusionChoices& fusion = {},
             std::vector<bool> trainable = {},
             const std::vector<std::optional<uint64_t>>& stored_bytes = {},
             std::vector<uint32_t> shard_divisor = {});
  ValueFacts(const core::BoundGraph& graph, const ValueFactsInputs& inputs)
      : ValueFacts(graph, inputs.precision, inputs.fusion, inputs.trainable, inputs.stored_bytes,
                   inputs.shard_divisor) {}
  ValueFacts(const ValueFacts&) = delete;
  ValueFacts& operator=(const ValueFacts&) = delete;

  // The facts of `graph` under `inputs`, made once and shared by every later call on the same
  // bound graph with equal inputs (graph.derived, core/derived_cache.h): the estimates of a
  // model at one batch that differ only in options the facts do not read (optimizer, GPU
  // capacity, fit policy) compute them once. `graph` must outlive every holder of the result.
  static std::shared_ptr<const ValueFacts> Shared(const core::BoundGraph& graph,
                                                  ValueFactsInputs inputs);

  const std::vector<bool>& requires_grad() const { return requires_grad_; }
  // A parameter that gets a gradient and optimizer state (Options::trainable / freeze).
  bool trainable(int id) const { return id >= 0 && trainable_[static_cast<size_t>(id)]; }
  bool requires_grad(int id) const { return id >= 0 && requires_grad_[static_cast<size_t>(id)]; }
  // Whether backward from a loss on the first output gives value `id` a gradient (it requires
  // grad and leads to that output).
  bool reaches_loss(int id) const { return id >= 0 && reaches_loss_[static_cast<size_t>(id)] != 0; }
  // A trainable parameter that backward gives a gradient, from a loss on the first output: the
  // ones that get a gradient and optimizer state in a training step.
  bool gets_gradient(int id) const { return trainable(id) && reaches_loss(id); }
  // The inputs node n's backward makes gradients for: its own inputs; for the last node of a
  // fused chain (ops/fusion.h) the chain's inputs from outside (FusedChain::inputs), as the fused
  // kernel's backward makes them in one call; for the chain's other nodes none.
  [[nodiscard]] std::span<const int> GradInputs(size_t n) const;
  // The trainable parameters that backward does not reach (requires grad, no gradient).
  [[nodiscard]] const std::vector<int>& ParametersWithoutGradient() const {
    return without_gradient_;
  }
  bool low(int id) const { return id >= 0 && low_[static_cast<size_t>(id)]; }
  // The value whose storage `id` is: its own, its source's for a view, its input's for an in-place
  // ReLU (FusionChoices::inplace_relu).
  int root(int id) const { return id < 0 ? id : root_[static_cast<size_t>(id)]; }
  uint64_t bytes(int id) const { return id < 0 ? 0 : bytes_[static_cast<size_t>(id)]; }
  // The concrete dims of value `id` at the bound dims; nullopt when unknown.
  core::MaybeDims dims(int id) const { return graph_.shapes.Find(id); }
  // The tensor-parallel ranks value `id` is split over (1 when it is whole on every rank).
  uint32_t shard(int id) const {
    return id < 0 || static_cast<size_t>(id) >= shard_.size() ? 1 : shard_[static_cast<size_t>(id)];
  }
  // One rank's share of `bytes` of value `id`.
  uint64_t Share(int id, uint64_t bytes) const {
    const uint64_t d = shard(id);
    return bytes / d + (bytes % d != 0);
  }
  // Op types whose outputs had to be sized by the fallback.
  const std::set<std::string>& fallback_ops() const { return fallback_ops_; }
  // Node n's rule (resolved at load: ops::RuleOf), nullptr when memest has none.
  const OpRule* rule(size_t n) const { return RuleOf(*graph_.graph, n); }
  // Whether node `n`'s outputs alias input 0's storage at run time (the rule's `view`, unless
  // the layout policy above makes it a copy).
  bool is_view(size_t n) const { return is_view_[n]; }
  bool contiguous(int id) const { return id < 0 || contiguous_[static_cast<size_t>(id)]; }
  // The tensors autograd saves for node `n` (ops::SavedTensors), with MatMul's copies of
  // non-contiguous operands as extra tensors (layout policy above); for a node of a fused chain
  // (ops/fusion.h), the fused kernel's list at the chain's last node and nothing elsewhere.
  // Every node's list is made on the first call (thread-safe) and kept with the facts.
  std::span<const SavedTensor> Saved(size_t n) const;
  // The forward workspace of node `n` beyond its outputs and what it saves: the rule's (a fused
  // attention op's chosen kernel, ops/attention.h), 0 for most ops.
  uint64_t Workspace(size_t n) const;
  // What node `n`'s backward allocates beyond the gradients of its inputs and outputs: the
  // attention kernel's (ops/attention.h) for a fused attention op or a fused chain's last node,
  // 0 otherwise.
  uint64_t BackwardWorkspace(size_t n) const;
  // Whether the graph runs GEMMs (cuBLAS workspace, memory-model.md §2.3).
  bool has_gemm() const { return has_gemm_; }
  // The fused chains found in the graph (their interior values are 0 bytes above).
  const Fusion& fusion() const { return *fusion_; }
  // Bytes of the low-precision autocast copy of a trainable fp32 weight used by a
  // lower-precision op (memory-model.md §5.1); 0 when there is none.
  uint64_t amp_cast_bytes(int id) const;

 private:
  // The constructor's steps, in order.
  void MarkLowPrecision();
  bool Promotes(int id) const;  // an fp32 operand that makes a pass-through op's result fp32
  void FindLayout();
  void FindStorageRoots(bool inplace_relu);
  bool InPlaceRelu(size_t k) const;
  void FindLossReach();
  void SizeValues(const std::vector<std::optional<uint64_t>>& stored_bytes);
  // Appends node n's list to `out`.
  void AppendSaved(size_t n, std::vector<SavedTensor>* out) const;
  void AutocastCopiesOfSavedInputs(size_t k, const FusedChain* chain,
                                   std::span<SavedTensor> list) const;
  void MakeSaved() const;  // fills saved_ and saved_begin_, once

  const core::BoundGraph& graph_;
  Precision precision_;
  std::vector<bool> trainable_;
  std::vector<bool> requires_grad_;
  std::vector<uint8_t> reaches_loss_;  // backward gives the value a gradient (FindLossReach)
  std::vector<int> without_gradient_;  // trainable, read, not reached
  std::vector<bool> low_;
  std::vector<int> root_;
  std::vector<bool> contiguous_;
  std::vector<bool> is_view_;
  std::vector<uint64_t> bytes_;
  std::vector<uint32_t> shard_;
  std::set<std::string> fallback_ops_;
  std::unique_ptr<Fusion> fusion_;
  bool has_gemm_ = false;
  mutable std::mutex saved_mu_;
  mutable std::atomic<bool> saved_made_{false};
  // Once Saved() was called: every node's list back to back (one allocation, not one per node),
  // node n's from saved_begin_[n] to saved_begin_[n + 1].
  mutable std::vector<SavedTensor> saved_;
  mutable std::vector<size_t> saved_begin_;
};

}  // namespace memest::ops

#endif  // MEMEST_OPS_VALUE_FACTS_H_
