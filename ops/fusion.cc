// ops/fusion.cc -- see ops/fusion.h for the policy. Each matcher starts at one anchor op
// (LayerNorm: the Sub; GroupNorm: the InstanceNormalization; GELU: the Erf or Tanh; SiLU: the
// Sigmoid; Mish: the Softplus; attention: the Softmax), follows the exporter's chain in both
// directions, and gives up at the first link that differs.
#include "ops/fusion.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string_view>

#include "base/dtype.h"
#include "core/graph.h"
#include "core/symbolic_shapes.h"

namespace memest::ops {
namespace {

using core::Node;

constexpr double kTolerance = 1e-3;

// A chain found by its structure alone (op types, which operand is which, constants, and that
// no interior value is read outside it): what an elementwise chain is at any dims. What it
// saves depends on the bound graph (SavedBy).
struct ChainMatch {
  FusedChain chain;         // nodes sorted, interior values; saved empty
  int x = -1;               // the chain's input, which the fused kernel saves
  int mean = -1;            // LayerNorm: the first ReduceMean's output, one statistic per row;
                            // GroupNorm: the grouped input [N, G, ...], one per (n, g)
  std::vector<int> params;  // the norms: the weight, then the bias, when the chain has them
};

// What a graph's structure says, whatever its dims: the elementwise chains (LayerNorm, GroupNorm,
// GELU, SiLU, Mish), identity dropouts, and whether a Softmax looks like attention.
class Structure {
 public:
  explicit Structure(const core::Graph& g) : g_(g) {}

  std::optional<ChainMatch> LayerNorm(size_t sub) const;
  std::optional<ChainMatch> GroupNorm(size_t instance_norm) const;
  std::optional<ChainMatch> Gelu(size_t erf) const;
  std::optional<ChainMatch> GeluTanh(size_t tanh) const;
  std::optional<ChainMatch> GeluTail(int x, const Node& act, FusedChain c) const;
  std::optional<ChainMatch> Silu(size_t sigmoid) const;
  std::optional<ChainMatch> Mish(size_t softplus) const;
  std::optional<ChainMatch> SelfGated(int x, FusedKind kind,
                                      std::initializer_list<const Node*> gate) const;
  bool LooksLikeAttention(size_t softmax) const;
  bool IdentityDropout(size_t n) const;
  // A mask computed from the inputs' shapes alone through a Trilu: the causal mask transformers'
  // eager path builds (no graph input's data reaches it).
  bool CausalMaskFromShapes(int mask) const;

 protected:
  const Node* Producer(int id) const {
    if (id < 0) return nullptr;
    const int p = g_.value(id).producer;
    return p < 0 ? nullptr : &g_.node(p);
  }
  int Index(const Node* n) const { return static_cast<int>(n - g_.nodes.data()); }
  bool Is(const Node* n, std::string_view op) const {
    return n != nullptr && n->op_type == op && (n->domain.empty() || n->domain == "ai.onnx");
  }
  // The only node reading `id` (read once or twice by it), or nullptr.
  const Node* SoleConsumer(int id) const {
    if (id < 0) return nullptr;
    const core::Value& v = g_.value(id);
    if (v.consumers.empty()) return nullptr;
    const int c = v.consumers.front();
    for (int other : v.consumers) {
      if (other != c) return nullptr;
    }
    return &g_.node(c);
  }
  std::optional<double> Scalar(int id) const {
    if (id < 0 || !g_.symbolic) return std::nullopt;
    const core::SymTensor& t = g_.symbolic->types[static_cast<size_t>(id)];
    if (t.float_values && t.float_values->size() == 1) return (*t.float_values)[0];
    if (t.values && t.values->size() == 1) {
      if (auto c = (*t.values)[0].AsConstant()) return static_cast<double>(*c);
    }
    return std::nullopt;
  }
  bool ScalarNear(int id, double want) const {
    auto v = Scalar(id);
    return v && std::abs(*v - want) <= kTolerance * std::max(1.0, std::abs(want));
  }
  // The input of binary node `n` that is not `known`, or -1 when neither/both match.
  int Other(const Node& n, int known) const {
    if (n.inputs.size() != 2) return -1;
    if (n.inputs[0] == known && n.inputs[1] != known) return n.inputs[1];
    if (n.inputs[1] == known && n.inputs[0] != known) return n.inputs[0];
    return -1;
  }
  // A value no data reaches: an initializer, or a Constant node's output.
  bool Constant(int id) const {
    if (id < 0) return false;
    if (g_.value(id).kind == core::ValueKind::kInitializer) return true;
    return Is(Producer(id), "Constant");
  }
  // The constant behind `id` (an initializer or a Constant node's output), itself or unsqueezed
  // (how torch.onnx shapes an affine weight [C] to [C, 1, ...] for a broadcast, and the [1]
  // ones and zeros it writes for a norm without one), or -1.
  int Parameter(int id) const {
    if (Constant(id)) return id;
    const Node* p = Producer(id);
    if (!Is(p, "Unsqueeze") || p->inputs.empty()) return -1;
    return Constant(p->inputs[0]) ? p->inputs[0] : -1;
  }
  // A chain is fused only when its interior values are read by its own nodes alone.
  bool Closed(const FusedChain& c) const;
  // The match of a chain whose nodes are all in `c`: none when it is not closed.
  std::optional<ChainMatch> Finished(FusedChain c, int x, int mean = -1,
                                     std::vector<int> params = {}) const {
    if (!Closed(c)) return std::nullopt;
    std::sort(c.nodes.begin(), c.nodes.end());
    return ChainMatch{std::move(c), x, mean, std::move(params)};
  }
  static void Add(FusedChain* c, const Node* n, const core::Graph& g) {
    c->nodes.push_back(static_cast<size_t>(n - g.nodes.data()));
  }

