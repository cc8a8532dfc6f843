// core/onnx_fallback.h -- ONNX's own shape inference for what memest's shape rules cannot know.
//
// memest infers shapes with its own per-op rules (ops/shape_rules*.cc). ONNX's inference
// functions are still needed for ops without a memest rule (If, Loop, Scan, a few rarer ops)
// and for the values downstream of them. They are written for trusted models and crash on
// malformed ones, so memest hands them as little as possible, and only after checking it:
//
//  * Only ops on a list of inference functions read for unchecked accesses are ever handed to
//    ONNX as the source of a shape (OnnxMayInfer below); the rest stay unknown.
//  * Only the nodes with an output still unknown after binding (and flagged by the symbolic
//    pass as one ONNX may know) are given to ONNX: a reduced model whose inputs are the values
//    those nodes read, typed with the concrete dtypes and dims memest bound, and whose small
//    integer inputs memest knows (shape tensors) are initializers. A node with a memest rule
//    whose rule rejected it never reaches ONNX: the loader reports it (core/loader.cc).
//  * The whole model already passed core/validate.h. Each node of the reduced model, and every
//    node in its bodies, is then checked against its ONNX schema (OpSchema::Verify: input and
//    output counts, attribute types, required attributes) and against attribute ranges ONNX's
//    functions index with unchecked (axis/axes within the input's rank, Scan's
//    num_scan_inputs within its inputs). A node that fails is an InvalidModel error naming it.
//  * ONNX's inference runs with data propagation; its Reshape/Expand/... functions are handed the
//    propagated shape values as constants (ONNX 1.12 reads only constant inputs there).
//  * Results are taken only for the values asked for, with dims >= 0; byte sizes are computed by
//    the caller with checked arithmetic.
//
// Thread safety: reentrant; the wrapped schema registry is process-wide and locked.
#ifndef MEMEST_CORE_ONNX_FALLBACK_H_
#define MEMEST_CORE_ONNX_FALLBACK_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/graph.h"
#include "core/shape_table.h"
#include "core/symbolic_shapes.h"
#include "memest/estimate.h"
#include "memest/status.h"

namespace memest::core {

// Whether ONNX's inference may be handed a node of this op: only If, Loop and Scan, whose bodies
// and attributes CheckForOnnx checks first (the list in onnx_fallback.cc). Any other op's outputs
// that memest's rules cannot size stay unknown, and an estimate resting on them is refused
// (Options::allow_unknown_shapes sizes them conservatively instead). Untrusted nodes never reach
// an inference function nobody read: the fuzzer found MaxUnpool's and STFT's reading inputs
// unchecked.
bool OnnxMayInfer(std::string_view domain, std::string_view op_type);

// What binding knows so far (per value id), and receives the fallback's results.
struct FallbackState {
  std::vector<int32_t>* dtypes = nullptr;
  ShapeTable* shapes = nullptr;
  std::vector<Diagnostic>* diagnostics = nullptr;
};

// Fills dtypes/shapes of the values flagged in `wanted` that ONNX's inference can tell, using
// the reduced model described above. `atoms` evaluates the symbolic pass's integer values
// (shape tensors) at the bound dims. Returns InvalidModel for a node that fails the checks.
[[nodiscard]] Status InferWithOnnx(const Graph& graph, const SymbolicShapes& sym,
                                   const AtomValues& atoms, const std::vector<bool>& wanted,
                                   FallbackState state);

}  // namespace memest::core

#endif  // MEMEST_CORE_ONNX_FALLBACK_H_
