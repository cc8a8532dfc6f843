// datasets/zoo/shapes.h -- synthetic graphs of one shape each, for finding passes that grow faster
// than the graph.
//
// The chain (chain.h) is one long path: each tensor has one consumer and dies at the next node.
// Real graphs also have tensors read by many nodes, nodes of many inputs or outputs, tensors that
// stay alive across the whole graph and many graph outputs. Each ShapeModel kind stresses one of
// these at `width` (the count that grows), over X[batch, 64], opset 17, weightless:
//  * "fanout":  X read by `width` MatMuls, summed by a chain of Adds (one value, many consumers);
//  * "concat":  `width` MatMuls of X joined by one Concat (one node, many inputs);
//  * "split":   one MatMul to 8 x `width` columns, one Split into `width` equal parts, a Relu
//               each, one Concat (one node, many outputs);
//  * "skips":   a chain of `width` (MatMul, Relu) whose every output is added again at the end
//               (`width` activations alive at once, as a U-Net's or a DenseNet's skips are);
//  * "outputs": `width` MatMuls of X, each a graph output.
// Deterministic; the node count is linear in `width`.
#ifndef MEMEST_DATASETS_ZOO_SHAPES_H_
#define MEMEST_DATASETS_ZOO_SHAPES_H_

#include <string>
#include <vector>

namespace memest::zoo {

// The kinds ShapeModel builds, in the order above.
const std::vector<std::string>& ShapeKinds();

// The serialized ModelProto of one kind at `width` (>= 2), or "" for an unknown kind.
std::string ShapeModel(const std::string& kind, int width);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_SHAPES_H_
