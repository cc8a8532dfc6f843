// ops/shape_rules_slicing.cc -- shape rules of the ops that join, cut or pick from tensors:
// Concat, Split, Slice, Gather, GatherElements, GatherND, Scatter*, Compress. The contract is
// ops/shape_rules.h's, the policy is at the top of ops/shape_rules.cc.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "base/dtype.h"
#include "ops/shape_rules.h"
#include "ops/shape_rules_internal.h"

namespace memest::ops::shape {

using internal::AttrOrInput;
using internal::Bad;
using internal::ConstDims;
using internal::ConstNumel;
using internal::Dims;
using internal::FoldStrided;
using internal::IntList;
using internal::NormAxis;
using internal::StridedAxis;
using internal::UnknownDims;

// -------------------------------------------------------------------------------------------
// Shape manipulation: joining, cutting, gathering.

Status Concat(InferContext& c) {
  SymTensor& y = c.out(0);
  for (size_t i = 0; i < c.num_inputs() && y.dtype == 0; ++i) y.dtype = c.dtype(i);
  const int64_t axis_attr = c.attr_int("axis", std::numeric_limits<int64_t>::min());
  if (axis_attr == std::numeric_limits<int64_t>::min()) return Bad(c, "no axis");
  std::optional<Dims> d;
  std::optional<size_t> axis;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const Dims* s = c.shape(i);
    if (s == nullptr) return Status::Ok();
    if (!d) {
      axis = NormAxis(axis_attr, s->size());
      if (!axis) return Bad(c, "axis out of range");
      d = *s;
      continue;
    }
    if (s->size() != d->size()) return Bad(c, "inputs of different ranks");
    for (size_t k = 0; k < s->size(); ++k) {
      if (k == *axis) {
        (*d)[k] = c.Add((*d)[k], (*s)[k]);
      } else if (!(*d)[k].IsConstant() && (*s)[k].IsConstant()) {
        (*d)[k] = (*s)[k];
      }
    }
  }
  if (!d) return Status::Ok();
  y.shape = std::move(d);
  // Elements of 1-D concatenations (shape vectors); an input of known length whose elements
  // are not known contributes unknowns.
  if (y.shape->size() != 1 || !ConstNumel(*y.shape)) return Status::Ok();
  Dims vals;
  std::vector<double> floats;
  bool all_floats = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const Dims* v = c.values(i);
    const auto* f = c.float_values(i);
    all_floats = all_floats && f != nullptr;
    if (f != nullptr) floats.insert(floats.end(), f->begin(), f->end());
    if (v != nullptr) {
      vals.insert(vals.end(), v->begin(), v->end());
      continue;
    }
    auto n = ConstNumel(*c.shape(i));
    if (!n) return Status::Ok();
    for (size_t k = 0; k < *n; ++k) vals.push_back(c.Unknown());
  }
  y.values = std::move(vals);
  if (all_floats) y.float_values = std::move(floats);
  return Status::Ok();
}

Status Split(InferContext& c) {
  const size_t n = c.num_outputs();
  for (size_t i = 0; i < n; ++i) c.out(i).dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr || n == 0) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", 0), x->size());
  if (!axis) return Bad(c, "axis out of range");
  const DimExpr& dim = (*x)[*axis];
  Dims sizes;
  const IntList split = AttrOrInput(c, "split", 1);
  if (split.given && !split.values) {
    const Dims* v = c.values(1);
    if (v == nullptr) {
      for (size_t i = 0; i < n; ++i) sizes.push_back(c.Unknown());
    } else {
      sizes = *v;
    }
  } else if (split.given && !split.values->empty()) {
    sizes.assign(split.values->begin(), split.values->end());
  } else {
    const int64_t parts = c.attr_int("num_outputs", static_cast<int64_t>(n));
    if (parts < 1 || static_cast<size_t>(parts) != n) return Bad(c, "num_outputs mismatch");
    const auto k = dim.AsConstant();
    if (c.attr("num_outputs") != nullptr && k && *k % parts != 0) {
      const int64_t chunk = (*k + parts - 1) / parts;  // opset 18: last chunk smaller
      for (int64_t i = 0; i < parts; ++i)
        sizes.emplace_back(std::max<int64_t>(0, std::min(chunk, *k - i * chunk)));
    } else {
      for (int64_t i = 0; i < parts; ++i) sizes.push_back(c.ExactDiv(dim, parts));
    }
  }
  if (sizes.size() != n) return Bad(c, "split sizes do not match the outputs");
  const Dims* v = c.values(0);
  auto ks = [&]() -> std::optional<std::vector<int64_t>> {
    std::vector<int64_t> out;
    for (const DimExpr& s : sizes) {
      auto k = s.AsConstant();
      if (!k || *k < 0) return std::nullopt;
      out.push_back(*k);
    }
    return out;
  }();
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    Dims d = *x;
    d[*axis] = sizes[i];
    c.Set(i, c.dtype(0), d);
    if (v != nullptr && x->size() == 1 && ks &&
        offset + static_cast<size_t>((*ks)[i]) <= v->size()) {
      c.out(i).values = Dims(v->begin() + static_cast<std::ptrdiff_t>(offset),
                             v->begin() + static_cast<std::ptrdiff_t>(offset + (*ks)[i]));
      offset += static_cast<size_t>((*ks)[i]);
    }
  }
  return Status::Ok();
}

