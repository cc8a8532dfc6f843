// ops/rules.cc -- the per-op rule table (see ops/rules.h for the contract).
//
// Policy (sections cited are those of docs/memory-model.md):
//  * A rule describes PyTorch 2.x eager training on CUDA, not ONNX Runtime.
//    Its `cite` names the memory-model.md sections it rests on ("§3.2 relu"); a rule that no quoted
//    source backs says "INF" and why, to be confirmed by measurement.
//  * Saved tensors (memory-model.md §3): an input or output that autograd keeps is listed
//    by value id, and the backend decides what it costs (initializers such as
//    weights are resident anyway and skipped there; a saved output shares the
//    output's storage, memory-model.md §3.1). Tensors PyTorch keeps that the ONNX graph
//    does not hold (dropout mask, max-pool indices, norm statistics) are
//    "extra" tensors with a byte size. When the ONNX node exposes such a
//    tensor as an output of the dtype PyTorch uses, that output is listed
//    instead, so it is not counted twice.
//  * Conditional saving (memory-model.md §3.1, guard_for): an operand used only by the
//    other operand's gradient (mul, mm, matmul, div's numerator) is saved only
//    when that other operand requires grad. Multi-output formulas (conv,
//    batch/layer norm) save everything, always.
//  * Unknown shapes never crash a rule: an extra tensor whose size cannot be
//    computed (unknown dims, overflow in checked arithmetic) is left out; the
//    backend reports unknown shapes.
//  * RequiresGrad assumes an unknown dtype is floating point (over-estimate
//    rather than under-estimate).
//  * No workspace constants: forward workspaces (cuDNN, memory-model.md §2.5) depend on
//    the plan chosen at run time and must come from measurements. The one workspace a rule
//    states is the fused attention ops': tensors the source shows the chosen kernel allocating
//    and freeing within the call, sized from the node's shapes (ops/attention.h), never a
//    constant.
//  * Fused attention ops (ONNX Attention; ONNX Runtime's com.microsoft Attention,
//    MultiHeadAttention, GroupQueryAttention): the rule describes the node as one
//    scaled_dot_product_attention call (`attention_site`); ops/attention.h picks the kernel
//    under Options::attention (eager: the math composite) and says what it saves and
//    allocates (memory-model.md §3.5). ONNX Runtime graphs are costed as if PyTorch ran them.
//  * AMP policies follow the CUDA autocast op lists (memory-model.md §5.2); ops not
//    listed pass through.
//  * Ops without a rule are assumed differentiable and use ConservativeSaved.
//  * Adding an op: one entry in kRules (a family helper when one fits) and
//    one line in tests/unit/rules_test.cc (EveryRuleHasASignature); its
//    shape rule is `.Infers(shape::X)` on the entry (ops/shape_rules.h) and
//    one case in tests/unit/shape_rules_test.cc.
#include "ops/rules.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "base/checked.h"
#include "base/dtype.h"
#include "core/name_index.h"
#include "core/symbolic_shapes.h"
#include "ops/attention.h"

