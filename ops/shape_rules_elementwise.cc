// ops/shape_rules_elementwise.cc -- shape rules of the elementwise ops with one input (Unary,
// Identity, Neg, Cast, ...), the broadcasting ones (Add, Compare, Where, ...) and the reductions.
// The contract is ops/shape_rules.h's, the policy is at the top of ops/shape_rules.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "ops/shape_rules.h"
#include "ops/shape_rules_internal.h"

namespace memest::ops::shape {

using core::DimTable;
using internal::AttrOrInput;
using internal::Bad;
using internal::BroadcastTwo;
using internal::Dims;
using internal::FoldBroadcast;
using internal::FoldElementwise;
using internal::IntegralValues;
using internal::IntList;
using internal::kBoolT;
using internal::KeepValues;
using internal::kI64;
using internal::kMaxExactDouble;
using internal::NormAxes;
using internal::NormAxis;
using internal::UnknownDims;

namespace {

// Float elementwise fold (shape arithmetic done in floating point: Div, Ceil, Clip of sizes)
// when every input's elements are known numbers; integral results are kept as integers too.
template <typename Fn>
void FoldFloat(InferContext& c, size_t n, Fn fn) {
  if (!base::IsFloatDType(c.out(0).dtype)) return;
  for (size_t k = 0; k < n; ++k) {
    if (c.float_values(k) == nullptr && c.values(k) == nullptr) return;  // nothing to fold
  }
  std::vector<std::vector<double>> numbers(n);
  for (size_t k = 0; k < n; ++k) {
    if (const auto* f = c.float_values(k)) {
      numbers[k] = *f;
    } else if (const Dims* v = c.values(k)) {
      for (const DimExpr& e : *v) {
        auto x = e.AsConstant();
        if (!x) return;
        numbers[k].push_back(static_cast<double>(*x));
      }
    } else {
      return;
    }
  }
  FoldBroadcast<double>(
      c, n, [&](size_t k) { return &numbers[k]; },
      [&](std::span<const double> a) -> std::optional<double> {
        const double r = fn(a);
        if (!std::isfinite(r)) return std::nullopt;
        return r;
      },
      [&](std::vector<double> result) {
        SymTensor& o = c.out(0);
        if (!o.values) o.values = IntegralValues(result);
        o.float_values = std::move(result);
      });
}

// The integer element types, bool included (Cast and Div keep integer elements exact).
bool IsIntegerDType(int32_t t) {
  switch (t) {
    case base::kInt8:
    case base::kInt16:
    case base::kInt32:
    case base::kInt64:
    case base::kUInt8:
    case base::kUInt16:
    case base::kUInt32:
    case base::kUInt64:
    case base::kBool:
      return true;
    default:
      return false;
  }
}

}  // namespace

// -------------------------------------------------------------------------------------------
// Elementwise, one input.

Status Unary(InferContext& c) {
  const SymTensor* x = c.input(0);
  if (x == nullptr) return Status::Ok();
  SymTensor& y = c.out(0);
  y.dtype = x->dtype;
  y.shape = x->shape;
  return Status::Ok();
}

Status Identity(InferContext& c) {
  const SymTensor* x = c.input(0);
  if (x != nullptr) c.out(0) = *x;
  return Status::Ok();
}

Status Neg(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (const Dims* v = c.values(0)) {
    Dims r;
    for (const DimExpr& e : *v) {
      auto n = core::Neg(e);
      if (!n) return Status::Ok();
      r.push_back(*n);
    }
    c.out(0).values = std::move(r);
  }
  return Status::Ok();
}

Status Rounding(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (const Dims* v = c.values(0)) c.out(0).values = *v;  // integers round to themselves
  const std::string& op = c.node().op_type;
  FoldFloat(c, 1, [&](std::span<const double> a) {
    return op == "Ceil" ? std::ceil(a[0]) : op == "Floor" ? std::floor(a[0]) : std::nearbyint(a[0]);
  });
  return Status::Ok();
}

Status Clip(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
  if (c.attr("min") != nullptr) lo = c.attr_float("min", 0.0F);  // opset < 11
  if (c.attr("max") != nullptr) hi = c.attr_float("max", 0.0F);
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!c.has_input(i)) continue;
    const auto* f = c.float_values(i);
    auto v = c.ints(i);
    if ((f == nullptr || f->size() != 1) && (!v || v->size() != 1)) return Status::Ok();
    const double bound = f != nullptr && f->size() == 1 ? (*f)[0] : static_cast<double>((*v)[0]);
    (i == 1 ? lo : hi) = bound;
  }
  FoldFloat(c, 1, [&](std::span<const double> a) { return std::min(std::max(a[0], lo), hi); });
  return Status::Ok();
}

