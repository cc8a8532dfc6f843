// symbolic/timeline.h -- a simulated PyTorch eager training step (or inference pass), replayed
// through the caching-allocator model.
//
// Simulate() walks the bound graph the way PyTorch eager would run it (policy at the top of
// timeline.cc, and of timeline_loop.cc for the loop) and produces every malloc/free with its
// size, category, phase and node, and the allocator's allocated/reserved bytes after each event.
// The result carries the common Estimate (peaks, breakdown at the device-level peak, phase and
// node) plus per-iteration peaks.
#ifndef MEMEST_SYMBOLIC_TIMELINE_H_
#define MEMEST_SYMBOLIC_TIMELINE_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/bind.h"
#include "memest/estimate.h"
#include "memest/gpu_profile.h"
#include "memest/options.h"
#include "memest/status.h"
#include "memory/category.h"
#include "memory/context.h"
#include "symbolic/allocator.h"
#include "symbolic/loop_watch.h"
#include "symbolic/simulation_key.h"

namespace memest::symbolic {

// The categories are memory's (memory/category.h), shared with the measurement harness.
using memory::Category;
using memory::kNumCategories;
using memory::ToString;

struct TimelineEvent {
  bool malloc = true;  // false: free
  uint64_t bytes = 0;  // requested bytes
  Category category = Category::kTransient;
  Phase phase = Phase::kUnknown;
  int node = -1;           // node index in the graph, -1 when not tied to a node
  int iteration = 0;       // 1-based
  uint64_t allocated = 0;  // allocator state after the event
  uint64_t reserved = 0;
};

struct IterationPeak {
  int iteration = 0;
  uint64_t allocated = 0;  // peak allocated within the iteration
  uint64_t reserved = 0;   // reserved at the end of the iteration
  bool walked = true;      // false: the loop's repeated requests, without walking the graph
};

// How a simulation limited by SimulationKey::allocator_budget went.
struct BudgetOutcome {
  bool ran_out = false;     // a request failed even after the cached segments were released
  CategoryPeak ran_out_at;  // the first such request (bytes: its size), when ran_out
  uint64_t retries = 0;     // cudaMalloc calls that failed and were retried after a release

