// memory/ddp_buckets.h -- the flat buffers of DistributedDataParallel (sharding none, dp > 1):
// the gradient buckets the reducer allocates, and when (what they hold with and without
// gradient_as_bucket_view: memory/parallel.h), and the buffers its broadcasts of the parameters
// and buffers copy them into.
//
// Policy (torch/nn/parallel/distributed.py __init__, _ddp_init_helper and _pre_forward;
// torch/distributed/utils.py _sync_module_states; torch/csrc/distributed/c10d/reducer.cpp
// compute_bucket_assignment_by_size, rebuild_buckets, initialize_buckets; comm.cpp
// broadcast_coalesced; torch/csrc/utils/tensor_flatten.h):
//  * Assignment (AssignBuckets): the gradients are taken in order and grouped by dtype. A dtype's
//    open bucket closes as soon as its bytes reach the current limit; that dtype's limit then
//    moves to the next one in the list (the last one repeats). A gradient is never split, so
//    there are at most as many buckets as gradients. The buckets still open at the end close
//    then, one per dtype.
//  * When the model is wrapped, with PyTorch's defaults (find_unused_parameters=False,
//    static_graph=False), the only limit is SIZE_MAX: one bucket per dtype holds all of that
//    dtype's gradients.
//  * During the first backward the reducer notes the order in which the gradients become ready.
//    The next forward (_pre_forward -> _rebuild_buckets) frees the buckets and allocates new ones,
//    assigned in that order with the limits [first, bucket_cap_mb], once. first is 1 MiB
//    (_DEFAULT_FIRST_BUCKET_BYTES) when DDP was given no bucket_cap_mb, else bucket_cap_mb
//    (distributed.py: bucket_bytes_cap_default); memest takes its default 25 MiB for "not given",
//    any other value for "given". memest takes the ready order to be the reverse of the order in
//    which the forward first reads each parameter: backward completes a parameter's gradient at its
//    earliest reader. Parameters first read by the same node keep the reverse of their value order.
//  * Each bucket is one flat tensor of its gradients' bytes, allocated in the assignment's order
//    (at::empty per bucket in initialize_buckets).
//  * Broadcasts (BroadcastBuffers): before it builds the reducer, DDP's constructor broadcasts
//    every parameter (trained or not), then every buffer, from rank 0 (_sync_module_states), and
//    with broadcast_buffers=True (the default) each forward that follows a synchronizing one
//    broadcasts the buffers again (_pre_forward -> _sync_buffers). Both call broadcast_coalesced
//    with DDP's broadcast_bucket_size, 250 MiB: the tensors are assigned as above under that one
//    limit, the buckets taken in the order of their first tensor (the assignment sorts them so
//    when it is given no order); each bucket is flattened into one new tensor of its bytes
//    (at::cat), except a bucket of one tensor, which is viewed, broadcast, copied back and freed.
//    Two buckets are in flight at once: a third's buffer is made after the first's is freed.
#ifndef MEMEST_MEMORY_DDP_BUCKETS_H_
#define MEMEST_MEMORY_DDP_BUCKETS_H_

#include <cstdint>
#include <vector>

namespace memest::memory {

// One tensor as DDP buckets it: a trained parameter's gradient, or a parameter or buffer it
// broadcasts.
struct BucketedTensor {
  uint64_t bytes = 0;     // on this rank, in its dtype
  int32_t dtype = 0;      // the bucket key (TensorProto.DataType, or any other distinct code)
  int64_t first_use = 0;  // a gradient's: the first node that reads the parameter (forward order)
};

// DistributedDataParallel's broadcast_bucket_size.
inline constexpr uint64_t kBroadcastBucketBytes = uint64_t{250} << 20;

// Bytes per bucket, in allocation order; at most one bucket per gradient.
struct DdpBuckets {
  std::vector<uint64_t> at_wrap;  // allocated when the model is wrapped
  std::vector<uint64_t> rebuilt;  // replace them in the forward after the first backward
};

// Groups `grads` (in the order given) into buckets as compute_bucket_assignment_by_size does
// under `limits` (bytes, at least one). Buckets come in the order they close.
[[nodiscard]] std::vector<uint64_t> AssignBuckets(const std::vector<BucketedTensor>& grads,
                                                  const std::vector<uint64_t>& limits);

// The flat buffers broadcast_coalesced makes to broadcast `tensors` (in the order given) under
// `limit`: bytes per bucket, in the order it makes them, 0 for a bucket of one tensor (a view).
// Bucket i's buffer is made after bucket i - 2's is freed.
[[nodiscard]] std::vector<uint64_t> BroadcastBuffers(const std::vector<BucketedTensor>& tensors,
                                                     uint64_t limit = kBroadcastBucketBytes);

// Both assignments of a rank's trained parameters (any order; first_use orders them) under
// bucket_cap_mb.
[[nodiscard]] DdpBuckets MakeDdpBuckets(std::vector<BucketedTensor> grads, double bucket_cap_mb);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_DDP_BUCKETS_H_