Status Abs(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (const Dims* v = c.values(0)) {
    Dims r;
    for (const DimExpr& e : *v) {
      if (c.table().NonNegative(e)) {
        r.push_back(e);
      } else if (auto n = core::Neg(e); n && c.table().NonNegative(*n)) {
        r.push_back(*n);
      } else {
        return Status::Ok();
      }
    }
    c.out(0).values = std::move(r);
  }
  return Status::Ok();
}

Status BoolUnary(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  c.out(0).dtype = kBoolT;
  return Status::Ok();
}

Status Not(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BoolUnary(c));
  if (auto v = c.ints(0)) {
    Dims r;
    for (int64_t x : *v) r.emplace_back(x == 0 ? 1 : 0);
    c.out(0).values = std::move(r);
  }
  return Status::Ok();
}

Status Dropout(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (c.has_output(1) && c.shape(0) != nullptr) c.Set(1, kBoolT, *c.shape(0));
  return Status::Ok();
}

Status Cast(InferContext& c) {
  const int64_t to = c.attr_int("to", 0);
  if (!base::IsKnownDType(static_cast<int32_t>(to))) return Bad(c, "unknown 'to' type");
  const SymTensor* x = c.input(0);
  SymTensor& y = c.out(0);
  y.dtype = static_cast<int32_t>(to);
  if (x == nullptr) return Status::Ok();
  y.shape = x->shape;
  const bool to_float = base::IsFloatDType(y.dtype);
  if (y.dtype == kBoolT) {
    if (auto v = c.ints(0)) {
      Dims r;
      for (int64_t e : *v) r.emplace_back(e != 0 ? 1 : 0);
      y.values = std::move(r);
    } else if (x->float_values) {
      Dims r;
      for (double e : *x->float_values) r.emplace_back(e != 0.0 ? 1 : 0);
      y.values = std::move(r);
    }
  } else if (IsIntegerDType(y.dtype) || to_float) {
    if (x->values) {
      y.values = x->values;
    } else if (x->float_values && !to_float) {
      Dims r;  // float -> integer truncates toward zero
      for (double e : *x->float_values) {
        if (!std::isfinite(e) || std::fabs(e) > kMaxExactDouble) return Status::Ok();
        r.emplace_back(static_cast<int64_t>(std::trunc(e)));
      }
      y.values = std::move(r);
    }
    if (to_float) {
      if (x->float_values) {
        y.float_values = x->float_values;
      } else if (auto v = c.ints(0)) {
        y.float_values.emplace(v->begin(), v->end());
      }
    }
  }
  return Status::Ok();
}

Status CastLike(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Identity(c));
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(1);
  if (!IsIntegerDType(y.dtype) && !base::IsFloatDType(y.dtype)) {
    y.values.reset();
    y.float_values.reset();
  }
  if (!base::IsFloatDType(y.dtype)) y.float_values.reset();
  return Status::Ok();
}

