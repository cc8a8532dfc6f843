// ops/shape_rules_values.cc -- shape rules of the ops whose output is a shape or a generated
// tensor (Shape, Size, Constant, ConstantOfShape, Range, OneHot, the random ops) and of the
// selections whose sizes depend on the data (TopK, NonZero, Unique, NonMaxSuppression). The
// contract is ops/shape_rules.h's, the policy is at the top of ops/shape_rules.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "base/dtype.h"
#include "ops/shape_rules.h"
#include "ops/shape_rules_internal.h"

namespace memest::ops::shape {

using internal::Bad;
using internal::ConstNumel;
using internal::Dims;
using internal::IntegralValues;
using internal::kI64;
using internal::kMaxExactDouble;
using internal::NormAxis;
using internal::ShapeInputRank;
using internal::UnknownDims;

// -------------------------------------------------------------------------------------------
// Shape values and generators.

Status Shape(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const auto r = static_cast<int64_t>(x->size());
  auto norm = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
  const int64_t start = norm(c.attr_int("start", 0));
  const int64_t end = std::max(start, norm(c.attr_int("end", r)));
  y.shape = Dims{end - start};
  y.values = Dims(x->begin() + start, x->begin() + end);
  return Status::Ok();
}

Status Size(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  y.shape = Dims{};
  if (const Dims* x = c.shape(0)) y.values = Dims{c.Product(*x)};
  return Status::Ok();
}

Status Constant(InferContext& c) {
  SymTensor& y = c.out(0);
  auto ints = [&](std::vector<int64_t> v, bool scalar) {
    y.dtype = kI64;
    y.shape = scalar ? Dims{} : Dims{static_cast<int64_t>(v.size())};
    if (v.size() <= core::kMaxTrackedElements) y.values.emplace(v.begin(), v.end());
  };
  auto floats = [&](std::vector<double> v, bool scalar) {
    y.dtype = base::kFloat;
    y.shape = scalar ? Dims{} : Dims{static_cast<int64_t>(v.size())};
    if (v.size() <= core::kMaxTrackedElements) {
      y.values = IntegralValues(v);
      y.float_values = std::move(v);
    }
  };
  if (const auto* a = c.attr("value"); a != nullptr && a->has_t()) {
    y = ConstantType(a->t());
  } else if (const auto* s = c.attr("sparse_value"); s != nullptr && s->has_sparse_tensor()) {
    const auto& st = s->sparse_tensor();
    y.dtype = base::IsKnownDType(st.values().data_type()) ? st.values().data_type() : 0;
    Dims d;
    for (int64_t x : st.dims()) {
      if (x < 0) return Bad(c, "negative dim");
      d.emplace_back(x);
    }
    if (d.size() <= core::kMaxRank) y.shape = std::move(d);
  } else if (const auto* i = c.attr("value_int"); i != nullptr) {
    ints({i->i()}, true);
  } else if (auto is = c.attr_ints("value_ints")) {
    ints(std::move(*is), false);
  } else if (const auto* f = c.attr("value_float"); f != nullptr) {
    floats({static_cast<double>(f->f())}, true);
  } else if (auto fs = c.attr_floats("value_floats")) {
    floats(std::vector<double>(fs->begin(), fs->end()), false);
  } else if (c.attr("value_string") != nullptr) {
    y.dtype = base::kString;
    y.shape = Dims{};
  } else if (const auto* ss = c.attr("value_strings"); ss != nullptr) {
    y.dtype = base::kString;
    y.shape = Dims{static_cast<int64_t>(ss->strings_size())};
  } else {
    return Bad(c, "no value attribute");
  }
  return Status::Ok();
}

Status ConstantOfShape(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = base::kFloat;
  std::optional<DimExpr> fill(0);
  if (const auto* a = c.attr("value"); a != nullptr && a->has_t()) {
    SymTensor v = ConstantType(a->t());
    y.dtype = v.dtype;
    fill.reset();
    if (v.values && v.values->size() == 1) fill = (*v.values)[0];
  }
  const Dims* target = c.values(0);
  if (target == nullptr) {
    if (auto n = ShapeInputRank(c, 0)) y.shape = UnknownDims(c, *n);
    return Status::Ok();
  }
  if (target->size() > core::kMaxRank) return Bad(c, "rank too large");
  for (const DimExpr& e : *target) {
    if (auto k = e.AsConstant(); k && *k < 0) return Bad(c, "negative dim");
  }
  y.shape = *target;
  if (fill) {
    if (auto n = ConstNumel(*y.shape)) y.values.emplace(*n, *fill);
  }
  return Status::Ok();
}

Status Range(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  auto scalar = [&](size_t i) -> std::optional<DimExpr> {
    const Dims* v = c.values(i);
    if (v == nullptr || v->size() != 1) return std::nullopt;
    return (*v)[0];
  };
  auto fscalar = [&](size_t i) -> std::optional<double> {
    const auto* f = c.float_values(i);
    if (f != nullptr && f->size() == 1) return (*f)[0];
    if (auto k = scalar(i); k && k->IsConstant()) return static_cast<double>(*k->AsConstant());
    return std::nullopt;
  };
  const auto start = scalar(0), limit = scalar(1), delta = scalar(2);
  if (start && limit && delta && delta->IsConstant() && *delta->AsConstant() != 0) {
    const int64_t step = *delta->AsConstant();
    const DimExpr n =
        step > 0 ? c.CeilDiv(c.Sub(*limit, *start), step)
                 : c.CeilDiv(c.Sub(*start, *limit), step == std::numeric_limits<int64_t>::min()
                                                        ? std::numeric_limits<int64_t>::max()
                                                        : -step);
    const DimExpr len = c.Max(n, 0);
    y.shape = Dims{len};
    auto k = len.AsConstant();
    auto s = start->AsConstant();
    if (k && s && *k <= static_cast<int64_t>(core::kMaxTrackedElements)) {
      Dims vals;
      for (int64_t i = 0; i < *k; ++i) vals.push_back(c.Add(*s, c.Mul(i, step)));
      y.values = std::move(vals);
    }
    return Status::Ok();
  }
  const auto fs = fscalar(0), fl = fscalar(1), fd = fscalar(2);
  if (fs && fl && fd && *fd != 0) {
    const double n = std::ceil((*fl - *fs) / *fd);
    if (!std::isfinite(n) || n > kMaxExactDouble) return Bad(c, "absurd length");
    y.shape = Dims{std::max<int64_t>(0, static_cast<int64_t>(n))};
    return Status::Ok();
  }
  y.shape = Dims{c.Unknown()};
  return Status::Ok();
}

Status OneHot(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(2);
  const Dims* idx = c.shape(0);
  if (idx == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", -1), idx->size(), /*inclusive=*/true);
  if (!axis) return Bad(c, "axis out of range");
  DimExpr depth = c.Unknown();
  if (const Dims* v = c.values(1); v != nullptr && v->size() == 1) {
    depth = (*v)[0];
  } else if (const auto* f = c.float_values(1); f != nullptr && f->size() == 1) {
    if (!std::isfinite((*f)[0]) || std::fabs((*f)[0]) > kMaxExactDouble) return Bad(c, "bad depth");
    depth = static_cast<int64_t>((*f)[0]);
  }
  Dims d = *idx;
  d.insert(d.begin() + static_cast<std::ptrdiff_t>(*axis), depth);
  y.shape = std::move(d);
  return Status::Ok();
}

Status RandomShape(InferContext& c) {
  SymTensor& y = c.out(0);
  const int64_t dt = c.attr_int("dtype", base::kFloat);
  if (!base::IsKnownDType(static_cast<int32_t>(dt))) return Bad(c, "unknown dtype");
  y.dtype = static_cast<int32_t>(dt);
  auto s = c.attr_ints("shape");
  if (!s) return Bad(c, "no shape");
  if (s->size() > core::kMaxRank) return Bad(c, "rank too large");
  Dims d;
  for (int64_t x : *s) {
    if (x < 0) return Bad(c, "negative dim");
    d.emplace_back(x);
  }
  y.shape = std::move(d);
  return Status::Ok();
}

Status Multinomial(InferContext& c) {
  SymTensor& y = c.out(0);
  const int64_t dt = c.attr_int("dtype", base::kInt32);
  if (!base::IsKnownDType(static_cast<int32_t>(dt))) return Bad(c, "unknown dtype");
  y.dtype = static_cast<int32_t>(dt);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() != 2) return Bad(c, "input must be 2-D");
  const int64_t n = c.attr_int("sample_size", 1);
  if (n < 0) return Bad(c, "negative sample_size");
  y.shape = Dims{(*x)[0], n};
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Selection.

Status TopK(InferContext& c) {
  c.out(0).dtype = c.dtype(0);
  c.out(1).dtype = kI64;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", -1), x->size());
  if (!axis) return Bad(c, "axis out of range");
  DimExpr k = c.Unknown();
  if (const auto* a = c.attr("k"); a != nullptr && a->type() == onnx::AttributeProto::INT) {
    if (a->i() < 0) return Bad(c, "negative k");
    k = a->i();
  } else if (const Dims* v = c.values(1); v != nullptr && v->size() == 1) {
    k = (*v)[0];
    if (auto kc = k.AsConstant(); kc && *kc < 0) return Bad(c, "negative k");
  }
  Dims d = *x;
  d[*axis] = k;
  c.Set(0, c.dtype(0), d);
  c.Set(1, kI64, d);
  return Status::Ok();
}

Status NonZero(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  const Dims* x = c.shape(0);
  DimExpr count = c.DataDependent("nonzero");
  if (auto v = c.ints(0)) {
    count =
        static_cast<int64_t>(std::count_if(v->begin(), v->end(), [](int64_t e) { return e != 0; }));
  }
  y.shape = Dims{x != nullptr ? DimExpr(static_cast<int64_t>(x->size())) : c.Unknown(), count};
  return Status::Ok();
}

Status Unique(InferContext& c) {
  const Dims* x = c.shape(0);
  c.out(0).dtype = c.dtype(0);
  for (size_t i = 1; i < 4; ++i) c.out(i).dtype = kI64;
  if (x == nullptr) return Status::Ok();
  const DimExpr u = c.DataDependent("unique");
  const int64_t axis_attr = c.attr_int("axis", std::numeric_limits<int64_t>::min());
  Dims y;
  DimExpr inverse;
  if (axis_attr == std::numeric_limits<int64_t>::min()) {
    y = Dims{u};
    inverse = c.Product(*x);
  } else {
    auto axis = NormAxis(axis_attr, x->size());
    if (!axis) return Bad(c, "axis out of range");
    y = *x;
    y[*axis] = u;
    inverse = (*x)[*axis];
  }
  c.Set(0, c.dtype(0), y);
  c.Set(1, kI64, Dims{u});
  c.Set(2, kI64, Dims{inverse});
  c.Set(3, kI64, Dims{u});
  return Status::Ok();
}

Status NonMaxSuppression(InferContext& c) {
  c.Set(0, kI64, Dims{c.DataDependent("selected"), 3});
  return Status::Ok();
}

}  // namespace memest::ops::shape
