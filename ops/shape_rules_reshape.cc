// ops/shape_rules_reshape.cc -- shape rules of the ops that rearrange, extend or resize one
// tensor: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile, Pad, Resize,
// DepthToSpace, SpaceToDepth. The contract is ops/shape_rules.h's, the policy is at the top of
// ops/shape_rules.cc.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "ops/shape_rules.h"
#include "ops/shape_rules_internal.h"

namespace memest::ops::shape {

using internal::AttrOrInput;
using internal::Bad;
using internal::BroadcastTwo;
using internal::Dims;
using internal::FoldElementwise;
using internal::FoldStrided;
using internal::IntList;
using internal::KeepValues;
using internal::kMaxExactDouble;
using internal::NormAxes;
using internal::NormAxis;
using internal::ShapeInputRank;
using internal::StridedAxis;
using internal::UnknownDims;

// -------------------------------------------------------------------------------------------
// Shape manipulation.

Status Reshape(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  std::optional<Dims> target;
  if (auto a = c.attr_ints("shape")) {  // opset < 5
    target.emplace(a->begin(), a->end());
  } else if (const Dims* v = c.values(1)) {
    target = *v;
  }
  if (!target) {
    if (auto n = ShapeInputRank(c, 1)) y.shape = UnknownDims(c, *n);
    return Status::Ok();
  }
  const bool allowzero = c.attr_int("allowzero", 0) != 0;
  Dims d;
  std::optional<size_t> infer;
  for (size_t i = 0; i < target->size(); ++i) {
    const DimExpr& e = (*target)[i];
    const auto k = e.AsConstant();
    if (k && *k == -1) {
      if (infer) return Bad(c, "more than one -1 in the target shape");
      infer = i;
      d.emplace_back(1);
    } else if (k && *k == 0 && !allowzero) {
      if (x == nullptr) {
        d.push_back(c.Unknown());
      } else if (i < x->size()) {
        d.push_back((*x)[i]);
      } else {
        return Bad(c, "0 in the target shape past the input's rank");
      }
    } else if (k && *k < 0) {
      return Bad(c, "negative dim in the target shape");
    } else {
      d.push_back(e);
    }
  }
  if (infer) {
    if (x == nullptr) {
      d[*infer] = c.Unknown();
    } else {
      d[*infer] = c.ExactDiv(c.Product(*x), c.Product(d));
    }
  }
  y.shape = std::move(d);
  KeepValues(c, 0);
  return Status::Ok();
}

Status Flatten(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  // Flatten's axis lies in [-r, r]; a negative one counts from r.
  const int64_t a = c.attr_int("axis", 1);
  const auto r = static_cast<int64_t>(x->size());
  if (a < -r || a > r) return Bad(c, "axis out of range");
  const auto axis = static_cast<size_t>(a < 0 ? a + r : a);
  const std::span<const DimExpr> all(*x);
  y.shape = Dims{c.Product(all.subspan(0, axis)), c.Product(all.subspan(axis))};
  KeepValues(c, 0);
  return Status::Ok();
}

Status Squeeze(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const IntList axes = AttrOrInput(c, "axes", 1);
  if (axes.given && !axes.values) return Status::Ok();
  Dims d;
  if (axes.given && !axes.values->empty()) {
    MEMEST_ASSIGN_OR_RETURN(auto drop, NormAxes(c, *axes.values, x->size()));
    for (size_t i = 0; i < x->size(); ++i) {
      if (!std::binary_search(drop.begin(), drop.end(), i)) {
        d.push_back((*x)[i]);
      } else if (auto k = (*x)[i].AsConstant(); k && *k != 1) {
        return Bad(c, "squeezed dim is not 1");
      }
    }
  } else {
    for (const DimExpr& e : *x) {
      auto k = e.AsConstant();
      if (!k) return Status::Ok();  // a symbolic dim might be 1
      if (*k != 1) d.push_back(e);
    }
  }
  y.shape = std::move(d);
  KeepValues(c, 0);
  return Status::Ok();
}

Status Unsqueeze(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const IntList axes = AttrOrInput(c, "axes", 1);
  if (x == nullptr || !axes.values) return Status::Ok();
  const size_t rank = x->size() + axes.values->size();
  if (rank > core::kMaxRank) return Bad(c, "rank too large");
  MEMEST_ASSIGN_OR_RETURN(auto add, NormAxes(c, *axes.values, rank));
  Dims d;
  size_t k = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (std::binary_search(add.begin(), add.end(), i)) {
      d.emplace_back(1);
    } else {
      d.push_back((*x)[k++]);
    }
  }
  y.shape = std::move(d);
  KeepValues(c, 0);
  return Status::Ok();
}

