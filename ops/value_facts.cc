#include "ops/value_facts.h"

#include <algorithm>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "base/dtype.h"

namespace memest::ops {
namespace {

// Strides are written into one pool (StridePool): the helpers below append a value's strides to
// it and return whether they exist, so that laying out a graph makes no allocation per view.
using Strides = std::span<const int64_t>;
using StridePool = std::vector<int64_t>;

void AppendContiguousStrides(core::Dims shape, StridePool* out) {
  const size_t at = out->size();
  out->resize(at + shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) {
    (*out)[at + i - 1] = (*out)[at + i] * std::max<int64_t>(shape[i], 1);
  }
}

bool IsContiguous(core::Dims shape, Strides st) {
  if (st.size() != shape.size()) return false;
  int64_t want = 1;  // the contiguous stride of dim i, from the innermost out
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && st[i] != want) return false;
    want *= std::max<int64_t>(shape[i], 1);
  }
  return true;
}

// Appends the strides of `to` as a view of a tensor of shape `from` with strides `st`; false (and
// nothing appended) when no view exists and reshape copies. The rule PyTorch's view/reshape
// applies (memory-model.md §3.1): walking from the innermost dim, each maximal run of input dims
// that are contiguous with one another must be covered exactly by whole output dims.
bool AppendViewStrides(core::Dims from, Strides st, core::Dims to, StridePool* pool) {
  if (from.empty()) {
    AppendContiguousStrides(to, pool);
    return true;
  }
  const size_t at = pool->size();
  pool->resize(at + to.size(), 1);
  int64_t* out = pool->data() + at;
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t base = st.back(), tensor_numel = 1, view_numel = 1;
  bool views = true;
  for (int64_t d = static_cast<int64_t>(from.size()) - 1; views && d >= 0; --d) {
    tensor_numel *= from[static_cast<size_t>(d)];
    const bool chunk_ends = d == 0 || (from[static_cast<size_t>(d - 1)] != 1 &&
                                       st[static_cast<size_t>(d - 1)] != tensor_numel * base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || to[static_cast<size_t>(view_d)] == 1)) {
      out[view_d] = view_numel * base;
      view_numel *= to[static_cast<size_t>(view_d)];
      --view_d;
    }
    views = view_numel == tensor_numel;
    if (d > 0) {
      base = st[static_cast<size_t>(d - 1)];
      tensor_numel = view_numel = 1;
    }
  }
  if (!views || view_d != -1) {
    pool->resize(at);
    return false;
  }
  return true;
}

// Appends Transpose's output strides: the input's, permuted by `perm` (reversed when absent);
// false (nothing appended) when the permutation does not fit the input.
bool AppendTransposeStrides(const core::Node& n, core::Dims xs, Strides xst, StridePool* pool) {
  const size_t rank = xs.size();
  const onnx::AttributeProto* a = FindAttr(n, "perm");
  const bool given = a != nullptr && a->type() == onnx::AttributeProto::INTS && a->ints_size() > 0;
  if (given && static_cast<size_t>(a->ints_size()) != rank) return false;
  const size_t at = pool->size();
  for (size_t i = 0; i < rank; ++i) {
    const int64_t p = given ? a->ints(static_cast<int>(i)) : static_cast<int64_t>(rank - 1 - i);
    if (p < 0 || p >= static_cast<int64_t>(rank)) {
      pool->resize(at);
      return false;
    }
    pool->push_back(xst[static_cast<size_t>(p)]);
  }
  return true;
}

// Appends Expand's output strides: 0 along every broadcast dim.
void AppendExpandStrides(core::Dims xs, Strides xst, core::Dims ys, StridePool* pool) {
  const size_t at = pool->size();
  pool->resize(at + ys.size(), 0);
  const size_t lead = ys.size() - xs.size();
  for (size_t i = 0; i < xs.size(); ++i) {
    (*pool)[at + lead + i] = xs[i] == ys[lead + i] ? xst[i] : 0;
  }
}

// What ops::RequiresGrad reads besides the graph's nodes: the key under which the graph keeps its
// flags for its other bound graphs (Graph::derived). Their dtypes are the same at every dims, so
// a search's or a scheduler's estimates at other batches and lengths find them made.
struct RequiresGradInputs {
  std::vector<bool> trainable;
  std::vector<int32_t> dtypes;
  bool operator==(const RequiresGradInputs&) const = default;
};

}  // namespace

