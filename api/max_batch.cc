// api/max_batch.cc -- the largest batch (or dim value) that fits: FindMaxBatch, FindMaxDim.
//
// Policy (docs/cli.md `--max-batch`; the contract in memest/estimator.h):
//  * The exact search (ExactSearch): safeguarded interpolation over the backend's own
//    estimates (Candidates); the answer is a batch that fits whose successor does not. For the
//    analytical backend's step (training or inference; on many GPUs, each pipeline stage's), the
//    candidates come first from the closed form read through the curves of the estimates' terms
//    (TermCandidates, api/term_candidates.h), and from Candidates where those say nothing; every
//    verdict is an estimate's either way.
//  * The symbolic backend's max batch (and max dim) first goes through its replay
//    (ReplayLargestFitting; symbolic/batch_trace.h): the step's allocator requests are traced at
//    batch 2 and at one larger batch (a dim: at two values, each size the parabola through them
//    and the origin, so that sizes growing with its square are parabolas, or the line through them
//    where it grows more slowly -- at three where that cannot be, BatchTrace::FitFromTwo), each
//    malloc's size is the curve through its traced sizes, and a batch is probed by replaying those
//    requests through the allocator model within the budget (no graph walk, no binding). Only the
//    first value's trace walks the step: the others are read off it in a context bound at their
//    value (symbolic::ResizeTrace: each malloc's size by where the walk read it; each pipeline
//    stage's; a decode step's prefill's in the prefill's context), and walked only where that
//    cannot be (a malloc whose recipe reads nothing there). A resized trace is what the walk
//    there makes wherever the walk makes the same requests; the curves through it are checked as
//    a walked trace's are (below), at the answer by its estimate and at the successor by its
//    trace there.
//    The probes start at the largest batch whose requested bytes alone stay within the budget;
//    while none fits, the next is where the requested bytes and what the allocator held beyond
//    them where the last replay ran out stay within it; then they step by how far the last one
//    was from fitting (ReplaySearch). A probe that runs out as the lowest failure did (the same
//    request, bytes reserved and short), though the bytes alive grew by more than were short
//    between them, is on a plateau: the mallocs up to there ask for the same segments over a
//    range of batches (the 10,000-node chain: activations over 14 MiB, each in a 16 MiB segment),
//    and the next probe is the lowest batch where they still do, or the one below it, when that is
//    farther down than the two were apart (BatchTrace::BelowSameSegments). Where that stalls, the
//    next steps down from the lowest failure by 1, 2, 4, ... batches while none fits (a probe that
//    fits costs a whole replay, one that fails only its requests up to the failing one), and
//    bisects once one has.
//  * A replay runs the training loop as the estimate does, until it repeats itself: past the
//    traced iterations with the last one's requests (symbolic/batch_trace.h, the loop). A decode
//    step after its prefill is traced and replayed with its prefill: the prefill's requests, then
//    the step's once, on one allocator whose peaks are reset between them (the estimate at the
//    answer follows both: the prefill's requests, then the step's).
//  * On many GPUs each pipeline stage's step is traced and replayed on its own (one stage
//    without a pipeline), with NCCL's buffers outside the allocator as the estimate counts them.
//    The stages are searched in turn, each up to the answer of those before, so the answer is the
//    smallest of theirs; a stage searched before the answer came down is replayed at it too, and
//    must fit there.
//  * The replay's answer stands only when checked: the backend's estimate at the answer fits with
//    the replay's allocated and reserved peaks (on many GPUs, each stage's device peak its
//    replay's; each stage's estimate follows its replay at the answer,
//    symbolic::EstimateFollowing, when the step there makes the replay's requests and repeats
//    its iterations as traced, instead of running the allocator model a second time -- written
//    from the first trace, each pipeline stage's from its own, which says where each request was
//    made, where the step at the answer has the shape it had there, instead of walking the step:
//    symbolic::EstimateFromTrace, the same estimate field for field), and the
//    trace at the successor is on the curves (each malloc rounds to the same size) as far as the
//    successor's replay ran -- to the request that failed, where its trace stops (TraceRequests'
//    most_requests; past the traced iterations, the trace loops as the curves do) -- so the
//    successor's replay, which did not fit, is what the simulation there does request by request
//    (on many GPUs, the trace of the stage whose successor did not fit). That trace is the first
//    one resized where the step at the successor has the shape it had where that was walked
//    (symbolic::ResizeTraceOfShape: the walk there makes the same requests, each malloc's size
//    its recipe's there), and a walk elsewhere (a decode step after its prefill). Where the
//    successor's trace is off the curves (sizes padded to a multiple: memory-efficient attention's
//    logsumexp and mask copies), its own requests are handed to the allocator model: where they run
//    out, so does the simulation there, and the answer stands when its estimate fits (made anew
//    where it cannot follow the replay, whose sizes at the answer may be off the curves too). Where
//    the replay's search found an answer it could not vouch for (its successor's requests, off the
//    curves, did not run out as far as they were traced; its estimate did not fit), that answer is
//    estimated, and its successor: when it fits and the successor does not, it is the answer
//    (ConfirmHint); else the exact search starts from those two -- from a hint that does not fit,
//    by steps down of 1, 2, 4, ... values (the replay's answer is then usually a few values too
//    high; a bisection from 1 took up to 17 estimates more). Anything else -- another backend, no
//    curves, an error -- is answered by the exact search, whose answer and errors are the ones
//    given.
//  * Where kFirstTraced's requested bytes alone pass the budget, no value from there fits: the
//    answer is 0 or 1, and the estimate at 1 says which (ConfirmHint with the hint 1; the
//    simulation at 2, where the trace walked, runs out of memory: the requested bytes alive at
//    once are a floor under what the allocator reserves).
//  * A dim searched up to 3 x kDimTraceStep or more is traced at multiples of kDimTraceStep, where
//    padded sizes are on their curves (from kFirstTraced instead when the step at kDimTraceStep is
//    refused or past the budget).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "analytical/step_terms.h"
#include "api/term_candidates.h"
#include "base/checked.h"
#include "memest/estimator.h"
#include "memory/context.h"
#include "memory/device.h"
#include "memory/parallel.h"
#include "symbolic/allocator.h"
#include "symbolic/batch_trace.h"
#include "symbolic/symbolic.h"

namespace memest {

namespace {

// Whether the symbolic backend simulated the step within the allocator's budget (noted
// allocator_retries or out_of_memory, symbolic/symbolic.cc).
bool WithinBudget(const Estimate& e) {
  return std::any_of(e.diagnostics.begin(), e.diagnostics.end(), [](const Diagnostic& d) {
    return d.code == "allocator_retries" || d.code == "out_of_memory";
  });
}

// What the search draws its line through: the device peak, except for a step made within the
// allocator's budget (WithinBudget). Its reserved peak is held at the budget by released caches,
// or is the unlimited step's, so it is the allocated bytes that meet the capacity: the device
// peak less what the allocator held cached but free.
double SearchSignal(const Estimate& e) {
  const uint64_t cached_free = e.peak_reserved - std::min(e.peak_allocated, e.peak_reserved);
  return static_cast<double>(WithinBudget(e) && e.peak_device >= cached_free
                                 ? e.peak_device - cached_free
                                 : e.peak_device);
}

// The candidates of the max-batch search (policy in memest/estimator.h and docs/cli.md
// `--max-batch`): safeguarded interpolation on SearchSignal, toward the device peak at which the
// verdict turns, as the last estimate's fit reads it (Capacity(): the GPU's usable memory less the
// safety margin, reached by the interval's top where that is judged, and under a memory fraction
// the room within the allocator's limit).
//
// What an estimate says grows with the value -- its saved activations and transients; where its
// peak is the optimizer step's, whose transients are the step's temporaries, those of its forward
// and backward's phase when it reports them (the analytical backend: Estimate::phases), with that
// phase's peak, else nothing -- is the model the candidates come from. Sizes are affine in the
// batch, and where two searched dims meet (the attention scores of a sequence) they grow with its
// square, so through two estimates that say what grows, the growth is the curve beta v + gamma v^2
// (the growth curve; a line when gamma is 0), and the peak is an estimate's fixed part (its peak
// less its growth) plus the curve.
//
// Unbracketed (no failing value yet):
//  * the first candidate after 1 is where the line through 1's peak with the slope of its growth
//    meets the capacity, rounded down (1's transients hold fixed parts too, so the slope is steep
//    and the candidate usually fits, below the answer);
//  * the candidate right after the first candidate or a jump that fitted reads that value's own
//    estimate: the line through its peak with the slope of its growth per value (the nearest
//    value), for the value before sits off the line the larger ones follow (fixed transients and
//    small blocks weigh on it, and its peak is often the optimizer step's);
//  * else the line through the last two estimates, at least one more than the largest fitting
//    value; where it does not rise, a jump: the value times the capacity over its peak, at least
//    twice it -- and at least 8 times it when the peak is the optimizer step's and the estimate
//    does not report its backward's (nothing there says how the forward and backward grow; the
//    bracket that follows is closed by the curve in a few estimates, so a long jump costs less
//    than many doublings);
//  * and a candidate above the last value estimated, which fits, is replaced by its successor when
//    that value's room left (the capacity less its peak) is under two values' growth of its
//    allocated bytes between the last two estimates (not right after 1): near the capacity the
//    rounding of blocks and segments moves the peak by a value or two either way, and the
//    successor's verdict may end the search.
// Bracketed (the largest fitting and the smallest failing value), the candidate is clamped into
// the open bracket and is:
//  * the growth curve's through the largest fitting value and the nearest larger estimate that
//    says what grows (the failing side, so that the curve is read between its points: read
//    beyond two smaller values, a constant part of what grows bends it away from the answer), else
//    the nearest smaller one; the mean of the two points where it meets the capacity from either
//    one's fixed part (the fixed parts differ by the rounding of blocks, which moves the peak up
//    and down);
//  * else the line through the bracket's ends, where they straddle the capacity, and else a
//    bisection;
//  * steps down from the failing end (1, 2, 4, ... values) once a candidate from the curve or the
//    line failed right under it (the bracket narrowed by at most a sixteenth, or 2) -- the peak
//    there is a plateau of rounded segments above the capacity, or bends -- or a value failed
//    whose own line value is just below the capacity (cached segments it could not release), until
//    one fits, or the next step would be longer than 32 values or a quarter of the bracket (then
//    the plateau is long, or the curve wrong); from there on the curve and the line are not
//    trusted in this bracket, and it is bisected (no more steps down);
//  * and a bisection after two steps in a row that did not halve the bracket (so at worst about
//    three estimates halve it).
class Candidates {
 public:
  Candidates(const Fit& fit_at_one, int64_t limit, const Estimate& at_one)
      : cap_(Capacity(at_one, fit_at_one)), limit_(limit), last_(PointOf(1, at_one)) {
    good_peak_ = last_.peak;
    if (last_.growing > 0) grown_.push_back(last_);
  }

