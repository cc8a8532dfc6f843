// ops/shape_rules_nn.cc -- shape rules of normalization (BatchNorm, LayerNorm), the losses,
// the recurrent ops (LSTM, GRU, RNN), Attention, GridSample and quantization. The contract is
// ops/shape_rules.h's, the policy is at the top of ops/shape_rules.cc.
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/shape_rules.h"
#include "ops/shape_rules_internal.h"

namespace memest::ops::shape {

using internal::Bad;
using internal::Dims;
using internal::NormAxis;

// -------------------------------------------------------------------------------------------
// Normalization, losses, recurrent, attention.

Status BatchNorm(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int32_t stat_dtype = c.dtype(3) != 0 ? c.dtype(3) : c.dtype(0);
  std::optional<Dims> stat;
  if (const Dims* m = c.shape(3)) {
    stat = *m;
  } else if (const Dims* x = c.shape(0); x != nullptr && x->size() >= 2) {
    stat = Dims{(*x)[1]};
  } else if (const Dims* s = c.shape(1)) {
    stat = *s;
  }
  for (size_t i = 1; i < c.num_outputs(); ++i) {
    c.out(i).dtype = stat_dtype;
    if (stat) c.out(i).shape = stat;
  }
  return Status::Ok();
}

Status LayerNorm(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int64_t stash = c.attr_int("stash_type", core::kFloat);
  if (!core::IsKnownDType(static_cast<int32_t>(stash))) return Bad(c, "unknown stash_type");
  for (size_t i = 1; i < 3; ++i) c.out(i).dtype = static_cast<int32_t>(stash);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", -1), x->size());
  if (!axis) return Bad(c, "axis out of range");
  Dims d = *x;
  for (size_t i = *axis; i < d.size(); ++i) d[i] = 1;
  for (size_t i = 1; i < 3; ++i) c.Set(i, static_cast<int32_t>(stash), d);
  return Status::Ok();
}

Status SoftmaxCrossEntropyLoss(InferContext& c) {
  c.out(0).dtype = c.dtype(0);
  const Dims* scores = c.shape(0);
  const Dims* labels = c.shape(1);
  if (c.has_output(1)) {
    c.out(1).dtype = c.dtype(0);
    if (scores != nullptr) c.out(1).shape = *scores;
  }
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction != "none") {
    c.out(0).shape = Dims{};
  } else if (labels != nullptr) {
    c.out(0).shape = *labels;
  }
  return Status::Ok();
}

Status NegativeLogLikelihoodLoss(InferContext& c) {
  c.out(0).dtype = c.dtype(0);
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction != "none") {
    c.out(0).shape = Dims{};
  } else if (const Dims* t = c.shape(1)) {
    c.out(0).shape = *t;
  }
  return Status::Ok();
}

Status Recurrent(InferContext& c) {
  const int32_t dt = c.dtype(0);
  for (size_t i = 0; i < c.num_outputs(); ++i) c.out(i).dtype = dt;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() != 3) return Bad(c, "X must be 3-D");
  const bool batch_first = c.attr_int("layout", 0) != 0;
  const DimExpr seq = (*x)[batch_first ? 1 : 0];
  const DimExpr batch = (*x)[batch_first ? 0 : 1];
  const std::string direction = c.attr_string("direction", "forward");
  const DimExpr dirs(direction == "bidirectional" ? 2 : 1);
  DimExpr hidden = c.Unknown();
  if (const auto* h = c.attr("hidden_size");
      h != nullptr && h->type() == onnx::AttributeProto::INT) {
    if (h->i() < 0) return Bad(c, "negative hidden_size");
    hidden = h->i();
  } else if (const Dims* r = c.shape(2); r != nullptr && r->size() == 3) {
    hidden = (*r)[2];
  }
  c.Set(0, dt, batch_first ? Dims{batch, seq, dirs, hidden} : Dims{seq, dirs, batch, hidden});
  const Dims state = batch_first ? Dims{batch, dirs, hidden} : Dims{dirs, batch, hidden};
  for (size_t i = 1; i < c.num_outputs() && i < 3; ++i) c.Set(i, dt, state);
  return Status::Ok();
}

Status Attention(InferContext& c) {
  const int32_t dt = c.dtype(0);
  for (size_t i = 0; i < c.num_outputs(); ++i) c.out(i).dtype = i == 0 ? dt : c.dtype(1);
  const Dims* q = c.shape(0);
  const Dims* k = c.shape(1);
  const Dims* v = c.shape(2);
  if (q == nullptr || k == nullptr || v == nullptr) return Status::Ok();
  if (q->size() != k->size() || q->size() != v->size() || (q->size() != 3 && q->size() != 4)) {
    return Bad(c, "Q, K, V must all be 3-D or all 4-D");
  }
  DimExpr heads_q, heads_kv, dk, dv, lq, lkv;
  const DimExpr& b = (*q)[0];
  if (q->size() == 4) {
    heads_q = (*q)[1];
    lq = (*q)[2];
    heads_kv = (*k)[1];
    lkv = (*k)[2];
    dk = (*k)[3];
    dv = (*v)[3];
  } else {
    const int64_t hq = c.attr_int("q_num_heads", 0), hkv = c.attr_int("kv_num_heads", 0);
    if (hq < 1 || hkv < 1) return Bad(c, "3-D inputs need q_num_heads and kv_num_heads");
    heads_q = hq;
    heads_kv = hkv;
    lq = (*q)[1];
    lkv = (*k)[1];
    dk = c.ExactDiv((*k)[2], hkv);
    dv = c.ExactDiv((*v)[2], hkv);
  }
  if (q->size() == 4) {
    c.Set(0, dt, Dims{b, heads_q, lq, dv});
  } else {
    c.Set(0, dt, Dims{b, lq, c.Mul(heads_q, dv)});
  }
  DimExpr total = lkv;
  if (c.has_input(4)) {
    const Dims* past = c.shape(4);
    total = past != nullptr && past->size() == 4 ? c.Add((*past)[2], lkv) : c.Unknown();
  }
  if (c.has_output(1)) c.Set(1, c.dtype(1), Dims{b, heads_kv, total, dk});
  if (c.has_output(2)) c.Set(2, c.dtype(2), Dims{b, heads_kv, total, dv});
  if (c.has_output(3)) c.Set(3, dt, Dims{b, heads_q, lq, total});
  return Status::Ok();
}

Status GridSample(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* grid = c.shape(1);
  if (x == nullptr || grid == nullptr) return Status::Ok();
  if (x->size() < 3 || grid->size() != x->size()) return Bad(c, "X and grid ranks do not match");
  Dims d{(*x)[0], (*x)[1]};
  d.insert(d.end(), grid->begin() + 1, grid->end() - 1);
  y.shape = std::move(d);
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Quantization.

Status QuantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  int32_t dt = c.has_input(2) ? c.dtype(2) : core::kUInt8;
  if (const int64_t o = c.attr_int("output_dtype", 0); o != 0) dt = static_cast<int32_t>(o);
  c.out(0).dtype = dt;
  return Status::Ok();
}

Status DequantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int32_t scale = c.dtype(1);
  c.out(0).dtype = core::IsFloatDType(scale) ? scale : core::kFloat;
  return Status::Ok();
}

Status DynamicQuantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  c.out(0).dtype = core::kUInt8;
  c.Set(1, core::kFloat, Dims{});
  c.Set(2, core::kUInt8, Dims{});
  return Status::Ok();
}

}  // namespace memest::ops::shape