ValueFacts::ValueFacts(const core::BoundGraph& graph, Precision precision,
                       const FusionChoices& fusion, std::vector<bool> trainable,
                       const std::vector<std::optional<uint64_t>>& stored_bytes,
                       std::vector<uint32_t> shard_divisor)
    : graph_(graph),
      precision_(precision),
      trainable_(std::move(trainable)),
      shard_(std::move(shard_divisor)) {
  const core::Graph& g = *graph.graph;
  const size_t nv = g.values.size();
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const OpRule* r = rule(n);
    has_gemm_ = has_gemm_ || (r != nullptr && r->uses_cublas);
  }
  if (trainable_.size() != nv) {
    trainable_.assign(nv, false);
    for (size_t i = 0; i < nv; ++i) trainable_[i] = g.values[i].trainable;
  }
  requires_grad_ = *g.derived.GetOrMake<std::vector<bool>>(
      RequiresGradInputs{trainable_, graph.dtypes}, nv, [&](const RequiresGradInputs&) {
        return std::make_shared<const std::vector<bool>>(RequiresGrad(graph, &trainable_));
      });
  fusion_ = std::make_unique<Fusion>(graph, requires_grad_, fusion);
  FindLossReach();
  MarkLowPrecision();
  FindLayout();
  FindStorageRoots(fusion.inplace_relu);
  SizeValues(stored_bytes);
}

// Backward from a loss on the first output, as the symbolic timeline walks it (symbolic/timeline.cc
// BackwardNode): nodes in reverse order; one with an output that has a gradient and an input that
// requires grad (GradInputs: a fused chain's inputs at its last node, none at its other nodes)
// gives a gradient to each of those inputs -- a view to its input 0 alone. A pipeline stage without
// the loss seeds the sent values that reach it (Sim::ReceiveGradients), so the stages agree with
// the walk over the whole graph. The walk is what the timeline does up to its zero-byte tensors:
// the timeline allocates none, so a gradient of 0 bytes ends its chain there, where the walk goes
// on (a parameter behind it keeps its state: the safe side).
void ValueFacts::FindLossReach() {
  const core::Graph& g = *graph_.graph;
  const size_t nv = g.values.size();
  reaches_loss_.assign(nv, 0);
  without_gradient_.clear();
  if (g.outputs.empty() || g.outputs.front() < 0) return;
  uint8_t* reach = reaches_loss_.data();
  reach[static_cast<size_t>(g.outputs.front())] = 1;
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const core::Node& n = g.nodes[k];
    bool has_grad = false;
    for (int out : n.outputs) has_grad = has_grad || (out >= 0 && reach[out] != 0);
    if (!has_grad) continue;
    if (n.subgraph_nodes > 0) {  // reads outer values that are not its inputs
      for (size_t i = 0; i < nv; ++i) reach[i] = requires_grad_[i];
      break;
    }
    std::span<const int> ins = GradInputs(k);
    bool needs = false;
    for (int in : ins) needs = needs || requires_grad(in);
    if (!needs) continue;
    const OpRule* r = rule(k);
    if (r != nullptr && r->view) ins = core::Span(n.inputs).first(n.inputs.empty() ? 0 : 1);
    for (int in : ins) {
      if (requires_grad(in)) reach[in] = 1;
    }
  }
  for (size_t i = 0; i < nv; ++i) {
    if (trainable_[i] && reach[i] == 0 && !g.values[i].consumers.empty()) {
      without_gradient_.push_back(static_cast<int>(i));
    }
  }
}

std::span<const int> ValueFacts::GradInputs(size_t n) const {
  const FusedChain* c = fusion_->chain_of(n);
  if (c == nullptr) return core::Span(graph_.graph->nodes[n].inputs);
  if (c->nodes.back() != n) return {};
  return c->inputs;
}