  // Whether the step met the budget at all: otherwise it is the step without one.
  [[nodiscard]] bool met_limit() const { return ran_out || retries > 0; }
};

struct Simulation {
  Estimate estimate;
  BudgetOutcome budget;
  std::vector<IterationPeak> iterations;
  std::vector<TimelineEvent> events;    // filled only when asked for
  std::vector<std::string> node_names;  // index -> name, for events
};

// One request of the step to the caching allocator, in order: a malloc of `bytes`, or (freed >= 0)
// the free of the step's malloc number `freed` (counting the step's mallocs from 0).
struct AllocatorRequest {
  uint64_t bytes = 0;  // a malloc's requested bytes; 0 for a free
  int64_t freed = -1;  // a free: the malloc it frees; -1 for a malloc
};

// The allocator model's run over a step's requests, made already (a replay,
// symbolic/batch_trace.h): the requests as made -- the loop's first iterations, to where it
// repeats itself -- the allocated and reserved bytes after each, the statistics at the end, and
// where the loop repeats.
struct AllocatorRun {
  AllocatorConfig config;
  // The run's requests: all of them, or its first ones, when `loop_length` says how the rest go.
  std::vector<AllocatorRequest> requests;
  std::vector<std::pair<uint64_t, uint64_t>> after;  // (allocated, reserved) after request i
  AllocatorStats end;
  std::optional<LoopRepeat> repeat;  // none: the run did not see the loop repeat itself
  // Past `requests` (fewer than `after`), the run's iterations are the iteration that `requests`
  // end with made again, this many requests each (its mallocs numbered on, its frees of its own
  // and the iteration before's mallocs renamed alike): not listed, since a simulation that makes
  // that iteration's requests as the run does, from the same loop, makes every later one's too.
  // 0: `requests` lists every request.
  size_t loop_length = 0;
};

// Where a traced malloc's size comes from (TraceRequests): what the walk read it off, so that the
// same malloc's size in another bound context -- the step at another value of the searched batch
// or dim -- is read there without walking the step again (ResizeTrace).
struct SizeRecipe {
  enum Kind : uint8_t {
    kUnknown,            // not read again: ResizeTrace refuses the trace
    kSame,               // the same in every context of the model (a scalar, cuBLAS's workspace)
    kValue,              // value a's bytes (ops::ValueFacts::bytes)
    kAmpCast,            // value a's autocast copy
    kWorkspace,          // node a's forward workspace
    kBackwardWorkspace,  // node a's backward buffers
    kCudnnWorkspace,     // node a's cuDNN workspace (b = 1: its weight-gradient call's)
    kSavedExtra,         // node a's saved tensor b, one that is no value of the graph
    kWeightForward,      // node a's dequantized weight, forward
    kWeightBackward,     // and backward
    kLossLogProbs,       // the loss's tensors (memory/loss.h)
    kLossOutputGrad,
    kLossTargets,
    kStateTensor,  // parameter a's optimizer state tensor b (memory/optimizer.h)
  };
  Kind kind = kUnknown;
  int32_t a = -1, b = -1;
};

// Where the walk made a traced request (StepTrace::moments): the node (-1: none), the phase, the
// iteration (0: before the first), and the category of the tensor a malloc made or a free freed.
struct TracedMoment {
  int32_t node = -1;
  uint8_t phase = 0;     // a Phase
  uint8_t category = 0;  // a memory::Category
  uint16_t iteration = 0;
  bool operator==(const TracedMoment&) const = default;
};

// A traced malloc's tensor moved to another category (a gradient stolen into .grad) after
// request `before` - 1, where the walk was at `at`.
struct TracedRelabel {
  size_t before = 0;
  int64_t malloc = 0;  // its number among the trace's mallocs
  uint8_t to = 0;      // a memory::Category
  TracedMoment at;
  bool operator==(const TracedRelabel&) const = default;
};

// The step's requests without the allocator (TraceRequests): its first kTracedIterations
// iterations, and where the last two begin. `loops`: the simulation's state at the start of the
// last one was what it was at the start of the one before (the same tensors alive, by their
// places in the step, of the same sizes), so every later iteration makes the last one's requests
// again: its mallocs in the same order and sizes, its frees of its own and of the iteration
// before's mallocs at the same places.
// A decode step after its prefill (Options::prefill) is one stream on one allocator: the
// prefill's requests, then the step's (once, no loop), whose frees may name the prefill's
// mallocs (the cache it left); between the two the allocator empties its cache when
// `cache_emptied` and resets its peaks, which are then the step's.
struct StepTrace {
  std::vector<AllocatorRequest> requests;
  size_t previous_begins = 0;  // requests before the next-to-last traced iteration
  size_t last_begins = 0;      // requests before the last traced iteration
  bool loops = false;
  // The last iteration's requests were made as the one before's again (TraceWalk::kNotedLoop),
  // not walked.
  bool last_repeated = false;
  // After a prefill: the prefill's requests, which come first (0 with none, or while the trace
  // has not got past them: TraceRequests' most_requests).
  size_t prefill_requests = 0;
  bool cache_emptied = false;  // DecodePrefill::cache_emptied, read when prefill_requests > 0
  // Per malloc, in order: where its size comes from.
  std::vector<SizeRecipe> recipes;
  // Per request, where the walk made it; and the relabels between them, in order (what an
  // estimate written from the trace reads: symbolic.h EstimateFromTrace).
  std::vector<TracedMoment> moments;
  std::vector<TracedRelabel> relabels;
};

// Loop request q (symbolic/loop_watch.h) as a request of the step, in an iteration whose mallocs
// are numbered from `own` on and the iteration before's from `previous` on; `bytes` is a malloc's
// size.
[[nodiscard]] inline AllocatorRequest StepRequest(const LoopRequest& q, uint64_t bytes, int64_t own,
                                                  int64_t previous) {
  if (q.kind == LoopRequest::kMalloc) return {bytes, -1};
  return {0, (q.kind == LoopRequest::kFreeOwn ? own : previous) + static_cast<int64_t>(q.r)};
}

// Whether requests a and b are the same to an allocator under `config`: the free of the same
// malloc, or mallocs whose sizes round to the same block (it decides on rounded sizes only).
// Inline: a replay's check and a simulation following a run ask it for every request.
[[nodiscard]] inline bool SameRequest(const AllocatorRequest& a, const AllocatorRequest& b,
                                      const AllocatorConfig& config) {
  return a.freed == b.freed &&
         (a.freed >= 0 || CachingAllocatorModel::RoundSize(a.bytes, config) ==
                              CachingAllocatorModel::RoundSize(b.bytes, config));
}

// A trace (TraceRequests), and so a replay of it and the run a simulation follows, holds the
// step's first kTracedIterations iterations: the first (optimizer state and workspaces created)
// and two more.
inline constexpr int kTracedIterations = 3;
// A simulation runs the training loop until an iteration starts from the state an earlier one
// started from (the same tensors alive in the same allocator blocks): from there the loop repeats
// itself, and no later iteration reaches more. It stops after kMostIterations without that, and
// warns that later iterations may reach more.
inline constexpr int kMostIterations = 16;

// The simulation over a context built by Estimator::Run() or SimulateModel() (the bound graph,
// its value facts, the options and the GPU profile). Its estimate carries the symbolic backend's
// own diagnostics only; the common ones are added by whoever built the context.
Result<Simulation> Simulate(const memory::EstimationContext& ctx, bool record_events);
// The same, reading the options and the GPU from `key` (which must be SimulationKey::Of(ctx) or
// equal to it).
Result<Simulation> Simulate(const memory::EstimationContext& ctx, const SimulationKey& key,
                            bool record_events);

// The prefill before a decode step (ctx.prefill(), Options::prefill) alone, as it runs before the
// step: the weights and one forward over the prompt, its cache kept (peaks not reset); without a
// budget. InvalidArgument when ctx has no prefill.
Result<Simulation> SimulatePrefill(const memory::EstimationContext& ctx,
                                   bool record_events = false);

// The same over a step whose allocator run is `run` (which did not run out, under
// StepAllocatorConfig(options, key.allocator_budget), and saw the loop repeat itself, unless the
// step is a decode step after its prefill): the
// allocator model is not run again, its state after each request is read from `run`, and the
// loop is taken to repeat where run's did. Exactly Simulate(ctx, key, false) when the step makes
// run's requests (each malloc rounding to the size run's does: the allocator decides on rounded
// sizes only) and repeats its iterations as its trace did (StepTrace::loops); InvalidArgument,
// naming the first request that differs, or saying which of those did not hold, otherwise.
// Where run.requests end early (AllocatorRun::loop_length), the step's requests are compared as
// far as they are listed, and the listed ones must end with a whole iteration of the loop the
// step repeats without walking, as long as the run's: every later iteration is then the run's
// too, request for request. A decode step after its prefill (one pass, no loop) follows a run
// over the prefill's requests and then the step's (a replay's, symbolic/batch_trace.h), which
// lists every one of them and saw no loop.
Result<Simulation> Simulate(const memory::EstimationContext& ctx, const SimulationKey& key,
                            const AllocatorRun& run);

// The same, written from a trace instead of walking the step: `first`, the step's whole trace
// walked in a context of the same model and options but the searched value, whose ShapeOfStep
// was `first_shape`, resized into ctx (ResizeTraceOfShape: the walk's trace there, with where the
// walk made each request), each request followed as the walk would make it. Exactly
// Simulate(ctx, key, run) where ctx's step has that shape (a pipeline stage's: `first` is that
// stage's trace); InvalidArgument where it has not, where the step is after a prefill (left to
// the walk), where the trace did not repeat its last iteration as noted
// (StepTrace::last_repeated), or where run is not the step's or a request is not run's (as
// Simulate's).
Result<Simulation> SimulateFromTrace(const memory::EstimationContext& ctx, const SimulationKey& key,
                                     const AllocatorRun& run, const StepTrace& first,
                                     const std::vector<uint64_t>& first_shape);

// The allocator model a simulation under `options` replays its step through, limited to
// `budget` bytes reserved.
[[nodiscard]] AllocatorConfig StepAllocatorConfig(const Options& options, uint64_t budget);

// How a trace makes its last iteration's requests. kNotedLoop: when that iteration starts with
// the tensors the one before did (StepTrace::loops), it makes the one before's requests again,
// its frees of older tensors renamed to the mallocs that took their places, as the simulation's
// loop does (symbolic/timeline_loop.cc), without walking the graph a third time; otherwise it is
// walked. kEveryIteration: it is always walked (what the tests compare kNotedLoop with).
enum class TraceWalk { kNotedLoop, kEveryIteration };

// The step's allocator requests, in order, without the allocator (unlimited budget): the same
// mallocs and frees Simulate(ctx, ...) hands the allocator model over its first
// kTracedIterations iterations (a decode step after its prefill: the prefill's, then the step's),
// since what the step allocates never depends on the allocator's state. What
// symbolic/batch_trace.h replays at other batches. With `most_requests`, the walk stops once it
// has made that many: the step's first requests (and `loops` is known only when the walk got to
// the last traced iteration).
Result<StepTrace> TraceRequests(const memory::EstimationContext& ctx,
                                size_t most_requests = std::numeric_limits<size_t>::max(),
                                TraceWalk walk = TraceWalk::kNotedLoop);
// The trace `traced` (TraceRequests, whole) of the same model under the same options but the
// searched batch or dim, as the walk in `ctx` would make it where it makes the same requests: each
// malloc's size read in ctx by its recipe, everything else traced's. Where a size would differ
// from its recipe's -- a rule that picks another kernel at some size, a size that falls to 0 --
// the walk makes other requests than these; what is built on them is checked against a walk
// (symbolic/batch_trace.h). On many GPUs, the trace of ctx's pipeline stage (ctx.stage()); a
// decode step after its prefill, the prefill's requests sized in ctx.prefill(). InvalidArgument
// where a malloc's recipe reads nothing in ctx or a size of 0 (the walk there makes no such
// request).
// With `most_requests`, its first requests only, as a walk that stops there traces them. With
// `kept` TraceKept::kRequests, where each request was made (moments, relabels) and the recipes are
// left out: what curves through the trace, or a comparison with them, read.
enum class TraceKept { kWhole, kRequests };
Result<StepTrace> ResizeTrace(const memory::EstimationContext& ctx, const StepTrace& traced,
                              size_t most_requests = std::numeric_limits<size_t>::max(),
                              TraceKept kept = TraceKept::kWhole);
// What the walk of the step in `ctx` (on its pipeline stage) decides by besides the sizes it
// allocates -- which values share storage, what each node saves, which sizes are 0 (requests the
// walk skips), the checkpoint, the loss; symbolic/step_shape.cc lists it. Two contexts of one
// model under the same options but the searched batch or dim whose shapes are equal walk the step
// alike: the same requests in the same order, each malloc's size its recipe's in its own context.
// InvalidArgument for a decode step after its prefill (left to the walk), or what the timeline
// does not model.
Result<std::vector<uint64_t>> ShapeOfStep(const memory::EstimationContext& ctx);
// TraceRequests(ctx, most_requests) without walking: `traced`, a whole trace walked in a context
// whose ShapeOfStep was `traced_shape`, resized into ctx (ResizeTrace) where ctx's shape is the
// same. InvalidArgument where it is not (the walk there may make other requests), or where
// ResizeTrace refuses.
Result<StepTrace> ResizeTraceOfShape(const memory::EstimationContext& ctx, const StepTrace& traced,
                                     const std::vector<uint64_t>& traced_shape,
                                     size_t most_requests = std::numeric_limits<size_t>::max(),
                                     TraceKept kept = TraceKept::kWhole);
// The first `most_requests` requests of a decode step's trace (TraceRequests over a context with
// a prefill) where they are all its prefill's, from the prefill's context alone (`prefill`: what
// EstimationContext::prefill() would be, made over memory::PrefillOptions): the step's own graph
// is neither bound nor walked. The same requests, and nothing of where the prefill ends
// (prefill_requests 0), as the step's trace cut there; fewer when the prefill makes fewer.
Result<StepTrace> TracePrefillRequests(const memory::EstimationContext& prefill,
                                       size_t most_requests);

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_TIMELINE_H_
