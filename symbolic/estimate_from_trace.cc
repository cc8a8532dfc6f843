// symbolic/estimate_from_trace.cc -- a simulation that follows an allocator run written from the
// step's trace instead of a walk of the step (Sim::Described; SimulateFromTrace in
// symbolic/timeline.h).
//
// Policy: a simulation that follows a run (Simulate's overload: the estimate at a search's
// answer) walks the step only to learn, at each request, the tensor's bytes and category, the
// node, phase and iteration it is in, and where a tensor changes category; the allocator's state
// after the request is the run's. A trace made with those moments (StepTrace::moments, relabels)
// and resized into the context (each malloc's size by its recipe there, the shape of the step the
// same as where it was walked: ResizeTraceOfShape) holds all of that, so the same bookkeeping is
// done here request by request, with the Sim's own methods (NoteMallocMoments, NoteCachedFree,
// NoteLargest, FollowRequest), in the order the walk makes them:
//  * the weights and the first two iterations as the walk makes them: each malloc counted in its
//    category, each free in the category its tensor has by then, each relabel where it happened;
//    an iteration's peaks noted where it ends, as Iteration() does;
//  * the third iteration on as the loop's repetition of the second (the trace made its third
//    iteration so: StepTrace::last_repeated): the second's requests, their moments and relabels
//    are the noted loop (loop_requests_ renamed as the trace's third iteration names them), which
//    FollowLoopRest, LoopAtPeak and EndOfRun take from there exactly as after a walk.
// A step after a prefill, or a trace that walked its third iteration, is left to the walk; on many
// GPUs the rank's states are prepared as the walk prepares them (PrepareParallel), for the
// estimate reports them, and a pipeline stage's step is written from that stage's own trace (its
// received activations, the gradients it sends back and its other micro-batches in flight are
// requests of that trace like any other). Every request is still
// compared with the run's (FollowRequest), so a trace that is not the step's is refused, as a walk
// that differs is. BatchTraceTest compares the two over the bundled models, the timm graphs and the
// language models.
#include <cstdint>
#include <string>
#include <vector>

#include "symbolic/sim.h"
#include "symbolic/timeline.h"