  // Whether the answer is known: the limit fits, or the bracket is two adjacent batches.
  bool done() const { return bad_ == 0 ? good_ >= limit_ : bad_ - good_ <= 1; }
  int64_t largest_fitting() const { return good_; }
  int64_t smallest_failing() const { return bad_; }  // 0: none yet

  // The next batch comes from elsewhere (TermCandidates): Record reads it as made by none of the
  // rules here.
  void NextFromElsewhere() { made_ = Made::kOther; }
  // The next candidates step down from the smallest failing value, as after a candidate of the
  // model that failed right under it (policy above): for a value from elsewhere that failed where
  // the answer was expected (the replay's answer, which its estimate did not confirm).
  void StepDownFromFailure() {
    if (bad_ > 0 && !stepped_down_) down_ = 1;
  }

  // The batch to estimate next.
  int64_t Next() {
    made_ = Made::kOther;
    if (bad_ == 0) return SuccessorWhenClose(Extrapolate());
    if (down_ > 0) {
      if (down_ <= kLongestStepDown && down_ * kStepsDownWithin <= bad_ - good_) {
        made_ = Made::kStepDown;
        return bad_ - down_;  // above good_: down_ is at most a quarter of the bracket
      }
      down_ = 0;  // the steps down ran out: the curve and the line are not trusted here
      stepped_down_ = true;
    }
    if (stepped_down_ || not_halving_ >= kBisectAfter) return Bisect();
    made_ = Made::kModel;
    if (const std::optional<double> root = BracketRoot()) {
      // (compared before any cast)
      if (!(*root < static_cast<double>(bad_) - 1)) return bad_ - 1;
      if (!(*root > static_cast<double>(good_) + 1)) return good_ + 1;
      return static_cast<int64_t>(std::floor(*root + 0.5));
    }
    if (good_peak_ <= cap_ && cap_ < bad_peak_) return Interpolate();
    return Bisect();
  }

  // The verdict and estimate at `batch`, the last Next().
  void Record(int64_t batch, const Fit& fit, const Estimate& e) {
    const bool fits = fit.fits;
    const int64_t width = bad_ == 0 ? 0 : bad_ - good_;
    // A candidate too large to estimate (Unaffordable) says nothing of where the verdict turns.
    if (e.peak_device < kUnaffordable) cap_ = Capacity(e, fit);
    prev_ = last_;
    last_ = PointOf(batch, e);
    if (last_.growing > 0) grown_.push_back(last_);
    if (fits) {
      good_ = batch;
      good_peak_ = last_.peak;
    } else {
      bad_ = batch;
      bad_peak_ = last_.peak;
    }
    if (width > 0) {
      const int64_t now = bad_ - good_;
      not_halving_ = now > width / 2 ? not_halving_ + 1 : 0;
      if (fits) {
        stepped_down_ = stepped_down_ || made_ == Made::kStepDown;
        down_ = 0;
      } else if (made_ == Made::kStepDown) {
        down_ *= 2;
      } else if (made_ == Made::kModel && width - now <= std::max<int64_t>(2, width / 16)) {
        down_ = 1;
      }
    }
    if (!fits && down_ == 0 && !stepped_down_ && FailedJustBelowCapacity()) down_ = 1;
  }

 private:
  struct Point {
    int64_t batch = 0;
    double peak = 0;       // SearchSignal
    double allocated = 0;  // peak_allocated
    // The breakdown's saved activations and transients (requested bytes), at a peak outside the
    // optimizer step, or the forward and backward's phase's where the estimate says it (PointOf);
    // 0 at the step's otherwise.
    double growing = 0;
    bool at_step = false;  // the peak is a fixed one (AtFixedPeak), and nothing says what grows
  };
  // What made the last candidate: how the bracket's next step reads its verdict. kOther:
  // unbracketed; kModel: the growth curve or the line between the bracket's ends.
  enum class Made { kOther, kModel, kStepDown, kBisection };
  // A fitting batch whose room left is under this many batches' growth of its allocated bytes is
  // followed by its successor.
  static constexpr double kCloseBatches = 2;
  // A failing batch is within this many batches' growth of the capacity line.
  static constexpr double kNearCapacity = 16;
  // The least jump while the peak is the optimizer step's.
  static constexpr double kJumpAtTheStep = 8;
  // The steps down end past this many values, or past 1/kStepsDownWithin of the bracket.
  static constexpr int64_t kLongestStepDown = 32;
  static constexpr int64_t kStepsDownWithin = 4;
  // A bisection follows this many bracket steps in a row that did not halve the bracket.
  static constexpr int kBisectAfter = 2;
  // Peaks past any estimate (RunInContext refuses 2^60 bytes): Unaffordable()'s.
  static constexpr uint64_t kUnaffordable = uint64_t{1} << 60;

  // The device peak at which the verdict turns, as estimate e's fit reads it: the GPU's usable
  // memory less the safety margin, where the judged peak may reach -- the interval's top, when
  // it is judged, in the proportion it stands to the peak at e (a stack's band is a share of the
  // peak) -- and under a memory fraction no more than e's peak plus its room left (the limit
  // plus what lives outside the allocator, less the margin on the limit and the interval).
  static double Capacity(const Estimate& e, const Fit& fit) {
    const double peak = static_cast<double>(e.peak_device);
    const double reach = static_cast<double>(fit.capacity) - static_cast<double>(fit.margin);
    const double by_capacity =
        fit.judged > e.peak_device ? reach * peak / static_cast<double>(fit.judged) : reach;
    if (fit.reserved_limit == 0) return by_capacity;
    return std::min(by_capacity, peak + static_cast<double>(fit.headroom));
  }

  // An estimate as the search reads it. Where its peak is the optimizer step's and it says what
  // the forward and backward's was (Estimate::phases: below the batch where the activations
  // outgrow the step), the point is that phase's -- its device peak, allocated bytes and what
  // grows in it: the step's peak is the same at every batch, so the verdict turns where the
  // backward's meets the capacity.
  static Point PointOf(int64_t batch, const Estimate& e) {
    Point p{batch, SearchSignal(e), static_cast<double>(e.peak_allocated), Growing(e),
            AtFixedPeak(e)};
    // (Not for a step made within the allocator's budget, whose signal is not its device peak,
    // nor for a pipeline's worst stage, where another stage's backward may decide.)
    if (!p.at_step || WithinBudget(e) || e.ranks.size() > 1) return p;
    for (const PhasePeak& phase : e.phases) {
      if (phase.phase != Phase::kBackward) continue;
      p.peak = static_cast<double>(phase.peak_device);
      p.allocated = static_cast<double>(phase.peak_allocated);
      p.growing = static_cast<double>(phase.breakdown.saved_activations) +
                  static_cast<double>(phase.breakdown.transient);
      p.at_step = !(p.growing > 0);
    }
    return p;
  }

  // Whether the estimate's peak is one the batch does not move: the optimizer step's, or (the
  // analytical backend's phase before the first iteration) DDP's wrap.
  static bool AtFixedPeak(const Estimate& e) {
    return e.peak_phase == Phase::kOptimizerStep ||
           (e.peak_phase == Phase::kUnknown && !e.phases.empty());
  }

