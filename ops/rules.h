// ops/rules.h -- the one per-op rule table shared by every backend.
//
// One OpRule per ONNX op (families make most ops one line). A rule states what PyTorch eager
// training does with memory for the op, citing docs/memory-model.md
// (section numbers in `cite`):
//   * which tensors autograd saves for backward (inputs, outputs, or extra tensors such as a
//     dropout mask or max-pool indices),
//   * whether the output is a view of input 0 (no new memory in PyTorch),
//   * whether gradients flow through it (differentiable) -- integer/shape/comparison ops do not,
//   * how autocast treats it (AMP policy),
//   * temporary workspace in the forward pass (bytes, beyond its outputs and what it keeps),
//   * for a fused attention op, how to describe its call (ops/attention.h picks the kernel),
//   * its shape and dtype rule over symbolic dims (`infer`, ops/shape_rules.h), run once per
//     model at load time (ops/shape_pass.h).
// Adding an op = one entry in ops/rules.cc + one test in tests/unit/rules_test.cc (and, for its
// shape rule, one case in tests/unit/shape_rules_test.cc).
// Shapes come from core::BoundGraph: the symbolic shapes evaluated at the bound dims, with ONNX
// shape inference as the fallback for what the shape rules leave unknown.
#ifndef MEMEST_OPS_RULES_H_
#define MEMEST_OPS_RULES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/bind.h"
#include "core/graph.h"
#include "memest/coverage.h"
#include "ops/shape_rules.h"

namespace memest::ops {

// How autocast treats an op; the tags name the lists in memory-model.md §5.2.
enum class AmpPolicy {
  kPassThrough,     // runs in its input's dtype (relu, add, ...)         "by omission"
  kLowerPrecision,  // runs in fp16/bf16 under autocast (conv, matmul)     LOWER_PRECISION_FP
  kFp32,            // inputs cast to fp32, output fp32 (softmax, LN, ...) FP32 lists
  kPromote,         // widest input type                                   PROMOTE
};

struct SavedTensor {
  int value = -1;      // value id when an input/output of the node is saved; -1 for an extra tensor
  uint64_t bytes = 0;  // for extra tensors (value == -1): their size; ignored otherwise
  // A short description: a string literal ("x", "mask(bool)", "indices(int64)"), followed by
  // `operand` when that is >= 0 ("in" and 1 read "in1"). Describe() spells the whole out. Only
  // tests and messages read it, so no saved tensor builds a string.
  std::string_view what;
  int32_t operand = -1;
  // What ops::ValueFacts made of a saved input: the contiguous copy MatMul's reshape saves, or the
  // copy autocast casts it to (value is then -1 and bytes the copy's), and the value it copies,
  // whose dims it has (-1 for no copy).
  enum class Copy : uint8_t { kNone, kContiguous, kAutocast };
  Copy copy = Copy::kNone;
  int32_t source = -1;
  // An extra tensor whose bytes no symbolic dim of the data moves (BatchNormalization's
  // per-channel statistics, where the channel count is a constant): the same at every batch and
  // sequence length. (A saved value says so by its symbolic shape instead.) What the max-batch
  // search's first guess reads as a fixed part (analytical/step_terms.h).
  bool fixed = false;
  // An extra tensor sized in the graph's dtype of the node's output 0 that PyTorch keeps in the
  // precision the op runs in: ops::ValueFacts halves it where that output runs in fp16/bf16
  // (autocast's lower-precision list, or a bf16 model; memory-model.md §5.2). cuDNN's RNN reserve.
  bool run_precision = false;

  // "in1", "x (contiguous copy)", "mean(fp32) (autocast copy)".
  [[nodiscard]] std::string Describe() const;
};

struct AttentionCall;  // ops/attention.h
struct AttentionSite;

struct RuleContext {
  const core::Node& node;
  const core::BoundGraph& graph;
  // Per value id: does it require grad (a trainable parameter, or computed from one through
  // differentiable ops)? See RequiresGrad().
  const std::vector<bool>& requires_grad;
  // A fused attention op's call with the kernel chosen for it (ops/attention.h, ops/fusion.h);
  // nullptr: the default policy's (the math composite).
  const AttentionCall* attention = nullptr;
};

using SavedFn = void (*)(const RuleContext&, std::vector<SavedTensor>*);
using WorkspaceFn = uint64_t (*)(const RuleContext&);
// Describes a fused attention op's call (ops/attention.h); fills what the node says.
using AttentionSiteFn = void (*)(const RuleContext&, AttentionSite*);

struct OpRule {
  std::string_view domain;  // "" for ai.onnx
  std::string_view op_type;
  bool differentiable = true;
  bool view = false;  // output 0 aliases input 0's storage in PyTorch
  AmpPolicy amp = AmpPolicy::kPassThrough;
  SavedFn saved = nullptr;          // nullptr: saves nothing
  WorkspaceFn workspace = nullptr;  // nullptr: no forward workspace
  // A fused attention op (ONNX Attention, com.microsoft Attention/MultiHeadAttention/
  // GroupQueryAttention): how to describe its call, so that ops/attention.h picks its kernel.
  AttentionSiteFn attention_site = nullptr;
  std::string_view cite;    // e.g. "§3.2 relu" (docs/memory-model.md sections)
  InferFn infer = nullptr;  // shape/dtype rule; nullptr: outputs unknown (ONNX inference)
  // Runs on cuBLAS (GEMMs, einsum, RNN cells): the first such node on a thread creates that
  // thread's cuBLAS workspace (memory-model.md §2.3).
  bool uses_cublas = false;
  // Runs as a cuDNN convolution: every call (forward, and each backward call) allocates the
  // workspace of the algorithm cuDNN picks through the caching allocator and frees it after
  // (memory-model.md §2.5); its size is the stack's (memory/device.h, CudnnWorkspaceBytes).
  bool uses_cudnn_conv = false;
  // Runs as a cuDNN recurrent layer: its forward and its backward call each allocate a workspace
  // likewise (memory-model.md §2.6; memory/device.h, CudnnWorkspaceBytes).
  bool uses_cudnn_rnn = false;