  const core::Graph& g_;
};

// Attention chains and calls, which read the bound graph's shapes and dtypes and the values'
// requires-grad flags besides the structure.
class Matcher : public Structure {
 public:
  Matcher(const core::BoundGraph& b, const std::vector<bool>& requires_grad)
      : Structure(*b.graph), b_(b), requires_grad_(requires_grad) {}

  // The chain and the call it makes (its kernel not chosen yet; the chain's saved list empty).
  std::optional<FusedChain> Attention(size_t softmax, AttentionSite* site) const;
  // A tensor repeated to more heads as transformers' repeat_kv writes it: Reshape(Expand(x)),
  // the Expand growing it, seen through a Transpose (k^T).
  bool RepeatedHeads(int id) const;
  // Marks `s` broadcast_kv when k^T and v have fewer rows than the probabilities.
  void BroadcastHeads(int key, int v, AttentionSite* s) const;
  // What elementwise chain `m` saves at the bound dims: nothing when no gradient flows through
  // it; else the fused kernel's list (LayerNorm, GroupNorm: x, the weight, and two fp32 statistics
  // per row or per (sample, group); GELU, SiLU, Mish: x).
  FusedChain SavedBy(const ChainMatch& m) const;

 private:
  bool RequiresGrad(int id) const {
    return id >= 0 && static_cast<size_t>(id) < requires_grad_.size() &&
           requires_grad_[static_cast<size_t>(id)];
  }
  uint64_t Numel(int id) const { return b_.Numel(id).value_or(0); }
  // The product of the first two dims of `id` (0 when unknown).
  uint64_t LeadingTwo(int id) const {
    const auto& shape = b_.shapes[static_cast<size_t>(id)];
    if (!shape || shape->size() < 2) return 0;
    return core::DimProduct(*shape, 0, 2).value_or(0);
  }

  // Mask or bias `id` of a chain, for the kernel that takes it as attn_mask.
  AttentionMask MaskOf(int id, const char* what) const {
    AttentionMask m;
    m.value = id;
    m.boolean = !base::IsFloatDType(b_.dtypes[static_cast<size_t>(id)]);
    m.what = what;
    const auto& shape = b_.shapes[static_cast<size_t>(id)];
    if (shape && !shape->empty() && shape->back() > 0) {
      m.numel = Numel(id);
      m.last = static_cast<uint64_t>(shape->back());
    }
    return m;
  }