  // What grows with the batch at an estimate's peak: its saved activations and transients
  // (requested bytes). At the optimizer step's peak the transients are the step's temporaries
  // and no saved activation is alive: nothing there says, 0.
  static double Growing(const Estimate& e) {
    if (AtFixedPeak(e)) return 0;
    return static_cast<double>(e.breakdown.saved_activations) +
           static_cast<double>(e.breakdown.transient);
  }

  // The growth curve through a and b (both growing; policy above), beta v + gamma v^2 with no
  // constant part: the mean of the values where it meets the capacity from a's fixed part and from
  // b's (a value at or below 0 where a fixed part alone passes it); nullopt when it says nothing
  // (gamma or beta negative -- growth with a constant part -- or no real root).
  std::optional<double> CurveRoot(const Point& a, const Point& b) const {
    const double va = static_cast<double>(a.batch), vb = static_cast<double>(b.batch);
    if (!(a.growing > 0 && b.growing > 0) || va == vb) return std::nullopt;
    const double gamma = (b.growing / vb - a.growing / va) / (vb - va);
    const double beta = a.growing / va - gamma * va;
    if (!(gamma >= 0 && beta >= 0)) return std::nullopt;
    // gamma v^2 + beta v = room, solved as 2 room / (beta + sqrt(beta^2 + 4 gamma room)): the
    // same root as (-beta + sqrt(...)) / (2 gamma), without its cancellation for a small gamma,
    // and room / beta at gamma 0.
    auto meets = [&](const Point& p) -> std::optional<double> {
      const double v = static_cast<double>(p.batch);
      const double room = cap_ - (p.peak - (beta * v + gamma * v * v));
      const double disc = beta * beta + 4 * gamma * room;
      if (!(disc >= 0)) return std::nullopt;
      const double denominator = beta + std::sqrt(disc);
      if (!(denominator > 0)) return std::nullopt;
      const double root = 2 * room / denominator;
      return std::isfinite(root) ? std::optional<double>(root) : std::nullopt;
    };
    const std::optional<double> from_a = meets(a), from_b = meets(b);
    if (!from_a || !from_b) return std::nullopt;
    return (*from_a + *from_b) / 2;
  }

  // Bracketed: the growth curve through the largest fitting value and the nearest larger
  // estimate that says what grows -- the failing side, so that the curve is read between its
  // points -- or, when there is none, the nearest smaller one; nullopt when there is neither.
  std::optional<double> BracketRoot() const {
    const Point* good = nullptr;
    const Point* above = nullptr;
    const Point* below = nullptr;
    for (const Point& p : grown_) {
      if (p.batch == good_) {
        good = &p;
      } else if (p.batch > good_) {
        if (above == nullptr || p.batch < above->batch) above = &p;
      } else if (below == nullptr || p.batch > below->batch) {
        below = &p;
      }
    }
    const Point* other = above != nullptr ? above : below;
    if (good == nullptr || other == nullptr) return std::nullopt;
    return CurveRoot(*good, *other);
  }

  // Where the line through the last estimate's peak, with the slope of what grows with the batch
  // there (per batch), meets the capacity; 0 when it says nothing (no such bytes, or it meets the
  // capacity at or below that batch).
  double GrowthRoot() const {
    if (!(last_.growing > 0)) return 0;
    const double batch = static_cast<double>(last_.batch);
    const double root = batch + (cap_ - last_.peak) / (last_.growing / batch);
    return root > batch ? root : 0;
  }

  // The first candidate after batch 1 (policy above): GrowthRoot() there, rounded down, at least
  // 2; 0 when batch 1 says nothing of its growth.
  int64_t FromBatchOne() const {
    if (prev_.batch != 0) return 0;
    const double root = GrowthRoot();
    if (root == 0) return 0;
    if (root >= static_cast<double>(limit_)) return limit_;  // (compared before any cast)
    return std::max<int64_t>(static_cast<int64_t>(root), 2);
  }

  // The candidate right after the first candidate or a jump, when that batch fitted (policy
  // above): GrowthRoot() there, the nearest batch; 0 when it says nothing.
  int64_t FromTheJump() const {
    if (last_.batch != jumped_to_ || last_.batch != good_) return 0;
    const double root = GrowthRoot();
    if (root == 0) return 0;
    if (root >= static_cast<double>(limit_)) return limit_;  // (compared before any cast)
    return std::clamp<int64_t>(static_cast<int64_t>(std::floor(root + 0.5)), good_ + 1, limit_);
  }

  // `next`, or the largest fitting batch's successor when that batch was the last estimated and
  // its room left is under kCloseBatches batches' growth of its allocated bytes (policy above).
  int64_t SuccessorWhenClose(int64_t next) const {
    if (next <= good_ + 1 || last_.batch != good_ || prev_.batch <= 1) return next;
    const double slope =
        (last_.allocated - prev_.allocated) / static_cast<double>(last_.batch - prev_.batch);
    return slope > 0 && (cap_ - good_peak_) / slope < kCloseBatches ? good_ + 1 : next;
  }

  int64_t Extrapolate() {
    if (const int64_t first = FromBatchOne(); first > 0) return jumped_to_ = first;
    if (const int64_t from_jump = FromTheJump(); from_jump > 0) return from_jump;
    // Where the device peak does not rise yet (segments rounded up hide small batches'
    // growth), the allocated bytes' slope, which does.
    const double step = static_cast<double>(last_.batch - prev_.batch);
    double slope = prev_.batch > 0 ? (last_.peak - prev_.peak) / step : 0;
    if (!(slope > 0) && prev_.batch > 0) slope = (last_.allocated - prev_.allocated) / step;
    double predicted =
        slope > 0 ? static_cast<double>(last_.batch) + (cap_ - last_.peak) / slope : 0;
    if (slope <= 0 || !(predicted > static_cast<double>(good_))) {
      // Nothing rises yet: a jump by the capacity over the peak so far, which a peak with a
      // fixed part and a part per batch cannot pass (W + a r b <= r (W + a b) = cap, for
      // r = cap / peak(b) >= 1); but at least a doubling, and at least kJumpAtTheStep times while
      // the peak is the optimizer step's and nothing says what grows (policy above), which can
      // pass it.
      const double least = last_.at_step ? kJumpAtTheStep : 2.0;
      const double jump = static_cast<double>(good_) *
                          std::max(least, std::floor(cap_ / std::max(good_peak_, 1.0)));
      jumped_to_ = jump >= static_cast<double>(limit_) ? limit_ : static_cast<int64_t>(jump);
      return jumped_to_;
    }
    if (predicted >= static_cast<double>(limit_)) return limit_;  // (compared before any cast)
    return std::max<int64_t>(static_cast<int64_t>(predicted), good_ + 1);
  }

  int64_t Interpolate() const {
    const double t = (cap_ - good_peak_) / (bad_peak_ - good_peak_);
    const double at = t * static_cast<double>(bad_ - good_);  // (compared before any cast)
    if (!(at < static_cast<double>(bad_ - good_ - 1))) return bad_ - 1;
    if (!(at > 1)) return good_ + 1;
    return good_ + static_cast<int64_t>(at);
  }

  int64_t Bisect() {
    made_ = Made::kBisection;
    not_halving_ = 0;
    return good_ + (bad_ - good_) / 2;
  }

  // The failing batch's line value is below the capacity (cached segments it could not
  // release) by at most kNearCapacity batches' growth: the boundary is usually a few batches
  // down.
  bool FailedJustBelowCapacity() const {
    const double per_batch = (bad_peak_ - good_peak_) / static_cast<double>(bad_ - good_);
    return bad_peak_ <= cap_ && cap_ - bad_peak_ <= kNearCapacity * per_batch;
  }

