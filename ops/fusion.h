// ops/fusion.h -- subgraphs of an exported graph that PyTorch runs as one fused kernel.
//
// ONNX exporters write some PyTorch modules as chains of elementary ops because the opset has no
// single op for them: nn.LayerNorm before opset 17 (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
// Div, Mul, Add), nn.GroupNorm always (Reshape to [N, G, -1], InstanceNormalization, Reshape
// back, Mul, Add: symbolic_opset9.group_norm), nn.GELU before opset 20 (Div, Erf, Add, Mul, Mul;
// with approximate="tanh" Mul, Mul, Mul, Add, Mul, Tanh, Add, Mul, Mul, the cube as Muls), nn.SiLU
// always (x * Sigmoid(x), torch.onnx's symbolic_opset9.silu), nn.Mish before opset 18 (x *
// Tanh(Softplus(x))), and attention always (MatMul, scale, Softmax, Dropout, MatMul). Run op by op,
// each link would save its inputs for backward; PyTorch's eager run of the module saves what the
// fused kernel's derivative needs (tools/autograd/derivatives.yaml): native_layer_norm keeps the
// input and two [M] fp32 statistics (mean, rstd), native_group_norm the same with [N, G] statistics
// (as written, the Mul saves the normalised tensor for the weight's gradient, one more tensor of
// x's size per norm); gelu, silu and mish keep their input (as written, the gate is saved too: the
// Sigmoid or Tanh saves its output and the Mul both operands, one more tensor of x's size per
// activation); scaled_dot_product_attention with the flash or memory-efficient backend keeps q, k,
// v, the output and an fp32 logsumexp of [B, H, L] and never materialises the L x S attention
// matrix (docs/memory-model.md §3.2, §3.4).
//
// Policy:
//  * A chain is fused only when it matches exactly (op types, which operand is which, the
//    constants: Pow exponent 2, GELU's 1/sqrt(2) or sqrt(2/pi) and 0.044715, 1 and 1/2 within
//    1e-3) and none of its interior values is used outside it (a graph output, or read by another
//    node): then PyTorch could not have computed it as one kernel either. A tanh GELU whose cube
//    is a Pow is Python code (GPT-2's NewGELUActivation), run op by op: not fused.
//  * The interior values of a fused chain do not exist at run time: they are 0 bytes. The last
//    node of the chain saves the fused kernel's list; the other nodes save nothing. A fused
//    chain's backward is one kernel call at its last node: the gradients of the chain's inputs
//    from outside are made there, while its output's gradient is alive, and the nodes inside make
//    none (the symbolic backend; the analytical one sizes each node's input gradients, which are
//    0 bytes inside, and an attention chain's all at its last node); a fused attention chain's
//    call also allocates its kernel's backward buffers there (backward_call, ops/attention.h).
//  * LayerNorm, GroupNorm, GELU, SiLU and Mish chains are fused whenever `fused_kernels` is set
//    (the default: what a PyTorch module does). Python code computing the same (x *
//    torch.sigmoid(x)) exports the same chain and runs op by op; a graph cannot tell the two apart,
//    and the module is what timm and transformers call (nn.SiLU, ACT2FN["silu"]). Attention chains
//    are fused only when the attention policy fuses chains (Options::attention sdpa-flash,
//    sdpa-mem-efficient or auto: the model calls F.scaled_dot_product_attention) and the kernel
//    ops/attention.h picks for the chain is flash or memory-efficient, or math on fp16/bf16 inputs
//    (the composite upcasts q, k and v to fp32, which the chain as written does not show); that
//    kernel's list is what the chain saves and its workspace what the chain's last node allocates.
//    With eager attention, sdpa-math, or a chain the policy gives the math kernel on fp32 inputs,
//    the chain stays as written (the math composite is the same computation).
//  * The call a fused chain makes is the one transformers' SDPA path makes for it: a mask made
//    from the inputs' shapes alone through a Trilu (the causal mask), over as many queries as keys
//    or one query, is is_causal and no attn_mask (masking_utils.py, sdpa_mask with
//    allow_is_causal_skip); k and v repeated to the query heads (Reshape of a growing Expand) are
//    passed unrepeated with enable_gqa when there is no mask (AttentionSite::grouped_kv); k and v
//    with fewer rows than q, broadcast by the MatMuls, are passed as they are, without enable_gqa
//    (AttentionSite::broadcast_kv: Falcon's multi-query attention), so only math runs them. A
//    causal mask read only by fused chains is never made then: it, and the values only it needs,
//    are 0 bytes like interior values.
//  * Fused attention ops (a rule with an attention_site: ONNX Attention, the com.microsoft
//    attention ops) get their kernel from the same choice, per node (attention_call()); their
//    rules then say what that kernel saves and allocates.
//  * What the structure decides is found once per graph and kept with it (Graph::derived): the
//    LayerNorm, GroupNorm, GELU, SiLU and Mish chains (op types, operands, constants,
//    closedness: the same at every dims), the identity dropouts, and which nodes may start an
//    attention chain or are fused attention ops. Each bound graph then sizes what those elementwise
//    chains save (the statistics' rows, and whether a gradient flows through them at all) and
//    matches attention chains itself, whose calls read shapes and whose kernel choice may turn on
//    them. A search's or a scheduler's estimates at other batches walk no node twice to find them.
//  * Dropout with a constant ratio of 0 is an identity in PyTorch (aten::dropout returns its input
//    when p == 0, without a mask): its output 0 aliases input 0, the mask output is 0 bytes, and
//    it saves nothing. This holds with or without fused kernels.
#ifndef MEMEST_OPS_FUSION_H_
#define MEMEST_OPS_FUSION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/bind.h"
#include "ops/attention.h"
#include "ops/rules.h"