// Whether value `id` takes part in type promotion as an fp32 operand (memory-model.md §5.2): an
// activation -- a data input or a node's output -- of rank >= 1. No initializer does: a parameter
// because a graph writes a Linear's bias as MatMul then Add, where PyTorch's addmm casts the bias
// with the product; a constant (an initializer or a Constant node's output) because it stands for
// a Python scalar of the model's code, which never promotes a tensor.
bool ValueFacts::Promotes(int id) const {
  const core::Value& v = graph_.graph->value(id);
  if (v.kind == core::ValueKind::kInitializer) return false;
  if (v.producer >= 0 && graph_.graph->node(v.producer).op_type == "Constant") return false;
  const core::MaybeDims shape = graph_.shapes.Find(id);
  return shape && !shape->empty();
}

// Run-time precision (memory-model.md §5.2/5.3).
void ValueFacts::MarkLowPrecision() {
  const core::Graph& g = *graph_.graph;
  const size_t nv = g.values.size();
  low_.assign(nv, false);
  if (precision_ == Precision::kBf16) {
    for (size_t i = 0; i < nv; ++i) low_[i] = graph_.dtypes[i] == base::kFloat;
    return;
  }
  if (precision_ == Precision::kFp32) return;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    const OpRule* r = rule(k);
    const AmpPolicy policy = r ? r->amp : AmpPolicy::kPassThrough;
    bool any_low = false, all_low = true, any_float = false, fp32_activation = false;
    for (int in : n.inputs) {
      if (in < 0 || !base::IsFloatDType(graph_.dtypes[static_cast<size_t>(in)])) continue;
      any_float = true;
      any_low = any_low || low_[static_cast<size_t>(in)];
      all_low = all_low && low_[static_cast<size_t>(in)];
      fp32_activation = fp32_activation || (!low_[static_cast<size_t>(in)] && Promotes(in));
    }
    bool out_low = false;
    switch (policy) {
      case AmpPolicy::kLowerPrecision:
        out_low = true;
        break;
      case AmpPolicy::kPassThrough:
        // Type promotion: an fp32 activation beside a low-precision one makes the result fp32
        // (gelu_new's x + 0.044715 * pow(x, 3) under autocast, pow being on the fp32 list).
        out_low = any_low && !fp32_activation;
        break;
      case AmpPolicy::kPromote:
        out_low = any_float && all_low;
        break;
      case AmpPolicy::kFp32:
        out_low = false;
        break;
    }
    for (int out : n.outputs) {
      if (out >= 0 && graph_.dtypes[static_cast<size_t>(out)] == base::kFloat) {
        low_[static_cast<size_t>(out)] = out_low;
      }
    }
  }
}

// Layout: strides of views, and which view ops copy (policy in the header). A value without
// strides here is contiguous (or of unknown shape: treated as contiguous).
void ValueFacts::FindLayout() {
  const core::Graph& g = *graph_.graph;
  const size_t nv = g.values.size();
  contiguous_.assign(nv, true);
  is_view_.assign(g.nodes.size(), false);
  // A view output's strides: pool[strides_at[id] ..] (as many as its rank); -1 where it has none.
  StridePool pool, xst;
  std::vector<int64_t> strides_at(nv, -1);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    if (fusion_->identity_dropout(k) && !n.inputs.empty() && n.inputs[0] >= 0) {
      is_view_[k] = true;  // dropout(p=0) returns its input (ops/fusion.h)
      continue;
    }
    const OpRule* r = rule(k);
    if (!r || !r->view || n.inputs.empty() || n.inputs[0] < 0) continue;
    is_view_[k] = true;
    const int x = n.inputs[0];
    const core::MaybeDims xs = graph_.shapes.Find(x);
    if (!xs) continue;  // unknown: a view of unknown layout, contiguous
    // The input's strides: a view's own, else contiguous (copied out, since appending to the
    // pool may move it).
    if (const int64_t at = strides_at[static_cast<size_t>(x)]; at >= 0) {
      xst.assign(pool.begin() + at, pool.begin() + at + static_cast<std::ptrdiff_t>(xs->size()));
    } else {
      xst.clear();
      AppendContiguousStrides(*xs, &xst);
    }
    const std::string_view op = n.op_type;  // compared by size first
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const int out = n.outputs[o];
      const core::MaybeDims ys = graph_.shapes.Find(out);
      if (out < 0 || !ys) continue;
      const size_t at = pool.size();
      bool known = true;
      if (op == "Transpose") {
        known = AppendTransposeStrides(n, *xs, xst, &pool);
      } else if ((op == "Slice" || op == "Split") && ys->size() == xs->size()) {
        pool.insert(pool.end(), xst.begin(), xst.end());  // same strides, smaller extent
      } else if (op == "Expand" && ys->size() >= xs->size()) {
        AppendExpandStrides(*xs, xst, *ys, &pool);
      } else if (!AppendViewStrides(*xs, xst, *ys, &pool)) {  // Reshape, Flatten, Squeeze, ...
        is_view_[k] = false;  // reshape of a layout no view can express: a contiguous copy
        break;
      }
      // Unknown, or (in a graph whose declared shapes disagree with the op, e.g. a Transpose
      // perm of another rank) strides that do not fit the output: a layout left unknown.
      if (!known || pool.size() - at != ys->size()) {
        pool.resize(at);
        continue;
      }
      strides_at[static_cast<size_t>(out)] = static_cast<int64_t>(at);
      contiguous_[static_cast<size_t>(out)] =
          IsContiguous(*ys, Strides(pool.data() + at, ys->size()));
    }
  }
}

