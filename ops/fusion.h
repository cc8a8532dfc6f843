// ops/fusion.h -- subgraphs of an exported graph that PyTorch runs as one fused kernel.
//
// ONNX exporters write some PyTorch modules as chains of elementary ops because the opset has no
// single op for them: nn.LayerNorm before opset 17 (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
// Div, Mul, Add), nn.GELU before opset 20 (Div, Erf, Add, Mul, Mul), and attention always
// (MatMul, scale, Softmax, Dropout, MatMul). Run op by op, each link would save its inputs for
// backward; PyTorch's eager run of the module saves what the fused kernel's derivative needs
// (tools/autograd/derivatives.yaml): native_layer_norm keeps the input and two [M] fp32 statistics
// (mean, rstd); gelu keeps its input; scaled_dot_product_attention with the flash or
// memory-efficient backend keeps q, k, v, the output and an fp32 logsumexp of [B, H, L] and
// never materialises the L x S attention matrix (docs/memory-model.md §3.2, §3.4).
//
// Policy:
//  * A chain is fused only when it matches exactly (op types, which operand is which, the
//    constants: Pow exponent 2, GELU's 1/sqrt(2), 1 and 1/2 within 1e-3) and none of its interior
//    values is used outside it (a graph output, or read by another node): then PyTorch could not
//    have computed it as one kernel either.
//  * The interior values of a fused chain do not exist at run time: they are 0 bytes. The last
//    node of the chain saves the fused kernel's list; the other nodes save nothing.
//  * LayerNorm and GELU chains are fused whenever `fused_kernels` is set (the default: what a
//    PyTorch module does). Attention chains are fused only with `fused_attention` (the model calls
//    F.scaled_dot_product_attention and PyTorch picks the flash or memory-efficient kernel:
//    Options::attention). With the math backend or eager attention the chain stays as written.
//  * Dropout with a constant ratio of 0 is an identity in PyTorch (aten::dropout returns its input
//    when p == 0, without a mask): its output 0 aliases input 0, the mask output is 0 bytes, and
//    it saves nothing. This holds with or without fused kernels.
#ifndef MEMEST_OPS_FUSION_H_
#define MEMEST_OPS_FUSION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/bind.h"
#include "ops/rules.h"

namespace memest::ops {

enum class FusedKind { kLayerNorm, kGelu, kAttention };
const char* ToString(FusedKind kind);

struct FusedChain {
  FusedKind kind;
  std::vector<size_t> nodes;       // topological order; the last one produces the chain's output
  std::vector<int> interior;       // values that exist only inside the fused kernel
  std::vector<SavedTensor> saved;  // what the fused kernel saves for backward
};

struct FusionChoices {
  bool fused_kernels = true;     // LayerNorm and GELU chains
  bool fused_attention = false;  // attention chains (SDPA flash / memory-efficient)
  // Rows of the logsumexp are padded to a multiple of this: 32 for the memory-efficient kernel
  // (kAlignLSE), 1 for flash (docs/memory-model.md §3.2).
  uint64_t logsumexp_align = 1;
};

class Fusion {
 public:
  Fusion(const core::BoundGraph& graph, const std::vector<bool>& requires_grad,
         const FusionChoices& choices);

  const std::vector<FusedChain>& chains() const { return chains_; }
  // The chain node `n` belongs to, or nullptr.
  const FusedChain* chain_of(size_t n) const;
  // Whether `id` is an interior value of a chain (0 bytes at run time).
  bool interior(int id) const { return id >= 0 && interior_[static_cast<size_t>(id)]; }
  // Whether node `n` is a Dropout of constant ratio 0 (an identity).
  bool identity_dropout(size_t n) const { return identity_dropout_[n]; }
  // With fused attention: the Softmax nodes whose probabilities feed a MatMul (through an
  // optional Dropout), i.e. look like attention, but whose chain does not match the one above
  // (a Cast, a second mask, ...). They are costed as written (eager); the context reports them.
  const std::vector<size_t>& unmatched_attention() const { return unmatched_attention_; }

 private:
  std::vector<FusedChain> chains_;
  std::vector<int> chain_of_;  // per node: index in chains_, or -1
  std::vector<bool> interior_;
  std::vector<bool> identity_dropout_;
  std::vector<size_t> unmatched_attention_;
};

}  // namespace memest::ops

#endif  // MEMEST_OPS_FUSION_H_
