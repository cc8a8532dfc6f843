// symbolic/batch_trace.h -- the step's allocator requests as polynomials in the searched value
// (the batch, or a dim such as the sequence length), replayed through the allocator model at any
// value without walking the graph again: what the max-batch and max-dim searches of the symbolic
// backend ask at most values (api/max_batch.cc).
//
// Policy:
//  * Traces of the step (TraceRequests, symbolic/timeline.h, or one read at another value by
//    ResizeTrace) at values v1 < v2 (< v3) that make the same requests in the same order (the
//    same frees of the same mallocs) give each malloc's
//    size as the polynomial through its sizes, rounded down (base/size_curves.h): the line through
//    two (a batch dim times the rest), the parabola through three (eager attention's [B, H, S, S]
//    scores grow with the square of the sequence length). FitFromTwo reads the same curves off
//    two traces where each size is a tensor's bytes over dims of the searched size: a v + b v^2
//    with a, b >= 0 (through the origin), or k (v + r) (past + 1 positions), which grows more
//    slowly than the value. A size that is neither (a workspace that is a fraction of its
//    operands, a [N, N] matrix on two traces) is off its curve elsewhere, and Matches() says so
//    when a trace at that value is compared.
//  * The caching allocator decides on rounded sizes only (allocator.cc RoundSize; the requested
//    bytes are only counted), so a trace matches the curves at v when each malloc rounds to the
//    size its curve rounds to. Then Replay(v) hands the allocator model, request by request, what
//    Simulate at v hands it: the same allocated and reserved bytes, the same release-and-retry,
//    the same first request that fails.
//  * Replay stops at the first request that fails even after the cached segments are released
//    (PyTorch raises OutOfMemoryError there); what it reports then is how far the step was from
//    the budget and where, so that the next guess can read how fast the bytes alive there grow
//    with the value (AliveGrowth).
//  * The loop: when every trace repeats its last iteration for ever (StepTrace::loops, at the same
//    places), Replay goes on past the traced iterations with the last one's requests -- its
//    mallocs on the same curves, its frees of its own and of the iteration before's mallocs --
//    until an iteration starts from the allocator state one of the two before it started from
//    (the same blocks, the iteration before's tensors in the same ones): from there the loop
//    repeats, as Simulate finds it does (symbolic/timeline.h kMostIterations).
//  * A decode step after its prefill (StepTrace::prefill_requests): the prefill's requests, then
//    the allocator's cache emptied (when the prefill was followed by torch.cuda.empty_cache()) and
//    its peaks reset, as Simulate does between the two, then the step's; the peaks reported are
//    the step's, and a request of either that fails for good ends the replay.
#ifndef MEMEST_SYMBOLIC_BATCH_TRACE_H_
#define MEMEST_SYMBOLIC_BATCH_TRACE_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "base/size_curves.h"
#include "symbolic/allocator.h"
#include "symbolic/loop_watch.h"
#include "symbolic/timeline.h"