namespace {

// ONNX's start/end normalization: negative values count from the end; symbolic values must be
// provably non-negative or negative.
std::optional<DimExpr> FromEnd(InferContext& c, const DimExpr& v, const DimExpr& dim) {
  if (auto k = v.AsConstant()) {
    if (*k < 0) return c.Add(dim, *k);
    return v;
  }
  if (c.table().NonNegative(v)) return v;
  if (c.table().Less(v, 0).value_or(false)) return c.Add(dim, v);
  return std::nullopt;
}

DimExpr Clamp(InferContext& c, const DimExpr& v, const DimExpr& lo, const DimExpr& hi) {
  return c.Min(c.Max(v, lo), hi);
}

// x's dims with those on `axes` (every one when nullopt) unknown: a slice whose starts, ends or
// steps are not known.
Dims UnknownOnAxes(InferContext& c, const Dims& x,
                   const std::optional<std::vector<int64_t>>& axes) {
  if (!axes) return UnknownDims(c, x.size());
  Dims d = x;
  for (int64_t a : *axes) {
    if (auto n = NormAxis(a, x.size())) d[*n] = c.Unknown();
  }
  return d;
}

}  // namespace

Status Slice(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const size_t r = x->size();
  std::optional<Dims> starts, ends;
  std::optional<std::vector<int64_t>> axes, steps;
  bool axes_unknown = false;
  if (auto s = c.attr_ints("starts")) {  // opset < 10
    starts.emplace(s->begin(), s->end());
    if (auto e = c.attr_ints("ends")) ends.emplace(e->begin(), e->end());
    axes = c.attr_ints("axes");
  } else {
    if (const Dims* v = c.values(1)) starts = *v;
    if (const Dims* v = c.values(2)) ends = *v;
    if (c.has_input(3)) {
      axes = c.ints(3);
      axes_unknown = !axes;
    }
    if (c.has_input(4)) {
      steps = c.ints(4);
      if (!steps) {
        y.shape = UnknownOnAxes(c, *x, axes);
        return Status::Ok();
      }
    }
  }
  if (!starts || !ends || axes_unknown) {
    y.shape = UnknownOnAxes(c, *x, axes);
    return Status::Ok();
  }
  const size_t n = starts->size();
  if (ends->size() != n) return Bad(c, "starts and ends differ in length");
  if (!axes) {
    axes.emplace(n);
    std::iota(axes->begin(), axes->end(), int64_t{0});
  }
  if (!steps) steps.emplace(n, 1);
  if (axes->size() != n || steps->size() != n) return Bad(c, "axes/steps length mismatch");
  Dims d = *x;
  std::vector<bool> seen(r, false);
  // Per axis: constant start and step, for folding elements (FoldStrided).
  std::vector<StridedAxis> view(r);
  for (size_t a = 0; a < r; ++a) view[a].in_axis = a;
  bool foldable = true;
  for (size_t k = 0; k < n; ++k) {
    auto axis = NormAxis((*axes)[k], r);
    if (!axis || seen[*axis]) return Bad(c, "axis out of range or repeated");
    seen[*axis] = true;
    const int64_t step = (*steps)[k];
    if (step == 0) return Bad(c, "step 0");
    const DimExpr dim = (*x)[*axis];
    auto s = FromEnd(c, (*starts)[k], dim);
    auto e = FromEnd(c, (*ends)[k], dim);
    if (!s || !e) {
      d[*axis] = c.Unknown();
      foldable = false;
      continue;
    }
    DimExpr len, first;
    if (step > 0) {
      first = Clamp(c, *s, 0, dim);
      len = c.Max(0, c.CeilDiv(c.Sub(Clamp(c, *e, 0, dim), first), step));
    } else {
      const DimExpr last = c.Sub(dim, 1);
      first = Clamp(c, *s, 0, last);
      len = c.Max(0, c.CeilDiv(c.Sub(first, Clamp(c, *e, -1, last)),
                               step == std::numeric_limits<int64_t>::min()
                                   ? std::numeric_limits<int64_t>::max()
                                   : -step));
    }
    d[*axis] = len;
    const auto start = first.AsConstant();
    foldable = foldable && start.has_value();
    view[*axis].start = start.value_or(0);
    view[*axis].step = step;
  }
  y.shape = std::move(d);
  if (foldable) FoldStrided(c, view);  // elements of a sliced constant tensor
  return Status::Ok();
}