Status Transpose(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  std::vector<int64_t> perm(x->size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
  if (auto p = c.attr_ints("perm")) perm = *p;
  if (perm.size() != x->size()) return Bad(c, "perm does not match the rank");
  std::vector<bool> seen(perm.size(), false);
  Dims d;
  d.reserve(perm.size());
  for (int64_t p : perm) {
    auto a = NormAxis(p, x->size());
    if (!a || seen[*a]) return Bad(c, "perm is not a permutation");
    seen[*a] = true;
    d.push_back((*x)[*a]);
  }
  y.shape = std::move(d);
  if (c.values(0) == nullptr && c.float_values(0) == nullptr) return Status::Ok();  // no elements
  std::vector<StridedAxis> view;
  for (int64_t p : perm) view.push_back({*NormAxis(p, x->size()), 0, 1});
  FoldStrided(c, view);
  return Status::Ok();
}

Status Expand(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* target = c.values(1);
  if (x == nullptr) return Status::Ok();
  if (target == nullptr) {
    if (auto n = ShapeInputRank(c, 1)) y.shape = UnknownDims(c, std::max(x->size(), *n));
    return Status::Ok();
  }
  if (target->size() > core::kMaxRank) return Bad(c, "rank too large");
  auto b = BroadcastTwo(c, *x, *target);
  if (!b) return Bad(c, "shape does not broadcast");
  y.shape = std::move(*b);
  FoldElementwise(c, 1, [](std::span<const DimExpr> a) { return std::optional<DimExpr>(a[0]); });
  return Status::Ok();
}

Status Tile(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const Dims* r = c.values(1);
  Dims d;
  if (r != nullptr && r->size() != x->size()) return Bad(c, "repeats do not match the rank");
  for (size_t i = 0; i < x->size(); ++i) {
    d.push_back(r != nullptr ? c.Mul((*x)[i], (*r)[i]) : c.Unknown());
  }
  y.shape = std::move(d);
  return Status::Ok();
}

Status Pad(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const size_t r = x->size();
  std::optional<Dims> pads;
  if (auto a = c.attr_ints("pads")) {
    pads.emplace(a->begin(), a->end());
  } else if (auto p = c.attr_ints("paddings")) {
    pads.emplace(p->begin(), p->end());
  } else if (const Dims* v = c.values(1)) {
    pads = *v;
  }
  std::vector<size_t> axes(r);
  std::iota(axes.begin(), axes.end(), size_t{0});
  if (c.has_input(3)) {
    auto a = c.ints(3);
    if (!a) {
      pads.reset();
    } else {
      axes.clear();
      for (int64_t ax : *a) {
        auto n = NormAxis(ax, r);
        if (!n) return Bad(c, "axis out of range");
        axes.push_back(*n);
      }
    }
  }
  Dims d = *x;
  if (!pads) {
    for (size_t a : axes) d[a] = c.Unknown();
  } else {
    if (pads->size() != 2 * axes.size()) return Bad(c, "pads do not match the axes");
    for (size_t k = 0; k < axes.size(); ++k) {
      d[axes[k]] = c.Add(d[axes[k]], c.Add((*pads)[k], (*pads)[k + axes.size()]));
    }
  }
  y.shape = std::move(d);
  return Status::Ok();
}

namespace {

// floor(dim * scale), exactly: constants in double, a symbolic dim when scale or 1/scale is an
// integer.
DimExpr ScaleDim(InferContext& c, const DimExpr& dim, double scale) {
  if (!std::isfinite(scale) || scale < 0) return c.Unknown();
  if (auto k = dim.AsConstant()) {
    const double v = std::floor(static_cast<double>(*k) * scale);
    if (v < 0 || v > kMaxExactDouble) return c.Unknown();
    return static_cast<int64_t>(v);
  }
  if (scale >= 1 && std::floor(scale) == scale && scale <= kMaxExactDouble) {
    return c.Mul(dim, static_cast<int64_t>(scale));
  }
  if (scale > 0 && scale < 1) {
    const double inv = std::round(1.0 / scale);
    if (inv <= kMaxExactDouble && 1.0 / inv == scale) {
      return c.FloorDiv(dim, static_cast<int64_t>(inv));
    }
  }
  return c.Unknown();
}

}  // namespace

Status Resize(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const size_t r = x->size();
  const bool upsample = c.node().op_type == "Upsample";
  size_t scales_in = 2;
  if (upsample || c.opset() < 11) scales_in = 1;
  // sizes (Resize >= 11): input 3, used when present and non-empty.
  if (!upsample && c.opset() >= 11 && c.has_input(3)) {
    const Dims* sizes = c.values(3);
    const Dims* ss = c.shape(3);
    if (sizes != nullptr && !sizes->empty()) {
      Dims d = *x;
      std::vector<size_t> axes(r);
      std::iota(axes.begin(), axes.end(), size_t{0});
      if (auto a = c.attr_ints("axes")) {
        axes.clear();
        for (int64_t ax : *a) {
          auto n = NormAxis(ax, r);
          if (!n) return Bad(c, "axis out of range");
          axes.push_back(*n);
        }
      }
      if (sizes->size() != axes.size()) return Bad(c, "sizes do not match the rank");
      for (size_t k = 0; k < axes.size(); ++k) d[axes[k]] = (*sizes)[k];
      y.shape = std::move(d);
      return Status::Ok();
    }
    if (sizes == nullptr && !(ss != nullptr && ss->size() == 1 && (*ss)[0] == DimExpr(0))) {
      y.shape = UnknownDims(c, r);
      return Status::Ok();
    }
  }
  std::optional<std::vector<double>> scales;
  if (auto a = c.attr_floats("scales")) {
    scales.emplace(a->begin(), a->end());
  } else if (const auto* f = c.float_values(scales_in)) {
    scales = *f;
  }
  if (!scales) {
    y.shape = UnknownDims(c, r);
    return Status::Ok();
  }
  if (scales->size() != r) return Bad(c, "scales do not match the rank");
  Dims d;
  for (size_t i = 0; i < r; ++i) d.push_back(ScaleDim(c, (*x)[i], (*scales)[i]));
  y.shape = std::move(d);
  return Status::Ok();
}

namespace {

// DepthToSpace (`to_space`) and SpaceToDepth over [N, C, H, W]: blocks of b*b channels become
// b x b spatial tiles, or back.
Status BlockRearrange(InferContext& c, bool to_space) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const int64_t b = c.attr_int("blocksize", 0);
  if (x->size() != 4 || b < 1 || b > (int64_t{1} << 20))
    return Bad(c, "needs rank 4, blocksize >= 1");
  if (to_space) {
    y.shape = Dims{(*x)[0], c.ExactDiv((*x)[1], b * b), c.Mul((*x)[2], b), c.Mul((*x)[3], b)};
  } else {
    y.shape = Dims{(*x)[0], c.Mul((*x)[1], b * b), c.ExactDiv((*x)[2], b), c.ExactDiv((*x)[3], b)};
  }
  return Status::Ok();
}

}  // namespace

Status DepthToSpace(InferContext& c) { return BlockRearrange(c, /*to_space=*/true); }
Status SpaceToDepth(InferContext& c) { return BlockRearrange(c, /*to_space=*/false); }

}  // namespace memest::ops::shape
