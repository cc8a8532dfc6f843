// memory/parallel.h -- many GPUs: what one rank of a data-, tensor- and pipeline-parallel job
// holds (Options::parallel). Each rule is stated here once; the analytical backend applies them
// (docs/memory-model.md §9 gives the sources).
//
// Policy:
//  * Layers: the graph's repeated blocks (core/blocks.h, found from names). For the pipeline, a
//    node that names no block belongs to the block of the last node before it in topological
//    order that names one (none: before the first block).
//  * Pipeline (pp stages, 1F1B). Blocks are cut into pp contiguous runs, floor(l * pp / L)
//    (l = block index, L = blocks); nodes before the first block run on stage 0 (embedding),
//    after the last on the last stage (head, loss). A rank holds the parameters its stage's nodes
//    read (tied embeddings: on the first and the last stage) and, under 1F1B, the saved
//    activations of min(pp - stage, micro_batches) micro-batches (Narayanan et al., 2021, §2.2).
//    pp greater than L is an error.
//  * Tensor parallelism (tp, Megatron-LM column/row splits; Shoeybi et al., 2019). Activations
//    are "full" (every tp rank holds all of it) or "split" (each holds 1/tp). A MatMul/Gemm whose
//    weight is a 2-D initializer (directly or through Transpose/Cast) splits its weight over the
//    tp ranks: column-parallel when its input is full (output split), row-parallel when its input
//    is split (output full, after the all-reduce). A bias added to a split tensor is split; a
//    Gather on a 2-D initializer (embedding) is vocabulary-parallel (weight split, output full);
//    every other node makes split outputs when any activation input is split. A value's bytes on
//    a rank are ceil(bytes / tp) when split. With sequence parallelism every full activation but
//    the data inputs and graph outputs is split along the sequence too (Korthikanti et al., 2022).
//    Errors: a column split whose output width, a row split whose input width, a vocabulary
//    split whose vocabulary, or an attention Softmax whose head count (dim 1 of a rank-4 input)
//    tp does not divide; and tp > 1 on a graph with no weight MatMul to split.
//  * Model states per rank (ShardModelStates): see the comment there.
//  * NCCL. Each communicator a rank belongs to (its data-parallel group when dp > 1, its
//    tensor-parallel group when tp > 1, its pipeline neighbours when pp > 1) holds, outside the
//    caching allocator, per channel and connection the buffers of NCCL's three protocols:
//    NCCL_BUFFSIZE (Simple, default 4 MiB) + 4,915,200 (LL128) + 524,288 (LL) bytes
//    (src/init.cc DEFAULT_*BUFFSIZE), one 2 MiB-granular allocation: 10 MiB at the defaults, the
//    size NVIDIA/nccl#1685 shows in its allocation log. Three connections per channel (the ring's
//    and the tree's peers) and 32 channels (what that log shows on 8 x H100) make 960 MiB per
//    communicator; the same thread measured 1.06 GB per GPU for one communicator with everything
//    else NCCL allocates. The rule is not measured by memest.
#ifndef MEMEST_MEMORY_PARALLEL_H_
#define MEMEST_MEMORY_PARALLEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/bind.h"
#include "core/blocks.h"
#include "memest/options.h"
#include "memest/status.h"
#include "memory/ddp_buckets.h"
#include "ops/value_facts.h"

namespace memest::memory {

class ParallelPlan {
 public:
  // The plan of `bound` under options.parallel (already validated by memest::Validate). One GPU:
  // one stage holding every node, no splits. InvalidArgument for degrees the graph cannot take.
  [[nodiscard]] static Result<ParallelPlan> Make(const core::BoundGraph& bound,
                                                 const Options& options);

