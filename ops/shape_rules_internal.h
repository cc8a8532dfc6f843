// ops/shape_rules_internal.h -- helpers that several shape-rule families share. For
// ops/shape_rules*.cc only: not part of the ops layer's interface (ops/shape_rules.h is). Defined
// in ops/shape_rules_helpers.cc; the templates are here.
#ifndef MEMEST_OPS_SHAPE_RULES_INTERNAL_H_
#define MEMEST_OPS_SHAPE_RULES_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "core/symbolic_shapes.h"
#include "core/symdim.h"
#include "memest/status.h"
#include "ops/shape_rules.h"

namespace memest::ops::shape::internal {

using Dims = std::vector<DimExpr>;

inline constexpr int32_t kI64 = base::kInt64;
inline constexpr int32_t kBoolT = base::kBool;
// Every integer of at most this magnitude is exact as a double (2^53).
inline constexpr double kMaxExactDouble = 9007199254740992.0;

// The malformed-node error: InvalidModel "<op_type>: <what>".
Status Bad(const InferContext& c, const std::string& what);

// Normalizes `axis` against `rank` ([-rank, rank) ; [-rank-1, rank] when `inclusive`).
std::optional<size_t> NormAxis(int64_t axis, size_t rank, bool inclusive = false);

// Normalized, sorted, unique axes; an error (Bad) when one is out of range or repeated.
Result<std::vector<size_t>> NormAxes(const InferContext& c, const std::vector<int64_t>& axes,
                                     size_t rank);

// An "axes"-like list read from attribute `name` when present, else from input `input`.
struct IntList {
  bool given = false;                          // the attribute or the input is there
  std::optional<std::vector<int64_t>> values;  // its elements; nullopt when given but not known
};
IntList AttrOrInput(const InferContext& c, std::string_view name, size_t input);

// Constant, non-negative dims, or nullopt.
std::optional<std::vector<int64_t>> ConstDims(const Dims& d);

// The element count of constant dims when at most core::kMaxTrackedElements, or nullopt.
std::optional<size_t> ConstNumel(const Dims& d);

// Integer-valued doubles as exact DimExprs; nullopt when any is not an integer.
std::optional<Dims> IntegralValues(const std::vector<double>& f);

// Multidirectional (numpy) broadcasting of two shapes; nullopt when they do not broadcast.
std::optional<Dims> BroadcastTwo(InferContext& c, const Dims& a, const Dims& b);

// `n` fresh unknown dims (InferContext::Unknown), in order.
Dims UnknownDims(InferContext& c, size_t n);

// The length of input `i` when it is 1-D with a constant length of at most core::kMaxRank: the
// rank a shape input (Reshape's, Expand's, ConstantOfShape's) gives when its elements are unknown.
std::optional<size_t> ShapeInputRank(const InferContext& c, size_t i);

// Copies input `from`'s known elements to output 0 when output 0's shape (already set) is
// constant and holds as many elements: the ops that keep the elements and change the shape.
void KeepValues(InferContext& c, size_t from);

// One output axis of a strided view: it walks input axis `in_axis` from `start` by `step`.
struct StridedAxis {
  size_t in_axis = 0;
  int64_t start = 0;
  int64_t step = 1;
};

// Folds the known elements of input 0 into output 0 when the output is a strided view of it
// (Transpose, Slice): output element [i0, i1, ...] is input element with coordinate
// start + i_k * step on each axis's input axis. Both shapes must be constant and small.
void FoldStrided(InferContext& c, const std::vector<StridedAxis>& axes);

// Row-major strides of constant dims.
std::vector<size_t> Strides(const std::vector<int64_t>& dims);

// Index into an input of dims `in` (strides `in_strides`) of output element `flat`, under
// numpy broadcasting to `out` (strides `out_strides`).
size_t BroadcastIndex(size_t flat, const std::vector<int64_t>& out,
                      const std::vector<size_t>& out_strides, const std::vector<int64_t>& in,
                      const std::vector<size_t>& in_strides);

// Elementwise fold of inputs [0, n) into output 0 (whose shape is set): `get(k)` gives input k's
// elements (nullptr: unknown), `fn` one element per input and returns the result or nullopt
// (then nothing is kept); `put` receives the results.
template <typename T, typename Get, typename Fn, typename Put>
void FoldBroadcast(InferContext& c, size_t n, Get get, Fn fn, Put put) {
  SymTensor& o = c.out(0);
  if (!o.shape) return;
  // Most tensors' elements are unknown: nothing to fold then, and nothing worth allocating.
  for (size_t k = 0; k < n; ++k) {
    if (get(k) == nullptr) return;
  }
  auto out_dims = ConstDims(*o.shape);
  auto numel = ConstNumel(*o.shape);
  if (!out_dims || !numel) return;
  std::vector<const std::vector<T>*> vals(n);
  std::vector<std::vector<int64_t>> in_dims(n);
  std::vector<std::vector<size_t>> in_strides(n);
  for (size_t k = 0; k < n; ++k) {
    vals[k] = get(k);
    const Dims* s = c.shape(k);
    if (vals[k] == nullptr || s == nullptr) return;
    auto d = ConstDims(*s);
    if (!d || d->size() > out_dims->size()) return;
    in_dims[k] = *d;
    in_strides[k] = Strides(in_dims[k]);
  }
  const std::vector<size_t> out_strides = Strides(*out_dims);
  std::vector<T> result;
  result.reserve(*numel);
  std::vector<T> args(n);
  for (size_t flat = 0; flat < *numel; ++flat) {
    for (size_t k = 0; k < n; ++k) {
      const size_t idx = BroadcastIndex(flat, *out_dims, out_strides, in_dims[k], in_strides[k]);
      if (idx >= vals[k]->size()) return;
      args[k] = (*vals[k])[idx];
    }
    auto r = fn(std::span<const T>(args));
    if (!r) return;
    result.push_back(std::move(*r));
  }
  put(std::move(result));
}

// Integer elementwise fold of inputs [0, n) into output 0's values (FoldBroadcast over their
// elements).
template <typename Fn>
void FoldElementwise(InferContext& c, size_t n, Fn fn) {
  FoldBroadcast<DimExpr>(
      c, n, [&](size_t k) { return c.values(k); }, fn,
      [&](Dims result) { c.out(0).values = std::move(result); });
}

}  // namespace memest::ops::shape::internal

#endif  // MEMEST_OPS_SHAPE_RULES_INTERNAL_H_