Status LikeWithDtype(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int64_t dt = c.attr_int("dtype", -1);
  if (dt != -1) {
    if (!base::IsKnownDType(static_cast<int32_t>(dt))) return Bad(c, "unknown dtype");
    c.out(0).dtype = static_cast<int32_t>(dt);
  }
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Broadcasting.

namespace {

// Broadcast shape of inputs [first, last); nullopt when some rank is unknown; an error when
// dims cannot broadcast.
Result<std::optional<Dims>> BroadcastInputs(InferContext& c, size_t first, size_t last) {
  std::optional<Dims> out;
  const Dims* only = nullptr;  // the first input's shape, copied only when no other comes
  for (size_t i = first; i < last && i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const Dims* s = c.shape(i);
    if (s == nullptr) return std::optional<Dims>();
    if (!out && only == nullptr) {
      only = s;
      continue;
    }
    auto b = BroadcastTwo(c, out ? *out : *only, *s);
    if (!b) return Bad(c, "input shapes do not broadcast");
    out = std::move(b);
  }
  if (!out && only != nullptr) out = *only;
  return out;
}

// Broadcast shape of every input into output 0 with `dtype` (0: input 0's).
Status BroadcastAll(InferContext& c, int32_t dtype, size_t first = 0) {
  SymTensor& y = c.out(0);
  y.dtype = dtype != 0 ? dtype : c.dtype(first);
  MEMEST_ASSIGN_OR_RETURN(auto s, BroadcastInputs(c, first, c.num_inputs()));
  if (s) {
    if (s->size() > core::kMaxRank) return Status::Ok();
    y.shape = std::move(*s);
  }
  return Status::Ok();
}

}  // namespace

Status Arith(InferContext& c) { return BroadcastAll(c, 0); }

Status Add(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) { return core::Add(a[0], a[1]); });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] + a[1]; });
  return Status::Ok();
}

Status Sub(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) { return core::Sub(a[0], a[1]); });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] - a[1]; });
  return Status::Ok();
}

Status Mul(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) { return core::Mul(a[0], a[1]); });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] * a[1]; });
  return Status::Ok();
}

Status Div(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  const bool integer = IsIntegerDType(c.out(0).dtype);
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    if (auto q = core::DivExact(a[0], a[1])) return q;
    // Integer division truncates; it is floor division when both operands are >= 0.
    if (integer && c.table().NonNegative(a[0]) && c.table().Less(0, a[1]).value_or(false)) {
      return c.table().FloorDiv(a[0], a[1]);
    }
    return std::nullopt;
  });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] / a[1]; });
  return Status::Ok();
}

Status Mod(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  const bool fmod = c.attr_int("fmod", 0) != 0;
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    const bool positive = c.table().Less(0, a[1]).value_or(false);
    if (!positive) return std::nullopt;
    if (fmod && !c.table().NonNegative(a[0])) return std::nullopt;  // C fmod: sign of a
    return c.table().Mod(a[0], a[1]);
  });
  return Status::Ok();
}

Status Compare(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, kBoolT));
  const std::string& op = c.node().op_type;
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    std::optional<bool> r;
    DimTable& t = c.table();
    if (op == "Equal") {
      r = t.Equal(a[0], a[1]);
    } else if (op == "Less") {
      r = t.Less(a[0], a[1]);
    } else if (op == "Greater") {
      r = t.Less(a[1], a[0]);
    } else if (op == "LessOrEqual") {
      if (auto g = t.Less(a[1], a[0])) r = !*g;
    } else if (op == "GreaterOrEqual") {
      if (auto l = t.Less(a[0], a[1])) r = !*l;
    }
    if (!r) return std::nullopt;
    return DimExpr(*r ? 1 : 0);
  });
  return Status::Ok();
}

Status Logical(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, kBoolT));
  const std::string& op = c.node().op_type;
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    auto x = a[0].AsConstant(), y = a[1].AsConstant();
    if (!x || !y) return std::nullopt;
    const bool p = *x != 0, q = *y != 0;
    const bool r = op == "And" ? (p && q) : op == "Or" ? (p || q) : (p != q);
    return DimExpr(r ? 1 : 0);
  });
  return Status::Ok();
}

