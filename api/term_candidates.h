// api/term_candidates.h -- the exact max-batch search's candidates read from the analytical
// backend's terms (analytical/step_terms.h): the closed form at any value from the curves
// through the terms of the values estimated so far.
//
// Policy (docs/cli.md `--max-batch`):
//  * Every estimate the search makes of an analytical step (training, or inference's forward walk)
//    keeps its terms, each pipeline stage's on many GPUs. Once two of them have terms alike
//    (StepTerms::SameShape; the first, at batch 1, not always: a broadcast over the batch dim can
//    be a view only there), the curves through the last two (three, for a dim whose sizes can
//    grow with its square) give the closed form at any value, its block rounding and segments
//    included, and each candidate is the largest value the curves say fits, between the largest
//    fitting value and the smallest failing one the estimates found (regula falsi on the
//    headroom of the forward and backward's phase, which decides where the step's fits; an
//    inference step's own; on many GPUs, the phase of the stage with the largest device peak, as
//    the estimate keeps it: a guide only, since the verdicts are the estimates'); where that
//    is the largest fitting value, or once it fitted, its successor, so that the estimates close
//    the bracket (after curves through the origin, only where the estimate's headroom is theirs
//    to the byte: elsewhere parts they read as growing moved the answer, and new curves say
//    where).
//  * The curves propose, and each verdict is the estimate's but one: where the curves' largest
//    fitting value fitted with the headroom they said to the byte -- the closed form, read at a
//    value it was not fitted at, gave that value's own estimate, rounding and the fullest node
//    included, which a term off its curve there would have moved unless another's error
//    cancelled it to the byte -- the curves' verdict at its successor (does not fit) is taken
//    for the estimate's there, and the search ends without that estimate (VouchForSuccessor;
//    under MaxBatchSearch::kAuto only). Over the 14 search sets of
//    scripts/max_batch_evaluations.py every answer was checked by plain estimates (it fits, its
//    successor does not; 2,054 searches with the vouch, 2026-11-30). A candidate whose estimate
//    gives another verdict than the curves did is a miss; after kMostMisses the search goes on
//    with its own candidates (Candidates, api/max_batch.cc), as it does wherever there are no
//    terms. Curves through the origin are a guess (each term starts there from its fixed part,
//    analytical/step_terms.h, but a term another bound dim moves -- a [seq, seq] mask in a batch
//    search -- or that is neither fixed nor proportional is read as growing with the searched
//    value): their misses are not counted (they guess at most
//    kMostOriginGuesses times), and where they say the largest fitting value's successor fails,
//    Candidates proposes instead. The curves are read at values up to 2^24
//    (base/size_curves.h): past it, Candidates proposes.
//  * Terms only for a search that goes on: a candidate whose verdict, where it is the curves',
//    ends the search (ProposalMayEndTheSearch) is estimated without its terms, and the search
//    works them out from that estimate's own context (no second bind) only when it goes on
//    (KeepTerms): the candidates, the verdicts and the number of estimates stay what they were
//    (every search of the 14 sets alike, 2026-12-02); the terms are then one walk less in most
//    searches (ResNet-50's on h100-80gb 1.558 -> 1.433 M instructions, docs/speed-log.md).
#ifndef MEMEST_API_TERM_CANDIDATES_H_
#define MEMEST_API_TERM_CANDIDATES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "analytical/step_terms.h"
#include "memest/estimator.h"

namespace memest {

// Holds references to the stack, GPU and options it is made with: they outlive it (ExactSearch's).
class TermCandidates {
 public:
  // `points`: 2 (the batch: lines) or 3 (a dim: parabolas once three estimates have terms).
  TermCandidates(const StackProfile& stack, const GpuProfile& gpu, const Options& options,
                 int points)
      : stack_(stack), gpu_(gpu), options_(options), points_(points) {}

  // The terms of an estimate: each pipeline stage's (one on one GPU, or with no pipeline).
  using Stages = std::vector<analytical::StepTerms>;

  // An estimate at value v, with its terms, and its verdict (CheckFit's). An estimate recorded
  // without terms (none given) is not read by the curves, unless KeepTerms adds them.
  void Record(int64_t v, Stages terms, const Estimate& e, const Fit& fit);
  // The terms of the estimate Record took last, recorded without them: kept as Record would have
  // kept them. Before the next Record or Next.
  void KeepTerms(Stages terms);