Status Gather(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* idx = c.shape(1);
  if (x == nullptr || idx == nullptr) return Status::Ok();
  if (x->empty()) return Bad(c, "scalar data");
  auto axis = NormAxis(c.attr_int("axis", 0), x->size());
  if (!axis) return Bad(c, "axis out of range");
  Dims d(x->begin(), x->begin() + static_cast<std::ptrdiff_t>(*axis));
  d.insert(d.end(), idx->begin(), idx->end());
  d.insert(d.end(), x->begin() + static_cast<std::ptrdiff_t>(*axis) + 1, x->end());
  if (d.size() > core::kMaxRank) return Bad(c, "rank too large");
  y.shape = d;
  // Fold: data elements known, indices constant.
  const Dims* v = c.values(0);
  auto ind = c.ints(1);
  auto xd = ConstDims(*x);
  if (v == nullptr || !ind || !xd || !ConstNumel(d)) return Status::Ok();
  size_t outer = 1, inner = 1;
  for (size_t i = 0; i < *axis; ++i) outer *= static_cast<size_t>((*xd)[i]);
  for (size_t i = *axis + 1; i < xd->size(); ++i) inner *= static_cast<size_t>((*xd)[i]);
  const int64_t dim = (*xd)[*axis];
  Dims vals;
  for (size_t o = 0; o < outer; ++o) {
    for (int64_t j : *ind) {
      if (j < 0) j += dim;
      if (j < 0 || j >= dim) return Bad(c, "index out of range");
      for (size_t k = 0; k < inner; ++k) {
        const size_t src = (o * static_cast<size_t>(dim) + static_cast<size_t>(j)) * inner + k;
        if (src >= v->size()) return Status::Ok();
        vals.push_back((*v)[src]);
      }
    }
  }
  y.values = std::move(vals);
  return Status::Ok();
}

Status GatherElements(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  if (const Dims* idx = c.shape(1)) y.shape = *idx;
  return Status::Ok();
}

Status GatherND(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* idx = c.shape(1);
  if (x == nullptr || idx == nullptr) return Status::Ok();
  if (idx->empty()) return Bad(c, "scalar indices");
  const int64_t b = c.attr_int("batch_dims", 0);
  auto m = idx->back().AsConstant();
  if (!m) return Status::Ok();
  if (b < 0 || *m < 0 || static_cast<uint64_t>(b) + static_cast<uint64_t>(*m) > x->size()) {
    return Bad(c, "indices do not fit the data's rank");
  }
  Dims d(idx->begin(), idx->end() - 1);
  d.insert(d.end(), x->begin() + b + *m, x->end());
  y.shape = std::move(d);
  return Status::Ok();
}

Status Scatter(InferContext& c) { return Unary(c); }

Status Compress(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const int64_t axis_attr = c.attr_int("axis", std::numeric_limits<int64_t>::min());
  std::optional<size_t> axis;
  if (axis_attr != std::numeric_limits<int64_t>::min()) {
    axis = NormAxis(axis_attr, x->size());
    if (!axis) return Bad(c, "axis out of range");
  }
  // The selected count: known when the condition is a constant and the selected dim is too
  // (a condition shorter than the dim selects from its prefix).
  DimExpr count = c.DataDependent("selected");
  const DimExpr dim = axis ? (*x)[*axis] : c.Product(*x);
  auto cond = c.ints(1);
  if (cond && dim.IsConstant()) {
    const auto n = static_cast<size_t>(
        std::min<int64_t>(*dim.AsConstant(), static_cast<int64_t>(cond->size())));
    count = static_cast<int64_t>(std::count_if(cond->begin(),
                                               cond->begin() + static_cast<std::ptrdiff_t>(n),
                                               [](int64_t e) { return e != 0; }));
  }
  if (!axis) {
    y.shape = Dims{count};
    return Status::Ok();
  }
  Dims d = *x;
  d[*axis] = count;
  y.shape = std::move(d);
  return Status::Ok();
}

}  // namespace memest::ops::shape