namespace memest::symbolic::internal {

Result<Simulation> Sim::Described(const StepTrace& sized) {
  MEMEST_RETURN_IF_ERROR(StepModelled());
  if (ctx_.prefill() != nullptr || run_ == nullptr) {
    return InvalidArgument("a step after a prefill is simulated by its walk");
  }
  PrepareParallel();  // a rank's states, which the estimate reports (Written)
  const std::vector<AllocatorRequest>& requests = sized.requests;
  const size_t second = sized.previous_begins, third = sized.last_begins;
  constexpr int kNoted = kTracedIterations - 1;  // the iteration the loop repeats
  if (!sized.loops || !sized.last_repeated || sized.moments.size() != requests.size() ||
      second >= third || third >= requests.size()) {
    return InvalidArgument(
        "the trace does not make its last iteration as the loop repeats the one before, or does "
        "not say where its requests were made");
  }
  // Per malloc, by number: its bytes and its category now; the first `walked` are the mallocs so
  // far. (Sized once, for every malloc of the trace: a push per malloc was a call each.)
  struct Made {
    uint64_t bytes = 0;
    Category category = Category::kWeights;
  };
  std::vector<Made> made_of(sized.recipes.size());
  size_t walked = 0;
  // Where the walk is, from a request's or a relabel's moment; at an iteration's first, the one
  // before ends (Iteration()) and the loop's noting begins with the second (StartNotingLoop).
  auto move_to = [&](const TracedMoment& m) {
    if (m.iteration != iteration_) {
      if (iteration_ > 0) {
        sim_.iterations.push_back({iteration_, iteration_alloc_peak_, Stats().reserved});
      }
      iteration_ = m.iteration;
      iteration_alloc_peak_ = Stats().allocated;
      if (iteration_ == kNoted) loop_live_start_ = live_;
    }
    node_ = m.node;
    phase_ = static_cast<Phase>(m.phase);
  };
  size_t relabel = 0;
  for (size_t i = 0; i <= third; ++i) {
    // The relabels made before request i.
    for (; relabel < sized.relabels.size() && sized.relabels[relabel].before <= i; ++relabel) {
      const TracedRelabel& r = sized.relabels[relabel];
      if (r.at.iteration > kNoted || r.malloc < 0 || static_cast<size_t>(r.malloc) >= walked ||
          r.to >= memory::kNumCategories) {
        return InvalidArgument("a relabel names no tensor of the walked iterations");
      }
      move_to(r.at);
      const auto m = static_cast<size_t>(r.malloc);
      const Category from = made_of[m].category, to = static_cast<Category>(r.to);
      if (iteration_ == kNoted) {
        loop_relabels_.push_back({static_cast<uint32_t>(i - second), from, to, made_of[m].bytes});
      }
      live_[from] -= made_of[m].bytes;
      live_[to] += made_of[m].bytes;
      made_of[m].category = to;
      NoteLargest(to);
    }
    if (i == third) break;
    const TracedMoment& where = sized.moments[i];
    if (where.category >= memory::kNumCategories) {
      return InvalidArgument("request " + std::to_string(i) + " has no category");
    }
    move_to(where);
    const AllocatorRequest& q = requests[i];
    uint64_t bytes = q.bytes;
    Category c = static_cast<Category>(where.category);
    if (q.freed < 0) {
      if (walked == made_of.size()) {
        return InvalidArgument("request " + std::to_string(i) + " is a malloc past the trace's");
      }
      made_of[walked++] = {bytes, c};
      live_[c] += bytes;
      ++mallocs_;
      FollowRequest(q);
      NoteMallocMoments(c);
    } else {
      if (static_cast<size_t>(q.freed) >= walked) {
        return InvalidArgument("request " + std::to_string(i) + " frees no earlier malloc");
      }
      bytes = made_of[static_cast<size_t>(q.freed)].bytes;
      c = made_of[static_cast<size_t>(q.freed)].category;
      live_[c] -= bytes;
      FollowRequest(q);
      NoteCachedFree();
    }
    if (iteration_ == kNoted) {
      loop_where_.push_back({bytes, node_, where.phase, c});
      loop_requests_.push_back({q.freed < 0 ? LoopRequest::kMalloc : LoopRequest::kFreeOwn, 0});
    }
  }
  sim_.iterations.push_back({iteration_, iteration_alloc_peak_, Stats().reserved});
  // The loop: the second iteration's requests as the third names them (TraceNoted).
  const int64_t own = mallocs_;
  int64_t loop_mallocs = 0;
  for (size_t i = third; i < requests.size(); ++i) loop_mallocs += requests[i].freed < 0;
  const int64_t previous = own - loop_mallocs;
  if (requests.size() - third != loop_requests_.size() || iteration_ != kNoted) {
    return InvalidArgument("the trace's last iteration is not the one before made again");
  }
  uint32_t made = 0;
  for (size_t i = third; i < requests.size(); ++i) {
    LoopRequest& q = loop_requests_[i - third];
    const int64_t f = requests[i].freed;
    if ((f < 0) != (q.kind == LoopRequest::kMalloc) || (f >= 0 && f < previous)) {
      return InvalidArgument("the trace's last iteration is not the one before made again");
    }
    if (f < 0) {
      q = {LoopRequest::kMalloc, made++};
    } else if (f >= own) {
      q = {LoopRequest::kFreeOwn, static_cast<uint32_t>(f - own)};
    } else {
      q = {LoopRequest::kFreePrevious, static_cast<uint32_t>(f - previous)};
    }
  }
  loop_blocks_.assign(static_cast<size_t>(loop_mallocs), -1);
  MEMEST_RETURN_IF_ERROR(RepeatNoted(kTracedIterations, {}, {}, sized.loops));
  return Written();
}

}  // namespace memest::symbolic::internal
