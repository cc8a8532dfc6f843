// api/term_candidates.cc -- the exact search's candidates from the analytical backend's terms
// (policy in term_candidates.h).
#include "api/term_candidates.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/size_curves.h"
#include "memory/context.h"
#include "memory/device.h"

namespace memest {

double TermCandidates::BackwardHeadroom(Estimate e) const {
  for (const PhasePeak& p : e.phases) {
    if (p.phase == Phase::kBackward) analytical::TakePeak(p, &e);
  }
  // The stack's band, as the estimate would have it with that phase's peak (a share of the peak).
  e.device_low.reset();
  e.device_high.reset();
  memory::ApplyResidualBand(stack_, &e);
  return static_cast<double>(CheckFit(e, gpu_, options_).headroom);
}

void TermCandidates::Record(int64_t v, Stages terms, const Estimate& e, const Fit& fit) {
  successor_next_ = false;
  vouched_at_ = 0;
  const double headroom = BackwardHeadroom(e);
  if (proposed_at_ != 0 && v == proposed_at_) {
    if (fit.fits != proposed_fits_) {
      if (!through_origin_) ++misses_;
    } else if (fit.fits) {
      // The curves' largest fitting value fitted; where they said its headroom to the byte, they
      // are exact there, and their successor's verdict is the next to check.
      successor_next_ = !through_origin_ || headroom == proposed_headroom_;
      if (successor_fails_ && headroom == proposed_headroom_) vouched_at_ = v;
    }
  }
  proposed_at_ = 0;
  unkept_v_ = terms.empty() ? v : 0;
  unkept_headroom_ = headroom;
  Keep(v, std::move(terms), headroom);
}

void TermCandidates::KeepTerms(Stages terms) {
  if (unkept_v_ == 0) return;
  Keep(unkept_v_, std::move(terms), unkept_headroom_);
  unkept_v_ = 0;
}

void TermCandidates::Keep(int64_t v, Stages terms, double headroom) {
  // None kept (an unaffordable candidate; one recorded without them).
  if (terms.empty() || !std::all_of(terms.begin(), terms.end(),
                                    [](const analytical::StepTerms& t) { return t.HasTerms(); })) {
    return;
  }
  points_seen_.push_back({v, std::move(terms), headroom});
}

std::optional<int64_t> TermCandidates::Propose(int64_t v, bool fits, double headroom,
                                               bool successor_fails, bool ends_if_so) {
  proposed_at_ = v;
  ends_if_so_ = ends_if_so;
  proposed_fits_ = fits;
  proposed_headroom_ = headroom;
  successor_fails_ = successor_fails;
  ++proposed_;
  return v;
}

bool TermCandidates::Alike(const Stages& a, const Stages& b) {
  if (a.size() != b.size()) return false;
  for (size_t s = 0; s < a.size(); ++s) {
    if (!a[s].SameShape(b[s])) return false;
  }
  return true;
}

Estimate TermCandidates::WorstStageAt(std::span<const analytical::StepCurve> curves,
                                      int64_t v) const {
  Estimate worst = curves[0].PeaksAt(v, stack_);
  for (size_t s = 1; s < curves.size(); ++s) {
    Estimate e = curves[s].PeaksAt(v, stack_);
    if (memory::WorseStage(e, worst)) worst = std::move(e);
  }
  return worst;
}

std::vector<const TermCandidates::Point*> TermCandidates::LastAlike() const {
  const Stages& last = points_seen_.back().terms;
  std::vector<const Point*> alike;
  for (auto it = points_seen_.rbegin();
       it != points_seen_.rend() && alike.size() < static_cast<size_t>(points_); ++it) {
    if (Alike(it->terms, last)) alike.push_back(&*it);
  }
  std::sort(alike.begin(), alike.end(), [](const Point* a, const Point* b) { return a->v < b->v; });
  return alike;
}

namespace {

// Regula falsi between lo (room_lo >= 0: fits) and hi (room_hi < 0), Illinois' way: a side kept
// twice in a row has its headroom halved; a bisection after two steps that did not halve the
// interval (geometric while the interval spans more than a factor of 4). The largest value whose
// headroom is >= 0, and that headroom in *room.
template <typename Headroom>
int64_t LargestWithRoom(int64_t lo, int64_t hi, double room_lo, double room_hi,
                        const Headroom& headroom, double* room) {
  *room = room_lo;
  int kept = 0, slow = 0;
  while (hi - lo > 1) {
    const int64_t width = hi - lo;
    // The bisection's point: the middle, or where the bracket spans orders of magnitude (its top
    // is the limit, 2^24, until a value fails), the geometric middle -- a curve that grows with
    // the square of the value stalls the secant near the bottom there.
    int64_t v = lo + width / 2;
    if (hi / 4 > lo) {
      v = std::clamp(static_cast<int64_t>(std::sqrt(static_cast<double>(std::max<int64_t>(lo, 1)) *
                                                    static_cast<double>(hi))),
                     lo + 1, hi - 1);
    }
    if (slow < 2) {
      const double x =
          static_cast<double>(lo) + static_cast<double>(width) * room_lo / (room_lo - room_hi);
      // (clamped before the cast: lo < x < hi, but in doubles)
      v = static_cast<int64_t>(
          std::floor(std::clamp(x, static_cast<double>(lo + 1), static_cast<double>(hi - 1))));
    }
    const double r = headroom(v);
    if (r >= 0) {
      lo = v;
      room_lo = *room = r;
      if (kept > 0) room_hi /= 2;
      kept = kept > 0 ? kept + 1 : 1;
    } else {
      hi = v;
      room_hi = r;
      if (kept < 0) room_lo /= 2;
      kept = kept < 0 ? kept - 1 : -1;
    }
    slow = 2 * (hi - lo) > width ? slow + 1 : 0;
    if (slow > 2) slow = 0;
  }
  return lo;
}

}  // namespace

std::optional<int64_t> TermCandidates::Next(int64_t good, int64_t bad, int64_t limit) {
  proposed_at_ = 0;
  if (misses_ >= kMostMisses || points_seen_.empty()) return std::nullopt;
  // The curves' largest fitting value fitted: by the same curves its successor does not. (After
  // curves through the origin, the successor is theirs too: a miss there is not counted either.)
  if (successor_next_ && points_seen_.back().v == good && (bad == 0 || good + 1 < bad)) {
    return Propose(good + 1, false, 0, false, /*ends_if_so=*/true);
  }
  // The curves through the last `points_` estimates alike (the last one's); with fewer, through
  // the origin too (terms proportional to the value, or to its square).
  const std::vector<const Point*> use = LastAlike();
  const bool origin = use.size() < static_cast<size_t>(points_);
  if (use.size() + (origin ? 1 : 0) < 2 || (origin && origin_guesses_ >= kMostOriginGuesses)) {
    return std::nullopt;
  }
  std::vector<int64_t> at;
  for (const Point* p : use) at.push_back(p->v);  // (distinct: each value is estimated once)
  std::vector<analytical::StepCurve> curves;      // each stage's
  std::vector<const analytical::StepTerms*> terms;
  for (size_t s = 0; s < use.front()->terms.size(); ++s) {
    terms.clear();
    for (const Point* p : use) terms.push_back(&p->terms[s]);
    std::optional<analytical::StepCurve> curve = analytical::StepCurve::Fit(at, terms, origin);
    if (!curve) return std::nullopt;
    curves.push_back(std::move(*curve));
  }
  through_origin_ = origin;
  if (origin) ++origin_guesses_;

  // The backward's headroom by the curves at v (BackwardHeadroom, of the worst stage); at a value
  // the curves pass through, the estimate's own.
  const auto headroom = [&](int64_t v) {
    for (const Point* p : use) {
      if (p->v == v) return p->headroom;
    }
    return BackwardHeadroom(WorstStageAt(curves, v));
  };
  // The largest value the curves say fits, between the largest fitting value and the smallest
  // failing one (the curves' verdict read as turning once, as the estimates' usually does), and
  // within the values the curves are read at.
  const int64_t above = bad > 0 ? bad : limit + 1;  // the least value not to propose
  const int64_t hi = std::min(above, base::SizeCurves::kMostValue);
  if (good >= hi) return std::nullopt;
  const double room_good = headroom(good), room_hi = headroom(hi);
  // (the estimate there fits: its backward, or its inference step, does)
  if (room_good < 0) return std::nullopt;
  if (room_hi >= 0) return hi < above ? Propose(hi, true, room_hi) : std::nullopt;
  double room = 0;
  const int64_t lo = LargestWithRoom(good, hi, room_good, room_hi, headroom, &room);
  // lo == good: the curves say its successor fails; else lo fits by them. (Not through the
  // origin: a fixed part of a term -- an embedding's gradient -- read as growing with the value
  // says a fitting value's successor fails where it has room for many more.)
  if (lo == good) return origin ? std::nullopt : Propose(good + 1, false, 0, false, true);
  // (LargestWithRoom ends with lo + 1 failing by the curves.)
  return Propose(lo, true, room, /*successor_fails=*/true, /*ends_if_so=*/true);
}

}  // namespace memest