  // The same rule with shape rule `fn`: `SavesOutput("Relu", ...).Infers(shape::Unary)`.
  constexpr OpRule Infers(InferFn fn) const {
    OpRule r = *this;
    r.infer = fn;
    return r;
  }
  constexpr OpRule UsesCublas() const {
    OpRule r = *this;
    r.uses_cublas = true;
    return r;
  }
  constexpr OpRule UsesCudnnConv() const {
    OpRule r = *this;
    r.uses_cudnn_conv = true;
    return r;
  }
  constexpr OpRule UsesCudnnRnn() const {
    OpRule r = *this;
    r.uses_cudnn_rnn = true;
    return r;
  }
  constexpr OpRule Allocates(WorkspaceFn fn) const {
    OpRule r = *this;
    r.workspace = fn;
    return r;
  }
  constexpr OpRule Attends(AttentionSiteFn fn) const {
    OpRule r = *this;
    r.attention_site = fn;
    return r;
  }
};

// A node's attributes by name, with their ONNX type checked: the default (nullopt) when the
// attribute is absent, of another type, or the node has no proto (a hand-built graph).
const onnx::AttributeProto* FindAttr(const core::Node& n, std::string_view name);
int64_t IntAttr(const core::Node& n, std::string_view name, int64_t def);
std::string StringAttr(const core::Node& n, std::string_view name, std::string_view def);
std::optional<std::vector<int64_t>> IntsAttr(const core::Node& n, std::string_view name);

// One ONNX recurrent layer (LSTM, GRU, RNN) as cuDNN sees it: from x [seq, batch, input]
// (layout 0) or [batch, seq, input] (layout 1) and W [directions, gates x hidden, input]; nullopt
// when a dim is unknown or the node is not recurrent.
struct RecurrentDims {
  uint64_t steps = 0;
  uint64_t batch = 0;
  uint64_t directions = 0;
  uint64_t hidden = 0;
};
std::optional<RecurrentDims> RecurrentDimsOf(const core::Node& node, core::MaybeDims x,
                                             core::MaybeDims w);
// What cuDNN's reserve space holds for that layer's backward, in bytes of `elem_size` elements
// (measured; the policy is SaveRecurrent's in rules.cc); nullopt when a dim is unknown.
std::optional<uint64_t> RecurrentReserveBytes(const core::Node& node, core::MaybeDims x,
                                              core::MaybeDims w, uint64_t elem_size);

// The rule for (domain, op_type), or nullptr. "ai.onnx" is treated as "".
const OpRule* FindRule(std::string_view domain, std::string_view op_type);
// The rule of a graph node, or nullptr: the one LoadModel resolved (core::Node::rule, no lookup
// by name), or FindRule's for a node it has not resolved.
const OpRule* RuleOf(const core::Node& node);
// The same for node `n` of `graph`, read from core::Graph::rules where ResolveRules filled it (a
// walk over every node reads 4 bytes a node there, not a cache line of core::Node each). Inline:
// the simulation asks it several times per node and iteration.
namespace internal {
extern const OpRule* const kRuleTable;  // the rules core::Node::rule indexes
}  // namespace internal
inline const OpRule* RuleOf(const core::Graph& graph, size_t n) {
  if (n >= graph.rules.size()) return RuleOf(graph.nodes[n]);
  const int32_t rule = graph.rules[n];
  return rule == core::Node::kNoRule ? nullptr : internal::kRuleTable + rule;
}
// Resolves core::Node::rule for every node of `graph` (LoadModel, once per model).
void ResolveRules(core::Graph* graph);

// Every rule, sorted by (domain, op_type).
std::span<const OpRule> AllRules();

// For ops without a rule: assume every input and output that requires grad is saved
// (conservative: over-estimates rather than under-estimates).
void ConservativeSaved(const RuleContext& ctx, std::vector<SavedTensor>* out);

// The tensors autograd would save for `node`: the rule's answer when the node takes part in
// autograd (some input requires grad), empty otherwise. Unknown ops use ConservativeSaved.
// `attention`: for a fused attention op, its call and kernel (RuleContext::attention).
std::vector<SavedTensor> SavedTensors(const core::Node& node, const core::BoundGraph& graph,
                                      const std::vector<bool>& requires_grad,
                                      const AttentionCall* attention = nullptr);
// The same list appended to `out` (whose earlier entries it leaves alone): no vector of its own.
void AppendSavedTensors(const core::Node& node, const core::BoundGraph& graph,
                        const std::vector<bool>& requires_grad, const AttentionCall* attention,
                        std::vector<SavedTensor>* out);

// The table against every ONNX default-domain operator (memest/coverage.h RuleCoverage, which
// this implements; `memest --show-coverage`).
OpCoverage OpsWithoutRules();

// Per value id: true for trainable parameters and for every output of a differentiable node
// (rule->differentiable, or unknown op) that has an input requiring grad and a float dtype.
// `trainable`: the parameters that require grad (per value id); nullptr: the loader's
// Value::trainable (every float parameter).
std::vector<bool> RequiresGrad(const core::BoundGraph& graph,
                               const std::vector<bool>* trainable = nullptr);

}  // namespace memest::ops

#endif  // MEMEST_OPS_RULES_H_
