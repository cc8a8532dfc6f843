// ops/shape_pass.h -- the shape pass: shapes and dtypes of every value, inferred once per model.
//
// At load time InferSymbolicShapes() walks the nodes in topological order and runs each op's
// shape rule (ops/rules.cc, `infer`) over symbolic dims (core/symdim.h); the result is a
// core::SymbolicShapes (core/symbolic_shapes.h). It also folds the shape sub-graphs exporters
// emit (Shape -> Gather -> Concat -> Reshape, ...): the elements of small integer tensors are
// tracked as expressions too, so Shape(x) = [batch, 128, 256].
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
#ifndef MEMEST_OPS_SHAPE_PASS_H_
#define MEMEST_OPS_SHAPE_PASS_H_

#include <memory>

#include "core/graph.h"
#include "core/symbolic_shapes.h"

namespace memest::ops {

// Runs the shape rules over `graph` (node protos and values must be final). Never fails: what
// cannot be inferred stays unknown. LoadModel (ops/load_model.cc) stores the result in
// Graph::symbolic.
std::shared_ptr<const core::SymbolicShapes> InferSymbolicShapes(const core::Graph& graph);

}  // namespace memest::ops

#endif  // MEMEST_OPS_SHAPE_PASS_H_