  int stages() const { return stages_; }
  int layers() const { return blocks_.count(); }
  // The blocks' name, as "<word>.<index>" or "<word><index>" ("" when none was found).
  std::string layer_pattern() const { return blocks_.pattern(); }
  int stage_of_node(size_t n) const { return stage_of_node_[n]; }
  // Whether initializer `id` is read by a node of `stage`.
  bool parameter_on_stage(int id, int stage) const;
  // Whether data input `id` is read by a node of `stage`.
  bool input_on_stage(int id, int stage) const { return parameter_on_stage(id, stage); }
  // Blocks on `stage`.
  int layers_on_stage(int stage) const;
  // Micro-batches whose saved activations `stage` holds under 1F1B.
  int in_flight(int stage) const;
  // Per value id: 1, or tp when the value is split over the tensor-parallel ranks. Empty on one
  // GPU.
  const std::vector<uint32_t>& shard_divisor() const { return divisor_; }
  // FSDP wrap unit per value id (initializers only): a unit index, or -1 for the root unit.
  const std::vector<int>& unit_of_value() const { return unit_of_value_; }
  // Per value id: the module a parameter belongs to (its name up to the last '.'), as an index;
  // -1 for values that are not parameters. ZeRO-3 gathers one module's parameters at a time.
  const std::vector<int>& module_of_value() const { return module_of_value_; }
  // NCCL communicators each rank belongs to.
  int communicators() const;
  const Parallelism& degrees() const { return p_; }
  // Ranks of `stage`: [stage * dp * tp, (stage + 1) * dp * tp - 1].
  int64_t first_rank(int stage) const;
  int64_t last_rank(int stage) const;

