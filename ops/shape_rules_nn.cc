// ops/shape_rules_nn.cc -- shape rules of normalization (BatchNorm, LayerNorm), the losses,
// the recurrent ops (LSTM, GRU, RNN), Attention (ONNX's, and ONNX Runtime's com.microsoft
// Attention, MultiHeadAttention and GroupQueryAttention), GridSample and quantization. The
// contract is ops/shape_rules.h's, the policy is at the top of ops/shape_rules.cc. The contrib
// ops follow their schemas in onnxruntime/core/graph/contrib_ops/bert_defs.cc, and where those
// leave a size open (a present cache without a known total length), the rule says which it takes.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
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
  const int64_t stash = c.attr_int("stash_type", base::kFloat);
  if (!base::IsKnownDType(static_cast<int32_t>(stash))) return Bad(c, "unknown stash_type");
  for (size_t i = 1; i < 3; ++i) c.out(i).dtype = static_cast<int32_t>(stash);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", -1), x->size());
  if (!axis) return Bad(c, "axis out of range");
  // Mean and InvStdDev: training exports keep them, others omit them (nothing to set then).
  if (!c.has_output(1) && !c.has_output(2)) return Status::Ok();
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
  // What no scaled_dot_product_attention call computes is refused rather than costed as one
  // (ops/attention.h).
  if (c.attr_float("softcap", 0.0f) != 0.0f) {
    return Bad(c, "softcap is not modelled: no scaled_dot_product_attention kernel caps scores");
  }
  if (c.has_input(4) != c.has_input(5)) return Bad(c, "past_key and past_value come together");
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
    const auto hq = heads_q.AsConstant(), hkv = heads_kv.AsConstant();
    if (hq && hkv && (*hkv < 1 || *hq % *hkv != 0)) {
      return Bad(c, "the query heads must be a multiple of the key/value heads");
    }
    const auto qd = (*q)[3].AsConstant(), kd = dk.AsConstant();
    if (qd && kd && *qd != *kd) return Bad(c, "Q and K must have the same head size");
  } else {
    const int64_t hq = c.attr_int("q_num_heads", 0), hkv = c.attr_int("kv_num_heads", 0);
    if (hq < 1 || hkv < 1) return Bad(c, "3-D inputs need q_num_heads and kv_num_heads");
    if (hq % hkv != 0) return Bad(c, "q_num_heads must be a multiple of kv_num_heads");
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

namespace {

// A positive head-count attribute; 0 when absent.
int64_t HeadsAttr(InferContext& c, std::string_view name) {
  const int64_t h = c.attr_int(name, 0);
  return h > 0 ? h : 0;
}

}  // namespace

// com.microsoft Attention: input [B, L, Din], weights [Din, Nq + Nk + Nv] (qkv_hidden_sizes,
// else three equal parts of the weights' or the bias' width). output [B, L, Nv]; present
// [2, B, H, P + L, Nq / H] after a past [2, B, H, P, D], the past's shape when
// past_present_share_buffer, [2, B, H, L, Nq / H] without a past.
Status MsAttention(InferContext& c) {
  const int32_t dt = c.has_input(2) && c.dtype(2) != 0 ? c.dtype(2) : c.dtype(0);
  for (size_t i = 0; i < c.num_outputs() && i < 2; ++i) c.out(i).dtype = dt;
  const int64_t heads = HeadsAttr(c, "num_heads");
  if (heads == 0) return Bad(c, "num_heads (required) must be positive");
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() != 3) return Bad(c, "input must be 3-D [batch, sequence, hidden]");
  DimExpr qh = c.Unknown(), vh = c.Unknown();
  if (const auto sizes = c.attr_ints("qkv_hidden_sizes")) {
    if (sizes->size() != 3 || (*sizes)[0] < 1 || (*sizes)[1] < 1 || (*sizes)[2] < 1) {
      return Bad(c, "qkv_hidden_sizes must be 3 positive sizes");
    }
    if ((*sizes)[0] != (*sizes)[1]) {
      return Bad(c, "qkv_hidden_sizes: Q and K must have the same hidden size");
    }
    if ((*sizes)[0] % heads != 0 || (*sizes)[2] % heads != 0) {
      return Bad(c, "qkv_hidden_sizes must be multiples of num_heads");
    }
    if (c.has_input(4) && (*sizes)[2] != (*sizes)[0]) {
      return Bad(c, "with a past, Q, K and V must have the same hidden size");
    }
    qh = (*sizes)[0];
    vh = (*sizes)[2];
  } else if (const Dims* w = c.shape(1); w != nullptr && w->size() == 2) {
    qh = vh = c.ExactDiv((*w)[1], 3);
  } else if (const Dims* b = c.shape(2); b != nullptr && b->size() == 1) {
    qh = vh = c.ExactDiv((*b)[0], 3);
  }
  c.Set(0, dt, Dims{(*x)[0], (*x)[1], vh});
  if (!c.has_output(1)) return Status::Ok();
  if (c.has_input(4)) {
    const Dims* past = c.shape(4);
    if (past == nullptr) return Status::Ok();
    if (past->size() != 5) return Bad(c, "past must be 5-D [2, batch, heads, length, head]");
    if (c.attr_int("past_present_share_buffer", 0) != 0) {
      c.Set(1, dt, *past);
    } else {
      c.Set(1, dt,
            Dims{(*past)[0], (*past)[1], (*past)[2], c.Add((*past)[3], (*x)[1]), (*past)[4]});
    }
    return Status::Ok();
  }
  c.Set(1, dt, Dims{2, (*x)[0], heads, (*x)[1], c.ExactDiv(qh, heads)});
  return Status::Ok();
}

