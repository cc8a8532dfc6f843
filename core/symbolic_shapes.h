// core/symbolic_shapes.h -- shapes and dtypes of every value, inferred once per model.
//
// The result of the shape pass (ops/shape_pass.h, run once per model by LoadModel): the
// symbolic dtype and shape of every value, over the dims of core/symdim.h. Binding dims
// (core/bind.h) only evaluates these expressions (EvaluateDims/EvaluateShapes below).
//
// Thread safety: the result is immutable once built and may be read from many threads.
#ifndef MEMEST_CORE_SYMBOLIC_SHAPES_H_
#define MEMEST_CORE_SYMBOLIC_SHAPES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/symdim.h"
#include "memest/status.h"

namespace memest::core {

struct Graph;

inline constexpr size_t kMaxRank = 64;
inline constexpr size_t kMaxTrackedElements = 1024;

// The symbolic type of one value.
struct SymTensor {
  int32_t dtype = 0;                          // TensorProto.DataType; 0 = unknown
  std::optional<std::vector<DimExpr>> shape;  // nullopt: rank unknown
  // The elements (row-major) when known exactly as integers; only for tensors whose shape is
  // constant with at most kMaxTrackedElements elements.
  std::optional<std::vector<DimExpr>> values;
  // The elements of a small float constant (Resize scales), when known.
  std::optional<std::vector<double>> float_values;
};

// The values' shapes, each distinct one numbered once, for binding (core/bind.cc): a bind
// evaluates each distinct shape once and every other value of it reads the same dims
// (ShapeTable::Alias). Most values share their shape with many others -- 40 distinct shapes among
// the 2,002 values of Qwen2.5-0.5B's decode step, 3 among the 200,001 of the 100,000-node chain
// -- and evaluating every value's dims, each a DimExpr reached through its terms' pointers, was
// most of a bind.
//
// Policy: two shapes are the same when their dims are the same expressions -- the same constant
// and the same shared terms (copies of a DimExpr share them, as shapes passed through ops are).
// Equal polynomials built apart count as two shapes: that costs one more evaluation, never a
// wrong dim. Built once per model with the shapes (Compile); immutable afterwards.
class ShapeProgram {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};  // base::Distinct::kNone

  // From the shape pass's types, by value id (base::NumberDistinct).
  [[nodiscard]] static ShapeProgram Compile(const std::vector<SymTensor>& types);

  // The number of distinct shapes.
  [[nodiscard]] size_t shapes() const { return shapes_; }
  // Value id's shape number; kNone for a value without a rank, or past the program (a program
  // not compiled for these types: every value is then evaluated on its own).
  [[nodiscard]] uint32_t shape_of(size_t id) const {
    return id < shape_of_.size() ? shape_of_[id] : kNone;
  }

 private:
  std::vector<uint32_t> shape_of_;  // per value id
  size_t shapes_ = 0;
};

struct SymbolicShapes {
  DimTable table;
  std::vector<SymTensor> types;  // per value id
  ShapeProgram program;          // types' distinct shapes (ShapeProgram::Compile)
  // Per data input (Graph::data_inputs order), per axis: the symbol atom of that dim, or -1
  // when the dim is a constant.
  std::vector<std::vector<AtomId>> input_atoms;
  std::string batch_symbol;  // the symbol of unnamed leading dims
  // Per value id: its shape or dtype is unknown and ONNX's shape inference might know it.
  std::vector<bool> needs_fallback;
  bool any_fallback = false;
  // Nodes whose rule failed, and a few "node (op): message" examples.
  int rule_failures = 0;
  std::vector<std::string> failure_examples;
  // Op types without a shape rule that the graph uses.
  std::vector<std::string> ops_without_rule;
};

// Concrete dtypes and shapes of every value at the given symbol values (by name, e.g.
// {"batch", 8}, {"unk_x_2", 5}); no ONNX fallback. A value whose dims cannot be evaluated stays
// nullopt; an overflow is an error naming the tensor.
// Evaluates `dims` with every atom's value: the concrete dims, or the first dim's error.
Result<std::vector<int64_t>> EvaluateDims(const std::vector<DimExpr>& dims,
                                          const AtomValues& atoms);
// The same into `out` (of dims.size() entries; what it holds after an error is unspecified).
Status EvaluateDimsInto(const std::vector<DimExpr>& dims, const AtomValues& atoms,
                        std::span<int64_t> out);

struct ConcreteShapes {
  std::vector<int32_t> dtypes;
  std::vector<std::optional<std::vector<int64_t>>> shapes;
};
Result<ConcreteShapes> EvaluateShapes(const Graph& graph, const SymbolicShapes& symbolic,
                                      const std::map<std::string, int64_t>& symbols);

}  // namespace memest::core

#endif  // MEMEST_CORE_SYMBOLIC_SHAPES_H_
