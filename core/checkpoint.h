// core/checkpoint.h -- where activation checkpointing cuts the graph (Options::checkpoint_segments,
// Options::checkpoint_blocks).
//
// torch.utils.checkpoint.checkpoint_sequential(functions, segments, input) splits a sequence of
// modules into `segments` chunks of equal length and checkpoints every chunk but the last. An ONNX
// graph has no module list, so memest cuts the topological node order instead: cut k of S goes
// near node k*N/S, at the position within a quarter of a segment around it that the fewest
// activations cross (a block boundary, where a person would put the checkpoint).
// checkpoint_blocks instead makes one segment of every repeated block (core/blocks.h): from its
// first node to its last, the last block too, as transformers' gradient_checkpointing_enable
// wraps every decoder layer (GradientCheckpointingLayer) and nothing else. The cuts depend on the
// graph's structure only, so the backends and the measurement harness, which all call this,
// checkpoint exactly the same nodes.
#ifndef MEMEST_CORE_CHECKPOINT_H_
#define MEMEST_CORE_CHECKPOINT_H_

#include <cstdint>
#include <vector>

#include "core/graph.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::core {

struct CheckpointSegment {
  int begin = 0;  // first node (topological index)
  int end = 0;    // one past the last node
  // Non-initializer values read by the segment and made outside it (data inputs and earlier
  // activations): what the checkpoint keeps for the recomputation. Sorted, unique.
  std::vector<int> inputs;
  // Values made in the segment that a later node reads or that are graph outputs. Sorted.
  std::vector<int> outputs;
  // Trainable initializers read by the segment. Sorted, unique.
  std::vector<int> parameters;
};

// The checkpointed segments (every segment but the last), in node order. Empty when
// `segments` <= 1 or the graph has fewer nodes than segments.
std::vector<CheckpointSegment> CheckpointSegments(const Graph& graph, int64_t segments);

// The segments `options` ask for in training: checkpoint_blocks' or checkpoint_segments'; empty
// in inference or when neither is set. InvalidArgument for checkpoint_blocks on a graph without
// repeated blocks or whose blocks interleave in the node order.
[[nodiscard]] Result<std::vector<CheckpointSegment>> CheckpointSegmentsFor(const Graph& graph,
                                                                           const Options& options);

// Index into `segments` of the segment holding `node`, or -1. Per node, for quick lookups.
std::vector<int> SegmentOfNode(const Graph& graph, const std::vector<CheckpointSegment>& segments);

}  // namespace memest::core

#endif  // MEMEST_CORE_CHECKPOINT_H_