  double cap_;  // Capacity() at the last estimate
  const int64_t limit_;
  int64_t good_ = 1;
  double good_peak_ = 0;
  int64_t bad_ = 0;  // 0 = no failing batch found yet
  double bad_peak_ = 0;
  Point last_, prev_;         // the last two evaluations
  std::vector<Point> grown_;  // every evaluation that says what grows, in order
  Made made_ = Made::kOther;
  int not_halving_ = 0;        // bracket steps in a row that did not halve it
  int64_t down_ = 0;           // the next step down from the failing batch; 0: not stepping down
  bool stepped_down_ = false;  // the steps down ended: the rest is bisected
  int64_t jumped_to_ = 0;      // the first candidate's or the last jump's batch (Extrapolate)
};

// What the search records for a candidate too large to estimate: peaks past any GPU.
Estimate Unaffordable() {
  Estimate e;
  e.peak_allocated = e.peak_reserved = e.peak_device = uint64_t{1} << 62;
  return e;
}

// The largest value v in [1, limit] for which the model fits with set(o, v) applied (Candidates
// above). label(v) names a candidate in errors ("batch 64", "seq 4096"). v = 0 when even 1 does
// not fit. With `hint` in [2, limit] (the replay's answer, which it could not vouch for), the
// candidates after 1 are the hint and, when it fits, its successor (when it does not, the steps
// down from it: Candidates::StepDownFromFailure); `made` holds estimates made already (the
// replay's check's, ConfirmHint's), which the search reads instead of estimating again (not
// counted again in evaluations). With `vouch` (MaxBatchSearch::kAuto), an answer whose successor
// the terms' curves vouch for (TermCandidates::VouchForSuccessor) ends the search without the
// successor's estimate.
template <typename Set, typename Label>
Result<MaxBatchResult> ExactSearch(const Estimator& estimator, const Model& model,
                                   const Options& options, const GpuProfile& gpu, int64_t limit,
                                   Label label, Set set, int term_points, std::string_view searched,
                                   bool vouch, int64_t hint = 0,
                                   const std::vector<std::pair<int64_t, Estimate>>& made = {}) {
  MaxBatchResult r;
  Options o = options;
  // The analytical backend's step keeps its terms, each pipeline stage's (api/term_candidates.h;
  // a decode step after a simulated prefill is the symbolic backend's alone).
  const bool with_terms = estimator.name() == "analytical" && !options.prefill;
  TermCandidates::Stages terms;
  std::optional<StackProfile> stack;  // the context's, for the curves' verdicts
  std::optional<TermCandidates> from_terms;
  const memory::BackendPart keeping_terms = [&](const memory::EstimationContext& ctx) {
    if (!stack) stack = ctx.stack();
    const auto at = static_cast<size_t>(ctx.stage());
    if (terms.size() <= at) terms.resize(at + 1);
    return analytical::EstimateWithTerms(ctx, &terms[at], searched);
  };
  // The context of the last estimate, made without its terms because its verdict could end the
  // search (TermCandidates::ProposalMayEndTheSearch; in most searches the last estimate is such a
  // one): where the search goes on, its terms are worked out there, without binding again.
  std::unique_ptr<memory::EstimationContext> terms_later;
  int64_t terms_later_at = 0;
  auto estimate = [&](int64_t v) -> Result<Estimate> {
    if (!with_terms) {
      for (const auto& [at, e] : made) {
        if (at == v) return e;
      }
    }
    set(&o, v);
    ++r.evaluations;
    terms.clear();
    terms_later.reset();
    const bool later = with_terms && from_terms && from_terms->ProposalMayEndTheSearch();
    if (later) terms_later_at = v;
    Result<Estimate> e = !with_terms ? estimator.Run(model, o)
                         : later ? memory::RunEstimate(estimator, model, o, nullptr, &terms_later)
                                 : memory::RunEstimate(estimator, model, o, keeping_terms);
    if (!e.ok()) return e.status().WithContext(label(v));
    return e;
  };
  MEMEST_ASSIGN_OR_RETURN(r.at_batch, estimate(1));
  const Fit at_one = CheckFit(r.at_batch, gpu, options);
  if (!at_one.fits) {
    r.batch = 0;
    return r;
  }
  Candidates search(at_one, limit, r.at_batch);
  if (stack) {
    from_terms.emplace(*stack, gpu, options, term_points);
    from_terms->Record(1, std::move(terms), r.at_batch, at_one);
  }
  // The hint, then its successor when the hint fits (1 is estimated already).
  std::vector<int64_t> hinted;
  if (hint > 1 && hint <= limit) hinted = {hint + 1, hint};
  while (!search.done()) {
    if (terms_later) {  // the search goes on: the curves read the last estimate's terms too
      terms.clear();
      const Result<Estimate> again =
          memory::RunAgainIn(estimator, keeping_terms, terms_later.get());
      if (!again.ok()) return again.status().WithContext(label(terms_later_at));
      from_terms->KeepTerms(std::move(terms));
      terms_later.reset();
    }
    int64_t next = 0;
    if (!hinted.empty()) {
      next = hinted.back();
      hinted.pop_back();
      search.NextFromElsewhere();
    } else if (std::optional<int64_t> t = from_terms
                                              ? from_terms->Next(search.largest_fitting(),
                                                                 search.smallest_failing(), limit)
                                              : std::nullopt) {
      next = *t;
      search.NextFromElsewhere();
    } else {
      next = search.Next();
    }
    Result<Estimate> at = estimate(next);
    // A candidate whose tensors overflow the byte arithmetic (RunInContext refuses past 2^60
    // bytes) needs more than any GPU has: it does not fit, and the search goes on below it.
    if (!at.ok() && at.status().code() == ErrorCode::kOverflow) {
      at = Unaffordable();
      terms.clear();  // (no terms: nothing the curves can read)
    }
    if (!at.ok()) return at.status();
    Estimate e = std::move(at).value();
    const Fit fit = CheckFit(e, gpu, options);
    search.Record(next, fit, e);
    // A hint that does not fit: the answer is usually a few values down (the replay's was off
    // by the sizes off its curves), so the steps down start there, not a bisection from 1.
    if (!fit.fits && next == hint) search.StepDownFromFailure();
    if (!fit.fits || next >= limit) hinted.clear();
    if (from_terms) from_terms->Record(next, std::move(terms), e, fit);
    if (fit.fits) r.at_batch = std::move(e);
    // The curves are exact at the largest fitting value, to the byte, and say its successor does
    // not fit: that is the estimate's verdict there (TermCandidates::VouchForSuccessor).
    if (vouch && fit.fits && next < limit && from_terms && from_terms->VouchForSuccessor(next) &&
        next == search.largest_fitting()) {
      r.batch = next;
      return r;
    }
  }
  r.batch = search.largest_fitting();
  return r;
}

// ---- The symbolic backend's replay (policy at the top) ----

// A replay's verdict at one batch, with what the next guess needs when it does not fit.
struct Probe {
  bool fits = false;
  bool ran_out = false;  // the replay ran out of memory (symbolic::BatchTrace::Replay::ran_out)
  double excess = 0;     // bytes past what fits; <= 0 when it fits (the room left, negated)
  // The requests after which the bytes alive decided the verdict (the failing one's, or the
  // allocated peak's): Prober::Growth reads their growth per batch when a guess needs it.
  size_t decided_at = 0;
  uint64_t overhead = 0;           // symbolic::BatchTrace::Replay::overhead
  symbolic::AllocatorStats stats;  // the replay's allocator statistics
  size_t requests_run = 0;         // symbolic::BatchTrace::Replay::requests_run
  uint64_t device = 0;             // the device peak, when the replay did not run out
};

// The verdict CheckFit gives the symbolic estimate of a replayed step: its device peak is the
// reserved peak and what lives outside the allocator -- the stack's, and on many GPUs NCCL's
// buffers (symbolic/timeline.cc) -- with the stack's band on top.
class Prober {
 public:
  // `budget`: symbolic::StepBudget(ctx).
  Prober(const symbolic::BatchTrace& trace, const memory::EstimationContext& ctx, uint64_t budget,
         const Options& options, const GpuProfile& gpu)
      : trace_(trace),
        options_(options),
        gpu_(gpu),
        stack_(ctx.stack()),
        config_(symbolic::StepAllocatorConfig(ctx.options(), budget)) {
    Breakdown outside;
    memory::SetOutsideAllocator(stack_, &outside);
    if (ctx.options().parallel.enabled()) {
      outside.nccl_buffers = memory::NcclBufferBytes(ctx.parallel());
    }
    outside_ = outside.Total();
  }

  const symbolic::AllocatorConfig& config() const { return config_; }
  int replays() const { return replays_; }
  // The requests its replays ran (MaxBatchResult::replayed_requests).
  int64_t replayed_requests() const { return replayed_requests_; }
  // The batch of the last probe that fitted (0: none yet).
  int64_t LastFitAt() const { return last_fit_at_; }
  // The allocator's run at `b`, the last probe that fitted (the search's answer, when it has
  // one), handed over: what the check's estimate follows instead of running the allocator model
  // again. Empty (which nothing follows) when the last probe that fitted was not at `b`.
  symbolic::AllocatorRun TakeLastFit(int64_t b) {
    if (b != last_fit_at_) return {};
    trace_.ListRequests(b, &last_fit_);
    last_fit_at_ = 0;
    return std::move(last_fit_);
  }
  // The largest batch whose requested bytes alive at once, and `overhead` bytes more, stay within
  // the allocator's budget (BatchTrace::LargestWithin); 0 when none does.
  int64_t LargestWithinBudget(uint64_t overhead, int64_t limit) const {
    return trace_.LargestWithin(config_.capacity - std::min(config_.capacity, overhead), limit);
  }
  // The growth per batch of the requested bytes alive where probe p at b was decided.
  double Growth(const Probe& p, int64_t b) const { return trace_.AliveGrowth(p.decided_at, b); }
  // The largest batch below b at which a malloc up to where probe p at b ran out asks for a
  // segment of another size (BatchTrace::BelowSameSegments); 0 when none does.
  int64_t BelowSameSegments(const Probe& p, int64_t b) const {
    return trace_.BelowSameSegments(p.requests_run, b, config_);
  }