namespace memest::ops {

// Attributes (node.proto may be null for hand-built graphs: defaults apply).
const onnx::AttributeProto* FindAttr(const core::Node& n, std::string_view name) {
  if (n.proto == nullptr) return nullptr;
  for (const auto& a : n.proto->attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}
namespace {
// An attribute found (FindAttr) read as an int: `def` when absent or of another type.
int64_t IntOf(const onnx::AttributeProto* a, int64_t def) {
  return a != nullptr && a->type() == onnx::AttributeProto::INT ? a->i() : def;
}
}  // namespace
int64_t IntAttr(const core::Node& n, std::string_view name, int64_t def) {
  return IntOf(FindAttr(n, name), def);
}

std::optional<RecurrentDims> RecurrentDimsOf(const core::Node& node, core::MaybeDims x,
                                             core::MaybeDims w) {
  if (!x || !w || x->size() != 3 || w->size() != 3) return std::nullopt;
  // Rows of W per direction, in units of hidden: the gates of one step.
  const int64_t gates = node.op_type == "LSTM" ? 4 : node.op_type == "GRU" ? 3 : 1;
  const bool batch_first = IntAttr(node, "layout", 0) == 1;
  const int64_t steps = (*x)[batch_first ? 1 : 0], batch = (*x)[batch_first ? 0 : 1];
  const int64_t dirs = (*w)[0], rows = (*w)[1];
  if (steps < 0 || batch < 0 || dirs < 0 || rows < 0 || rows % gates != 0) return std::nullopt;
  return RecurrentDims{static_cast<uint64_t>(steps), static_cast<uint64_t>(batch),
                       static_cast<uint64_t>(dirs), static_cast<uint64_t>(rows / gates)};
}

std::optional<uint64_t> RecurrentReserveBytes(const core::Node& node, core::MaybeDims x,
                                              core::MaybeDims w, uint64_t elem_size) {
  const auto d = RecurrentDimsOf(node, x, w);
  if (!d) return std::nullopt;
  // Per step and once, in units of batch x directions x hidden (SaveRecurrent's policy).
  const bool lstm = node.op_type == "LSTM", gru = node.op_type == "GRU";
  const uint64_t per_step = lstm ? 5 : gru ? 6 : 1, once = lstm ? 2 : gru ? 1 : 0;
  auto n = base::CheckedMul(per_step, d->steps);
  if (n) n = base::CheckedAdd(*n, once);
  for (uint64_t f : {d->batch, d->directions, d->hidden, elem_size}) {
    if (n) n = base::CheckedMul(*n, f);
  }
  return n;
}

std::string StringAttr(const core::Node& n, std::string_view name, std::string_view def) {
  const onnx::AttributeProto* a = FindAttr(n, name);
  return a != nullptr && a->type() == onnx::AttributeProto::STRING ? a->s() : std::string(def);
}
std::optional<std::vector<int64_t>> IntsAttr(const core::Node& n, std::string_view name) {
  const onnx::AttributeProto* a = FindAttr(n, name);
  if (a == nullptr || a->type() != onnx::AttributeProto::INTS) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

namespace {

using core::BoundGraph;
using core::Node;

// -----------------------------------------------------------------------------
// Graph accessors that tolerate omitted values (-1), short vectors and unknown
// shapes.

int InputId(const RuleContext& c, size_t i) {
  return i < c.node.inputs.size() ? c.node.inputs[i] : -1;
}
int OutputId(const RuleContext& c, size_t i) {
  return i < c.node.outputs.size() ? c.node.outputs[i] : -1;
}

bool RequiresGradAt(const std::vector<bool>& rg, int id) {
  return id >= 0 && static_cast<size_t>(id) < rg.size() && rg[static_cast<size_t>(id)];
}
bool Rg(const RuleContext& c, int id) { return RequiresGradAt(c.requires_grad, id); }

// Bound dtype, falling back to the declared one; 0 when unknown.
int32_t DTypeOf(const BoundGraph& g, int id) {
  if (id < 0) return 0;
  const auto i = static_cast<size_t>(id);
  if (i < g.dtypes.size() && g.dtypes[i] != 0) return g.dtypes[i];
  if (g.graph != nullptr && i < g.graph->values.size()) return g.graph->values[i].dtype;
  return 0;
}

// Elements times element size, checked; nullopt when either is unknown or on
// overflow.
std::optional<uint64_t> TimesSize(std::optional<uint64_t> numel, uint64_t elem_size) {
  if (!numel || elem_size == 0) return std::nullopt;
  return base::CheckedMul(*numel, elem_size);
}

using core::DimProduct;

// Normalizes an ONNX axis attribute against `rank`; nullopt when out of range.
std::optional<size_t> NormalizeAxis(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) return std::nullopt;
  return static_cast<size_t>(axis);
}

// -----------------------------------------------------------------------------
// Building blocks for saved-tensor functions.

// `what` is a string literal (SavedTensor::what); `operand` follows it ("in", 1: "in1").
void SaveValue(std::vector<SavedTensor>* out, int id, std::string_view what, size_t operand) {
  if (id >= 0) out->push_back(SavedTensor{id, 0, what, static_cast<int32_t>(operand)});
}
void SaveValue(std::vector<SavedTensor>* out, int id, std::string_view what) {
  if (id >= 0) out->push_back(SavedTensor{id, 0, what});
}
void SaveExtra(std::vector<SavedTensor>* out, std::optional<uint64_t> bytes,
               std::string_view what) {
  if (bytes) out->push_back(SavedTensor{-1, *bytes, what});
}

// PyTorch keeps a tensor of `numel` elements of `dtype` that the ONNX node may
// expose as output `index`: list that output when present with the same dtype,
// else an extra tensor.
void SaveOutputOrExtra(const RuleContext& c, std::vector<SavedTensor>* out, size_t index,
                       int32_t dtype, std::optional<uint64_t> numel, std::string_view what) {
  const int id = OutputId(c, index);
  if (id >= 0 && DTypeOf(c.graph, id) == dtype) {
    SaveValue(out, id, what);
    return;
  }
  SaveExtra(out, TimesSize(numel, base::DTypeSize(dtype)), what);
}

template <int... I>
void SaveInputs(const RuleContext& c, std::vector<SavedTensor>* out) {
  (SaveValue(out, InputId(c, I), "in", static_cast<size_t>(I)), ...);
}

template <int... I>
void SaveOutputs(const RuleContext& c, std::vector<SavedTensor>* out) {
  (SaveValue(out, OutputId(c, I), "out", static_cast<size_t>(I)), ...);
}

template <int... I>
void SaveInputsAndOutputs(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveInputs<I...>(c, out);
  SaveOutputs<0>(c, out);
}

void SaveAllInputs(const RuleContext& c, std::vector<SavedTensor>* out) {
  for (size_t i = 0; i < c.node.inputs.size(); ++i) {
    SaveValue(out, c.node.inputs[i], "in", i);
  }
}

// Operand `i` of those listed is saved when any other listed operand requires
// grad (memory-model.md §3.1: mm(x, W) saves x only if W requires grad). Operands not
// listed (Gemm's C) are not saved.
template <int... I>
void SaveOperandsForOthers(const RuleContext& c, std::vector<SavedTensor>* out) {
  constexpr std::array<int, sizeof...(I)> kIdx{I...};
  for (int i : kIdx) {
    bool other = false;
    for (int j : kIdx) other = other || (j != i && Rg(c, InputId(c, static_cast<size_t>(j))));
    if (other) {
      SaveValue(out, InputId(c, static_cast<size_t>(i)), "in", static_cast<size_t>(i));
    }
  }
}

// Variadic form for Einsum. INF: einsum folds to bmm (memory-model.md §3.2 matmul), so
// each operand is kept for the other operands' gradients; a single operand
// keeps nothing (sum/permute/diagonal).
void SaveEinsumOperands(const RuleContext& c, std::vector<SavedTensor>* out) {
  const size_t n = c.node.inputs.size();
  for (size_t i = 0; i < n; ++i) {
    bool other = false;
    for (size_t j = 0; j < n; ++j) other = other || (j != i && Rg(c, c.node.inputs[j]));
    if (other) SaveValue(out, c.node.inputs[i], "in", i);
  }
}

// -----------------------------------------------------------------------------
// Op-specific saved-tensor functions.

// div(a, b): b is used by both gradients (always saved); a only by b's
// (memory-model.md §3.2 div).
void SaveDiv(const RuleContext& c, std::vector<SavedTensor>* out) {
  const int a = InputId(c, 0), b = InputId(c, 1);
  if (Rg(c, b)) SaveValue(out, a, "a");
  SaveValue(out, b, "b");
}

// pow(x, e): x always (memory-model.md §3.2 pow); INF: when the exponent requires grad,
// pow.Tensor_Tensor also keeps the result.
void SavePow(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  if (Rg(c, InputId(c, 1))) SaveValue(out, OutputId(c, 0), "y");
}

// Conv / ConvTranspose: input and weight, always (memory-model.md §3.2 conv2d). Bias:
// sizes only.
void SaveConv(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveValue(out, InputId(c, 1), "W");
}

// Max pooling keeps x and int64 indices of the output's shape (memory-model.md §3.2
// max_pool2d).
void SaveMaxPool(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveOutputOrExtra(c, out, 1, base::kInt64, c.graph.Numel(OutputId(c, 0)), "indices(int64)");
}

// torchvision roi_pool: keeps rois and the int64 argmax of every output element (INF).
void SaveMaxRoiPool(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 1), "rois");
  SaveExtra(out, TimesSize(c.graph.Numel(OutputId(c, 0)), 8), "argmax(int64)");
}

// Pad: constant_pad_nd's backward slices the gradient (nothing saved). INF:
// reflection and replication pads keep self (their backward kernels take it).
void SavePad(const RuleContext& c, std::vector<SavedTensor>* out) {
  std::string mode = StringAttr(c.node, "mode", "constant");
  if (mode != "constant") SaveValue(out, InputId(c, 0), "x");
}

bool BatchNormTraining(const Node& n) {
  if (const onnx::AttributeProto* a = FindAttr(n, "training_mode")) return IntOf(a, 0) != 0;
  if (n.opset >= 14) return false;
  // Opset < 14: a graph exported in training mode carries the running/saved
  // statistics outputs.
  int present = 0;
  for (int id : n.outputs) present += id >= 0;
  return present > 1;
}

// Channels of a BatchNormalization: dim 1 of x, else the length of scale.
std::optional<uint64_t> BatchNormChannels(const RuleContext& c) {
  if (const core::MaybeDims x = c.graph.shapes.Find(InputId(c, 0)); x && x->size() >= 2) {
    return DimProduct(*x, 1, 2);
  }
  if (const core::MaybeDims s = c.graph.shapes.Find(InputId(c, 1)); s && s->size() == 1) {
    return DimProduct(*s, 0, 1);
  }
  return std::nullopt;
}

// Whether BatchNormChannels reads a constant: dim 1 of x a constant in the symbolic shapes (no
// data dim moves it), else the scale, an initializer.
bool ConstantChannels(const RuleContext& c) {
  const core::SymbolicShapes* sym = c.graph.graph ? c.graph.graph->symbolic.get() : nullptr;
  const int x = InputId(c, 0);
  if (sym == nullptr || x < 0 || static_cast<size_t>(x) >= sym->types.size()) return false;
  const auto& shape = sym->types[static_cast<size_t>(x)].shape;
  if (shape && shape->size() >= 2) return (*shape)[1].IsConstant();
  const int scale = InputId(c, 1);
  return scale >= 0 && c.graph.graph->value(scale).kind == core::ValueKind::kInitializer;
}

// batch_norm: x and weight; in training also save_mean and save_invstd, fp32
// [C] (memory-model.md §3.2 batch_norm, §5.2). Opset 9-13 training graphs expose them as
// outputs 3 and 4. Inference-mode nodes keep x (the op is still
// differentiable).
void SaveBatchNorm(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveValue(out, InputId(c, 1), "W");
  if (!BatchNormTraining(c.node)) return;
  const std::optional<uint64_t> ch = BatchNormChannels(c);
  const bool legacy = c.node.opset < 14 && FindAttr(c.node, "training_mode") == nullptr;
  const size_t before = out->size();
  if (legacy) {
    SaveOutputOrExtra(c, out, 3, base::kFloat, ch, "save_mean(fp32)");
    SaveOutputOrExtra(c, out, 4, base::kFloat, ch, "save_invstd(fp32)");
  } else {
    SaveExtra(out, TimesSize(ch, 4), "save_mean(fp32)");
    SaveExtra(out, TimesSize(ch, 4), "save_invstd(fp32)");
  }
  if (!ConstantChannels(c)) return;
  for (size_t i = before; i < out->size(); ++i) (*out)[i].fixed = (*out)[i].value < 0;
}

// INF: instance_norm runs batch_norm in training mode on x viewed as
// [1, N*C, ...], so it keeps x plus save_mean/save_invstd of N*C fp32 each.
void SaveInstanceNorm(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveValue(out, InputId(c, 1), "W");
  std::optional<uint64_t> nc;
  if (const core::MaybeDims x = c.graph.shapes.Find(InputId(c, 0)); x && x->size() >= 2) {
    nc = DimProduct(*x, 0, 2);
  }
  SaveExtra(out, TimesSize(nc, 4), "save_mean(fp32)");
  SaveExtra(out, TimesSize(nc, 4), "save_invstd(fp32)");
}

// Rows of a normalization over the dims from `axis` on:
// M = prod(dims[0, axis)).
std::optional<uint64_t> LeadingRows(const RuleContext& c, int64_t axis_attr) {
  const core::MaybeDims x = c.graph.shapes.Find(InputId(c, 0));
  if (!x) return std::nullopt;
  const std::optional<size_t> axis = NormalizeAxis(axis_attr, x->size());
  if (!axis) return std::nullopt;
  return DimProduct(*x, 0, *axis);
}

// layer_norm: x, W, b, and mean/rstd of [M] in fp32 (memory-model.md §3.2 layer_norm).
// ONNX outputs 1 and 2 (Mean, InvStdDev) are those tensors when present in
// fp32.
void SaveLayerNorm(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveValue(out, InputId(c, 1), "W");
  SaveValue(out, InputId(c, 2), "b");
  const std::optional<uint64_t> m = LeadingRows(c, IntAttr(c.node, "axis", -1));
  SaveOutputOrExtra(c, out, 1, base::kFloat, m, "mean(fp32)");
  SaveOutputOrExtra(c, out, 2, base::kFloat, m, "rstd(fp32)");
}

// INF: rms_norm (fused or composite) keeps x, W and rstd of [M] in fp32, like
// layer_norm.
void SaveRmsNorm(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveValue(out, InputId(c, 1), "W");
  SaveExtra(out, TimesSize(LeadingRows(c, IntAttr(c.node, "axis", -1)), 4), "rstd(fp32)");
}

// INF: native_group_norm keeps x, W, and mean/rstd of [N, G] in fp32.
void SaveGroupNorm(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveValue(out, InputId(c, 1), "W");
  const int64_t groups = IntAttr(c.node, "num_groups", -1);
  std::optional<uint64_t> ng;
  if (const core::MaybeDims x = c.graph.shapes.Find(InputId(c, 0));
      x && !x->empty() && groups > 0) {
    if (auto n = DimProduct(*x, 0, 1)) ng = base::CheckedMul(*n, static_cast<uint64_t>(groups));
  }
  SaveExtra(out, TimesSize(ng, 4), "mean(fp32)");
  SaveExtra(out, TimesSize(ng, 4), "rstd(fp32)");
}

// Dropout in training keeps a bool mask of x's shape (memory-model.md §3.2 dropout).
// Training: the node has a mask output, or a training_mode input that is not a
// known false constant (opset >= 12).
void SaveDropout(const RuleContext& c, std::vector<SavedTensor>* out) {
  bool training = OutputId(c, 1) >= 0;
  const int mode = InputId(c, 2);
  if (!training && mode >= 0) {
    training = true;  // unknown at load time: assume training (over-estimate)
    const core::Graph* g = c.graph.graph;
    if (g != nullptr && static_cast<size_t>(mode) < g->values.size()) {
      const auto& data = g->value(mode).int_data;
      if (data) training = std::any_of(data->begin(), data->end(), [](int64_t v) { return v; });
    }
  }
  if (!training) return;
  SaveOutputOrExtra(c, out, 1, base::kBool, c.graph.Numel(InputId(c, 0)), "mask(bool)");
}

// What cuDNN keeps for the backward of one recurrent layer beside its inputs and outputs:
//  * its reserve space, in elements of the layer's dtype: (per_step x steps + once) x batch x
//    directions x hidden. Measured on an H200, cuDNN 9.19 (datasets/h200-torch211/rnn-truth.jsonl;
//    memory-model.md section 2.6): LSTM 5 per step (four gates and the cell state) + 2, GRU
//    6 + 1. RNN (tanh/relu) was not measured: its one gate per step.
//  * the weight buffer _cudnn_rnn returns and keeps (aten/src/ATen/native/cudnn/RNN.cpp): a copy
//    of W, R and B when the weights are separate tensors, as an ONNX graph's are and as
//    memest-measure passes them (measured: the weights' bytes), and in bfloat16 even for a
//    module's flattened weights. An fp32/fp16 nn.LSTM whose weights are already one buffer keeps
//    no copy: for it this over-states by the weights' bytes.
// LSTM/GRU/RNN (INF; _cudnn_rnn keeps input, weights, hx/cx, output, reserve and weight
// buffer): every input and output, plus the reserve and the weight buffer (above). The transient
// cuDNN workspace of the forward and backward calls is the stack's (memory/device.h).
void SaveRecurrent(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveAllInputs(c, out);
  for (size_t i = 0; i < c.node.outputs.size(); ++i) {
    SaveValue(out, c.node.outputs[i], "out", i);
  }
  // Both in the layer's run-time precision (SavedTensor::run_precision): half under autocast.
  auto keep = [&](std::optional<uint64_t> bytes, std::string_view what, bool fixed) {
    if (!bytes) return;
    SavedTensor t{-1, *bytes, what};
    t.run_precision = true;
    t.fixed = fixed;
    out->push_back(t);
  };
  const int x = InputId(c, 0);
  keep(RecurrentReserveBytes(c.node, c.graph.shapes.Find(x), c.graph.shapes.Find(InputId(c, 1)),
                             base::DTypeSize(DTypeOf(c.graph, x))),
       "reserve", /*fixed=*/false);
  std::optional<uint64_t> weights = 0;
  for (int i = 1; i <= 3 && weights; ++i) {  // W, R, B (B optional)
    const int id = InputId(c, i);
    if (id < 0) continue;
    const auto bytes = TimesSize(c.graph.Numel(id), base::DTypeSize(DTypeOf(c.graph, id)));
    weights = bytes ? base::CheckedAdd(*weights, *bytes) : std::nullopt;
  }
  if (weights != 0) keep(weights, "weight_buf", /*fixed=*/true);  // 0: no weight input at all
}

// INF: TopK keeps the int64 indices (output 1) for
// value_selecting_reduction_backward.
void SaveTopK(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, OutputId(c, 1), "indices");
}

