// ops/shape_rules_helpers.cc -- the helpers the shape-rule families share (declared, with their
// contracts, in ops/shape_rules_internal.h).
#include <algorithm>
#include <cmath>
#include <utility>

#include "ops/shape_rules_internal.h"

namespace memest::ops::shape::internal {

Status Bad(const InferContext& c, const std::string& what) {
  return InvalidModel(c.node().op_type + ": " + what);
}

std::optional<size_t> NormAxis(int64_t axis, size_t rank, bool inclusive) {
  const auto r = static_cast<int64_t>(rank) + (inclusive ? 1 : 0);
  if (axis < -r || axis >= r) return std::nullopt;
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

Result<std::vector<size_t>> NormAxes(const InferContext& c, const std::vector<int64_t>& axes,
                                     size_t rank) {
  std::vector<size_t> out;
  for (int64_t a : axes) {
    auto n = NormAxis(a, rank);
    if (!n)
      return Bad(c, "axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
    out.push_back(*n);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) return Bad(c, "repeated axis");
  return out;
}

IntList AttrOrInput(const InferContext& c, std::string_view name, size_t input) {
  IntList l;
  if (auto a = c.attr_ints(name)) {
    l.given = true;
    l.values = std::move(a);
    return l;
  }
  if (c.has_input(input)) {
    l.given = true;
    l.values = c.ints(input);
    if (!l.values) {
      // A known empty 1-D tensor is an empty list.
      const Dims* s = c.shape(input);
      if (s != nullptr && s->size() == 1 && (*s)[0] == DimExpr(0)) l.values.emplace();
    }
  }
  return l;
}

std::optional<std::vector<int64_t>> ConstDims(const Dims& d) {
  std::vector<int64_t> out;
  out.reserve(d.size());
  for (const DimExpr& e : d) {
    auto c = e.AsConstant();
    if (!c || *c < 0) return std::nullopt;
    out.push_back(*c);
  }
  return out;
}

std::optional<size_t> ConstNumel(const Dims& d) {
  uint64_t n = 1;
  for (const DimExpr& e : d) {
    const auto x = e.AsConstant();
    if (!x || *x < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(*x), &n)) return std::nullopt;
  }
  if (n > core::kMaxTrackedElements) return std::nullopt;
  return static_cast<size_t>(n);
}

std::optional<Dims> IntegralValues(const std::vector<double>& f) {
  std::vector<DimExpr> out;
  out.reserve(f.size());
  for (double x : f) {
    if (!std::isfinite(x) || std::floor(x) != x || std::fabs(x) > kMaxExactDouble) {
      return std::nullopt;
    }
    out.emplace_back(static_cast<int64_t>(x));
  }
  return out;
}

std::optional<Dims> BroadcastTwo(InferContext& c, const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const DimExpr one(1);
    const DimExpr& x = i + a.size() >= r ? a[i + a.size() - r] : one;
    const DimExpr& y = i + b.size() >= r ? b[i + b.size() - r] : one;
    auto d = c.table().Broadcast(x, y);
    if (!d) return std::nullopt;
    out[i] = *d;
  }
  return out;
}

Dims UnknownDims(InferContext& c, size_t n) {
  Dims d;
  for (size_t i = 0; i < n; ++i) d.push_back(c.Unknown());
  return d;
}

std::optional<size_t> ShapeInputRank(const InferContext& c, size_t i) {
  const Dims* s = c.shape(i);
  if (s == nullptr || s->size() != 1) return std::nullopt;
  const auto n = (*s)[0].AsConstant();
  if (!n || *n < 0 || *n > static_cast<int64_t>(core::kMaxRank)) return std::nullopt;
  return static_cast<size_t>(*n);
}

void KeepValues(InferContext& c, size_t from) {
  SymTensor& o = c.out(0);
  const SymTensor* in = c.input(from);
  if (in == nullptr || !o.shape) return;
  auto n = ConstNumel(*o.shape);
  if (!n) return;
  if (in->values && in->values->size() == *n) o.values = in->values;
  if (in->float_values && in->float_values->size() == *n) o.float_values = in->float_values;
}

void FoldStrided(InferContext& c, const std::vector<StridedAxis>& axes) {
  SymTensor& o = c.out(0);
  const SymTensor* in = c.input(0);
  if (in == nullptr || !in->shape || !o.shape || (!in->values && !in->float_values)) return;
  const auto in_dims = ConstDims(*in->shape);
  const auto out_dims = ConstDims(*o.shape);
  const auto in_n = ConstNumel(*in->shape), out_n = ConstNumel(*o.shape);
  if (!in_dims || !out_dims || !in_n || !out_n || axes.size() != out_dims->size()) return;
  if ((in->values && in->values->size() != *in_n) ||
      (in->float_values && in->float_values->size() != *in_n)) {
    return;
  }
  std::vector<int64_t> stride(in_dims->size(), 1);
  for (size_t k = in_dims->size(); k-- > 1;) stride[k - 1] = stride[k] * (*in_dims)[k];
  Dims vals;
  std::vector<double> floats;
  std::vector<int64_t> idx(out_dims->size(), 0);
  for (size_t e = 0; e < *out_n; ++e) {
    int64_t src = 0;
    for (size_t k = 0; k < idx.size(); ++k) {
      const StridedAxis& a = axes[k];
      const int64_t coord = a.start + idx[k] * a.step;
      if (a.in_axis >= in_dims->size() || coord < 0 || coord >= (*in_dims)[a.in_axis]) return;
      src += coord * stride[a.in_axis];
    }
    if (in->values) vals.push_back((*in->values)[static_cast<size_t>(src)]);
    if (in->float_values) floats.push_back((*in->float_values)[static_cast<size_t>(src)]);
    for (size_t k = idx.size(); k-- > 0;) {  // next output index, row-major
      if (++idx[k] < (*out_dims)[k]) break;
      idx[k] = 0;
    }
  }
  if (in->values) o.values = std::move(vals);
  if (in->float_values) o.float_values = std::move(floats);
}

std::vector<size_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<size_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * static_cast<size_t>(dims[i]);
  return s;
}

size_t BroadcastIndex(size_t flat, const std::vector<int64_t>& out,
                      const std::vector<size_t>& out_strides, const std::vector<int64_t>& in,
                      const std::vector<size_t>& in_strides) {
  const size_t off = out.size() - in.size();
  size_t idx = 0;
  for (size_t a = 0; a < in.size(); ++a) {
    const size_t coord = (flat / out_strides[a + off]) % static_cast<size_t>(out[a + off]);
    if (in[a] != 1) idx += coord * in_strides[a];
  }
  return idx;
}

}  // namespace memest::ops::shape::internal