  Probe At(int64_t b) {
    ++replays_;
    const symbolic::BatchTrace::Replay r = trace_.Run(b, config_, &run_, &alloc_);
    replayed_requests_ += static_cast<int64_t>(r.requests_run);
    Probe p;
    p.stats = r.stats;
    p.overhead = r.overhead;
    p.requests_run = r.requests_run;
    if (r.ran_out) {
      p.ran_out = true;
      p.excess = static_cast<double>(r.short_by);
      p.decided_at = r.requests_run;
      return p;
    }
    Estimate e;
    e.backend = "symbolic";
    e.peak_allocated = r.stats.peak_allocated;
    e.peak_reserved = r.stats.peak_reserved;
    e.peak_device = base::SatAdd(r.stats.peak_reserved, outside_);
    p.device = e.peak_device;
    memory::ApplyResidualBand(stack_, &e);
    const Fit f = CheckFit(e, gpu_, options_);
    p.fits = f.fits;
    p.excess = -static_cast<double>(f.headroom);
    p.decided_at = r.at_peak;
    if (p.fits) {
      std::swap(run_, last_fit_);
      last_fit_at_ = b;
    }
    return p;
  }

 private:
  const symbolic::BatchTrace& trace_;
  const Options& options_;
  const GpuProfile& gpu_;
  const StackProfile& stack_;
  const symbolic::AllocatorConfig config_;
  // The allocator's run: of the probe (its vectors reused), of the last that fitted.
  symbolic::AllocatorRun run_, last_fit_;
  symbolic::CachingAllocatorModel alloc_;  // each replay's, reset for the next
  int64_t last_fit_at_ = 0;
  uint64_t outside_ = 0;
  int replays_ = 0;
  int64_t replayed_requests_ = 0;
};

// Whether two replays ran out alike: at the same request, short by the same bytes, with the same
// bytes reserved.
bool RanOutAlike(const Probe& a, const Probe& b) {
  return a.ran_out && b.ran_out && a.requests_run == b.requests_run && a.excess == b.excess &&
         a.stats.reserved == b.stats.reserved && a.stats.peak_reserved == b.stats.peak_reserved;
}

// The largest batch in [1, limit] that fits by the replay, and its successor does not (or it is
// the limit). The first probe is `start`, the batch whose requested bytes alone reach the budget.
// While no probe fits, the next is the largest batch whose requested bytes and the last replay's
// overhead (what the allocator held beyond them where it ran out: rounding, cached and split
// blocks) stay within the budget. Once one fits, the next is where the line through the last two
// probes' excess (bytes past the budget, negative for the room left) meets zero -- or, after a
// failing probe, where its excess is gone at the growth per batch of the bytes alive where it
// failed -- or, after one that ran out alike with the lowest failure though the bytes alive grew
// by more than its excess between them, the lowest batch whose mallocs up to its failing request
// ask for the same segments (or the one below that, when it is the probe), when that is farther
// down than the two were apart (the 10,000-node chain's search on h100-80gb: 40 replays to 5).
// Each guess is kept inside the open bracket. A second probe in a row that did not halve
// the bracket, or an overhead guess that no batch meets or that is past the lowest failure, is
// followed by a step down from the lowest failure by 1, 2, 4, ... batches while no probe has
// fitted, and by a bisection once one has. (A probe that fits runs the whole loop, until it
// repeats; one that fails stops at its failing request. A bisection before anything fits lands
// far below the answer on a probe that fits, and the wide bracket it leaves is narrowed through
// more of them: over the 255 searches of the timm graphs and the bundled models on three GPUs it
// replayed 1.84 times the requests of the answer's replay and its successor's, the steps down
// 1.60 times; docs/cli.md `--max-batch`.) A step down never goes below the bracket's middle: past
// it the search bisects, so a run of stalls takes no more probes than bisections would.
// 0 when batch 1 does not fit or the probes run out; *at_answer and *at_successor are the probes
// at the answer and at its successor.
int64_t ReplaySearch(Prober* probe, int64_t start, int64_t limit, Probe* at_answer,
                     Probe* at_successor) {
  constexpr int kMostProbes = 48;
  int64_t lo = 0, hi = limit + 1;  // lo fits (0: none yet), hi does not (limit + 1: none yet)
  int64_t next = std::clamp<int64_t>(start, 1, limit);
  int64_t prev_b = 0;
  double prev_excess = 0;
  int slow = 0;
  int64_t down = 1;  // the next step down from the lowest failure while nothing fits
  for (int i = 0; i < kMostProbes && hi - lo > 1; ++i) {
    const int64_t b = next;
    const int64_t width = hi - lo;
    const Probe p = probe->At(b);
    // Ran out as the lowest failure did, though the bytes alive grew by more than were short
    // between them: a plateau, where what the allocator asks for stays the same.
    const int64_t alike_over = hi - b;  // batches between the two, when they ran out alike
    const bool plateau = hi <= limit && RanOutAlike(p, *at_successor) &&
                         static_cast<double>(alike_over) * probe->Growth(p, b) >= p.excess;
    if (p.fits) {
      lo = b;
      *at_answer = p;
    } else {
      hi = b;
      *at_successor = p;
    }
    if (plateau) {
      // No batch from the lowest one with these segments up to hi is likely to fit: the next
      // probe is there, or just below it, when that is farther down than the two were apart.
      const int64_t below = probe->BelowSameSegments(p, b);
      next = below + 1 < b ? below + 1 : below;
      if (next > lo && b - next >= alike_over) {
        prev_b = b;
        prev_excess = p.excess;
        slow = 0;
        continue;
      }
    }
    // Where the excess meets zero: the largest batch that fits is about the floor of it.
    double root = static_cast<double>(b) + 1;
    if (lo == 0) {
      root = static_cast<double>(probe->LargestWithinBudget(p.overhead, limit));
      if (root < 1 || root >= static_cast<double>(hi)) {
        root = std::numeric_limits<double>::infinity();  // bisect
      }
    } else if (prev_b > 0 && prev_b != b && p.excess != prev_excess) {
      root = static_cast<double>(b) -
             p.excess * static_cast<double>(b - prev_b) / (p.excess - prev_excess);
    } else if (const double growth = p.fits ? 0 : probe->Growth(p, b); growth > 0) {
      root = static_cast<double>(b) - p.excess / growth;
    }
    prev_b = b;
    prev_excess = p.excess;
    slow = 2 * (hi - lo) > width ? slow + 1 : 0;
    if (slow >= 2 || !std::isfinite(root)) {
      if (lo == 0) {
        next = std::max(hi - down, lo + (hi - lo) / 2);
        down *= 2;
      } else {
        next = lo + (hi - lo) / 2;
      }
      slow = 0;
    } else {
      next = static_cast<int64_t>(
          std::clamp(std::floor(root), static_cast<double>(lo + 1), static_cast<double>(hi - 1)));
    }
  }
  return hi - lo == 1 ? lo : 0;
}

// The first batch traced. Not 1: at batch 1 some graphs make other requests (a broadcast or expand
// over the batch dim that is a view only there; 5 of the 81 timm graphs of
// datasets/timm-a100), and their lines would say nothing.
constexpr int64_t kFirstTraced = 2;
// The largest value the curves are read at (symbolic/batch_trace.cc), FindMaxBatch's default limit.
constexpr int64_t kMostReplayed = int64_t{1} << 24;

// A dim searched up to 3 of these or more is traced at multiples of it: sizes that pad the dim to
// 8, 32 or 128 (memory-efficient attention's mask copies and logsumexp, flash attention's
// backward; ops/attention.cc) are then on their curves at the values traced and near them in
// between, so that where the successor's trace is off the curves the replay's answer, which
// ConfirmHint estimates (and the exact search starts from), is close. (Sizes on their curves have
// the same curves wherever traced.)
constexpr int64_t kDimTraceStep = 128;

// The values traced, the first at `first`, where the requested bytes alive at once were
// `first_peak`: the first, the farthest, and for a dim also halfway, each a multiple of `step`
// (kDimTraceStep, or 1). The farthest is, with step 1 (first at kFirstTraced), the value where
// first_peak times it reaches the budget; with a larger step, the value v where first_peak x v /
// first does -- inside the range searched, so that the curves are read where the answer lies, and
// far enough for a third trace to fit halfway.
std::vector<int64_t> TracedValues(int64_t first, int64_t step, uint64_t first_peak, uint64_t budget,
                                  int64_t limit, int curve_traces) {
  const auto times = static_cast<int64_t>(
      std::min<uint64_t>(budget / std::max<uint64_t>(first_peak, 1), uint64_t{1} << 40));
  // With step 1 the first value is 2 and `times` is read as the value itself.
  const int64_t reach = step == 1 ? times : times * first;
  const int64_t far =
      std::clamp<int64_t>(reach / step * step, first + 2 * step, limit / step * step);
  std::vector<int64_t> at = {first, far};
  if (curve_traces == 3) at.insert(at.begin() + 1, first + (far - first) / 2 / step * step);
  return at;
}

// The number of pipeline stages a context's step is estimated over (memory::RunEstimate runs the
// backend's part once on one GPU, and on each stage on many).
int StagesOf(const memory::EstimationContext& ctx) {
  return ctx.options().parallel.enabled() ? ctx.parallel().stages() : 1;
}

// The step's allocator requests at value v of the searched batch, one trace per pipeline stage
// (only stage `only`'s when it is set) made by `trace(ctx, stage)` -- a walk (TraceAt), or another
// value's trace resized (symbolic::ResizeTrace) -- and the context they were made in; nullopt
// when the options or the bind refuse v (the exact search says why), or a trace cannot be made.
template <typename Set, typename Trace>
std::optional<
    std::pair<std::unique_ptr<memory::EstimationContext>, std::vector<symbolic::StepTrace>>>
TracesAt(const Model& model, Options o, Set set, int64_t v, Trace trace,
         std::optional<int> only = std::nullopt) {
  set(&o, v);
  if (!Validate(o).ok()) return std::nullopt;
  auto made = memory::EstimationContext::Make(model, o);
  if (!made.ok()) return std::nullopt;
  std::unique_ptr<memory::EstimationContext> ctx = std::move(made).value();
  std::vector<symbolic::StepTrace> traces;
  const int stages = StagesOf(*ctx);
  for (int s = only.value_or(0); s < (only ? *only + 1 : stages); ++s) {
    if (s >= stages) return std::nullopt;
    ctx->set_stage(s);
    Result<symbolic::StepTrace> requests = trace(*ctx, static_cast<size_t>(s));
    if (!requests.ok()) return std::nullopt;
    traces.push_back(std::move(requests).value());
  }
  ctx->set_stage(0);
  return std::make_pair(std::move(ctx), std::move(traces));
}

// TracesAt by walking the step (symbolic::TraceRequests: with `only`, its first `most_requests`).
template <typename Set>
auto TraceAt(const Model& model, const Options& o, Set set, int64_t v,
             std::optional<int> only = std::nullopt,
             size_t most_requests = std::numeric_limits<size_t>::max()) {
  return TracesAt(
      model, o, set, v,
      [most_requests](const memory::EstimationContext& ctx, size_t) {
        return symbolic::TraceRequests(ctx, most_requests);
      },
      only);
}

// The first `most_requests` requests of a decode step's trace at value v where they are all its
// prefill's: the prefill's context alone is made and walked (symbolic::TracePrefillRequests), not
// the step's. nullopt when the options or the bind refuse it.
template <typename Set>
std::optional<symbolic::StepTrace> TracePrefillAt(const Model& model, Options o, Set set, int64_t v,
                                                  size_t most_requests) {
  set(&o, v);
  if (!Validate(o).ok() || !o.prefill || o.prefill->model == nullptr) return std::nullopt;
  auto prefill_options = memory::PrefillOptions(o);
  if (!prefill_options.ok()) return std::nullopt;
  auto made = memory::EstimationContext::Make(*o.prefill->model, *prefill_options);
  if (!made.ok()) return std::nullopt;
  auto requests = symbolic::TracePrefillRequests(**made, most_requests);
  if (!requests.ok()) return std::nullopt;
  return std::move(requests).value();
}

// One pipeline stage's replay (a single one on one GPU): the probes at the search's answer and
// at its successor, and the allocator's run at the answer.
struct StageAnswer {
  Probe at_answer, at_successor;
  symbolic::AllocatorRun run;
};

// Whether the estimate `e` is the replays' at its value: on one GPU its allocated and reserved
// peaks are the replay's; on many, each stage's device peak is its replay's, and the worst
// stage's peaks are that stage's replay's.
bool IsTheReplays(const Estimate& e, const std::vector<StageAnswer>& stages) {
  if (e.ranks.empty()) {
    const symbolic::AllocatorStats& s = stages.front().at_answer.stats;
    return stages.size() == 1 && e.peak_allocated == s.peak_allocated &&
           e.peak_reserved == s.peak_reserved;
  }
  if (e.ranks.size() != stages.size()) return false;
  std::optional<size_t> worst;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (e.ranks[s].peak_device != stages[s].at_answer.device) return false;
    if (!worst && e.ranks[s].peak_device == e.peak_device) worst = s;
  }
  if (!worst) return false;
  const symbolic::AllocatorStats& w = stages[*worst].at_answer.stats;
  return e.peak_allocated == w.peak_allocated && e.peak_reserved == w.peak_reserved;
}

// The check of the replay's answer (policy at the top): the estimate at `batch`, when it is the
// stages' replays' (IsTheReplays) and fits, and the trace of stage `decisive` at batch + 1 is on
// its lines -- as far as its replay there (`successor`) ran: a simulation that makes the same
// first requests as a replay that ran out runs out at the same one, so the trace stops there
// (`trace_next`: stage s's first requests at a value, resized or walked).
// Where that trace is off its lines, its own requests must run out in the allocator model
// (symbolic::RunsOut), and then the estimate at `batch` need only fit: both verdicts are then
// the simulation's own, which is what ConfirmHint would have estimated at both values.
// (That stage's step at batch + 1 does not fit, so the estimate there does not either: its worst
// stage has a device peak at least that stage's, and every stage holds the same outside the
// allocator, so a reserved peak at least that stage's too.) nullopt otherwise; an estimate made
// at `batch` and not taken is added to *made (it is Run's there: a run followed gives the same).
template <typename Set, typename TraceNext, typename Follow>
std::optional<Estimate> CheckAnswer(const Estimator& estimator, const Model& model,
                                    const Options& options, const GpuProfile& gpu, int64_t limit,
                                    Set set, TraceNext trace_next, Follow follow,
                                    const std::vector<symbolic::BatchTrace>& traces,
                                    const symbolic::AllocatorConfig& config, int64_t batch,
                                    int decisive, const std::vector<StageAnswer>& stages,
                                    MaxBatchResult* spent,
                                    std::vector<std::pair<int64_t, Estimate>>* made) {
  bool on_curves = true;  // the successor's trace is on the curves (none past the limit)
  if (batch < limit) {
    if (decisive < 0) return std::nullopt;
    // (A successor's probe always ran at least its failing request; 0 would be no probe at all,
    // and then the whole trace is checked.)
    const Probe& successor = stages[decisive].at_successor;
    const size_t prefix =
        successor.requests_run > 0 ? successor.requests_run : std::numeric_limits<size_t>::max();
    // (A decode step's successor that ran out within its prefill is traced that far from the
    // prefill's context alone.)
    const symbolic::BatchTrace& curves = traces[decisive];
    std::optional<symbolic::StepTrace> next;
    if (options.prefill && prefix <= curves.prefill_requests()) {
      next = TracePrefillAt(model, options, set, batch + 1, prefix);
    } else {
      next = trace_next(batch + 1, decisive, prefix);
    }
    ++spent->traces;
    if (!next) return std::nullopt;
    on_curves = curves.Matches(*next, batch + 1, config, prefix);
    // Off the curves (sizes padded to a multiple, or not polynomials of the value): the walked
    // requests themselves, through the allocator model.
    if (!on_curves && !symbolic::RunsOut(*next, config)) return std::nullopt;
  }
  Options o = options;
  set(&o, batch);
  ++spent->evaluations;
  // Each stage's estimate follows its replay at the answer (the same allocator run, when the step
  // at `batch` makes its requests -- a decode step's, its prefill's first: symbolic::
  // EstimateFollowing checks them one by one); else it is made anew.
  auto following = [&] {
    return memory::RunEstimate(estimator, model, o,
                               [&stages, &follow](const memory::EstimationContext& ctx) {
                                 return follow(ctx, stages[static_cast<size_t>(ctx.stage())].run);
                               });
  };
  Result<Estimate> e = following();
  if (!e.ok()) e = estimator.Run(model, o);
  if (!e.ok()) return std::nullopt;
  if (!CheckFit(*e, gpu, options).fits || (on_curves && !IsTheReplays(*e, stages))) {
    made->emplace_back(batch, std::move(e).value());  // Run's (a run followed makes the same)
    return std::nullopt;
  }
  return std::move(e).value();
}

// The first values traced: each stage's requests, the context they were traced in and its
// budget, and the fullest stage's requested bytes alive at once.
struct FirstTrace {
  std::unique_ptr<memory::EstimationContext> ctx;
  std::vector<symbolic::StepTrace> traces;
  int64_t at = 0, step = 1;  // the value traced, and the step of those after it (TracedValues)
  uint64_t budget = 0, peak = 0;
};

// The first trace of the replay: a dim searched far enough at kDimTraceStep, else (or when a dim
// is past the budget there, its answer below it, or refused there) at kFirstTraced; nullopt when
// the options or the bind refuse it. The traces made are counted in *spent.
template <typename Set>
std::optional<FirstTrace> TraceFirst(const Model& model, const Options& options, Set set,
                                     int64_t limit, int curve_traces, MaxBatchResult* spent) {
  const bool aligned = curve_traces == 3 && limit >= 3 * kDimTraceStep;
  for (const int64_t step : {aligned ? kDimTraceStep : int64_t{1}, int64_t{1}}) {
    const int64_t at = step == 1 ? kFirstTraced : step;
    auto traced = TraceAt(model, options, set, at);
    if (traced) {
      spent->traces += static_cast<int>(traced->second.size());
      FirstTrace f{std::move(traced->first), std::move(traced->second), at, step};
      f.budget = symbolic::StepBudget(*f.ctx);
      for (const symbolic::StepTrace& t : f.traces) {
        f.peak = std::max(f.peak, symbolic::PeakRequested(t.requests));
      }
      if (step == 1 || f.peak <= f.budget) return f;
    }
    if (step == 1) break;
  }
  return std::nullopt;
}

// An answer the replay's search found and could not vouch for (0: none), which ConfirmHint
// estimates; and whether its successor is known not to fit without an estimate (the replay's
// first trace, walked there, holds more requested bytes at once than the allocator may reserve).
struct Hint {
  int64_t at = 0;
  bool successor_fails = false;
};

// The symbolic backend's answer by replay, checked (policy at the top), from `curve_traces`
// traces (2: lines, for the batch; 3: parabolas, for a dim such as the sequence length -- two
// where BatchTrace::FitFromTwo gives every size its curve) of each
// pipeline stage; nullopt when the replay cannot give one, with what it spent counted in *spent
// and, where its search found an answer it could not vouch for, that answer in *unchecked (1
// where kFirstTraced's requested bytes alone pass the budget: the answer is 0 or 1), and the
// check's estimate there in *made when it made one.
template <typename Set>
std::optional<MaxBatchResult> ReplayLargestFitting(
    const Estimator& estimator, const Model& model, const Options& options, const GpuProfile& gpu,
    int64_t limit, Set set, int curve_traces, MaxBatchResult* spent, Hint* unchecked,
    std::vector<std::pair<int64_t, Estimate>>* made) {
  // (A decode step after its prefill is inference, modelled on one GPU only: both graphs'
  // requests on one allocator, symbolic/batch_trace.h.)
  if (estimator.name() != "symbolic" || (options.prefill && options.parallel.enabled()) ||
      limit < kFirstTraced + curve_traces || limit > kMostReplayed) {
    return std::nullopt;
  }
  try {
    std::optional<FirstTrace> first = TraceFirst(model, options, set, limit, curve_traces, spent);
    if (!first) return std::nullopt;
    const size_t stages = first->traces.size();
    const memory::EstimationContext& ctx = *first->ctx;
    const uint64_t budget = first->budget;
    // Past the budget at kFirstTraced (its requested bytes alone): the answer is 0 or 1, which
    // ConfirmHint finds in one estimate, at 1 (the exact search alone took up to 10 on decode
    // steps, whose failing estimates draw no line to the capacity). Its successor, the value
    // traced, does not fit: the step there (walked, not resized) holds more requested bytes at
    // once than the allocator may reserve, so the simulation runs out there.
    if (first->peak > budget) {
      unchecked->at = 1;
      unchecked->successor_fails = first->at == unchecked->at + 1;
      return std::nullopt;
    }
    // The others: the farthest (where the fullest stage's requested bytes reach the budget), and
    // with three, one halfway.
    const std::vector<int64_t> at =
        TracedValues(first->at, first->step, first->peak, budget, limit, curve_traces);
    // The traces kept, in increasing values (traced_at): [value][stage]. The first and the
    // farthest; halfway only where the curves need it.
    std::vector<int64_t> traced_at = {at.front()};
    std::vector<std::vector<symbolic::StepTrace>> kept;
    kept.push_back(std::move(first->traces));
    // Keeps `more`, every stage's trace at v (TracesAt's), at position `i`.
    auto keep_at = [&](int64_t v, size_t i, auto more) {
      if (!more || more->second.size() != stages) return false;
      spent->traces += static_cast<int>(stages);
      kept.insert(kept.begin() + static_cast<ptrdiff_t>(i), std::move(more->second));
      traced_at.insert(traced_at.begin() + static_cast<ptrdiff_t>(i), v);
      return true;
    };
    // Traces the step at v and keeps it at position `i`.
    auto trace_at = [&](int64_t v, size_t i) {
      return keep_at(v, i, TraceAt(model, options, set, v));
    };
    // Or reads it off the first trace in a context bound at v (symbolic::ResizeTrace: each
    // malloc's size by its recipe, no walk; each stage's); where that cannot be, traces it. The
    // curves through it are checked as a trace's are: at the answer by its estimate, at the
    // successor by its trace there (trace_next).
    auto resize_at = [&](int64_t v, size_t i) {
      const std::vector<symbolic::StepTrace>& first = kept.front();
      const auto resize = [&first](const memory::EstimationContext& ctx,
                                   size_t s) -> Result<symbolic::StepTrace> {
        if (s >= first.size()) return InvalidArgument("no first trace of this stage");
        return symbolic::ResizeTrace(ctx, first[s], std::numeric_limits<size_t>::max(),
                                     symbolic::TraceKept::kRequests);
      };
      return keep_at(v, i, TracesAt(model, options, set, v, resize));
    };
    if (!resize_at(at.back(), 1) && !trace_at(at.back(), 1)) return std::nullopt;
    // Each stage's curves through the traces kept, by `fit`; nullopt where a stage has none.
    auto fit_all = [&](auto fit) -> std::optional<std::vector<symbolic::BatchTrace>> {
      std::vector<symbolic::BatchTrace> out;
      out.reserve(stages);
      for (size_t s = 0; s < stages; ++s) {
        std::vector<symbolic::Traced> traced;
        for (size_t i = 0; i < kept.size(); ++i) traced.push_back({traced_at[i], &kept[i][s]});
        std::optional<symbolic::BatchTrace> trace = fit(traced);
        if (!trace) return std::nullopt;
        out.push_back(std::move(trace).value());
      }
      return out;
    };
    // A dim's sizes are parabolas: through two traces where each grows as a tensor's bytes over
    // dims of the dim's size (BatchTrace::FitFromTwo), else through a third, halfway.
    std::optional<std::vector<symbolic::BatchTrace>> fitted;
    if (at.size() == 3) {
      fitted = fit_all(symbolic::BatchTrace::FitFromTwo);
      if (!fitted && !resize_at(at[1], 1) && !trace_at(at[1], 1)) return std::nullopt;
    }
    if (!fitted) fitted = fit_all(symbolic::BatchTrace::Fit);
    if (!fitted) return std::nullopt;
    std::vector<symbolic::BatchTrace> traces = std::move(fitted).value();
    // The curves hold what the search reads of the later traces; what follows reads the first
    // alone (its resizes and the answer's estimate), so the others go before the replays.
    kept.resize(1);
    std::vector<Prober> probers;
    probers.reserve(stages);
    for (const symbolic::BatchTrace& t : traces) probers.emplace_back(t, ctx, budget, options, gpu);
    auto count_replays = [&] {
      for (const Prober& p : probers) {
        spent->replays += p.replays();
        spent->replayed_requests += p.replayed_requests();
      }
    };
    // Each stage's search runs up to the answer of the stages before: the answer is the smallest
    // of theirs, and `decisive` the last stage whose search lowered it -- the one whose replay at
    // the answer's successor did not fit (none while the answer is the limit).
    std::vector<StageAnswer> answers(stages);
    int64_t batch = limit;
    int decisive = -1;
    for (size_t s = 0; s < stages; ++s) {
      StageAnswer& a = answers[s];
      const int64_t b = ReplaySearch(&probers[s], traces[s].LargestWithin(budget, batch), batch,
                                     &a.at_answer, &a.at_successor);
      if (b < 1) {
        count_replays();
        return std::nullopt;
      }
      if (b < batch) decisive = static_cast<int>(s);
      batch = b;
    }
    // A stage searched before the answer came down fits at it too, by its own replay there.
    bool all_fit = true;
    for (size_t s = 0; s < stages && all_fit; ++s) {
      if (answers[s].at_answer.fits && probers[s].LastFitAt() == batch) continue;
      answers[s].at_answer = probers[s].At(batch);
      all_fit = answers[s].at_answer.fits;
    }
    count_replays();
    for (size_t s = 0; s < stages; ++s) {
      answers[s].run = probers[s].TakeLastFit(batch);
    }
    // The probes' own runs and allocator models are done with: gone before the answer's check
    // walks, which is where a search's memory peaks.
    const symbolic::AllocatorConfig config = probers.front().config();
    probers.clear();
    unchecked->at = batch;
    if (!all_fit) return std::nullopt;
    // Stage s's shape where the first trace was walked (symbolic::ShapeOfStep), once.
    std::vector<std::optional<Result<std::vector<uint64_t>>>> first_shapes(stages);
    auto first_shape = [&](int s) -> const Result<std::vector<uint64_t>>& {
      std::optional<Result<std::vector<uint64_t>>>& shape = first_shapes[static_cast<size_t>(s)];
      if (!shape) {
        first->ctx->set_stage(s);
        shape = symbolic::ShapeOfStep(*first->ctx);
        first->ctx->set_stage(0);
      }
      return *shape;
    };
    // Stage s's first `prefix` requests at v: the first trace resized there where the step has
    // the shape it had where that was walked (symbolic::ResizeTraceOfShape), else walked.
    auto trace_next = [&](int64_t v, int s, size_t prefix) -> std::optional<symbolic::StepTrace> {
      const Result<std::vector<uint64_t>>& shape = first_shape(s);
      if (shape.ok()) {
        const symbolic::StepTrace& whole = kept.front()[static_cast<size_t>(s)];
        auto resized = TracesAt(
            model, options, set, v,
            [&](const memory::EstimationContext& c, size_t) {
              return symbolic::ResizeTraceOfShape(c, whole, *shape, prefix,
                                                  symbolic::TraceKept::kRequests);
            },
            s);
        if (resized) return std::move(resized->second.front());
      }
      auto traced = TraceAt(model, options, set, v, s, prefix);
      if (!traced) return std::nullopt;
      return std::move(traced->second.front());
    };
    // The estimate at the answer that follows a stage's run there: written from the stage's first
    // trace where its step has the shape it had there (symbolic::EstimateFromTrace), else by a
    // walk that follows the run (symbolic::EstimateFollowing).
    auto follow = [&](const memory::EstimationContext& c,
                      const symbolic::AllocatorRun& run) -> Result<Estimate> {
      const int s = c.stage();
      if (s >= 0 && static_cast<size_t>(s) < stages) {
        const Result<std::vector<uint64_t>>& shape = first_shape(s);
        if (shape.ok()) {
          Result<Estimate> e =
              symbolic::EstimateFromTrace(c, kept.front()[static_cast<size_t>(s)], *shape, run);
          if (e.ok()) return e;
        }
      }
      return symbolic::EstimateFollowing(c, run);
    };
    std::optional<Estimate> e =
        CheckAnswer(estimator, model, options, gpu, limit, set, trace_next, follow, traces, config,
                    batch, decisive, answers, spent, made);
    if (!e) return std::nullopt;
    MaxBatchResult r = *spent;
    r.batch = batch;
    r.at_batch = std::move(e).value();
    return r;
  } catch (const std::exception&) {
    return std::nullopt;  // the exact search meets the same and says so
  }
}

// The replay's answer it could not vouch for, `hint`, confirmed by estimates: it fits and its
// successor does not (or it is the limit, or the replay knows it does not: Hint). Those two
// estimates are an answer as the replay's check is, without an estimate at 1 (unless the hint is
// 1); nullopt otherwise, with the estimates made in *made for the exact search (counted in
// spent->evaluations).
template <typename Set>
std::optional<MaxBatchResult> ConfirmHint(const Estimator& estimator, const Model& model,
                                          const Options& options, const GpuProfile& gpu,
                                          int64_t limit, Set set, const Hint& unchecked,
                                          MaxBatchResult* spent,
                                          std::vector<std::pair<int64_t, Estimate>>* made) {
  const int64_t hint = unchecked.at;
  if (hint < 1 || hint > limit) return std::nullopt;
  const auto made_at = [made](int64_t v) -> const Estimate* {
    for (const auto& [at, e] : *made) {
      if (at == v) return &e;
    }
    return nullptr;
  };
  for (const int64_t v : {hint, hint + 1}) {
    if (v > limit || (v > hint && unchecked.successor_fails)) break;
    const Estimate* e = made_at(v);  // the replay's check's, when it made one there
    if (e == nullptr) {
      Options o = options;
      set(&o, v);
      ++spent->evaluations;
      Result<Estimate> run = estimator.Run(model, o);
      if (!run.ok()) return std::nullopt;  // the exact search meets it and says so
      made->emplace_back(v, std::move(run).value());
      e = &made->back().second;
    }
    if (CheckFit(*e, gpu, options).fits != (v == hint)) return std::nullopt;
  }
  MaxBatchResult r = *spent;
  r.batch = hint;
  r.at_batch = *made_at(hint);
  return r;
}

// The replay where it applies, else (or when it cannot answer) the exact search; the cost of both
// is counted.
// `searched`: the dim searched, empty for the batch (analytical::StepTerms::searched).
template <typename Set, typename Label>
Result<MaxBatchResult> SearchLargestFitting(const Estimator& estimator, const Model& model,
                                            const Options& options, const GpuProfile& gpu,
                                            int64_t limit, Label label, Set set, int curve_traces,
                                            bool dim_squared, std::string_view searched) {
  MaxBatchResult spent;
  Hint unchecked;  // the replay's answer, where it could not vouch for it
  // The estimates made on the way (the replay's check's, where it disagreed; ConfirmHint's),
  // which the steps after read instead of estimating again.
  std::vector<std::pair<int64_t, Estimate>> made;
  if (curve_traces > 0) {
    if (auto r = ReplayLargestFitting(estimator, model, options, gpu, limit, set, curve_traces,
                                      &spent, &unchecked, &made)) {
      return std::move(r).value();
    }
  }
  if (auto r = ConfirmHint(estimator, model, options, gpu, limit, set, unchecked, &spent, &made)) {
    return std::move(r).value();
  }
  MEMEST_ASSIGN_OR_RETURN(
      MaxBatchResult r,
      ExactSearch(estimator, model, options, gpu, limit, label, set, dim_squared ? 3 : 2, searched,
                  /*vouch=*/curve_traces > 0, unchecked.at, made));
  r.evaluations += spent.evaluations;
  r.traces = spent.traces;
  r.replays = spent.replays;
  r.replayed_requests = spent.replayed_requests;
  return r;
}

}  // namespace

