// core/bind.h -- binding symbolic dims to values and inferring every tensor's concrete shape.
//
// Bind() takes a loaded Graph and the options' batch/dims, binds the data inputs' symbolic dims,
// and evaluates the shapes LoadModel inferred once per model (ops/shape_pass.h: the
// per-op shape rules over symbolic dims, with Shape / Gather / Concat sub-graphs folded so
// Reshape targets resolve). It returns concrete dims and byte sizes for every value. A node
// whose shape rule rejected it (shapes that do not broadcast, an axis out of range) is an
// InvalidModel error naming it: a malformed model is never estimated. Values left unknown
// because an op has no memest rule (If, Loop, Scan, ...) are handed, with the nodes that make
// them and nothing else, to ONNX's own shape inference (core/onnx_fallback.h); that fallback runs
// only when such values exist. Values whose shape stays unknown are left empty; backends count
// them conservatively and report them in diagnostics.
//
// Policy:
//  * The leading dim of a data input binds to options.batch when it is symbolic or has neither
//    value nor name. Any named dim binds to options.dims[name]; dims wins over batch.
//  * Every other symbolic or unnamed dim of a data input is an error that names it (UnboundDim).
//  * Byte sizes are computed with checked 64-bit arithmetic; overflow is an error naming the tensor
//    (so is a dim expression that overflows when evaluated).
//  * Cost: evaluating expressions, linear in the number of values; no proto copy, no ONNX call,
//    unless the fallback is needed.
#ifndef MEMEST_CORE_BIND_H_
#define MEMEST_CORE_BIND_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/derived_cache.h"
#include "core/graph.h"
#include "core/shape_table.h"
#include "memest/estimate.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::core {

struct BoundGraph {
  const Graph* graph = nullptr;
  std::map<std::string, int64_t> bindings;  // every dim name -> the value it was bound to
  // Per value id: dtype after inference (0 = unknown) and concrete dims (nullopt = unknown).
  std::vector<int32_t> dtypes;
  ShapeTable shapes;
  // Per value id: bytes (numel * dtype size) when shape and dtype are known.
  std::vector<std::optional<uint64_t>> bytes;
  int unknown_shapes = 0;  // intermediate values left without a concrete shape
  std::vector<Diagnostic> diagnostics;
  // What the layers above derive from this graph (ops::ValueFacts), kept for the later estimates
  // that share it (core/derived_cache.h). Not part of the graph's value: a copy starts empty.
  DerivedCache derived;

  bool known(int id) const { return id >= 0 && bytes[static_cast<size_t>(id)].has_value(); }
  uint64_t Bytes(int id) const { return known(id) ? *bytes[static_cast<size_t>(id)] : 0; }
  std::optional<uint64_t> Numel(int id) const;
};

// The most the tensors of one graph may add up to at the bound dims (Overflow beyond).
inline constexpr uint64_t kMaxTotalTensorBytes = uint64_t{1} << 56;  // 64 PiB

Result<BoundGraph> Bind(const Graph& graph, const Options& options);

}  // namespace memest::core

#endif  // MEMEST_CORE_BIND_H_