// cross_entropy = log_softmax + nll_loss: keeps the log-probs (ONNX output 1
// when present), target and class weights (memory-model.md §3.2 cross_entropy).
void SaveSoftmaxCrossEntropy(const RuleContext& c, std::vector<SavedTensor>* out) {
  const int scores = InputId(c, 0);
  SaveOutputOrExtra(c, out, 1, DTypeOf(c.graph, scores), c.graph.Numel(scores), "log_prob");
  SaveValue(out, InputId(c, 1), "target");
  SaveValue(out, InputId(c, 2), "weight");
}

// -----------------------------------------------------------------------------
// Fused attention ops (ops/attention.h). Each site function describes its node as one
// scaled_dot_product_attention call -- q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] --
// naming the graph values that hold q, k, v and the output (or -1 for a tensor the op makes
// inside: a projection, a rotary embedding, a cache concatenated without a present output).
// SaveFusedAttention and AttentionWorkspace then ask the chosen kernel.

// Dim i of value `id`, when known and >= 0.
std::optional<uint64_t> DimAt(const RuleContext& c, int id, size_t i) {
  const core::MaybeDims s = c.graph.shapes.Find(id);
  if (!s || i >= s->size() || (*s)[i] < 0) return std::nullopt;
  return static_cast<uint64_t>((*s)[i]);
}
uint64_t Dim(const RuleContext& c, int id, size_t i) { return DimAt(c, id, i).value_or(0); }
size_t Rank(const RuleContext& c, int id) {
  const core::MaybeDims s = c.graph.shapes.Find(id);
  return s ? s->size() : 0;
}
// a / b when b divides a, else 0 (unknown).
uint64_t ExactDiv(uint64_t a, uint64_t b) { return b > 0 && a % b == 0 ? a / b : 0; }
// A head-count attribute, 0 when absent or absurd.
uint64_t Heads(const RuleContext& c, std::string_view name, int64_t def = 0) {
  const int64_t h = IntAttr(c.node, name, def);
  return h > 0 && h <= (int64_t{1} << 20) ? static_cast<uint64_t>(h) : 0;
}

void SetDims(AttentionSite* s, uint64_t b, uint64_t hq, uint64_t hkv, uint64_t l, uint64_t kv_len,
             uint64_t d, uint64_t dv) {
  s->batch = b;
  s->q_heads = hq;
  s->kv_heads = hkv;
  s->q_len = l;
  s->kv_len = kv_len;
  s->head_dim = d;
  s->v_head_dim = dv;
  s->known = b > 0 && hq > 0 && hkv > 0 && l > 0 && kv_len > 0 && d > 0 && dv > 0;
}
// q's element size as the graph types it (the caller applies the precision).
void SetElem(const RuleContext& c, int q, AttentionSite* s) {
  const int32_t dt = DTypeOf(c.graph, q);
  const uint64_t size = base::DTypeSize(dt);
  s->elem = size == 0 ? 4 : size;
  s->bf16 = dt == base::kBFloat16;
}
// An explicit mask or bias input; one not of a float type (bool, an int32 mask index) is
// converted by the fused kernels.
void AddMask(const RuleContext& c, int id, const char* what, AttentionSite* s) {
  if (id < 0) return;
  AttentionMask m;
  m.value = id;
  m.boolean = !base::IsFloatDType(DTypeOf(c.graph, id));
  m.what = what;
  if (const core::MaybeDims shape = c.graph.shapes.Find(id); shape && !shape->empty()) {
    m.numel = c.graph.Numel(id).value_or(0);
    m.last = shape->back() > 0 ? static_cast<uint64_t>(shape->back()) : 0;
  }
  s->masks.push_back(std::move(m));
}