namespace memest::symbolic {

// The most requested bytes alive at once in a trace.
[[nodiscard]] uint64_t PeakRequested(const std::vector<AllocatorRequest>& requests);

// Whether the allocator model configured by `config`, handed `trace`'s requests in order (a
// decode step's prefill's first, then its cache emptied where traced so, as the simulation does
// between the two), fails one of them for good. The simulation that makes
// these requests -- the walk `trace` was traced from -- then runs out at the same one: the
// allocator decides on the requests alone.
[[nodiscard]] bool RunsOut(const StepTrace& trace, const AllocatorConfig& config);

// One trace of the step, at value `at` of the searched batch or dim.
struct Traced {
  int64_t at = 0;
  const StepTrace* trace = nullptr;
};

class BatchTrace {
 public:
  // The curves through two or three traces at increasing values >= 1; nullopt when the traces
  // differ in anything but the mallocs' sizes, or a size falls as the value grows. The loop
  // goes on past the traced iterations when every trace loops, with the same iterations.
  [[nodiscard]] static std::optional<BatchTrace> Fit(const std::vector<Traced>& traces);
  // The curves through two traces at increasing values >= 1, as a tensor's bytes over dims of
  // the searched size grow: each size that grows at least in proportion to the value and at most
  // with its square is the parabola through 0 at value 0 and its two sizes (a v + b v^2, a, b >=
  // 0: [B, S, H], [B, H, S, S], or a sum of both); one that grows more slowly is the line through
  // its two sizes (k (v + r): a decode step's [B, H, 1, past + 1] scores); one that does not
  // change is the same at every value. What a third trace would give wherever every size is such
  // a polynomial. nullopt as Fit's, and where a size grows faster than the square of the value, or
  // more slowly than it on a line that is not a whole number of bytes at value 0, which only a
  // third trace can tell.
  [[nodiscard]] static std::optional<BatchTrace> FitFromTwo(const std::vector<Traced>& traces);

  // Whether `trace`, taken at value `v`, is what the curves give at v: the same requests, each
  // malloc rounding (under `config`) to the size its curve rounds to. With `prefix`, `trace` is
  // the step's first `prefix` requests (TraceRequests' most_requests), compared with the curves'
  // first ones; a prefix past the traced iterations (a replay that ran on in the loop; the
  // default is the traced iterations alone) also needs the trace to loop as the curves do.
  [[nodiscard]] bool Matches(const StepTrace& trace, int64_t v, const AllocatorConfig& config,
                             size_t prefix = std::numeric_limits<size_t>::max()) const;

  // A decode step's trace after its prefill: the prefill's requests, first (StepTrace's); 0
  // without one.
  [[nodiscard]] size_t prefill_requests() const { return prefill_requests_; }

  // The largest value in [1, limit] at which the requested bytes alive at once stay within
  // `bytes` by the curves (in doubles; where they grow with the value); 0 when even 1 does not.
  // Allocated and reserved bytes are at least the requested ones, so a larger value does not fit
  // an allocator limited to `bytes`.
  [[nodiscard]] int64_t LargestWithin(uint64_t bytes, int64_t limit) const;

  struct Replay {
    AllocatorStats stats;  // at the end, or at the request that failed
    bool ran_out = false;
    // The requests replayed, the loop's past the traced ones included: all, or up to and
    // including the one that failed. A simulation that makes these same first requests (Matches
    // with this prefix) fails at the same one.
    size_t requests_run = 0;
    // Where the loop repeats itself; none when the replay ran out, the traces do not loop, or
    // the loop did not repeat within kMostIterations.
    std::optional<LoopRepeat> repeat;
    // When ran_out: the bytes the failing request's segment lacked after the release.
    uint64_t short_by = 0;
    // The requests up to the last one that raised the allocated peak: AliveGrowth(at_peak, v) is
    // the growth per unit of the requested bytes alive there.
    size_t at_peak = 0;
    // When ran_out: what the allocator would have had to reserve there (the reserved bytes and
    // short_by, at least the capacity) beyond the requested bytes alive with the failing
    // request's -- rounding, split remainders and cached blocks.
    uint64_t overhead = 0;
  };
  // The step at value `v` through an allocator model configured by `config` (its capacity the
  // budget), the loop's iterations past the traced ones included, stopping at the first request
  // that fails for good. With `kept`, the run is kept there too: its config, the allocated and
  // reserved bytes after each request, the statistics at the end and where the loop repeats;
  // with its requests listed (ListRequests), the AllocatorRun that Simulate can follow instead of
  // running the allocator model again (symbolic/timeline.h). With `on`, the replay runs on that
  // model, reset to `config` first (CachingAllocatorModel::Reset: as on a new one), which a
  // caller replaying many values keeps for all of them; on a model of its own otherwise.
  [[nodiscard]] Replay Run(int64_t v, const AllocatorConfig& config, AllocatorRun* kept = nullptr,
                           CachingAllocatorModel* on = nullptr) const;
  // Lists the requests of `run`, kept by Run at value `v`, that a simulation following it
  // compares with its own (symbolic/timeline.h Simulate): the traced ones and one iteration of
  // the loop past them, the later iterations left to AllocatorRun::loop_length; all of them when
  // the traces do not loop.
  void ListRequests(int64_t v, AllocatorRun* run) const;
  // The growth per unit of the value, at value v, of the requested bytes alive after the first
  // `end` requests.
  [[nodiscard]] double AliveGrowth(size_t end, int64_t v) const;
  // The largest value below `v` at which a malloc among the first `requests` (past the traced
  // ones: the loop's, which the traced ones include) would ask for a segment of another size than
  // at v -- memory::AllocationSize of its size rounded under `config` -- if no cached block took
  // it; 0 when none would below v. Between that value and v those mallocs round to other sizes
  // but ask for the same segments: where a replay ran out for want of segments alike at two such
  // values, the values between likely do too (a guess for the search, not a verdict).
  [[nodiscard]] int64_t BelowSameSegments(size_t requests, int64_t v,
                                          const AllocatorConfig& config) const;
  // The step's first `count` requests at value `v` by the curves (past the traced ones: the
  // loop's, when the traces loop); all the traced ones by default.
  [[nodiscard]] std::vector<AllocatorRequest> RequestsAt(
      int64_t v, size_t count = std::numeric_limits<size_t>::max()) const;

