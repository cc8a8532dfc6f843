// analytical/train_terms.h -- the analytical training estimate's terms, and the same estimate at
// any value of a searched dim from the terms of two or three values (TrainCurve): what the exact
// max-batch and max-dim searches read their next candidate from (api/max_batch.cc).
//
// Policy:
//  * The closed form (formula at the top of analytical.cc) adds up terms. The ones a dim of the
//    data inputs can move -- each saved activation of one micro-batch, each node's forward and
//    backward transient, the loss's -- are kept one by one (TrainTerms); the model states,
//    workspaces and collective buffers as the sums the formula takes. StepPeaks() is the formula's
//    last part, from the terms to both phases' peaks: the estimate and the curve share it.
//  * TrainCurve: the terms of two or three estimates at increasing values, with the same fixed
//    parts and the same terms (the same values saved by the same nodes, in the same order), give
//    each term as the curve through its bytes (base/size_curves.h) -- or of one or two estimates
//    and the origin, for terms proportional to the value or its square (an activation holds the
//    batch dim once; attention's scores, the sequence's twice) -- and the closed form at any
//    value from them: the block rounding and the segments are the formula's own, and where the
//    largest transient moves from one node to another, the curves say where. A size that is not a
//    polynomial of the value is off its curve elsewhere: the curve only proposes where the search
//    estimates next, and every verdict the search gives is an estimate's.
#ifndef MEMEST_ANALYTICAL_TRAIN_TERMS_H_
#define MEMEST_ANALYTICAL_TRAIN_TERMS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/checked.h"
#include "base/size_curves.h"
#include "memest/estimate.h"
#include "memest/stack.h"
#include "memest/status.h"
#include "memory/allocator_constants.h"

namespace memest::memory {
class EstimationContext;
}

namespace memest::analytical {

// Requested bytes, and what the caching allocator makes of them (closed-form approximation:
// docs/memory-model.md §1.3-1.4).
struct Blocks {
  uint64_t requested = 0;
  uint64_t allocated = 0;  // 512-byte-rounded blocks
  uint64_t large = 0;      // reserved bytes of blocks > 1 MiB (2 MiB-rounded)
  uint64_t small = 0;      // allocated bytes of blocks <= 1 MiB

  // The block the allocator hands out for a request of `bytes` (512-byte rounded).
  static uint64_t BlockOf(uint64_t bytes) {
    return bytes < memory::kMinBlockSize ? memory::kMinBlockSize
                                         : RoundUp(bytes, memory::kMinBlockSize);
  }
  // One block of `bytes` (inline: the search's curves add every term at every value they read).
  void Add(uint64_t bytes) {
    if (bytes == 0) return;
    const uint64_t block = BlockOf(bytes);
    requested = base::SatAdd(requested, bytes);
    allocated = base::SatAdd(allocated, block);
    if (block > memory::kSmallSize) {
      large = base::SatAdd(large, RoundUp(block, memory::kRoundLarge));
    } else {
      small = base::SatAdd(small, block);
    }
  }
  // n rounded up to a multiple of m, saturating.
  static uint64_t RoundUp(uint64_t n, uint64_t m) { return base::SatMul(n / m + (n % m != 0), m); }
  // Takes back one Add(bytes) (never below zero).
  void Remove(uint64_t bytes);
  void Add(const Blocks& o);
  uint64_t Reserved() const;  // large blocks + small ones packed into 2 MiB segments
  bool operator==(const Blocks&) const = default;
};

// The peak fields and the outside-allocator and rounding parts of p's breakdown, from the blocks
// allocated at its peak (p's requested parts set).
void FinishPhase(const Blocks& all, const StackProfile& stack, PhasePeak* p);
// p as the estimate's peak: its peak fields, breakdown and phase.
void TakePeak(const PhasePeak& p, Estimate* e);

// The step's model states as one rank holds them.
struct ModelStates {
  Blocks weights, cast_cache, grads, state;
  Blocks collective;              // gathered units: live in forward and backward
  Blocks buckets;                 // DDP's gradient buckets: allocated once, kept
  Blocks step_only;               // ZeRO's fp32 gradient partition, made for the step
  uint64_t step_temporaries = 0;  // the optimizer step's temporaries at its peak
  bool operator==(const ModelStates&) const = default;
};

// One saved activation of a micro-batch: the bytes, the checkpointed segment whose recomputation
// makes it (-1: kept outside the segments) and what it is (the value, or -1 for bytes a node's
// rule saves that are no graph value; the node that saves it, -1 for inputs and the loss).
struct SavedTerm {
  uint64_t bytes = 0;
  int32_t segment = -1;
  int32_t value = -1;
  int32_t node = -1;
};

// The terms added up as they come: the saved activations outside the checkpointed segments and
// in each, and the largest transient.
class TermSums {
 public:
  explicit TermSums(int segments = 0) : in_segment_(static_cast<size_t>(std::max(segments, 0))) {}
  void AddSaved(uint64_t bytes, int segment) {
    (segment >= 0 ? in_segment_[static_cast<size_t>(segment)] : outside_).Add(bytes);
  }
  void AddTransient(uint64_t bytes) { transient_ = std::max(transient_, bytes); }
  // What backward keeps of `in_flight` micro-batches: of each, everything outside the segments
  // plus the largest segment's own (recomputed in backward one segment at a time).
  [[nodiscard]] Blocks Saved(int in_flight) const;
  uint64_t transient() const { return transient_; }