  const core::BoundGraph& b_;
  const std::vector<bool>& requires_grad_;
};

bool Structure::Closed(const FusedChain& c) const {
  auto member = [&c](int node) {
    return std::find(c.nodes.begin(), c.nodes.end(), static_cast<size_t>(node)) != c.nodes.end();
  };
  for (int id : c.interior) {
    if (g_.value(id).graph_output) return false;
    for (int consumer : g_.value(id).consumers) {
      if (!member(consumer)) return false;
    }
  }
  return true;
}

// x - ReduceMean(x) -> Pow 2 -> ReduceMean -> Add eps -> Sqrt; (x - mean) / that [* w] [+ b].
std::optional<ChainMatch> Structure::LayerNorm(size_t k) const {
  const Node& sub = g_.nodes[k];
  if (sub.inputs.size() != 2 || sub.outputs.empty()) return std::nullopt;
  const int x = sub.inputs[0], mean = sub.inputs[1], d = sub.outputs[0];
  const Node* r1 = Producer(mean);
  if (!Is(r1, "ReduceMean") || r1->inputs.empty() || r1->inputs[0] != x) return std::nullopt;
  const Node *pow = nullptr, *div = nullptr;
  for (int c : g_.value(d).consumers) {
    const Node* n = &g_.node(c);
    if (Is(n, "Pow") && n->inputs.size() == 2 && n->inputs[0] == d && ScalarNear(n->inputs[1], 2)) {
      pow = n;
    } else if (Is(n, "Div") && n->inputs.size() == 2 && n->inputs[0] == d) {
      div = n;
    }
  }
  if (!pow || !div) return std::nullopt;
  const Node* r2 = SoleConsumer(pow->outputs[0]);
  if (!Is(r2, "ReduceMean")) return std::nullopt;
  const Node* eps = SoleConsumer(r2->outputs[0]);
  if (!Is(eps, "Add") || Other(*eps, r2->outputs[0]) < 0 || !Scalar(Other(*eps, r2->outputs[0]))) {
    return std::nullopt;
  }
  const Node* sqrt = SoleConsumer(eps->outputs[0]);
  if (!Is(sqrt, "Sqrt") || div->inputs[1] != sqrt->outputs[0]) return std::nullopt;
  FusedChain c{FusedKind::kLayerNorm,
               {},
               {mean, d, pow->outputs[0], r2->outputs[0], eps->outputs[0], sqrt->outputs[0]},
               {}};
  for (const Node* n : {r1, &sub, pow, r2, eps, sqrt, div}) Add(&c, n, g_);
  std::vector<int> params;
  int out = div->outputs[0];
  const Node* mul = SoleConsumer(out);
  if (Is(mul, "Mul") && Other(*mul, out) >= 0 &&
      g_.value(Other(*mul, out)).kind == core::ValueKind::kInitializer) {
    c.interior.push_back(out);
    params.push_back(Other(*mul, out));
    Add(&c, mul, g_);
    out = mul->outputs[0];
    const Node* add = SoleConsumer(out);
    if (Is(add, "Add") && Other(*add, out) >= 0 &&
        g_.value(Other(*add, out)).kind == core::ValueKind::kInitializer) {
      c.interior.push_back(out);
      params.push_back(Other(*add, out));
      Add(&c, add, g_);
    }
  }
  return Finished(std::move(c), x, mean, std::move(params));
}

// F.group_norm as torch.onnx writes it (symbolic_opset9.group_norm): Reshape x to [N, G, -1] ->
// InstanceNormalization with constant scale and bias (ones, zeros) -> Reshape back (to Shape(x)
// or a constant shape) -> * weight [-> + bias], each unsqueezed to [C, 1, ...] (GroupNorm
// without affine parameters: constants [1] of 1 and 0).
std::optional<ChainMatch> Structure::GroupNorm(size_t k) const {
  const Node& norm = g_.nodes[k];
  if (norm.inputs.size() != 3 || norm.outputs.empty()) return std::nullopt;
  const int grouped = norm.inputs[0], n = norm.outputs[0];
  if (!Constant(norm.inputs[1]) || !Constant(norm.inputs[2])) return std::nullopt;
  const Node* split = Producer(grouped);
  if (!Is(split, "Reshape") || split->inputs.size() != 2 || !Constant(split->inputs[1])) {
    return std::nullopt;
  }
  const int x = split->inputs[0];
  if (x < 0) return std::nullopt;
  const Node* back = SoleConsumer(n);
  if (!Is(back, "Reshape") || back->inputs.size() != 2 || back->inputs[0] != n ||
      back->outputs.empty()) {
    return std::nullopt;
  }
  const Node* shape = Producer(back->inputs[1]);
  if (!Constant(back->inputs[1]) &&
      !(Is(shape, "Shape") && !shape->inputs.empty() && shape->inputs[0] == x)) {
    return std::nullopt;
  }
  FusedChain c{FusedKind::kGroupNorm, {}, {grouped, n}, {}};
  for (const Node* node : {split, &norm, back}) Add(&c, node, g_);
  std::vector<int> params;
  int out = back->outputs[0];
  for (const char* op : {"Mul", "Add"}) {  // the affine weight, then the bias
    const Node* next = SoleConsumer(out);
    if (!Is(next, op) || next->outputs.empty()) break;
    const int param = Parameter(Other(*next, out));
    if (param < 0) break;
    c.interior.push_back(out);
    params.push_back(param);
    Add(&c, next, g_);
    out = next->outputs[0];
  }
  // A chain that ends in the Reshape (a view of the normalised tensor) is left as written:
  // torch.onnx writes the Mul even without a weight (by a constant 1).
  if (params.empty()) return std::nullopt;
  return Finished(std::move(c), x, grouped, std::move(params));
}

// x / sqrt(2) -> Erf -> + 1 -> x * that -> * 0.5 (or 0.5 * x first).
std::optional<ChainMatch> Structure::Gelu(size_t k) const {
  const Node& erf = g_.nodes[k];
  if (erf.inputs.empty() || erf.outputs.empty()) return std::nullopt;
  const int t = erf.inputs[0];
  const Node* scale = Producer(t);
  if (!scale || scale->inputs.size() != 2) return std::nullopt;
  const int x = scale->inputs[0];
  const bool div = Is(scale, "Div") && ScalarNear(scale->inputs[1], std::sqrt(2.0));
  const bool mul = Is(scale, "Mul") && ScalarNear(scale->inputs[1], 1 / std::sqrt(2.0));
  if (!div && !mul) return std::nullopt;
  FusedChain c{FusedKind::kGelu, {}, {t}, {}};
  for (const Node* n : {scale, &erf}) Add(&c, n, g_);
  return GeluTail(x, erf, std::move(c));
}

// The end both GELU forms share, after the Erf or Tanh node `act`: + 1 -> x * that -> * 0.5 (or
// 0.5 * x first). `c` holds the chain up to `act`; the tail adds `act`'s output and the rest.
std::optional<ChainMatch> Structure::GeluTail(int x, const Node& act, FusedChain c) const {
  const Node* plus = SoleConsumer(act.outputs[0]);
  if (!Is(plus, "Add") || plus->outputs.empty() || !ScalarNear(Other(*plus, act.outputs[0]), 1)) {
    return std::nullopt;
  }
  const int a = plus->outputs[0];
  c.interior.push_back(act.outputs[0]);
  c.interior.push_back(a);
  Add(&c, plus, g_);
  const Node* times = SoleConsumer(a);
  if (!Is(times, "Mul") || times->outputs.empty()) return std::nullopt;
  const int other = Other(*times, a);
  if (other == x) {  // (x * (1 + act)) * 0.5
    const Node* half = SoleConsumer(times->outputs[0]);
    if (!Is(half, "Mul") || !ScalarNear(Other(*half, times->outputs[0]), 0.5)) return std::nullopt;
    c.interior.push_back(times->outputs[0]);
    Add(&c, times, g_);
    Add(&c, half, g_);
  } else {  // (x * 0.5) * (1 + act)
    const Node* half = Producer(other);
    if (!Is(half, "Mul") || Other(*half, x) < 0 || !ScalarNear(Other(*half, x), 0.5)) {
      return std::nullopt;
    }
    c.interior.push_back(other);
    Add(&c, half, g_);
    Add(&c, times, g_);
  }
  return Finished(std::move(c), x);
}

// F.gelu(x, approximate="tanh") as torch.onnx writes it below opset 20: x * (x * x) -> * 0.044715
// -> + x -> * sqrt(2/pi) -> Tanh -> + 1 -> x * that -> * 0.5 (or 0.5 * x first). The cube must be
// Muls: a Pow is Python code computing the same (GPT-2's NewGELUActivation), op by op.
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)

std::optional<ChainMatch> Structure::GeluTanh(size_t k) const {
  const Node& tanh = g_.nodes[k];
  if (tanh.inputs.empty() || tanh.outputs.empty()) return std::nullopt;
  const int t = tanh.inputs[0];
  const Node* beta = Producer(t);
  if (!Is(beta, "Mul") || beta->inputs.size() != 2) return std::nullopt;
  const bool beta_second = ScalarNear(beta->inputs[1], kSqrt2OverPi);
  if (!beta_second && !ScalarNear(beta->inputs[0], kSqrt2OverPi)) return std::nullopt;
  const int inner = beta->inputs[beta_second ? 0 : 1];
  const Node* sum = Producer(inner);
  if (!Is(sum, "Add") || sum->inputs.size() != 2) return std::nullopt;
  // One operand of the sum is x, the other kappa * x^3 with the cube x * (x * x).
  for (int side = 0; side < 2; ++side) {
    const int x = sum->inputs[static_cast<size_t>(side)];
    const int scaled = sum->inputs[static_cast<size_t>(1 - side)];
    const Node* kappa = Producer(scaled);
    if (!Is(kappa, "Mul") || kappa->inputs.size() != 2) continue;
    const bool kappa_second = ScalarNear(kappa->inputs[1], 0.044715);
    if (!kappa_second && !ScalarNear(kappa->inputs[0], 0.044715)) continue;
    const int cube = kappa->inputs[kappa_second ? 0 : 1];
    const Node* cubed = Producer(cube);
    if (!Is(cubed, "Mul") || Other(*cubed, x) < 0) continue;
    const int square = Other(*cubed, x);
    const Node* squared = Producer(square);
    if (!Is(squared, "Mul") || squared->inputs.size() != 2 || squared->inputs[0] != x ||
        squared->inputs[1] != x) {
      continue;
    }
    FusedChain c{FusedKind::kGelu, {}, {square, cube, scaled, inner, t}, {}};
    for (const Node* n : {squared, cubed, kappa, sum, beta, &tanh}) Add(&c, n, g_);
    return GeluTail(x, tanh, std::move(c));
  }
  return std::nullopt;
}

// x * Sigmoid(x), either operand first: nn.SiLU as torch.onnx writes it (symbolic_opset9.silu).
std::optional<ChainMatch> Structure::Silu(size_t k) const {
  const Node& sigmoid = g_.nodes[k];
  if (sigmoid.inputs.empty() || sigmoid.outputs.empty()) return std::nullopt;
  return SelfGated(sigmoid.inputs[0], FusedKind::kSilu, {&sigmoid});
}

// x * Tanh(Softplus(x)): nn.Mish below opset 18, which has no Mish op.
std::optional<ChainMatch> Structure::Mish(size_t k) const {
  const Node& softplus = g_.nodes[k];
  if (softplus.inputs.empty() || softplus.outputs.empty()) return std::nullopt;
  const Node* tanh = SoleConsumer(softplus.outputs[0]);
  if (!Is(tanh, "Tanh") || tanh->inputs.size() != 1 || tanh->outputs.empty()) return std::nullopt;
  return SelfGated(softplus.inputs[0], FusedKind::kMish, {&softplus, tanh});
}

// The end SiLU and Mish share: `gate`, a chain of unary nodes from x, multiplies x itself.
std::optional<ChainMatch> Structure::SelfGated(int x, FusedKind kind,
                                               std::initializer_list<const Node*> gate) const {
  const Node* last = *(gate.end() - 1);
  const int g = last->outputs[0];
  if (x < 0) return std::nullopt;
  const Node* times = SoleConsumer(g);
  if (!Is(times, "Mul") || times->outputs.empty() || Other(*times, g) != x) return std::nullopt;
  FusedChain c{kind, {}, {}, {}};
  for (const Node* n : gate) {
    c.interior.push_back(n->outputs[0]);
    Add(&c, n, g_);
  }
  Add(&c, times, g_);
  return Finished(std::move(c), x);
}

// A Softmax whose probabilities are the left operand of a MatMul, directly or through one
// Dropout: the shape of attention, whatever comes before the Softmax.
bool Structure::LooksLikeAttention(size_t k) const {
  const Node& softmax = g_.nodes[k];
  if (softmax.outputs.empty()) return false;
  int probs = softmax.outputs[0];
  const Node* next = SoleConsumer(probs);
  if (Is(next, "Dropout") && !next->outputs.empty()) {
    probs = next->outputs[0];
    next = SoleConsumer(probs);
  }
  return Is(next, "MatMul") && !next->inputs.empty() && next->inputs[0] == probs;
}

// MatMul(q, k^T) [* or / scale] [masked_fill as Where] [+ bias] -> Softmax -> [Dropout] ->
// MatMul(., v). The call: the probabilities [..., L, S] give the rows (batch times heads) and the
// lengths, q the head dim, v its own; k and v arrive repeated to the query heads (repeat_kv), so
// the call has one head per row.
std::optional<FusedChain> Matcher::Attention(size_t k, AttentionSite* site) const {
  const Node& softmax = g_.nodes[k];
  if (softmax.inputs.empty() || softmax.outputs.empty()) return std::nullopt;
  FusedChain c{FusedKind::kAttention, {}, {}, {}};
  Add(&c, &softmax, g_);
  int bias = -1, mask = -1;
  int cur = softmax.inputs[0];
  const Node* qk = nullptr;
  for (int step = 0; step < 4 && !qk; ++step) {
    const Node* p = Producer(cur);
    if (!p) return std::nullopt;
    const bool where = Is(p, "Where") && p->inputs.size() == 3 && mask < 0;
    if (!where && p->inputs.size() != 2) return std::nullopt;
    c.interior.push_back(cur);
    Add(&c, p, g_);
    if (where) {  // masked_fill(mask, fill): Where(mask, fill, scores) or Where(mask, scores, fill)
      const Node* second = Producer(p->inputs[1]);
      const bool scores_second = second && (Is(second, "MatMul") || Is(second, "Mul") ||
                                            Is(second, "Div") || Is(second, "Add"));
      cur = scores_second ? p->inputs[1] : p->inputs[2];
      mask = p->inputs[0];
    } else if (Is(p, "MatMul")) {
      qk = p;
    } else if ((Is(p, "Mul") || Is(p, "Div")) && Scalar(p->inputs[1])) {
      cur = p->inputs[0];
    } else if (Is(p, "Add") && bias < 0) {
      const Node* left = Producer(p->inputs[0]);
      const bool left_chain = left && (Is(left, "MatMul") || Is(left, "Mul") || Is(left, "Div"));
      cur = left_chain ? p->inputs[0] : p->inputs[1];
      bias = left_chain ? p->inputs[1] : p->inputs[0];
    } else {
      return std::nullopt;
    }
  }
  if (!qk) return std::nullopt;
  int probs = softmax.outputs[0];
  c.interior.push_back(probs);
  const Node* next = SoleConsumer(probs);
  double dropout = 0;
  if (Is(next, "Dropout")) {
    Add(&c, next, g_);
    // ratio: input 1 (opset >= 12) or the attribute (0.5 by default); unknown: assume dropout.
    if (IdentityDropout(static_cast<size_t>(Index(next)))) {
      dropout = 0;
    } else {
      dropout = next->inputs.size() > 1 ? Scalar(next->inputs[1]).value_or(0.5) : 0.5;
    }
    probs = next->outputs[0];
    c.interior.push_back(probs);
    if (next->outputs.size() > 1 && next->outputs[1] >= 0) c.interior.push_back(next->outputs[1]);
    next = SoleConsumer(probs);
  }
  if (!Is(next, "MatMul") || next->inputs.size() != 2 || next->inputs[0] != probs) {
    return std::nullopt;
  }
  Add(&c, next, g_);
  if (!Closed(c)) return std::nullopt;
  const int q = qk->inputs[0], key = qk->inputs[1], v = next->inputs[1], out = next->outputs[0];
  AttentionSite s;
  s.q = q;
  s.k = key;
  s.v = v;
  s.out = out;
  if (bias >= 0) s.masks.push_back(MaskOf(bias, "attn_bias"));
  // A boolean mask is passed as attn_mask and kept; is_causal keeps nothing. A graph cannot
  // always tell them apart: a mask made from shapes alone through a Trilu, over as many queries
  // as keys (or one query), is the causal mask transformers' SDPA path replaces with is_causal
  // when there is no padding mask (masking_utils.py, sdpa_mask: allow_is_causal_skip); any other
  // mask is counted.
  s.grouped_kv = RepeatedHeads(key) && RepeatedHeads(v);
  bool causal_mask = false;
  if (mask >= 0 && CausalMaskFromShapes(mask)) {
    const auto& probs_shape = b_.shapes[static_cast<size_t>(softmax.outputs[0])];
    if (probs_shape && probs_shape->size() >= 2) {
      const int64_t lq = (*probs_shape)[probs_shape->size() - 2], lk = probs_shape->back();
      causal_mask = lq > 0 && (lq == lk || lq == 1);
    }
  }
  if (causal_mask) {
    s.causal = true;
    s.causal_mask = mask;
  } else if (mask >= 0) {
    s.masks.push_back(MaskOf(mask, "attn_mask"));
  }
  s.dropout = dropout;
  s.training = RequiresGrad(q) || RequiresGrad(key) || RequiresGrad(v) || RequiresGrad(bias);
  const int32_t dt = b_.dtypes[static_cast<size_t>(q)];
  s.elem = base::DTypeSize(dt) == 0 ? 4 : base::DTypeSize(dt);
  s.bf16 = dt == base::kBFloat16;
  const auto& p_shape = b_.shapes[static_cast<size_t>(softmax.outputs[0])];
  const auto& q_shape = b_.shapes[static_cast<size_t>(q)];
  const auto& v_shape = b_.shapes[static_cast<size_t>(v)];
  if (p_shape && p_shape->size() >= 2 && q_shape && !q_shape->empty() && v_shape &&
      !v_shape->empty() && p_shape->back() > 0 && (*p_shape)[p_shape->size() - 2] > 0) {
    const uint64_t lk = static_cast<uint64_t>(p_shape->back());
    const uint64_t lq = static_cast<uint64_t>((*p_shape)[p_shape->size() - 2]);
    s.batch = Numel(softmax.outputs[0]) / lk / lq;
    s.q_heads = s.kv_heads = 1;
    s.q_len = lq;
    s.kv_len = lk;
    s.head_dim = q_shape->back() > 0 ? static_cast<uint64_t>(q_shape->back()) : 0;
    s.v_head_dim = v_shape->back() > 0 ? static_cast<uint64_t>(v_shape->back()) : 0;
    s.known = s.batch > 0 && s.head_dim > 0 && s.v_head_dim > 0;
    if (s.known && !s.grouped_kv) BroadcastHeads(key, v, &s);
  }
  *site = std::move(s);
  std::sort(c.nodes.begin(), c.nodes.end());
  return c;
}

bool Structure::CausalMaskFromShapes(int mask) const {
  std::vector<int> todo{mask};
  std::set<int> seen;
  bool trilu = false;
  while (!todo.empty()) {
    const int id = todo.back();
    todo.pop_back();
    if (id < 0 || !seen.insert(id).second) continue;
    if (seen.size() > 64) return false;  // not a small shape computation
    const Node* p = Producer(id);
    if (!p) {
      if (g_.value(id).kind == core::ValueKind::kDataInput) return false;
      continue;  // an initializer or constant
    }
    if (Is(p, "Shape") || Is(p, "Size")) continue;  // reads a shape, not data
    trilu |= Is(p, "Trilu");
    for (int in : p->inputs) todo.push_back(in);
  }
  return trilu;
}

// k^T [.., D, S] and v [.., S, Dv] with fewer rows than the probabilities [rows, L, S]: the
// MatMuls broadcast them over the query heads (Falcon's multi-query attention). The site then
// counts k's rows as its batch and the query heads per k/v head as q_heads.
void Matcher::BroadcastHeads(int key, int v, AttentionSite* s) const {
  const uint64_t k_rows = Numel(key) / (s->head_dim * s->kv_len);
  const uint64_t v_rows = Numel(v) / (s->v_head_dim * s->kv_len);
  if (k_rows == 0 || v_rows == 0 || (k_rows >= s->batch && v_rows >= s->batch)) return;
  s->broadcast_kv = true;
  if (k_rows == v_rows && s->batch % k_rows == 0) {
    s->q_heads = s->batch / k_rows;
    s->batch = k_rows;
  }
}

bool Matcher::RepeatedHeads(int id) const {
  const Node* p = Producer(id);
  if (Is(p, "Transpose") && !p->inputs.empty()) p = Producer(p->inputs[0]);
  if (!Is(p, "Reshape") || p->inputs.empty()) return false;
  const Node* expand = Producer(p->inputs[0]);
  if (!Is(expand, "Expand") || expand->inputs.empty() || expand->outputs.empty()) return false;
  return Numel(expand->outputs[0]) > Numel(expand->inputs[0]) && Numel(expand->inputs[0]) > 0;
}

bool Structure::IdentityDropout(size_t k) const {
  const Node& n = g_.nodes[k];
  return Is(&n, "Dropout") && n.inputs.size() >= 2 && ScalarNear(n.inputs[1], 0.0);
}

FusedChain Matcher::SavedBy(const ChainMatch& m) const {
  FusedChain c = m.chain;
  if (c.kind != FusedKind::kLayerNorm && c.kind != FusedKind::kGroupNorm) {  // the input alone
    if (RequiresGrad(m.x)) c.saved.push_back({m.x, 0, "x"});
    return c;
  }
  const bool active = RequiresGrad(m.x) || std::any_of(m.params.begin(), m.params.end(),
                                                       [&](int p) { return RequiresGrad(p); });
  if (!active) return c;
  c.saved.push_back({m.x, 0, "x"});
  if (!m.params.empty()) c.saved.push_back({m.params.front(), 0, "weight"});
  const uint64_t rows = c.kind == FusedKind::kGroupNorm ? LeadingTwo(m.mean) : Numel(m.mean);
  c.saved.push_back({-1, rows * 4, "mean(fp32)"});
  c.saved.push_back({-1, rows * 4, "rstd(fp32)"});
  return c;
}

// Where a graph may fuse, whatever its dims (Graph::derived keeps it, so each bound graph reads it
// instead of walking every node): in node order, the fused attention ops (a rule with an
// attention_site), the Softmax nodes (attention chains, matched on each bound graph: their call
// reads shapes) and the elementwise chains found by structure (sized on each bound graph,
// Matcher::SavedBy); and the identity dropouts.
struct FusionSites {
  enum class Kind { kAttentionOp, kSoftmax, kElementwise };
  struct Site {
    size_t node = 0;
    Kind kind = Kind::kSoftmax;
    size_t chain = 0;  // kElementwise: the index in `chains`
  };
  std::vector<Site> sites;
  std::vector<ChainMatch> chains;
  std::vector<size_t> identity_dropouts;
};
struct FusionSitesKey {
  bool operator==(const FusionSitesKey&) const = default;
};

std::shared_ptr<const FusionSites> FindSites(const core::Graph& g) {
  auto found = std::make_shared<FusionSites>();
  const Structure structure(g);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& node = g.nodes[k];
    if (structure.IdentityDropout(k)) found->identity_dropouts.push_back(k);
    if (const OpRule* rule = RuleOf(node); rule && rule->attention_site) {
      found->sites.push_back({k, FusionSites::Kind::kAttentionOp});
      continue;
    }
    const std::string_view op = node.op_type;  // compared by size first
    if (op == "Softmax") {
      found->sites.push_back({k, FusionSites::Kind::kSoftmax});
      continue;
    }
    std::optional<ChainMatch> m;
    if (op == "Sub") m = structure.LayerNorm(k);
    if (op == "InstanceNormalization") m = structure.GroupNorm(k);
    if (op == "Erf") m = structure.Gelu(k);
    if (op == "Tanh") m = structure.GeluTanh(k);
    if (op == "Sigmoid") m = structure.Silu(k);
    if (op == "Softplus") m = structure.Mish(k);
    if (!m) continue;
    found->sites.push_back({k, FusionSites::Kind::kElementwise, found->chains.size()});
    found->chains.push_back(std::move(*m));
  }
  return found;
}

}  // namespace