 private:
  BatchTrace() = default;

  // Fit and FitFromTwo (`from_two`).
  static std::optional<BatchTrace> FitOver(const std::vector<Traced>& traces, bool from_two);

  // Reads the loop off the traced requests (StepTrace's iterations); false when the last
  // iteration frees a malloc older than the iteration before, its mallocs are not freed once each
  // by it or the next (CarriedMallocs), or the two iterations make different numbers of mallocs.
  bool FindLoop(size_t previous_begins, size_t last_begins);
  // Fills alive_after_malloc_ from freed_ and curves_.
  void SumAlive();
  // Each distinct curve's bytes at v (curves_.DistinctBytes), by its number.
  [[nodiscard]] std::vector<uint64_t> DistinctAt(int64_t v) const;

  // The traced requests, as the first trace made them: a free's malloc (by number), -1 for a
  // malloc, whose size at any value is its curve's. Four bytes a request where a copy of the
  // trace's requests took sixteen: the 10k-node chain's search peaked at 81.1 MB of heap with
  // the copy and at 77.6 MB without (valgrind --tool=massif).
  std::vector<int32_t> freed_;
  base::SizeCurves curves_;  // per malloc, equal ones shared (base/size_curves.h)
  bool loops_ = false;
  // The loop's requests: the last traced iteration's (a malloc's curve is
  // loop_first_malloc_ + r).
  std::vector<LoopRequest> loop_;
  size_t previous_begins_ = 0;        // requests before the next-to-last traced iteration
  size_t loop_begins_ = 0;            // requests before the last traced iteration
  size_t loop_first_malloc_ = 0;      // mallocs before it
  size_t previous_first_malloc_ = 0;  // mallocs before the iteration before it
  std::vector<uint32_t> carried_;     // the loop's mallocs that outlive their iteration
  size_t most_alive_ = 0;
  // After each malloc, in order: the requested bytes alive as c x^2 + b x + a in x = v - at(0),
  // the sums of the alive curves' coefficients (what LargestWithin reads, for every budget it is
  // asked: summed once, by FitOver).
  struct Alive {
    double a, b, c;
  };
  std::vector<Alive> alive_after_malloc_;
  size_t prefill_requests_ = 0;  // StepTrace::prefill_requests (0: no prefill)
  bool cache_emptied_ = false;
};

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_BATCH_TRACE_H_