// com.microsoft MultiHeadAttention: query [B, L, Nq] (or packed QKV [B, L, H, 3, D]); key
// [B, S, Nq], packed KV [B, S, H, 2, D] or [B, H, S, D] (cross attention); value [B, S, Nv] or
// [B, H, S, Dv]. output [B, L, Nv]; present_key/value [B, H, P + S, D] after past_key/value
// [B, H, P, D], the past's shapes when past_sequence_length is given (a shared buffer), the key's
// and value's when they are already [B, H, S, D]; qk [B, H, L, total].
Status MultiHeadAttention(InferContext& c) {
  const int32_t dt = c.dtype(0);
  for (size_t i = 0; i < c.num_outputs() && i < 4; ++i) c.out(i).dtype = dt;
  const int64_t heads = HeadsAttr(c, "num_heads");
  if (heads == 0) return Bad(c, "num_heads (required) must be positive");
  if (c.has_input(9)) {
    return Bad(c, "cache_indirection (beam search over a shared cache) is not modelled");
  }
  if (c.has_input(6) != c.has_input(7)) return Bad(c, "past_key and past_value come together");
  const Dims* q = c.shape(0);
  if (q == nullptr) return Status::Ok();
  const Dims* k = c.shape(1);
  const Dims* v = c.shape(2);
  DimExpr vh = c.Unknown(), head = c.Unknown(), head_v = c.Unknown(), sk = c.Unknown();
  if (q->size() == 5) {  // packed QKV
    vh = c.Mul((*q)[2], (*q)[4]);
    head = head_v = (*q)[4];
    sk = (*q)[1];
  } else if (q->size() == 3) {
    head = c.ExactDiv((*q)[2], heads);
    if (v != nullptr && v->size() == 3) {
      vh = (*v)[2];
      head_v = c.ExactDiv(vh, heads);
    } else if (v != nullptr && v->size() == 4) {
      vh = c.Mul((*v)[1], (*v)[3]);
      head_v = (*v)[3];
    } else if (v != nullptr) {
      return Bad(c, "value must be 3-D or 4-D");
    } else if (k != nullptr && k->size() == 5) {  // packed KV
      vh = (*q)[2];
      head_v = (*k)[4];
    }
    if (k != nullptr && (k->size() == 3 || k->size() == 5)) sk = (*k)[1];
    if (k != nullptr && k->size() == 4) sk = (*k)[2];
  } else {
    return Bad(c, "query must be 3-D or packed 5-D");
  }
  c.Set(0, dt, Dims{(*q)[0], (*q)[1], vh});
  if (!c.has_output(1) && !c.has_output(2) && !c.has_output(3)) return Status::Ok();
  const DimExpr hs(heads);
  DimExpr total = sk;
  Dims present_k{(*q)[0], hs, sk, head}, present_v{(*q)[0], hs, sk, head_v};
  if (k != nullptr && k->size() == 4) {  // cross attention: the key and value are the cache
    present_k = *k;
    if (v != nullptr && v->size() == 4) present_v = *v;
  } else if (c.has_input(6)) {
    const Dims* past = c.shape(6);
    if (past == nullptr) return Status::Ok();
    if (past->size() != 4) return Bad(c, "past_key must be 4-D [batch, heads, length, head]");
    const Dims* past_v = c.shape(7);
    if (c.has_input(8)) {  // past and present share one buffer
      present_k = *past;
      present_v = past_v != nullptr ? *past_v : *past;
      total = (*past)[2];
    } else {
      total = c.Add((*past)[2], sk);
      present_k = Dims{(*past)[0], (*past)[1], total, (*past)[3]};
      present_v = Dims{(*past)[0], (*past)[1], total,
                       past_v != nullptr && past_v->size() == 4 ? (*past_v)[3] : head_v};
    }
  }
  if (c.has_output(1)) c.Set(1, dt, present_k);
  if (c.has_output(2)) c.Set(2, dt, present_v);
  if (c.has_output(3)) c.Set(3, dt, Dims{(*q)[0], hs, (*q)[1], total});
  return Status::Ok();
}