// ONNX Attention (opset 23): Q, K, V [B, H, L, D] or [B, L, H*D] (q_num_heads, kv_num_heads),
// attn_mask, past_key/past_value [B, Hkv, P, D] concatenated into present_key/present_value.
void OnnxAttentionSite(const RuleContext& c, AttentionSite* s) {
  const int q = InputId(c, 0), k = InputId(c, 1), v = InputId(c, 2), past = InputId(c, 4);
  SetElem(c, q, s);
  s->causal = IntAttr(c.node, "is_causal", 0) != 0;
  AddMask(c, InputId(c, 3), "attn_mask", s);
  s->q = q;
  s->k = past >= 0 ? OutputId(c, 1) : k;
  s->v = InputId(c, 5) >= 0 ? OutputId(c, 2) : v;
  s->out = OutputId(c, 0);
  s->scores_output = OutputId(c, 3) >= 0;  // qk_matmul_output
  uint64_t hq = 0, hkv = 0, l = 0, sk = 0, d = 0, dv = 0;
  if (Rank(c, q) == 4) {  // [B, H, L, D]
    hq = Dim(c, q, 1);
    l = Dim(c, q, 2);
    d = Dim(c, q, 3);
    hkv = Dim(c, k, 1);
    sk = Dim(c, k, 2);
    dv = Dim(c, v, 3);
  } else if (Rank(c, q) == 3) {  // [B, L, H * D]
    hq = Heads(c, "q_num_heads");
    hkv = Heads(c, "kv_num_heads");
    l = Dim(c, q, 1);
    d = ExactDiv(Dim(c, q, 2), hq);
    sk = Dim(c, k, 1);
    dv = ExactDiv(Dim(c, v, 2), hkv);
  } else {
    return;
  }
  if (past >= 0) {
    const std::optional<uint64_t> p = DimAt(c, past, 2);
    if (!p) return;
    sk += *p;
  }
  SetDims(s, Dim(c, q, 0), hq, hkv, l, sk, d, dv);
}

// com.microsoft Attention: input [B, L, Din] times the packed weights [Din, Nq + Nk + Nv]
// (qkv_hidden_sizes, else thirds) inside the op; past [2, B, H, P, D] and present
// [2, B, H, P + L, D] hold keys and values together (bert_defs.cc).
void MsAttentionSite(const RuleContext& c, AttentionSite* s) {
  const int x = InputId(c, 0), w = InputId(c, 1), bias = InputId(c, 2), past = InputId(c, 4);
  SetElem(c, x, s);
  s->causal = IntAttr(c.node, "unidirectional", 0) != 0;
  AddMask(c, InputId(c, 3), "mask_index", s);
  AddMask(c, InputId(c, 5), "attn_bias", s);
  s->q = -1;  // the projection's output
  s->k = s->v = OutputId(c, 1);
  s->out = OutputId(c, 0);
  const uint64_t heads = Heads(c, "num_heads");
  uint64_t qh = 0, vh = 0;
  const std::optional<std::vector<int64_t>> sizes = IntsAttr(c.node, "qkv_hidden_sizes");
  if (sizes && sizes->size() == 3 && (*sizes)[0] > 0 && (*sizes)[2] > 0) {
    qh = static_cast<uint64_t>((*sizes)[0]);
    vh = static_cast<uint64_t>((*sizes)[2]);
  } else if (Rank(c, w) == 2) {
    qh = vh = ExactDiv(Dim(c, w, 1), 3);
  } else if (Rank(c, bias) == 1) {
    qh = vh = ExactDiv(Dim(c, bias, 0), 3);
  }
  if (Rank(c, x) != 3) return;
  const uint64_t l = Dim(c, x, 1);
  uint64_t total = l;
  if (past >= 0) {
    const std::optional<uint64_t> p = DimAt(c, past, 3);
    if (Rank(c, past) != 5 || !p) return;
    total = IntAttr(c.node, "past_present_share_buffer", 0) != 0 ? *p : *p + l;
  }
  SetDims(s, Dim(c, x, 0), heads, heads, l, total, ExactDiv(qh, heads), ExactDiv(vh, heads));
}

// com.microsoft MultiHeadAttention: query [B, L, H*D] or packed QKV [B, L, H, 3, D]; key
// [B, S, H*D], packed KV [B, S, H, 2, D] or already [B, H, S, D] (cross attention); a bias
// makes q, k, v new tensors; past_key [B, H, P, D] is concatenated into present_key, or shares
// its buffer when past_sequence_length is given.
void MultiHeadAttentionSite(const RuleContext& c, AttentionSite* s) {
  const int q = InputId(c, 0), k = InputId(c, 1), v = InputId(c, 2), past = InputId(c, 6);
  SetElem(c, q, s);
  s->causal = IntAttr(c.node, "unidirectional", 0) != 0;
  AddMask(c, InputId(c, 4), "key_padding_mask", s);
  AddMask(c, InputId(c, 5), "attn_bias", s);
  s->out = OutputId(c, 0);
  s->scores_output = OutputId(c, 3) >= 0;  // qk
  const uint64_t heads = Heads(c, "num_heads");
  const size_t rq = Rank(c, q), rk = Rank(c, k), rv = Rank(c, v);
  uint64_t d = 0, dv = 0, sk = 0;
  int qv = q, kv = k, vv = v;
  if (rq == 5) {  // packed QKV: q, k and v are views of the query input
    d = dv = Dim(c, q, 4);
    sk = Dim(c, q, 1);
    kv = vv = q;
  } else if (rq == 3) {
    d = ExactDiv(Dim(c, q, 2), heads);
    if (rk == 5) {  // packed KV: k and v are views of the key input
      sk = Dim(c, k, 1);
      dv = Dim(c, k, 4);
      vv = k;
    } else if (rk == 3 || rk == 4) {
      sk = Dim(c, k, rk == 3 ? 1 : 2);
      dv = rv == 3 ? ExactDiv(Dim(c, v, 2), heads) : rv == 4 ? Dim(c, v, 3) : 0;
    }
  } else {
    return;
  }
  const bool concat = past >= 0 && rk != 4;
  uint64_t total = sk;
  if (concat) {
    const std::optional<uint64_t> p = DimAt(c, past, 2);
    if (!p) return;
    total = InputId(c, 8) >= 0 ? *p : *p + sk;
  }
  if (InputId(c, 3) >= 0) qv = kv = vv = -1;  // q + bias, k + bias, v + bias
  s->q = qv;
  s->k = concat ? OutputId(c, 1) : kv;
  s->v = concat ? OutputId(c, 2) : vv;
  SetDims(s, Dim(c, q, 0), heads, heads, Dim(c, q, 1), total, d, dv);
}