Result<MaxBatchResult> FindMaxBatch(const Estimator& estimator, const Model& model,
                                    const Options& options, int64_t limit, MaxBatchSearch search) {
  if (options.micro_batches > 1) limit = std::max<int64_t>(limit / options.micro_batches, 1);
  auto gpu = ResolveGpuProfile(options);
  if (!gpu.ok()) return gpu.status();
  if (limit < 1) return InvalidArgument("max-batch search limit must be >= 1");
  // The search needs a batch dim to bind: some data input whose leading dim is not fixed.
  bool has_batch_dim = false;
  for (const InputInfo& in : model.summary().data_inputs) {
    has_batch_dim = has_batch_dim || (!in.dims.empty() && in.dims[0].value < 0);
  }
  if (!has_batch_dim) {
    return InvalidArgument(
        "the model has no batch dim to search over: every data input has a "
        "fixed leading dim");
  }
  // With gradient accumulation the search runs over the micro-batch size; batches are multiples.
  const int64_t k = std::max<int64_t>(options.micro_batches, 1);
  MEMEST_ASSIGN_OR_RETURN(MaxBatchResult r,
                          SearchLargestFitting(
                              estimator, model, options, *gpu, limit,
                              [k](int64_t micro) { return "batch " + std::to_string(micro * k); },
                              [k](Options* o, int64_t micro) { o->batch = micro * k; },
                              /*curve_traces=*/search == MaxBatchSearch::kAuto ? 2 : 0,
                              /*dim_squared=*/false, /*searched=*/""));
  r.batch *= k;
  return r;
}

