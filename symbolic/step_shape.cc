// symbolic/step_shape.cc -- the walk's shape: what the step's walk decides by in a context, other
// than the sizes it allocates (ShapeOfStep, ResizeTraceOfShape; symbolic/timeline.h).
//
// Policy: the walk (symbolic/timeline.cc, symbolic/timeline_loop.cc) reads a bound context
// through the value facts, the weights' storage, the loss, the checkpoint, the pipeline plan and
// the cache of a decode step; of those, what decides which requests it makes, and in which
// order, is listed here, and nothing else of the context does:
//  * which value owns each value's storage (ValueFacts::root: a reshape that copies at one size
//    and is a view at another makes one request more), whether it needs a gradient, whether it
//    is a trained parameter, whether it is kept to the end (a graph output the cache keeps), and
//    whether its bytes, its autocast copy's and a decode step's releasing it are 0 or not;
//  * for each node, its pipeline stage (on this context's), whether it runs as a view and in a
//    fused chain (where the chain's saves and gradients are made), whether its forward
//    workspace, its backward's, its cuDNN workspace and its dequantized weights forward and
//    backward are 0 (the walk's Malloc skips a request of 0 bytes), and what it saves: each
//    saved value by id, each saved extra by whether it is 0;
//  * the checkpoint's segments (their nodes and the inputs they keep), the loss: its value,
//    cross-entropy or not, and which of its tensors are 0.
// The rest it reads is the model's and the options' own -- the graph, its rules, the optimizer,
// the parallel plan's shards, units and DDP's buckets and broadcasts (sizes a trace records as
// kSame) -- and the same in every context of one search, which differs only in the searched
// batch or dim. Two contexts of equal shape therefore walk the step alike: the same requests in
// the same order, each malloc's size its recipe's (SizeRecipe) in its own context, which is what
// ResizeTrace reads.
// BatchTraceTest compares a trace resized into a context of the traced one's shape with the walk
// there over the bundled models, the timm graphs and the language models; a decode step after
// its prefill (two contexts walked) is left to the walk.
#include <cstdint>
#include <vector>

#include "symbolic/sim.h"
#include "symbolic/timeline.h"

namespace memest::symbolic {
namespace internal {

Status Sim::AppendShape(std::vector<uint64_t>* words) {
  MEMEST_RETURN_IF_ERROR(PrepareSizes());
  const size_t nv = g_.values.size(), nn = g_.nodes.size();
  words->reserve(words->size() + nv + 2 * nn + 16);
  // Flags above a 32-bit id, the first lowest.
  auto flags = [](auto... bits) {
    uint64_t w = 0;
    int shift = 32;
    ((w |= uint64_t{static_cast<bool>(bits)} << shift++), ...);  // in order: a comma fold
    return w;
  };
  auto id = [](int64_t i) { return static_cast<uint64_t>(static_cast<uint32_t>(i)); };
  for (size_t i = 0; i < nv; ++i) {
    const int v = static_cast<int>(i);
    words->push_back(id(facts_.root(v)) | flags(facts_.bytes(v) == 0, facts_.amp_cast_bytes(v) == 0,
                                                facts_.requires_grad(v), facts_.trainable(v),
                                                kept_root_[i], kv_cache_.released_at_last_use(v)));
  }
  for (size_t k = 0; k < nn; ++k) {
    const ops::FusedChain* chain = facts_.fusion().chain_of(k);
    const std::span<const ops::SavedTensor> saved = StepSaves(k);
    words->push_back(id(static_cast<int64_t>(saved.size())) |
                     flags(OnStage(k), facts_.is_view(k), chain != nullptr,
                           chain != nullptr && chain->nodes.back() == k, facts_.Workspace(k) == 0,
                           facts_.BackwardWorkspace(k) == 0, CudnnWorkspaceOf(k) == 0,
                           weights_.forward_transient(k) == 0,
                           weights_.backward_transient(k) == 0));
    for (const ops::SavedTensor& s : saved) {
      words->push_back(id(s.value) | flags(s.value < 0 && s.bytes == 0));
    }
  }
  words->push_back(checkpoint_.size());
  for (const core::CheckpointSegment& seg : checkpoint_) {
    words->push_back(id(seg.begin) | id(seg.end) << 32);
    words->push_back(seg.inputs.size());
    for (int in : seg.inputs) words->push_back(id(in));
  }
  words->push_back(id(loss_value_) |
                   flags(loss_tensors_.cross_entropy, loss_tensors_.log_probs == 0,
                         loss_tensors_.output_grad == 0, loss_tensors_.targets == 0));
  return Status::Ok();
}

}  // namespace internal

Result<std::vector<uint64_t>> ShapeOfStep(const memory::EstimationContext& ctx) {
  if (ctx.prefill() != nullptr) {
    return InvalidArgument("a decode step after its prefill has no shape of its own here");
  }
  SimulationKey key = SimulationKey::Of(ctx);  // the Sim reads its options by reference
  key.iterations = kTracedIterations;
  StepTrace unused;  // a trace's Sim: no allocator model is set up
  std::vector<uint64_t> words;
  MEMEST_RETURN_IF_ERROR(internal::Sim(ctx, key, /*record=*/false, &unused).AppendShape(&words));
  return words;
}

Result<StepTrace> ResizeTraceOfShape(const memory::EstimationContext& ctx, const StepTrace& traced,
                                     const std::vector<uint64_t>& traced_shape,
                                     size_t most_requests, TraceKept kept) {
  MEMEST_ASSIGN_OR_RETURN(std::vector<uint64_t> shape, ShapeOfStep(ctx));
  if (shape != traced_shape) {
    return InvalidArgument("the step here has another shape than where it was traced");
  }
  return ResizeTrace(ctx, traced, most_requests, kept);
}

}  // namespace memest::symbolic