// com.microsoft GroupQueryAttention: query [B, L, H*D] (or packed with key and value,
// [B, L, (H + 2 Hkv) * D]), key/value [B, L, Hkv*D], past_key [B, Hkv, P, D]; present_key /
// present_value are the cache the call attends over; do_rotary (or q_norm_weight) makes q and k
// inside. The combinations no SDPA call computes (softcap, smooth_softmax, a sliding window, a
// quantized cache) are refused by its shape rule.
void GroupQueryAttentionSite(const RuleContext& c, AttentionSite* s) {
  const int q = InputId(c, 0), k = InputId(c, 1), v = InputId(c, 2), past = InputId(c, 3);
  const int present_k = OutputId(c, 1), present_v = OutputId(c, 2);
  SetElem(c, q, s);
  s->causal = IntAttr(c.node, "causal", 1) != 0;
  AddMask(c, InputId(c, 10), "attn_bias", s);
  s->out = OutputId(c, 0);
  const uint64_t hq = Heads(c, "num_heads"), hkv = Heads(c, "kv_num_heads");
  s->scores_output = OutputId(c, 3) >= 0;  // output_qk
  const bool packed = k < 0;
  // do_rotary, or q_norm_weight/k_norm_weight (a per-head RMS norm): q and k made inside.
  const bool rotary = IntAttr(c.node, "do_rotary", 0) != 0 || InputId(c, 14) >= 0;
  s->q = packed || rotary ? -1 : q;
  s->k = present_k >= 0 ? present_k : packed || rotary ? -1 : k;
  s->v = present_v >= 0 ? present_v : packed ? -1 : v;
  if (Rank(c, q) != 3) return;
  const uint64_t d = packed ? ExactDiv(Dim(c, q, 2), hq + 2 * hkv) : ExactDiv(Dim(c, k, 2), hkv);
  const uint64_t sk = packed ? Dim(c, q, 1) : Dim(c, k, 1);
  uint64_t total = sk;
  if (const std::optional<uint64_t> t = DimAt(c, present_k, 2)) {
    total = *t;
  } else if (past >= 0) {
    const std::optional<uint64_t> p = DimAt(c, past, 2);
    if (!p) return;
    total = *p + sk;
  }
  SetDims(s, Dim(c, q, 0), hq, hkv, Dim(c, q, 1), total, d, d);
}

// What the chosen kernel keeps (ops/attention.h).
void SaveFusedAttention(const RuleContext& c, std::vector<SavedTensor>* out) {
  const std::optional<AttentionCall> call = AttentionCallOf(c);
  if (!call) return;
  const std::vector<SavedTensor> saved = AttentionKernelSaved(call->kernel, call->site);
  out->insert(out->end(), saved.begin(), saved.end());
}

// com.microsoft Attention projects its input first: linear keeps x and W (memory-model.md §3.2
// linear), then the attention kernel's list.
void SaveMsAttention(const RuleContext& c, std::vector<SavedTensor>* out) {
  SaveValue(out, InputId(c, 0), "x");
  SaveValue(out, InputId(c, 1), "W");
  SaveFusedAttention(c, out);
}

// What the chosen kernel allocates and frees within the call (ops/attention.h).
uint64_t AttentionWorkspace(const RuleContext& c) {
  const std::optional<AttentionCall> call = AttentionCallOf(c);
  return call ? AttentionKernelWorkspace(call->kernel, call->site) : 0;
}

// -----------------------------------------------------------------------------
// Families: most ops are one line.

constexpr AmpPolicy kPass = AmpPolicy::kPassThrough;
constexpr AmpPolicy kLow = AmpPolicy::kLowerPrecision;
constexpr AmpPolicy kFp32 = AmpPolicy::kFp32;
constexpr AmpPolicy kPromote = AmpPolicy::kPromote;

constexpr OpRule Saves(std::string_view op, SavedFn fn, std::string_view cite,
                       AmpPolicy amp = kPass) {
  return OpRule{.domain = "", .op_type = op, .amp = amp, .saved = fn, .cite = cite};
}
// An ONNX Runtime contrib op (domain com.microsoft).
constexpr OpRule MsSaves(std::string_view op, SavedFn fn, std::string_view cite,
                         AmpPolicy amp = kPass) {
  return OpRule{.domain = "com.microsoft", .op_type = op, .amp = amp, .saved = fn, .cite = cite};
}
// Backward needs the result (relu, sigmoid, tanh, exp, sqrt, softmax, ...).
constexpr OpRule SavesOutput(std::string_view op, std::string_view cite, AmpPolicy amp = kPass) {
  return Saves(op, SaveOutputs<0>, cite, amp);
}
// Backward needs the input (gelu, erf, log, pow, trig, most activations, avg
// pool).
constexpr OpRule SavesInput(std::string_view op, std::string_view cite, AmpPolicy amp = kPass) {
  return Saves(op, SaveInputs<0>, cite, amp);
}
// Backward needs input and result (amax, prod, norms, logsumexp).
constexpr OpRule SavesInputOutput(std::string_view op, std::string_view cite,
                                  AmpPolicy amp = kPass) {
  return Saves(op, SaveInputsAndOutputs<0>, cite, amp);
}
// Linear in its inputs: backward needs sizes only (add, sum, cat, cast, ...).
constexpr OpRule SavesNothing(std::string_view op, std::string_view cite, AmpPolicy amp = kPass) {
  return Saves(op, nullptr, cite, amp);
}
// Output 0 is a view of input 0; nothing saved (memory-model.md §3.1 views).
constexpr OpRule View(std::string_view op, std::string_view cite) {
  return OpRule{.domain = "", .op_type = op, .view = true, .cite = cite};
}
// No gradient flows: integer, bool, shape or piecewise-constant outputs.
constexpr OpRule NoGrad(std::string_view op, std::string_view cite) {
  return OpRule{.domain = "", .op_type = op, .differentiable = false, .cite = cite};
}

constexpr std::string_view kIntOut = "INF: integer/bool output, no gradient";
constexpr std::string_view kShapeOut = "§3.1 sizes are not tensors; INF: no gradient";
constexpr std::string_view kStepOut = "INF: piecewise constant, zero gradient";
constexpr std::string_view kRandom = "INF: random generator, no gradient";
constexpr std::string_view kQuant = "INF: quantized (integer) op, not trained";

constexpr bool RuleLess(const OpRule& a, const OpRule& b) {
  return std::tie(a.domain, a.op_type) < std::tie(b.domain, b.op_type);
}