Result<MaxBatchResult> FindMaxDim(const Estimator& estimator, const Model& model,
                                  const Options& options, const std::string& dim, int64_t limit,
                                  MaxBatchSearch search) {
  auto gpu = ResolveGpuProfile(options);
  if (!gpu.ok()) return gpu.status();
  if (limit < 1) return InvalidArgument("max-dim search limit must be >= 1");
  bool named = false;
  std::string names;
  for (const InputInfo& in : model.summary().data_inputs) {
    for (const DimInfo& d : in.dims) {
      if (d.param.empty()) continue;
      named = named || d.param == dim;
      if (names.find("'" + d.param + "'") == std::string::npos) {
        names += (names.empty() ? "'" : ", '") + d.param + "'";
      }
    }
  }
  if (!named) {
    return InvalidArgument("dim '" + dim + "' is not a symbolic dim of the model's inputs (" +
                           (names.empty() ? std::string("it has none") : "it has " + names) +
                           "): there is nothing to search");
  }
  if (options.dims.count(dim) > 0) {
    return InvalidArgument("dim '" + dim + "' is both bound (--dim) and searched (--max-dim)");
  }
  return SearchLargestFitting(
      estimator, model, options, *gpu, limit,
      [&dim](int64_t v) { return dim + " " + std::to_string(v); },
      [&dim](Options* o, int64_t v) { o->dims[dim] = v; },
      /*curve_traces=*/search == MaxBatchSearch::kAuto ? 3 : 0, /*dim_squared=*/true, dim);
}

}  // namespace memest