 private:
  Parallelism p_;
  int64_t micro_batches_ = 1;
  int stages_ = 1;
  core::Blocks blocks_;  // the graph's repeated blocks (empty on one GPU)
  std::vector<int> stage_of_node_;
  std::vector<std::vector<int>> readers_;  // per value: the stages whose nodes read it
  std::vector<uint32_t> divisor_;
  std::vector<int> unit_of_value_;
  std::vector<int> module_of_value_;
};

// One parameter tensor as a rank holds it (after the tensor-parallel split).
struct ParameterShare {
  int value = -1;  // the initializer's value id
  uint64_t elements = 0;
  uint64_t bytes = 0;  // in its storage dtype on this rank (the estimate's weight bytes)
  bool trainable = false;
  int unit = -1;          // FSDP unit (-1: root)
  int module = -1;        // module (ZeRO-3's gathering granule)
  int32_t dtype = 0;      // its TensorProto.DataType (DDP buckets one dtype together)
  int64_t first_use = 0;  // the first node that reads it
};

// The parameters (the loader's parameter tensors) the ranks of `stage` hold, as the sharding rules
// take them: tensor-parallel shares of elements and bytes from `facts`.
[[nodiscard]] std::vector<ParameterShare> RankParameters(const core::BoundGraph& bound,
                                                         const ops::ValueFacts& facts,
                                                         const ParallelPlan& plan, int stage);

// The model states of one rank: parameters, gradients and optimizer state, sharded over the
// data-parallel group as options.parallel.sharding says. Fields are requested bytes.
//
//  none (DDP): as on one GPU (the estimate's own accounting), plus the gradient buckets:
//    without gradient_as_bucket_view DDP copies every gradient into flat buckets, a second copy
//    of the gradients (memory/ddp_buckets.h says which, and when); with it the same buckets hold
//    the gradients: after each backward .grad is a view into them, and zero_grad(set_to_none)
//    drops only the view, so the next backward's gradient is made, copied in and freed
//    (reducer.cpp mark_variable_ready_dense; torch/nn/parallel/distributed.py).
//  zero1/2/3 (DeepSpeed, deepspeed/runtime/zero/stage_1_and_2.py, stage3.py): c-byte parameters
//    and gradients (c = 2 under amp-fp16/amp-bf16/bf16, 4 under fp32) and, per data-parallel
//    partition (1/N), an fp32 master copy (4 bytes) and the optimizer's fp32 state tensors
//    (4 bytes each). Stage 1 partitions the master copy and state, stage 2 the gradients too,
//    stage 3 the parameters too. Stages 1 and 2 keep an fp32 gradient partition (4P/N) for the
//    step; stage 3 one per sub-group (4 x min(P/N, sub_group_size)). Stage 3 gathers one module's
//    parameters at a time and keeps its c-byte gradient until the reduce-scatter: 2c x the
//    largest module (DeepSpeed's estimate_zero3_model_states_mem_needs: 4 x largest_layer_params).
//    offload_optimizer moves the master copy, state and gradient partitions to host memory;
//    offload_params (stage 3) the parameter partition too.
//  fsdp-* (FSDP2 fully_shard, torch/distributed/fsdp/_fully_shard): the sharded parameters in
//    their own dtype (fp32 under amp, 2 bytes under bf16), their gradients in that dtype and the
//    optimizer state, 1/S each (S = dp; fsdp-hybrid: min(dp, gpus_per_node)); during forward
//    and backward the c-byte unsharded parameters of the root unit, of the current unit and of
//    the prefetched next one, and the unsharded c-byte gradients of one unit before its
//    reduce-scatter. fsdp-grad-op keeps every unit unsharded from its forward to its backward
//    (all of them at the peak). fsdp-no-shard: as DDP with gradient_as_bucket_view.
struct RankStates {
  uint64_t weights = 0;           // parameters resident on the rank (shard or whole)
  uint64_t gradients = 0;         // gradients resident (shard or whole), c-byte
  uint64_t fp32_grad_buffer = 0;  // ZeRO's fp32 gradient partition for the step
  uint64_t optimizer_state = 0;   // fp32 master copy + optimizer state (DeepSpeed), or state
  uint64_t gathered = 0;          // unsharded parameters and gradients of units in flight
  DdpBuckets buckets;             // DDP gradient buckets (none otherwise)
  // DDP with gradient_as_bucket_view: the buckets hold the gradients themselves from the wrap on
  // (.grad is a view into them), and a gradient backward makes is copied in and freed.
  bool grads_in_buckets = false;
  uint64_t host = 0;  // offloaded to host memory
  // Whether the estimate's own per-tensor accounting of parameters, gradients and optimizer
  // state applies (DDP, fsdp-no-shard); then weights/gradients/optimizer_state above are unset.
  bool unsharded = true;
};
[[nodiscard]] RankStates ShardModelStates(const std::vector<ParameterShare>& params,
                                          const Options& options);

// The same for a model described only by its parameter count (every parameter trains, one
// module of `largest_module` elements is the largest): the closed forms DeepSpeed and the ZeRO
// paper state, for checking them. `elements` counts the rank's parameters (after tp/pp).
[[nodiscard]] RankStates ShardModelStates(uint64_t elements, uint64_t largest_module,
                                          const Options& options);

// The flat buffers DDP's broadcasts make on a rank (memory/ddp_buckets.h BroadcastBuffers: bytes
// per bucket in the order it makes them, two in flight). `at_wrap`: the constructor's, of every
// parameter the rank holds (`params`, trained or not) and then every buffer; `each_forward`: a
// forward's that follows a synchronizing backward, of the buffers. The ONNX graph does not say
// which initializers are buffers: they are taken to be the stage's initializers that are not
// parameters, of more than one element, floating-point (BatchNormalization's statistics, tables)
// or boolean (masks); one-element constants and integer ones (shapes, indices) are the export's.
// Both empty unless `rank` is DDP's (it has buckets).
struct DdpBroadcasts {
  std::vector<uint64_t> at_wrap, each_forward;
};
[[nodiscard]] DdpBroadcasts MakeDdpBroadcasts(const core::BoundGraph& bound,
                                              const ops::ValueFacts& facts,
                                              const ParallelPlan& plan, int stage,
                                              const std::vector<ParameterShare>& params,
                                              const RankStates& rank);

// DDP with gradient_as_bucket_view (RankStates::grads_in_buckets).
inline bool GradientsInBuckets(const Options& o) {
  return o.parallel.sharding == Sharding::kNone && o.parallel.DataParallel() > 1 &&
         o.parallel.gradient_as_bucket_view;
}

// Bytes per element of the parameters and gradients the model computes with under ZeRO and FSDP
// (the c above): 2 under amp-fp16, amp-bf16 and bf16, 4 under fp32.
constexpr uint64_t ComputeBytes(const Options& o) {
  return o.precision == Precision::kFp32 ? 4 : 2;
}

// NCCL's buffers of one rank (outside the caching allocator).
[[nodiscard]] uint64_t NcclBufferBytes(const ParallelPlan& plan);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_PARALLEL_H_