  // Whether the candidate Next() proposed last ends the search where its estimate says what the
  // curves said of it: their largest fitting value, whose successor fails by them (under
  // VouchForSuccessor's condition the search ends there), or their largest fitting value's
  // successor (a failure closes the bracket). The search can then estimate it without its terms,
  // which only a search that goes on reads (KeepTerms).
  [[nodiscard]] bool ProposalMayEndTheSearch() const { return proposed_at_ != 0 && ends_if_so_; }

  // The next value to estimate inside (good, bad) -- bad 0: none failed yet, and the limit is the
  // top -- and at most SizeCurves::kMostValue (2^24), where the curves are read; nullopt when the
  // curves say nothing (too few terms alike, too many misses, too many guesses through the
  // origin).
  [[nodiscard]] std::optional<int64_t> Next(int64_t good, int64_t bad, int64_t limit);

  // Whether the curves vouch that the successor of `v`, the last value recorded, does not fit:
  // v was their largest fitting value, with its successor failing by them, and its estimate fitted
  // with the headroom they said, to the byte (the closed form gave that estimate at a value it was
  // not fitted at), so that their verdict at v + 1 is taken for the estimate's there (policy
  // above). The search's answer is then v, without that estimate.
  [[nodiscard]] bool VouchForSuccessor(int64_t v) const {
    return vouched_at_ != 0 && vouched_at_ == v;
  }

  // Candidates proposed, and those the estimate's verdict contradicted.
  [[nodiscard]] int proposed() const { return proposed_; }
  [[nodiscard]] int misses() const { return misses_; }

 private:
  static constexpr int kMostMisses = 2;
  // Curves through the origin guess (their misses are not counted): at most this many times.
  static constexpr int kMostOriginGuesses = 3;
  struct Point {
    int64_t v = 0;
    Stages terms;
    double headroom = 0;  // BackwardHeadroom
  };
  // Adds the point (v, terms) for the curves, when the terms are whole.
  void Keep(int64_t v, Stages terms, double headroom);
  // Both hold terms of the same shape, stage by stage.
  static bool Alike(const Stages& a, const Stages& b);
  // The worst stage's peaks by the curves at v (memory::WorseStage, as the estimate keeps it).
  Estimate WorstStageAt(std::span<const analytical::StepCurve> curves, int64_t v) const;
  // CheckFit's headroom of e's forward and backward phase judged alone (an inference step's: its
  // own). The optimizer step's peak is the same at every value: where it fits, the verdict turns
  // where this meets 0, and it grows smoothly with the value where the estimate's own stays at
  // the step's.
  double BackwardHeadroom(Estimate e) const;
  // The last `points_` estimates whose terms are alike the last one's, in increasing values.
  std::vector<const Point*> LastAlike() const;
  // Proposes v, which the curves say fits or not (with that headroom: BackwardHeadroom).
  // `ends_if_so`: the search ends when v's estimate agrees (ProposalMayEndTheSearch).
  std::optional<int64_t> Propose(int64_t v, bool fits, double headroom = 0,
                                 bool successor_fails = false, bool ends_if_so = false);
  const StackProfile& stack_;
  const GpuProfile& gpu_;
  const Options& options_;
  const int points_;
  std::vector<Point> points_seen_;  // in the order estimated
  int64_t proposed_at_ = 0;         // the last candidate proposed (0: none pending)
  bool proposed_fits_ = false;      // what the curves said of it
  bool through_origin_ = false;     // the curves it came from went through the origin
  double proposed_headroom_ = 0;    // what the curves said its headroom is
  bool successor_next_ = false;     // it was the curves' largest fitting value, and it fitted
  bool successor_fails_ = false;    // the curves said the candidate's successor does not fit
  bool ends_if_so_ = false;         // ProposalMayEndTheSearch
  int64_t vouched_at_ = 0;          // VouchForSuccessor's value (0: none)
  int proposed_ = 0;
  int misses_ = 0;
  int origin_guesses_ = 0;
  // The last estimate Record took without terms, for KeepTerms (v 0: none).
  int64_t unkept_v_ = 0;
  double unkept_headroom_ = 0;
};

}  // namespace memest

#endif  // MEMEST_API_TERM_CANDIDATES_H_
