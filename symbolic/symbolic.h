// symbolic/symbolic.h -- the symbolic backend: bound shapes, a simulated training timeline
// (symbolic/timeline.h) and PyTorch's caching allocator (symbolic/allocator.h).
#ifndef MEMEST_SYMBOLIC_SYMBOLIC_H_
#define MEMEST_SYMBOLIC_SYMBOLIC_H_

#include <memory>

#include "memest/estimator.h"
#include "symbolic/timeline.h"

namespace memest::symbolic {

std::unique_ptr<Estimator> MakeSymbolicEstimator();

// What the caching allocator may reserve in `ctx` (memory::AllocatorBudget, with the NCCL buffers
// of a parallel plan): the budget the step is simulated within (policy in symbolic.cc).
[[nodiscard]] uint64_t StepBudget(const memory::EstimationContext& ctx);

// The symbolic backend's estimate in `ctx` (its EstimateIn: on many GPUs, of the pipeline stage
// ctx.stage()) for a step whose allocator run within StepBudget(ctx) is `run`, made already (a
// replay that did not run out, symbolic/batch_trace.h): the simulation follows it instead of
// running the allocator model again. InvalidArgument when the step's requests are not run's
// (Simulate's overload); the caller then runs the estimate.
Result<Estimate> EstimateFollowing(const memory::EstimationContext& ctx, const AllocatorRun& run);

// The same estimate written from `first` -- the step's whole trace walked in a context of the same
// model and options but the searched value, whose ShapeOfStep was `first_shape` -- resized into
// ctx, instead of a walk that follows run (symbolic/estimate_from_trace.cc): EstimateFollowing's,
// field for field, where ctx's step has that shape. InvalidArgument where it has not, where the
// step is after a prefill, where the trace walked its last iteration, or where the step's
// requests are not run's (a pipeline stage's: `first` must be that stage's trace); the caller then
// follows run by a walk.
Result<Estimate> EstimateFromTrace(const memory::EstimationContext& ctx, const StepTrace& first,
                                   const std::vector<uint64_t>& first_shape,
                                   const AllocatorRun& run);

// The whole simulation (events included when `record_events`), for --timeline. Under pipeline
// parallelism, of one rank of the stage with the highest device peak.
Result<Simulation> SimulateModel(const Model& model, const Options& options, bool record_events);

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_SYMBOLIC_H_