namespace memest::ops {

enum class FusedKind { kLayerNorm, kGroupNorm, kGelu, kSilu, kMish, kAttention };
const char* ToString(FusedKind kind);

struct FusedChain {
  FusedKind kind;
  std::vector<size_t> nodes;       // topological order; the last one produces the chain's output
  std::vector<int> interior;       // values that exist only inside the fused kernel
  std::vector<SavedTensor> saved;  // what the fused kernel saves for backward
  // Its inputs from outside (neither interior nor made by its own nodes), sorted, each once: what
  // the fused kernel's backward makes gradients for, at the last node.
  std::vector<int> inputs = {};
};

struct FusionChoices {
  bool fused_kernels = true;  // LayerNorm, GroupNorm, GELU, SiLU and Mish chains
  // A ReLU after a Conv or BatchNormalization, its input's only reader, writes into its input
  // (Options::inplace_relu; ops::ValueFacts gives both one storage). false: as written.
  bool inplace_relu = false;
  AttentionPolicy attention;  // attention chains and fused attention ops (ops/attention.h)
  bool operator==(const FusionChoices&) const = default;
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
  // Every attention call the policy decided a kernel for, in node order: the matched chains
  // (fused, or left as written when the math kernel was chosen) and the fused attention ops.
  const std::vector<AttentionCall>& attention_calls() const { return calls_; }
  // The call of fused attention op `n`, or nullptr (not such an op).
  const AttentionCall* attention_call(size_t n) const {
    return call_of_[n] < 0 ? nullptr : &calls_[static_cast<size_t>(call_of_[n])];
  }
  // The call whose kernel's backward runs at node `n`, or nullptr: a fused attention op's, or a
  // fused chain's at the chain's last node (the one that saves its list).
  const AttentionCall* backward_call(size_t n) const {
    return backward_of_[n] < 0 ? nullptr : &calls_[static_cast<size_t>(backward_of_[n])];
  }

 private:
  void DropUnusedCausalMasks(const core::Graph& g);
  // Fills c->inputs (after every interior value is known).
  void FindInputs(const core::Graph& g, FusedChain* c) const;

  std::vector<FusedChain> chains_;
  std::vector<int> chain_of_;  // per node: index in chains_, or -1
  std::vector<AttentionCall> calls_;
  std::vector<int> call_of_;      // per node: index in calls_ of a fused op's call, or -1
  std::vector<int> backward_of_;  // per node: index in calls_ whose backward runs there, or -1
  std::vector<bool> interior_;
  std::vector<bool> identity_dropout_;
  std::vector<size_t> unmatched_attention_;
};

}  // namespace memest::ops

#endif  // MEMEST_OPS_FUSION_H_