// Whether node `k` is a ReLU that writes into its input (FusionChoices::inplace_relu): an input a
// Conv, ConvTranspose or BatchNormalization made, read by nothing else and not a graph output
// (nor a view: in-place on a view would change its source). Neither op keeps its output for
// backward (§3.2), so writing over it is what autograd allows; relu_ keeps its result, as relu
// does. A ReLU after an Add stays out of place: timm's ResNet adds in place and then applies an
// in-place ReLU, its CSP blocks an out-of-place one, and the graph cannot tell them apart.
bool ValueFacts::InPlaceRelu(size_t k) const {
  const core::Graph& g = *graph_.graph;
  const core::Node& n = g.nodes[k];
  if (n.op_type != "Relu" || !n.domain.empty() || n.inputs.empty() || n.outputs.size() != 1 ||
      n.inputs[0] < 0 || n.outputs[0] < 0) {
    return false;
  }
  const int x = n.inputs[0];
  const core::Value& v = g.value(x);
  if (v.producer < 0 || v.consumers.size() != 1 || v.graph_output ||
      root_[static_cast<size_t>(x)] != x) {
    return false;
  }
  const core::Node& p = g.node(v.producer);
  return p.domain.empty() &&
         (p.op_type == "Conv" || p.op_type == "ConvTranspose" || p.op_type == "BatchNormalization");
}

// Storage owners: views share their source's storage, and so does an in-place ReLU's output
// (in node order, so that a view of that output shares it too).
void ValueFacts::FindStorageRoots(bool inplace_relu) {
  const core::Graph& g = *graph_.graph;
  const size_t nv = g.values.size();
  root_.resize(nv);
  for (size_t i = 0; i < nv; ++i) root_[i] = static_cast<int>(i);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    // (The op's name's length first: this runs for every node, and most are not ReLUs.)
    const bool relu = inplace_relu && n.op_type.size() == 4 && InPlaceRelu(k);
    if (!relu && !is_view_[k]) continue;
    if (n.inputs.empty() || n.inputs[0] < 0) continue;
    for (int out : n.outputs) {
      if (out >= 0) root_[static_cast<size_t>(out)] = root_[static_cast<size_t>(n.inputs[0])];
    }
  }
}