constexpr auto kRules = [] {
  std::array rules{
      // -- Saves its output (memory-model.md §3.2: relu, sigmoid, tanh, softmax,
      // log_softmax, exp, sqrt).
      SavesOutput("Relu", "§3.2 relu").Infers(shape::Unary),
      SavesOutput("Sigmoid", "§3.2 sigmoid").Infers(shape::Unary),
      SavesOutput("Tanh", "§3.2 tanh").Infers(shape::Unary),
      SavesOutput("Exp", "§3.2 exp; §5.2 FP32", kFp32).Infers(shape::Unary),
      SavesOutput("Sqrt", "§3.2 sqrt").Infers(shape::Unary),
      SavesOutput("Reciprocal", "INF: grad * -result^2 (like §3.2 sqrt); §5.2 FP32", kFp32)
          .Infers(shape::Unary),
      SavesOutput("Softmax", "§3.2 softmax; §5.2 FP32_SET_OPT_DTYPE", kFp32).Infers(shape::Unary),
      SavesOutput("LogSoftmax", "§3.2 log_softmax; §5.2 FP32_SET_OPT_DTYPE", kFp32)
          .Infers(shape::Unary),
      SavesOutput("Tan", "INF: grad * (1 + result^2); §5.2 FP32", kFp32).Infers(shape::Unary),
      SavesOutput("ReduceLogSum", "INF: log(sum(x)) keeps the sum, sized like y; §5.2 FP32", kFp32)
          .Infers(shape::Reduce),

      // -- Saves its input (memory-model.md §3.2: gelu, silu, pow).
      SavesInput("Gelu", "§3.2 gelu").Infers(shape::Unary),
      SavesInput("Erf", "INF: grad * exp(-x^2) needs x (like §3.2 gelu)").Infers(shape::Unary),
      SavesInput("Log", "INF: grad / x needs x; §5.2 FP32", kFp32).Infers(shape::Unary),
      SavesInput("Sin", "INF: grad * cos(x) needs x").Infers(shape::Unary),
      SavesInput("Cos", "INF: grad * -sin(x) needs x").Infers(shape::Unary),
      SavesInput("Asin", "INF: needs x; §5.2 FP32", kFp32).Infers(shape::Unary),
      SavesInput("Acos", "INF: needs x; §5.2 FP32", kFp32).Infers(shape::Unary),
      SavesInput("Atan", "INF: needs x").Infers(shape::Unary),
      SavesInput("Sinh", "INF: needs x; §5.2 FP32", kFp32).Infers(shape::Unary),
      SavesInput("Cosh", "INF: needs x; §5.2 FP32", kFp32).Infers(shape::Unary),
      SavesInput("Asinh", "INF: needs x").Infers(shape::Unary),
      SavesInput("Acosh", "INF: needs x").Infers(shape::Unary),
      SavesInput("Atanh", "INF: needs x").Infers(shape::Unary),
      SavesInput("Abs", "INF: grad * sgn(x) needs x").Infers(shape::Abs),
      SavesInput("LeakyRelu", "INF: leaky_relu_backward(grad, self) like §3.2 gelu")
          .Infers(shape::Unary),
      SavesInput("Elu", "INF: elu_backward(..., self) (out of place)").Infers(shape::Unary),
      SavesInput("Selu", "INF: selu is elu with scales, keeps x").Infers(shape::Unary),
      SavesInput("Celu", "INF: celu is elu with scales, keeps x").Infers(shape::Unary),
      SavesInput("Softplus", "INF: softplus_backward(grad, self); §5.2 FP32", kFp32)
          .Infers(shape::Unary),
      SavesInput("Softsign", "INF: composite x/(1+|x|), keeps x").Infers(shape::Unary),
      SavesInput("HardSigmoid", "INF: hardsigmoid_backward(grad, self)").Infers(shape::Unary),
      SavesInput("HardSwish", "INF: hardswish_backward(grad, self)").Infers(shape::Unary),
      SavesInput("Mish", "INF: mish_backward(grad, self) like §3.2 silu").Infers(shape::Unary),
      SavesInput("ThresholdedRelu", "INF: threshold_backward(grad, self, alpha)")
          .Infers(shape::Unary),
      SavesInput("Shrink", "INF: hard/softshrink_backward(grad, self)").Infers(shape::Unary),
      SavesInput("Clip", "INF: clamp_backward(grad, self, min, max)").Infers(shape::Clip),
      SavesInput("AveragePool", "§3.2 avg_pool2d").Infers(shape::Pool),
      SavesInput("MeanVarianceNormalization", "INF: composite, conservatively keeps x")
          .Infers(shape::Unary),
      SavesInput("ReduceL1", "INF: grad * sgn(x) needs x; §5.2 norms FP32", kFp32)
          .Infers(shape::Reduce),
      SavesInput("ReduceSumSquare", "INF: pow(x, 2) keeps x (§3.2 pow); §5.2 FP32", kFp32)
          .Infers(shape::Reduce),

      // -- Saves input and output.
      SavesInputOutput("ReduceMax", "INF: amax backward compares x with result")
          .Infers(shape::Reduce),
      SavesInputOutput("ReduceMin", "INF: amin backward compares x with result")
          .Infers(shape::Reduce),
      SavesInputOutput("ReduceProd", "INF: prod_backward(grad, self, result); §5.2 FP32", kFp32)
          .Infers(shape::Reduce),
      SavesInputOutput("ReduceL2", "INF: norm_backward(grad, self, p, result); §5.2 FP32", kFp32)
          .Infers(shape::Reduce),
      SavesInputOutput("ReduceLogSumExp", "INF: logsumexp_backward(grad, self, result); §5.2 FP32",
                       kFp32)
          .Infers(shape::Reduce),
      SavesInputOutput("LpNormalization", "INF: x / norm keeps x and the norm; §5.2 norms FP32",
                       kFp32)
          .Infers(shape::Unary),
      SavesInputOutput("LRN", "INF: composite (pow, avg_pool, div), keeps x and y")
          .Infers(shape::Unary),
      SavesInputOutput("LpPool", "INF: composite (pow, avg_pool, pow), keeps x and y")
          .Infers(shape::Pool),
      SavesInputOutput("GlobalLpPool", "INF: composite (pow, avg_pool, pow), keeps x and y")
          .Infers(shape::GlobalPool),

      // -- Saves nothing (linear ops: memory-model.md §3.2 add/sub, sum/mean, cat,
      // clone/_to_copy).
      SavesNothing("Add", "§3.2 add").Infers(shape::Add),
      SavesNothing("Sub", "§3.2 sub").Infers(shape::Sub),
      SavesNothing("Neg", "INF: -grad, nothing saved (like §3.2 sub)").Infers(shape::Neg),
      SavesNothing("Sum", "§3.2 add (variadic)").Infers(shape::Variadic),
      SavesNothing("Mean", "§3.2 add, mean (variadic)").Infers(shape::Variadic),
      SavesNothing("ReduceSum", "§3.2 sum; §5.2 FP32_SET_OPT_DTYPE", kFp32).Infers(shape::Reduce),
      SavesNothing("ReduceMean", "§3.2 mean").Infers(shape::Reduce),
      SavesNothing("Concat", "§3.2 cat").Infers(shape::Concat),
      SavesNothing("Cast", "§3.2 _to_copy").Infers(shape::Cast),
      SavesNothing("CastLike", "§3.2 _to_copy").Infers(shape::CastLike),
      SavesNothing("GlobalAveragePool", "§3.2 adaptive_avg_pool2d (1,1)").Infers(shape::GlobalPool),
      SavesNothing("Tile", "INF: repeat_backward needs sizes only").Infers(shape::Tile),
      SavesNothing("Trilu", "INF: triu/tril backward masks grad, sizes only").Infers(shape::Unary),
      SavesNothing("CumSum", "INF: reversed cumsum of grad; §5.2 FP32_SET_OPT_DTYPE", kFp32)
          .Infers(shape::Unary),
      SavesNothing("DepthToSpace", "INF: reshape+permute copy, nothing saved")
          .Infers(shape::DepthToSpace),
      SavesNothing("SpaceToDepth", "INF: reshape+permute copy, nothing saved")
          .Infers(shape::SpaceToDepth),
      SavesNothing("Mod", "INF: fmod/remainder grad is grad").Infers(shape::Mod),
      SavesNothing("Resize", "INF: upsample_* backward needs sizes only; §5.2 FP32 upsample_*",
                   kFp32)
          .Infers(shape::Resize),
      SavesNothing("Upsample", "INF: upsample_* backward needs sizes only; §5.2 FP32 upsample_*",
                   kFp32)
          .Infers(shape::Resize),

      // -- Views of input 0 (memory-model.md §3.1 views; reshape copies only when not
      // viewable).
      View("Reshape", "§3.1 views reshape").Infers(shape::Reshape),
      View("Flatten", "§3.1 views flatten").Infers(shape::Flatten),
      View("Squeeze", "§3.1 views squeeze").Infers(shape::Squeeze),
      View("Unsqueeze", "§3.1 views unsqueeze").Infers(shape::Unsqueeze),
      View("Transpose", "§3.1 views permute").Infers(shape::Transpose),
      View("Expand", "§3.1 views expand").Infers(shape::Expand),
      View("Identity", "§3.1 views alias").Infers(shape::Identity),
      View("Slice", "§3.1 views slice").Infers(shape::Slice),
      View("Split", "§3.1 views split").Infers(shape::Split),

      // -- Operand products: each operand kept for the other's gradient
      // (memory-model.md §3.1 guard_for).
      Saves("Mul", SaveOperandsForOthers<0, 1>, "§3.2 mul; §3.1 guard_for").Infers(shape::Mul),
      Saves("MatMul", SaveOperandsForOthers<0, 1>, "§3.2 matmul; §3.1; §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::MatMul)
          .UsesCublas(),
      Saves("Gemm", SaveOperandsForOthers<0, 1>, "§3.2 linear (addmm); §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::Gemm)
          .UsesCublas(),
      Saves("Einsum", SaveEinsumOperands, "INF: folds to bmm (§3.2); §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::Einsum)
          .UsesCublas(),
      Saves("Div", SaveDiv, "§3.2 div").Infers(shape::Div),
      Saves("Pow", SavePow, "§3.2 pow; §5.2 FP32", kFp32).Infers(shape::Arith),

      // -- Inputs kept by their backward.
      Saves("Conv", SaveConv, "§3.2 conv2d; §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::Conv)
          .UsesCudnnConv(),
      Saves("ConvTranspose", SaveConv, "§3.2 conv2d (convolution); §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::ConvTranspose)
          .UsesCudnnConv(),
      Saves("PRelu", SaveInputs<0, 1>, "INF: prelu backward needs x, slope; §5.2 LOWER_PRECISION",
            kLow)
          .Infers(shape::Unary),
      Saves("Where", SaveInputs<0>, "INF: where(cond, grad, 0) keeps the bool condition")
          .Infers(shape::Where),
      Saves("Gather", SaveInputs<1>, "§3.2 embedding (indices only)").Infers(shape::Gather),
      Saves("GatherElements", SaveInputs<1>, "§3.2 embedding; INF: gather keeps index")
          .Infers(shape::GatherElements),
      Saves("GatherND", SaveInputs<1>, "§3.2 embedding; INF: index keeps indices")
          .Infers(shape::GatherND),
      Saves("ScatterElements", SaveInputs<1>, "INF: scatter backward gathers by index")
          .Infers(shape::Scatter),
      Saves("Scatter", SaveInputs<1>, "INF: scatter backward gathers by index")
          .Infers(shape::Scatter),
      Saves("ScatterND", SaveInputs<1>, "INF: index_put backward indexes; §5.2 PROMOTE index_put",
            kPromote)
          .Infers(shape::Scatter),
      Saves("Compress", SaveInputs<1>, "INF: index_select/masked_select keeps the selector")
          .Infers(shape::Compress),
      Saves("Max", SaveAllInputs, "INF: maximum backward compares the inputs")
          .Infers(shape::Variadic),
      Saves("Min", SaveAllInputs, "INF: minimum backward compares the inputs")
          .Infers(shape::Variadic),
      Saves("GridSample", SaveInputs<0, 1>,
            "INF: grid_sampler_2d_backward(grad, input, grid); §5.2 PROMOTE", kPromote)
          .Infers(shape::GridSample),
      Saves("NegativeLogLikelihoodLoss", SaveInputs<0, 1, 2>,
            "§3.2 cross_entropy (nll_loss); §5.2 FP32 nll_loss", kFp32)
          .Infers(shape::NegativeLogLikelihoodLoss),
      Saves("SoftmaxCrossEntropyLoss", SaveSoftmaxCrossEntropy,
            "§3.2 cross_entropy; §5.2 FP32 nll_loss (INF)", kFp32)
          .Infers(shape::SoftmaxCrossEntropyLoss),
      Saves("RoiAlign", SaveInputs<1, 2>,
            "INF: torchvision roi_align backward keeps rois and batch indices (shape of x only); "
            "5.2 PROMOTE",
            kPromote)
          .Infers(shape::RoiAlign),
      Saves("MaxRoiPool", SaveMaxRoiPool,
            "INF: torchvision roi_pool keeps rois and int64 argmax of the output's size")
          .Infers(shape::RoiAlign),
      Saves("ReverseSequence", SaveInputs<1>,
            "INF: backward reverses grad by the saved sequence lengths")
          .Infers(shape::Unary),
      Saves("TopK", SaveTopK, "INF: value_selecting_reduction_backward keeps indices")
          .Infers(shape::TopK),
      Saves("Pad", SavePad, "INF: constant pad keeps nothing; reflect/edge keep x")
          .Infers(shape::Pad),

      // -- Pooling with indices, normalizations, dropout (extra tensors).
      Saves("MaxPool", SaveMaxPool, "§3.2 max_pool2d").Infers(shape::Pool),
      Saves("GlobalMaxPool", SaveMaxPool, "INF: adaptive_max_pool2d keeps x and indices (3.2)")
          .Infers(shape::GlobalPool),
      Saves("MaxUnpool", SaveInputs<1>,
            "INF: max_unpool backward gathers the gradient at the saved indices")
          .Infers(shape::MaxUnpool),
      Saves("BatchNormalization", SaveBatchNorm, "§3.2 batch_norm; §5.2 not in FP32 list")
          .Infers(shape::BatchNorm),
      Saves("InstanceNormalization", SaveInstanceNorm,
            "INF: batch_norm on [1, N*C, ...] (§3.2 batch_norm)")
          .Infers(shape::Unary),
      Saves("LayerNormalization", SaveLayerNorm, "§3.2 layer_norm; §5.2 FP32", kFp32)
          .Infers(shape::LayerNorm),
      Saves("GroupNormalization", SaveGroupNorm,
            "INF: like §3.2 layer_norm, stats [N, G]; §5.2 FP32 group_norm", kFp32)
          .Infers(shape::Unary),
      Saves("RMSNormalization", SaveRmsNorm, "INF: like §3.2 layer_norm, rstd only")
          .Infers(shape::Unary),
      Saves("Dropout", SaveDropout, "§3.2 dropout").Infers(shape::Dropout),
      Saves("Attention", SaveFusedAttention, "§3.2 SDPA rows; §3.5; §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::Attention)
          .Attends(OnnxAttentionSite)
          .Allocates(AttentionWorkspace),

      // -- Recurrent (cuDNN; measured, memory-model.md §2.6).
      Saves("LSTM", SaveRecurrent, "INF: all inputs/outputs + cuDNN reserve; §2.6; §5.2 RNN cells",
            kLow)
          .Infers(shape::Recurrent)
          .UsesCublas()
          .UsesCudnnRnn(),
      Saves("GRU", SaveRecurrent, "INF: all inputs/outputs + cuDNN reserve; §2.6; §5.2 RNN cells",
            kLow)
          .Infers(shape::Recurrent)
          .UsesCublas()
          .UsesCudnnRnn(),
      Saves("RNN", SaveRecurrent, "INF: all inputs/outputs + cuDNN reserve; §2.6; §5.2 RNN cells",
            kLow)
          .Infers(shape::Recurrent)
          .UsesCublas()
          .UsesCudnnRnn(),

      // -- No gradient.
      NoGrad("Shape", kShapeOut).Infers(shape::Shape),
      NoGrad("Size", kShapeOut).Infers(shape::Size),
      NoGrad("Equal", kIntOut).Infers(shape::Compare),
      NoGrad("Less", kIntOut).Infers(shape::Compare),
      NoGrad("LessOrEqual", kIntOut).Infers(shape::Compare),
      NoGrad("Greater", kIntOut).Infers(shape::Compare),
      NoGrad("GreaterOrEqual", kIntOut).Infers(shape::Compare),
      NoGrad("And", kIntOut).Infers(shape::Logical),
      NoGrad("Or", kIntOut).Infers(shape::Logical),
      NoGrad("Xor", kIntOut).Infers(shape::Logical),
      NoGrad("Not", kIntOut).Infers(shape::Not),
      NoGrad("IsNaN", kIntOut).Infers(shape::BoolUnary),
      NoGrad("IsInf", kIntOut).Infers(shape::BoolUnary),
      NoGrad("NonZero", kIntOut).Infers(shape::NonZero),
      NoGrad("ArgMax", kIntOut).Infers(shape::ArgReduce),
      NoGrad("ArgMin", kIntOut).Infers(shape::ArgReduce),
      NoGrad("Unique", kIntOut).Infers(shape::Unique),
      NoGrad("NonMaxSuppression", kIntOut).Infers(shape::NonMaxSuppression),
      NoGrad("BitShift", kIntOut).Infers(shape::Arith),
      NoGrad("BitwiseAnd", kIntOut).Infers(shape::Arith),
      NoGrad("BitwiseOr", kIntOut).Infers(shape::Arith),
      NoGrad("BitwiseXor", kIntOut).Infers(shape::Arith),
      NoGrad("BitwiseNot", kIntOut).Infers(shape::Unary),
      NoGrad("Hardmax", kStepOut).Infers(shape::Unary),
      NoGrad("Floor", kStepOut).Infers(shape::Rounding),
      NoGrad("Ceil", kStepOut).Infers(shape::Rounding),
      NoGrad("Round", kStepOut).Infers(shape::Rounding),
      NoGrad("Sign", kStepOut).Infers(shape::Unary),
      NoGrad("Range", kShapeOut).Infers(shape::Range),
      NoGrad("ConstantOfShape", kShapeOut).Infers(shape::ConstantOfShape),
      NoGrad("Constant", "INF: constant, no gradient").Infers(shape::Constant),
      NoGrad("OneHot", kIntOut).Infers(shape::OneHot),
      NoGrad("EyeLike", kShapeOut).Infers(shape::LikeWithDtype),
      NoGrad("RandomNormal", kRandom).Infers(shape::RandomShape),
      NoGrad("RandomNormalLike", kRandom).Infers(shape::LikeWithDtype),
      NoGrad("RandomUniform", kRandom).Infers(shape::RandomShape),
      NoGrad("RandomUniformLike", kRandom).Infers(shape::LikeWithDtype),
      NoGrad("Bernoulli", kRandom).Infers(shape::LikeWithDtype),
      NoGrad("Multinomial", kRandom).Infers(shape::Multinomial),
      NoGrad("QuantizeLinear", kQuant).Infers(shape::QuantizeLinear),
      NoGrad("DequantizeLinear", kQuant).Infers(shape::DequantizeLinear),
      NoGrad("DynamicQuantizeLinear", kQuant).Infers(shape::DynamicQuantizeLinear),
      NoGrad("MatMulInteger", kQuant).Infers(shape::MatMulInteger),
      NoGrad("ConvInteger", kQuant).Infers(shape::ConvInteger),
      NoGrad("QLinearConv", kQuant).Infers(shape::QLinearConv),
      NoGrad("QLinearMatMul", kQuant).Infers(shape::QLinearMatMul),

      // -- ONNX Runtime contrib ops (com.microsoft), costed as the SDPA call they make.
      MsSaves("Attention", SaveMsAttention, "§3.2 linear, SDPA rows; §3.5; §5.2 LOWER_PRECISION",
              kLow)
          .Infers(shape::MsAttention)
          .Attends(MsAttentionSite)
          .Allocates(AttentionWorkspace)
          .UsesCublas(),
      MsSaves("MultiHeadAttention", SaveFusedAttention,
              "§3.2 SDPA rows; §3.5; §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::MultiHeadAttention)
          .Attends(MultiHeadAttentionSite)
          .Allocates(AttentionWorkspace),
      MsSaves("GroupQueryAttention", SaveFusedAttention,
              "§3.2 SDPA rows; §3.5; §5.2 LOWER_PRECISION", kLow)
          .Infers(shape::GroupQueryAttention)
          .Attends(GroupQueryAttentionSite)
          .Allocates(AttentionWorkspace),
  };
  std::sort(rules.begin(), rules.end(), RuleLess);
  return rules;
}();

constexpr bool StrictlySorted() {
  for (size_t i = 1; i < kRules.size(); ++i) {
    if (!RuleLess(kRules[i - 1], kRules[i])) return false;
  }
  return true;
}
static_assert(StrictlySorted(), "duplicate op in the rule table");

// The rules of the default domain by op type: every pass over a graph asks for each node's rule
// (the shape pass, requires-grad, saved tensors, fusion), and one probe of a flat hash table
// (core/name_index.h) beats the binary search's eight string compares. Other domains (a handful of
// rules) keep the binary search.
core::NameIndex DefaultDomainIndex() {
  core::NameIndex index;
  index.Reserve(kRules.size());
  for (size_t i = 0; i < kRules.size(); ++i) {
    if (kRules[i].domain.empty()) index.Insert(kRules[i].op_type, static_cast<int>(i));
  }
  return index;
}

}  // namespace

const OpRule* FindRule(std::string_view domain, std::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  if (domain.empty()) {
    static const core::NameIndex* index = new core::NameIndex(DefaultDomainIndex());
    const int i = index->Find(op_type);
    return i < 0 ? nullptr : &kRules[static_cast<size_t>(i)];
  }
  OpRule key;
  key.domain = domain;
  key.op_type = op_type;
  auto it = std::lower_bound(kRules.begin(), kRules.end(), key, RuleLess);
  if (it == kRules.end() || it->domain != domain || it->op_type != op_type) return nullptr;
  return &*it;
}

const OpRule* RuleOf(const core::Node& node) {
  if (node.rule == core::Node::kRuleUnresolved) return FindRule(node.domain, node.op_type);
  if (node.rule == core::Node::kNoRule) return nullptr;
  return &kRules[static_cast<size_t>(node.rule)];
}

void ResolveRules(core::Graph* graph) {
  graph->rules.clear();
  graph->rules.reserve(graph->nodes.size());
  for (core::Node& node : graph->nodes) {
    const OpRule* rule = FindRule(node.domain, node.op_type);
    node.rule = rule == nullptr ? core::Node::kNoRule : static_cast<int32_t>(rule - kRules.data());
    graph->rules.push_back(node.rule);
  }
}

std::span<const OpRule> AllRules() { return kRules; }
const OpRule* const internal::kRuleTable = kRules.data();

OpCoverage OpsWithoutRules() {
  // get_all_schemas() holds the newest version of each (name, domain).
  const std::vector<onnx::OpSchema> schemas = onnx::OpSchemaRegistry::get_all_schemas();
  std::map<std::string, const onnx::OpSchema*> newest;
  for (const onnx::OpSchema& s : schemas) {
    if (!s.domain().empty() && s.domain() != "ai.onnx") continue;
    if (s.Deprecated() || s.support_level() == onnx::OpSchema::SupportType::EXPERIMENTAL) {
      continue;
    }
    newest.emplace(s.Name(), &s);
  }
  OpCoverage c;
  for (const auto& [name, schema] : newest) {
    c.onnx_ops.push_back(name);
    const OpRule* rule = FindRule("", name);
    if (rule == nullptr) c.without_rule.push_back(name);
    if (rule == nullptr || rule->infer == nullptr) c.without_shape_rule.push_back(name);
  }
  c.rules = static_cast<int>(kRules.size());
  return c;
}

void ConservativeSaved(const RuleContext& ctx, std::vector<SavedTensor>* out) {
  for (size_t i = 0; i < ctx.node.inputs.size(); ++i) {
    const int id = ctx.node.inputs[i];
    if (Rg(ctx, id)) SaveValue(out, id, "in", i);
  }
  for (size_t i = 0; i < ctx.node.outputs.size(); ++i) {
    const int id = ctx.node.outputs[i];
    if (Rg(ctx, id)) SaveValue(out, id, "out", i);
  }
}

std::string SavedTensor::Describe() const {
  std::string s(what);
  if (operand >= 0) s += std::to_string(operand);
  if (copy == Copy::kContiguous) s += " (contiguous copy)";
  if (copy == Copy::kAutocast) s += " (autocast copy)";
  return s;
}

std::vector<SavedTensor> SavedTensors(const core::Node& node, const core::BoundGraph& graph,
                                      const std::vector<bool>& requires_grad,
                                      const AttentionCall* attention) {
  std::vector<SavedTensor> saved;
  AppendSavedTensors(node, graph, requires_grad, attention, &saved);
  return saved;
}

void AppendSavedTensors(const core::Node& node, const core::BoundGraph& graph,
                        const std::vector<bool>& requires_grad, const AttentionCall* attention,
                        std::vector<SavedTensor>* out) {
  // memory-model.md §3.1: autograd records nothing when no input requires grad.
  const bool active = std::any_of(node.inputs.begin(), node.inputs.end(),
                                  [&](int id) { return RequiresGradAt(requires_grad, id); });
  if (!active) return;
  const OpRule* rule = RuleOf(node);
  if (rule != nullptr && !rule->differentiable) return;
  const RuleContext ctx{node, graph, requires_grad, attention};
  const auto first = static_cast<std::ptrdiff_t>(out->size());
  if (rule == nullptr) {
    ConservativeSaved(ctx, out);
  } else if (rule->saved != nullptr) {
    rule->saved(ctx, out);
  }
  // A value listed twice (mul(x, x)) holds one storage: keep the first entry.
  auto kept = out->begin() + first;
  for (auto it = kept; it != out->end(); ++it) {
    if (it->value >= 0 && std::any_of(out->begin() + first, kept,
                                      [&](const SavedTensor& u) { return u.value == it->value; })) {
      continue;
    }
    if (kept != it) *kept = std::move(*it);
    ++kept;
  }
  out->erase(kept, out->end());
}

std::vector<bool> RequiresGrad(const core::BoundGraph& graph, const std::vector<bool>* trainable) {
  if (graph.graph == nullptr) return {};
  const core::Graph& g = *graph.graph;
  std::vector<bool> rg;
  if (trainable != nullptr && trainable->size() == g.values.size()) {
    rg = *trainable;  // (copied a word at a time)
  } else {
    rg.assign(g.values.size(), false);
    for (size_t i = 0; i < g.values.size(); ++i) {
      rg[i] =
          trainable != nullptr && i < trainable->size() ? (*trainable)[i] : g.values[i].trainable;
    }
  }
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& node = g.nodes[k];
    const OpRule* rule = RuleOf(g, k);
    if (rule != nullptr && !rule->differentiable) continue;
    // If/Loop/Scan bodies may read outer values that node.inputs does not
    // list: assume one of them requires grad (over-estimate).
    const bool any =
        node.subgraph_nodes > 0 || std::any_of(node.inputs.begin(), node.inputs.end(),
                                               [&](int id) { return RequiresGradAt(rg, id); });
    if (!any) continue;
    for (int id : node.outputs) {
      if (id < 0 || static_cast<size_t>(id) >= rg.size()) continue;
      const int32_t dtype = DTypeOf(graph, id);
      // Unknown dtype: assume float (over-estimate rather than under-estimate).
      rg[static_cast<size_t>(id)] = dtype == 0 || base::IsFloatDType(dtype);
    }
  }
  return rg;
}

}  // namespace memest::ops