// com.microsoft GroupQueryAttention: query [B, L, H*D] (or packed [B, L, (H + 2 Hkv) * D]),
// key/value [B, L, Hkv*D]; output [B, L, H*D]; present_key/value [B, Hkv, T, D] in the past's
// dtype, where T is max(P, total_sequence_length) when that input's value is known (the schema's
// rule), else P + L after a past of P (the cache grows by this call's keys; a shared buffer of
// max length would be P), the past's length with sliding_window_cache, and total_sequence_length
// or L without a past; output_qk [B, H, L, T].
Status GroupQueryAttention(InferContext& c) {
  const int64_t hq = HeadsAttr(c, "num_heads"), hkv = HeadsAttr(c, "kv_num_heads");
  if (hq == 0 || hkv == 0) return Bad(c, "num_heads and kv_num_heads (required) must be positive");
  if (hq % hkv != 0) return Bad(c, "num_heads must be a multiple of kv_num_heads");
  // What no scaled_dot_product_attention call computes is refused rather than costed as one
  // (ops/attention.h).
  if (c.attr_float("softcap", 0.0f) != 0.0f) {
    return Bad(c, "softcap is not modelled: no scaled_dot_product_attention kernel caps scores");
  }
  if (c.attr_int("smooth_softmax", 0) != 0 || c.has_input(11)) {
    return Bad(c, "smooth_softmax / head_sink is not modelled (a softmax SDPA does not compute)");
  }
  if (c.attr_int("local_window_size", -1) > 0) {
    return Bad(c,
               "local_window_size (sliding-window attention) is not modelled: PyTorch needs an "
               "explicit mask for it, which the graph does not hold");
  }
  if (c.attr_string("k_quant_type", "NONE") != "NONE" ||
      c.attr_string("v_quant_type", "NONE") != "NONE" || c.has_input(12) || c.has_input(13) ||
      (c.has_input(3) && c.dtype(3) != 0 && !base::IsFloatDType(c.dtype(3)))) {
    return Bad(c, "a quantized KV cache is not modelled (use --kv-cache-dtype on a float graph)");
  }
  if (c.has_input(1) != c.has_input(2)) return Bad(c, "key and value come together");
  if (c.has_input(3) != c.has_input(4)) return Bad(c, "past_key and past_value come together");
  const int32_t dt = c.dtype(0);
  const int32_t cache_dt = c.has_input(3) && c.dtype(3) != 0 ? c.dtype(3) : dt;
  c.out(0).dtype = dt;
  for (size_t i = 1; i < c.num_outputs() && i < 3; ++i) c.out(i).dtype = cache_dt;
  if (c.num_outputs() > 3) c.out(3).dtype = dt;
  const Dims* q = c.shape(0);
  if (q == nullptr) return Status::Ok();
  if (q->size() != 3) return Bad(c, "query must be 3-D [batch, sequence, hidden]");
  const Dims* k = c.shape(1);
  DimExpr head = c.Unknown(), sk = (*q)[1];
  if (c.has_input(1)) {
    if (k != nullptr && k->size() == 3) head = c.ExactDiv((*k)[2], hkv);
    if (k != nullptr && k->size() == 3) sk = (*k)[1];
    c.Set(0, dt, *q);
  } else {  // packed QKV
    head = c.ExactDiv((*q)[2], hq + 2 * hkv);
    c.Set(0, dt, Dims{(*q)[0], (*q)[1], c.Mul(DimExpr(hq), head)});
  }
  std::optional<DimExpr> given;
  if (const std::vector<DimExpr>* t = c.values(6); t != nullptr && t->size() == 1) given = (*t)[0];
  DimExpr total = given ? *given : sk;
  Dims present{(*q)[0], hkv, total, head};
  if (c.has_input(3)) {
    const Dims* past = c.shape(3);
    if (past == nullptr) return Status::Ok();
    if (past->size() != 4) return Bad(c, "past_key must be 4-D [batch, kv_heads, length, head]");
    if (c.attr_int("sliding_window_cache", 0) == 1) {
      total = (*past)[2];
    } else {
      total = given ? c.Max((*past)[2], *given) : c.Add((*past)[2], sk);
    }
    present = Dims{(*past)[0], (*past)[1], total, (*past)[3]};
  }
  for (size_t i = 1; i < 3; ++i) {
    if (c.has_output(i)) c.Set(i, cache_dt, present);
  }
  if (c.has_output(3)) {
    c.Set(3, dt, Dims{(*q)[0], hq, (*q)[1], total});
  }
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
  int32_t dt = c.has_input(2) ? c.dtype(2) : base::kUInt8;
  if (const int64_t o = c.attr_int("output_dtype", 0); o != 0) dt = static_cast<int32_t>(o);
  c.out(0).dtype = dt;
  return Status::Ok();
}

Status DequantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int32_t scale = c.dtype(1);
  c.out(0).dtype = base::IsFloatDType(scale) ? scale : base::kFloat;
  return Status::Ok();
}

Status DynamicQuantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  c.out(0).dtype = base::kUInt8;
  c.Set(1, base::kFloat, Dims{});
  c.Set(2, base::kUInt8, Dims{});
  return Status::Ok();
}

}  // namespace memest::ops::shape