// Run-time bytes; unknown sizes take the largest known tensor of their producer. Then the
// stored bytes of weights kept in another dtype, the rank's shares, and zero for what a fused
// kernel never materialises and dropout(p=0)'s absent mask (ops/fusion.h).
void ValueFacts::SizeValues(const std::vector<std::optional<uint64_t>>& stored_bytes) {
  const core::Graph& g = *graph_.graph;
  const size_t nv = g.values.size();
  bytes_.assign(nv, 0);
  auto known = [&](int id) {
    const uint64_t b = graph_.Bytes(id);
    return low_[static_cast<size_t>(id)] ? b / 2 : b;
  };
  for (size_t i = 0; i < nv; ++i) {
    const int id = static_cast<int>(i);
    if (graph_.known(id)) {
      bytes_[i] = known(id);
      continue;
    }
    const core::Value& v = g.value(id);
    if (v.producer < 0) continue;
    const core::Node& n = g.node(v.producer);
    uint64_t guess = 0;
    for (int x : n.inputs) {
      if (x >= 0 && graph_.known(x)) guess = std::max(guess, known(x));
    }
    for (int x : n.outputs) {
      if (x >= 0 && graph_.known(x)) guess = std::max(guess, known(x));
    }
    bytes_[i] = guess;
    fallback_ops_.insert(n.op_type);
  }
  for (size_t i = 0; i < nv && i < stored_bytes.size(); ++i) {
    if (stored_bytes[i]) bytes_[i] = *stored_bytes[i];
  }
  for (size_t i = 0; i < nv && i < shard_.size(); ++i) {
    bytes_[i] = Share(static_cast<int>(i), bytes_[i]);
  }
  for (size_t i = 0; i < nv; ++i) {
    if (fusion_->interior(static_cast<int>(i))) bytes_[i] = 0;
  }
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    if (fusion_->identity_dropout(k) && n.outputs.size() > 1 && n.outputs[1] >= 0) {
      bytes_[static_cast<size_t>(n.outputs[1])] = 0;
    }
  }
}

std::shared_ptr<const ValueFacts> ValueFacts::Shared(const core::BoundGraph& graph,
                                                     ValueFactsInputs inputs) {
  return graph.derived.GetOrMake<ValueFacts>(
      std::move(inputs), graph.dtypes.size(),
      [&](const ValueFactsInputs& in) { return std::make_shared<const ValueFacts>(graph, in); });
}

std::span<const SavedTensor> ValueFacts::Saved(size_t k) const {
  if (!saved_made_.load(std::memory_order_acquire)) MakeSaved();
  return std::span<const SavedTensor>(saved_).subspan(saved_begin_[k],
                                                      saved_begin_[k + 1] - saved_begin_[k]);
}

void ValueFacts::MakeSaved() const {
  std::lock_guard<std::mutex> lock(saved_mu_);
  if (saved_made_.load(std::memory_order_relaxed)) return;  // another thread made them
  const size_t nodes = graph_.graph->nodes.size();
  saved_begin_.reserve(nodes + 1);
  // Most nodes save one or two tensors: room for two each spares the growth's copies (each a
  // fresh, page-faulted block on a large graph).
  saved_.reserve(2 * nodes);
  for (size_t n = 0; n < nodes; ++n) {
    saved_begin_.push_back(saved_.size());
    AppendSaved(n, &saved_);
  }
  saved_begin_.push_back(saved_.size());
  saved_made_.store(true, std::memory_order_release);
}

void ValueFacts::AppendSaved(size_t k, std::vector<SavedTensor>* out) const {
  const core::Node& n = graph_.graph->nodes[k];
  const size_t first = out->size();
  const FusedChain* chain = fusion_->chain_of(k);
  if (chain != nullptr) {  // the chain's last node saves its list
    if (k == chain->nodes.back()) out->insert(out->end(), chain->saved.begin(), chain->saved.end());
  } else if (!fusion_->identity_dropout(k)) {
    AppendSavedTensors(n, graph_, requires_grad_, fusion_->attention_call(k), out);
  }
  const std::span<SavedTensor> list = std::span<SavedTensor>(*out).subspan(first);
  // Tensors a rule sizes itself (statistics, masks, logsumexp) are split over the
  // tensor-parallel ranks as the node's output is.
  const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
  if (shard(out0) > 1) {
    for (SavedTensor& s : list) {
      if (s.value < 0) s.bytes = Share(out0, s.bytes);
    }
  }
  AutocastCopiesOfSavedInputs(k, chain, list);
  // Extras kept in the op's run-time precision: half where its output runs in fp16/bf16.
  if (out0 >= 0 && low(out0) && graph_.dtypes[static_cast<size_t>(out0)] == base::kFloat) {
    for (SavedTensor& s : list) {
      if (s.value < 0 && s.run_precision) s.bytes /= 2;
    }
  }
  if (chain != nullptr || n.op_type != "MatMul" || !n.domain.empty()) return;
  for (SavedTensor& s : list) {
    if (s.value < 0 || contiguous(s.value)) continue;
    const core::MaybeDims shape = graph_.shapes.Find(s.value);
    if (!shape || shape->size() < 3) continue;
    // matmul folds the operand with reshape: a contiguous copy, which bmm/mm saves.
    s.bytes = bytes(s.value);
    s.copy = SavedTensor::Copy::kContiguous;
    s.source = s.value;
    s.value = -1;
  }
}

