// core/symbolic_shapes.h -- shapes and dtypes of every value, inferred once per model.
//
// At load time InferSymbolicShapes() walks the nodes in topological order and runs each op's
// shape rule (ops/rules.cc, `infer`) over symbolic dims (core/symdim.h). It also folds the
// shape sub-graphs exporters emit (Shape -> Gather -> Concat -> Reshape, ...): the elements of
// small integer tensors are tracked as expressions too, so Shape(x) = [batch, 128, 256].
// Binding dims (core/bind.h) then only evaluates the expressions.
//
// Policy:
//  * Data inputs: a known dim is a constant; a named dim (dim_param) is the symbol of that name;
//    an unnamed leading dim is the batch symbol (one symbol shared by every data input: they are
//    all bound to Options::batch); any other unnamed dim gets its own symbol
//    "unk_<input>_<axis>" (binding rejects those, as it always did).
//  * Initializers are concrete, and their small integer payloads (and Constant nodes' values)
//    seed the folding. Float constants are kept too (Resize scales); a float tensor whose
//    elements are integers is tracked like an integer one (Cast(Shape(x)) * 2 stays exact).
//  * A node whose rule fails (a malformed attribute, ranks that do not match) leaves its outputs
//    unknown and is counted (rule_failures): binding then refuses the model, naming the node.
//  * A node without a shape rule leaves its outputs unknown. If ONNX has an inference function
//    for it, binding falls back on ONNX's shape inference for them (needs_fallback); so does a
//    node with a rule when one of its inputs waits for that fallback. Otherwise the shapes
//    declared in the file (value_info) seed the outputs.
//  * Data-dependent sizes (NonZero, Unique, Compress, NonMaxSuppression) are fresh unknowns:
//    no shape pass can know them, so they do not trigger the fallback.
//  * Bounds on untrusted input: ranks above kMaxRank and tracked element lists above
//    kMaxTrackedElements are dropped (the shape stays, the elements are forgotten).
//
// Thread safety: the result is immutable once built and may be read from many threads.
#ifndef MEMEST_CORE_SYMBOLIC_SHAPES_H_
#define MEMEST_CORE_SYMBOLIC_SHAPES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
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

struct SymbolicShapes {
  DimTable table;
  std::vector<SymTensor> types;  // per value id
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

// Runs the shape rules over `graph` (node protos and values must be final). Never fails: what
// cannot be inferred stays unknown.
std::shared_ptr<const SymbolicShapes> InferSymbolicShapes(const Graph& graph);

// Concrete dtypes and shapes of every value at the given symbol values (by name, e.g.
// {"batch", 8}, {"unk_x_2", 5}); no ONNX fallback. A value whose dims cannot be evaluated stays
// nullopt; an overflow is an error naming the tensor.
// Evaluates `dims` with every atom's value: the concrete dims, or the first dim's error.
Result<std::vector<int64_t>> EvaluateDims(const std::vector<DimExpr>& dims,
                                          const AtomValues& atoms);

struct ConcreteShapes {
  std::vector<int32_t> dtypes;
  std::vector<std::optional<std::vector<int64_t>>> shapes;
};
Result<ConcreteShapes> EvaluateShapes(const Graph& graph, const SymbolicShapes& symbolic,
                                      const std::map<std::string, int64_t>& symbols);

}  // namespace memest::core

#endif  // MEMEST_CORE_SYMBOLIC_SHAPES_H_