Status Variadic(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, 0));
  const std::string& op = c.node().op_type;
  if (op == "Mean" || c.num_inputs() == 0) return Status::Ok();
  FoldElementwise(c, c.num_inputs(), [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    DimExpr r = a[0];
    for (size_t i = 1; i < a.size(); ++i) {
      if (op == "Sum") {
        auto s = core::Add(r, a[i]);
        if (!s) return std::nullopt;
        r = *s;
      } else if (op == "Max") {
        r = c.table().Max(r, a[i]);
      } else {
        r = c.table().Min(r, a[i]);
      }
    }
    return r;
  });
  FoldFloat(c, c.num_inputs(), [&](std::span<const double> a) {
    double r = a[0];
    for (size_t i = 1; i < a.size(); ++i) {
      r = op == "Sum" ? r + a[i] : op == "Max" ? std::max(r, a[i]) : std::min(r, a[i]);
    }
    return r;
  });
  return Status::Ok();
}

Status Where(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, 0, 0));
  c.out(0).dtype = c.dtype(1) != 0 ? c.dtype(1) : c.dtype(2);
  FoldElementwise(c, 3, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    auto cond = a[0].AsConstant();
    if (!cond) return std::nullopt;
    return *cond != 0 ? a[1] : a[2];
  });
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Reductions.

Status Reduce(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const bool keep = c.attr_int("keepdims", 1) != 0;
  const IntList axes = AttrOrInput(c, "axes", 1);
  if (axes.given && !axes.values) {
    if (keep) y.shape = UnknownDims(c, x->size());  // rank known, which dims become 1 is not
    return Status::Ok();
  }
  std::vector<size_t> reduced;
  if (axes.given && !axes.values->empty()) {
    MEMEST_ASSIGN_OR_RETURN(reduced, NormAxes(c, *axes.values, x->size()));
  } else if (c.attr_int("noop_with_empty_axes", 0) != 0) {
    y.shape = *x;
    KeepValues(c, 0);
    return Status::Ok();
  } else {
    reduced.resize(x->size());
    std::iota(reduced.begin(), reduced.end(), size_t{0});
  }
  Dims d;
  for (size_t i = 0; i < x->size(); ++i) {
    const bool r = std::binary_search(reduced.begin(), reduced.end(), i);
    if (!r) {
      d.push_back((*x)[i]);
    } else if (keep) {
      d.emplace_back(1);
    }
  }
  y.shape = std::move(d);
  // Fold a 1-D integer reduction (x.numel() exports as ReduceProd(Shape(x))).
  const std::string& op = c.node().op_type;
  const Dims* v = c.values(0);
  if (v != nullptr && x->size() == 1 && !v->empty() &&
      (op == "ReduceSum" || op == "ReduceProd" || op == "ReduceMax" || op == "ReduceMin")) {
    DimExpr acc = (*v)[0];
    for (size_t i = 1; i < v->size(); ++i) {
      if (op == "ReduceSum") {
        acc = c.Add(acc, (*v)[i]);
      } else if (op == "ReduceProd") {
        acc = c.Mul(acc, (*v)[i]);
      } else if (op == "ReduceMax") {
        acc = c.Max(acc, (*v)[i]);
      } else {
        acc = c.Min(acc, (*v)[i]);
      }
    }
    y.values = Dims{acc};
  }
  return Status::Ok();
}

Status ArgReduce(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", 0), x->size());
  if (!axis) return Bad(c, "axis out of range");
  Dims d = *x;
  if (c.attr_int("keepdims", 1) != 0) {
    d[*axis] = 1;
  } else {
    d.erase(d.begin() + static_cast<std::ptrdiff_t>(*axis));
  }
  y.shape = std::move(d);
  return Status::Ok();
}

}  // namespace memest::ops::shape