const char* ToString(FusedKind kind) {
  switch (kind) {
    case FusedKind::kLayerNorm:
      return "layer_norm";
    case FusedKind::kGroupNorm:
      return "group_norm";
    case FusedKind::kGelu:
      return "gelu";
    case FusedKind::kSilu:
      return "silu";
    case FusedKind::kMish:
      return "mish";
    case FusedKind::kAttention:
      return "scaled_dot_product_attention";
  }
  return "?";
}

Fusion::Fusion(const core::BoundGraph& b, const std::vector<bool>& requires_grad,
               const FusionChoices& choices) {
  const core::Graph& g = *b.graph;
  chain_of_.assign(g.nodes.size(), -1);
  call_of_.assign(g.nodes.size(), -1);
  backward_of_.assign(g.nodes.size(), -1);
  interior_.assign(g.values.size(), false);
  identity_dropout_.assign(g.nodes.size(), false);
  const AttentionPolicy& policy = choices.attention;
  // The call as the run sees it: the precision's dtype, autograd recording only in training.
  auto as_run = [&](AttentionSite* s) {
    if (policy.half) {
      s->elem = 2;
      s->bf16 = policy.bf16;
    }
    s->training = s->training && policy.training;
  };
  const Matcher m(b, requires_grad);
  const std::shared_ptr<const FusionSites> sites = g.derived.GetOrMake<FusionSites>(
      FusionSitesKey{}, g.nodes.size(), [&g](const FusionSitesKey&) { return FindSites(g); });
  for (size_t k : sites->identity_dropouts) identity_dropout_[k] = true;
  for (const FusionSites::Site& site : sites->sites) {
    const size_t k = site.node;
    const core::Node& node = g.nodes[k];
    if (site.kind == FusionSites::Kind::kAttentionOp) {
      AttentionCall call;
      call.node = k;
      RuleOf(node)->attention_site(RuleContext{node, b, requires_grad}, &call.site);
      call.site.training = std::any_of(node.inputs.begin(), node.inputs.end(), [&](int id) {
        return id >= 0 && static_cast<size_t>(id) < requires_grad.size() &&
               requires_grad[static_cast<size_t>(id)];
      });
      as_run(&call.site);
      call.kernel = ChooseAttentionKernel(policy, call.site, &call.reason);
      call.refusal = ForcedRefusal(policy, call.site);
      call_of_[k] = backward_of_[k] = static_cast<int>(calls_.size());
      calls_.push_back(std::move(call));
      continue;
    }
    const bool softmax = site.kind == FusionSites::Kind::kSoftmax;
    if (softmax ? !policy.FusesChains() : !choices.fused_kernels) continue;
    std::optional<FusedChain> c;
    std::optional<AttentionCall> call;
    if (!softmax) c = m.SavedBy(sites->chains[site.chain]);
    if (softmax) {
      call.emplace();
      c = m.Attention(k, &call->site);
      if (!c && m.LooksLikeAttention(k)) unmatched_attention_.push_back(k);
      if (c) {
        call->node = k;
        call->chain = true;
        as_run(&call->site);
        call->kernel = ChooseAttentionKernel(policy, call->site, &call->reason);
        call->refusal = ForcedRefusal(policy, call->site);
        c->saved = AttentionKernelSaved(call->kernel, call->site);
      }
    }
    if (!c) continue;
    // A node already in another chain keeps its first chain.
    if (std::any_of(c->nodes.begin(), c->nodes.end(),
                    [&](size_t n) { return chain_of_[n] >= 0; })) {
      continue;
    }
    if (call) {
      // Math on fp32 inputs: the chain as written (the same computation); on fp16/bf16 inputs the
      // composite upcasts q, k and v to fp32 first, which the chain as written does not show.
      call->as_written = call->kernel == AttentionKernel::kMath && call->site.elem != 2;
      const bool fused = !call->as_written;
      if (fused) backward_of_[c->nodes.back()] = static_cast<int>(calls_.size());
      calls_.push_back(std::move(*call));
      if (!fused) continue;
    }
    for (size_t n : c->nodes) chain_of_[n] = static_cast<int>(chains_.size());
    for (int id : c->interior) interior_[static_cast<size_t>(id)] = true;
    chains_.push_back(std::move(*c));
  }
  DropUnusedCausalMasks(*b.graph);
  for (FusedChain& c : chains_) FindInputs(*b.graph, &c);
}