// Under autocast an op of the lower-precision list (matmul, linear, conv,
// scaled_dot_product_attention) casts each fp32 input to fp16/bf16 first, and one of the fp32 list
// (softmax, layer_norm, pow, log, ...) each fp16/bf16 input to fp32; what the op saves for
// backward is that copy (memory-model.md §5.2: cached_cast makes a new tensor; only a leaf weight
// that requires grad is cached, amp_cast_bytes). So a saved input in the other precision (a softmax
// or layer-norm output into a matmul, a rotary embedding promoted to fp32; a bf16 activation into
// pow) is saved as a copy in the op's precision, alive until the backward, and the original can
// be freed earlier.
void ValueFacts::AutocastCopiesOfSavedInputs(size_t k, const FusedChain* chain,
                                             std::span<SavedTensor> list) const {
  if (precision_ != Precision::kAmpFp16 && precision_ != Precision::kAmpBf16) return;
  const OpRule* r = chain != nullptr ? nullptr : rule(k);
  const bool lower = chain != nullptr ? chain->kind == FusedKind::kAttention
                                      : r != nullptr && r->amp == AmpPolicy::kLowerPrecision;
  const bool fp32 = chain == nullptr && r != nullptr && r->amp == AmpPolicy::kFp32;
  if (!lower && !fp32) return;
  const core::Node& n = graph_.graph->nodes[k];
  for (SavedTensor& s : list) {
    if (s.value < 0 || trainable(s.value) ||
        graph_.dtypes[static_cast<size_t>(s.value)] != base::kFloat) {
      continue;
    }
    const bool low = low_[static_cast<size_t>(s.value)];
    if (low == lower) continue;  // already in the op's precision
    const bool input =
        chain != nullptr || std::find(n.inputs.begin(), n.inputs.end(), s.value) != n.inputs.end();
    if (!input) continue;  // an output the op saves is in its own precision
    s.bytes = lower ? bytes(s.value) / 2 : bytes(s.value) * 2;
    s.copy = SavedTensor::Copy::kAutocast;
    s.source = s.value;
    s.value = -1;
  }
}

uint64_t ValueFacts::Workspace(size_t k) const {
  const core::Node& n = graph_.graph->nodes[k];
  if (const AttentionCall* call = fusion_->backward_call(k); call != nullptr && call->chain) {
    // A fused chain's kernel runs at its last node: what it allocates beyond what it keeps.
    const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
    return Share(out0, AttentionKernelWorkspace(call->kernel, call->site));
  }
  const OpRule* rule = this->rule(k);
  if (rule == nullptr || rule->workspace == nullptr) return 0;
  const uint64_t bytes =
      rule->workspace(RuleContext{n, graph_, requires_grad_, fusion_->attention_call(k)});
  const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
  return Share(out0, bytes);  // split over tensor-parallel ranks as the node's output is
}

uint64_t ValueFacts::BackwardWorkspace(size_t k) const {
  const AttentionCall* call = fusion_->backward_call(k);
  if (call == nullptr) return 0;
  const core::Node& n = graph_.graph->nodes[k];
  const int out0 = n.outputs.empty() ? -1 : n.outputs[0];
  return Share(out0, AttentionKernelBackwardWorkspace(call->kernel, call->site));
}

uint64_t ValueFacts::amp_cast_bytes(int id) const {
  if (precision_ != Precision::kAmpFp16 && precision_ != Precision::kAmpBf16) return 0;
  const core::Value& v = graph_.graph->value(id);
  if (!trainable(id) || v.dtype != base::kFloat) return 0;
  for (int c : v.consumers) {
    const OpRule* r = rule(static_cast<size_t>(c));
    if (r && r->amp == AmpPolicy::kLowerPrecision) return Share(id, graph_.Bytes(id) / 2);
  }
  return 0;
}

}  // namespace memest::ops
