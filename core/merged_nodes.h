// core/merged_nodes.h -- gives back to each module the activation torch.onnx.export merged away.
//
// Policy: torch.onnx.export runs TorchScript's common-subexpression elimination over the traced
// graph (torch/onnx/utils.py, _optimize_graph: _C._jit_pass_cse). Where two modules apply the same
// activation to the same tensor -- a NASNet-style cell, each of whose branches starts with its
// own nn.ReLU over the cell's input -- the file holds one node, named for the first module, and
// the other module's layers read its output. Eager PyTorch runs each module's ReLU: one output
// each, each kept for backward by the layer that reads it (timm's pnasnet5large, per sample:
// autograd keeps 359 MiB of ReLU outputs on the CPU; the graph as exported keeps 198).
//
// A merged node is told by its readers, whose module paths the exporter writes into node names
// ("/cell_4/comb_iter_0_left/act_1/Relu" is module act_1 of /cell_4/comb_iter_0_left, its parent
// P): a reader outside P, in a module F, at the place within F where a reader of the node sits
// within P (F/separable_1/depthwise_conv2d as P/separable_1/depthwise_conv2d), where F holds no
// node at the node's own place (no F/act_1: F's ReLU is the one merged). Each such F gets a copy
// of the node, named for it (/cell_4/comb_iter_4_left/act_1/Relu), placed before its first
// reader, and F's readers there read the copy. Only activations and pools are copied: ops a
// module applies to its input as a whole. A merge with nothing to mirror stays as the file has
// it (a ReLU at the head of modules of other structures, a pool that is its module's only op, as
// PNASNet's identical max pools of a cell's input are), as does every graph whose node names do
// not carry module paths. A reader of a module's output elsewhere (a feature pyramid reading a
// backbone's stages) is not within a P that reads it, and is left alone.
#ifndef MEMEST_CORE_MERGED_NODES_H_
#define MEMEST_CORE_MERGED_NODES_H_

#include "core/graph.h"

namespace memest::core {

// Copies each merged node (policy above) for every module that lost its own, in `g`'s nodes,
// values, name index and kept proto alike (node i stays proto node i, in topological order).
// Runs on a loaded graph's nodes before shapes or rules are read. Returns how many copies it
// made (0: the graph is unchanged).
[[nodiscard]] int SplitMergedActivations(Graph* g);

}  // namespace memest::core

#endif  // MEMEST_CORE_MERGED_NODES_H_