void Fusion::FindInputs(const core::Graph& g, FusedChain* c) const {
  for (size_t m : c->nodes) {
    for (int in : g.nodes[m].inputs) {
      if (in < 0 || interior(in)) continue;
      const int producer = g.value(in).producer;
      if (producer >= 0 && chain_of(static_cast<size_t>(producer)) == c) continue;
      c->inputs.push_back(in);
    }
  }
  std::sort(c->inputs.begin(), c->inputs.end());
  c->inputs.erase(std::unique(c->inputs.begin(), c->inputs.end()), c->inputs.end());
}

// A causal mask that every fused chain reading it takes as is_causal is never made at run time
// (transformers' SDPA path builds no mask then): it and the values only it needs are 0 bytes.
void Fusion::DropUnusedCausalMasks(const core::Graph& g) {
  std::vector<int> todo;
  std::vector<int> dropped(chains_.size(), -1);  // per chain: the causal mask it does not read
  for (const AttentionCall& call : calls_) {
    if (!call.chain || call.site.causal_mask < 0 || chain_of_[call.node] < 0) continue;
    dropped[static_cast<size_t>(chain_of_[call.node])] = call.site.causal_mask;
    todo.push_back(call.site.causal_mask);
  }
  auto makes_nothing = [&](const core::Node& n) {  // every output is 0 bytes
    return std::all_of(n.outputs.begin(), n.outputs.end(),
                       [&](int out) { return out < 0 || interior(out); });
  };
  auto needed = [&](int id) {  // read by a node that runs, or a graph output
    const core::Value& v = g.value(id);
    if (v.graph_output || v.kind != core::ValueKind::kIntermediate) return true;
    return std::any_of(v.consumers.begin(), v.consumers.end(), [&](int n) {
      const int c = chain_of_[static_cast<size_t>(n)];
      if (c >= 0) return dropped[static_cast<size_t>(c)] != id;  // a chain reads it as is_causal
      return !makes_nothing(g.node(n));
    });
  };
  while (!todo.empty()) {
    const int id = todo.back();
    todo.pop_back();
    if (id < 0 || interior(id) || needed(id)) continue;
    interior_[static_cast<size_t>(id)] = true;
    const int producer = g.value(id).producer;
    if (producer < 0 || !makes_nothing(g.node(producer))) continue;
    for (int in : g.node(producer).inputs) todo.push_back(in);
  }
}

const FusedChain* Fusion::chain_of(size_t n) const {
  return chain_of_[n] < 0 ? nullptr : &chains_[static_cast<size_t>(chain_of_[n])];
}

}  // namespace memest::ops