 private:
  Blocks outside_;
  std::vector<Blocks> in_segment_;
  uint64_t transient_ = 0;
};

struct TrainTerms {
  ModelStates states;
  uint64_t workspace = 0;     // the cuBLAS workspaces
  uint64_t nccl_buffers = 0;  // outside the allocator
  int in_flight = 1;          // micro-batches whose saved activations a stage holds (1F1B)
  int segments = 0;           // checkpointed segments
  // With `keep`, each term one by one (what the search's curves need): the saved activations of
  // a micro-batch, and every node's forward and backward transient and the loss's backward peak
  // (in that order). Without, only their sums (a plain estimate).
  bool keep = true;
  std::vector<SavedTerm> saved;
  std::vector<uint64_t> transients;
  TermSums sums;

  // Starts the terms of a step with `segments` checkpointed segments (empty, `keep` kept).
  void Start(int checkpointed_segments);
  void AddSaved(const SavedTerm& s) {
    sums.AddSaved(s.bytes, s.segment);
    if (keep) saved.push_back(s);
  }
  void AddTransient(uint64_t bytes) {
    sums.AddTransient(bytes);
    if (keep) transients.push_back(bytes);
  }
  // Everything but the terms' bytes is the same.
  [[nodiscard]] bool SameShape(const TrainTerms& o) const;
};

// Both phases' peaks from the terms' sums (Estimate::phases; the larger one's in the peak fields
// and breakdown).
[[nodiscard]] Estimate StepPeaks(const TrainTerms& t, const StackProfile& stack);

// The training estimate in `ctx` (the analytical backend's, Estimator::Run's in that context),
// and its terms in *terms, kept one by one.
[[nodiscard]] Result<Estimate> EstimateWithTerms(const memory::EstimationContext& ctx,
                                                 TrainTerms* terms);

class TrainCurve {
 public:
  // The curves through terms[i] at at[i] (increasing values in [1, 2^24]), and with `origin`,
  // through 0 bytes at value 0 first: 2 or 3 points in all. Nullopt when the terms differ in
  // anything but their bytes, hold no transients (an inference step's), or a term falls as the
  // value grows or is 2^46 bytes or more (base/size_curves.h).
  [[nodiscard]] static std::optional<TrainCurve> Fit(std::span<const int64_t> at,
                                                     std::span<const TrainTerms* const> terms,
                                                     bool origin = false);
  // The terms at value v by the curves.
  [[nodiscard]] TrainTerms At(int64_t v) const;
  // StepPeaks(At(v)), without the copy.
  [[nodiscard]] Estimate PeaksAt(int64_t v, const StackProfile& stack) const;

 private:
  TrainTerms shape_;            // the first traced value's terms: all but the curves' bytes
  base::SizeCurves saved_;      // per saved term
  base::SizeCurves transient_;  // per transient
};

}  // namespace memest::analytical

#endif  // MEMEST_ANALYTICAL_TRAIN_TERMS_H_
