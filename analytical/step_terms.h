// analytical/step_terms.h -- the analytical estimate's terms (a training step's, or an inference
// step's forward walk), and the same estimate at any value of a searched dim from the terms of two
// or three values (StepCurve): what the exact max-batch and max-dim searches read their next
// candidate from (api/max_batch.cc).
//
// Policy:
//  * The closed form (formula at the top of analytical.cc) adds up terms. The ones a dim of the
//    data inputs can move are kept one by one (StepTerms): in training, each saved activation of
//    one micro-batch, each node's forward and backward transient, the loss's; in inference, the
//    forward walk (LiveWalk): each storage root made, each node's workspaces and each root freed,
//    in order. The model states, workspaces and collective buffers are kept as the sums the
//    formula takes. StepPeaks() is the formula's last part, from the terms to the peaks: the
//    estimate and the curve share it, and in inference the walk's peak is the walk's own.
//  * StepCurve: the terms of two or three estimates at increasing values, with the same fixed
//    parts and the same terms (the same values saved by the same nodes, in the same order; the
//    same walk), give each term as the curve through its bytes (base/size_curves.h) -- or of one
//    or two estimates and the origin, where each term starts from its fixed part (TermParts: the
//    bytes the searched dim does not move) and grows in proportion to the value, its quadratic
//    part with the square (an activation holds the batch dim once; attention's scores, the
//    sequence's twice: from one estimate a third point at twice its value, read from the
//    parts, gives the parabola) -- and the
//    closed form at any value from them: the block rounding and the segments are the formula's
//    own, and where the largest transient (the fullest node of the walk) moves from one node to
//    another, the curves say where. A size that is not a polynomial of the value is off its curve
//    elsewhere: the curve only proposes where the search estimates next, and every verdict the
//    search gives is an estimate's.
#ifndef MEMEST_ANALYTICAL_STEP_TERMS_H_
#define MEMEST_ANALYTICAL_STEP_TERMS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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
  // Reserved bytes by pool (Charge): blocks of 10 MiB or more, each in its own segment; blocks
  // of 1-10 MiB, as shares of 20 MiB segments; blocks of up to 1 MiB, by their size.
  uint64_t large = 0;
  uint64_t mid = 0;
  uint64_t small = 0;

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
    const auto [pool, reserved] = Charge(block);
    *pool = base::SatAdd(*pool, reserved);
  }
  // `count` blocks of `bytes`: Add(bytes) `count` times (the sums saturate alike).
  void Add(uint64_t bytes, uint64_t count) {
    if (bytes == 0 || count == 0) return;
    const uint64_t block = BlockOf(bytes);
    requested = base::SatAdd(requested, base::SatMul(bytes, count));
    allocated = base::SatAdd(allocated, base::SatMul(block, count));
    const auto [pool, reserved] = Charge(block);
    *pool = base::SatAdd(*pool, base::SatMul(reserved, count));
  }
  // n rounded up to a multiple of m, saturating.
  static uint64_t RoundUp(uint64_t n, uint64_t m) { return base::SatMul(n / m + (n % m != 0), m); }
  // Takes back one Add(bytes) (never below zero; inline, as Add).
  void Remove(uint64_t bytes) {
    if (bytes == 0) return;
    const uint64_t block = BlockOf(bytes);
    requested -= std::min(requested, bytes);
    allocated -= std::min(allocated, block);
    const auto [pool, reserved] = Charge(block);
    *pool -= std::min(*pool, reserved);
  }
  void Add(const Blocks& o);
  // The pools' segments: large and mid as counted, mid rounded up to whole 20 MiB segments and
  // small packed into 2 MiB ones (analytical.cc, memory-model.md §1.4).
  uint64_t Reserved() const;
  bool operator==(const Blocks&) const = default;

 private:
  // The pool a block is counted in, and the segment bytes it stands for there (memory-model.md
  // §1.4 get_pool, get_allocation_size and should_split): up to 1 MiB its own bytes, packed into
  // 2 MiB segments; below 10 MiB its share of the 20 MiB segment that blocks of its size fill --
  // split off one after another, floor(20 MiB / block) to a segment, the rest going with the last
  // (a 1.5 MiB block stands for 20/13 MiB, an 8 MiB one for 10 MiB); from 10 MiB its own segment.
  std::pair<uint64_t*, uint64_t> Charge(uint64_t block) {
    if (block <= memory::kSmallSize) return {&small, block};
    const uint64_t segment = memory::AllocationSize(block);
    if (block < memory::kMinLargeAlloc) return {&mid, segment / (segment / block)};
    return {&large, segment};
  }
};

// Buffers made one after another, two alive at once (buffer i is made once buffer i - 2 is freed:
// DDP's broadcasts, memory/ddp_buckets.h): the two alive together that reserve the most, of two
// that reserve the same the pair that allocates more. 0 bytes: no buffer.
[[nodiscard]] Blocks FullestInFlight(const std::vector<uint64_t>& buffers);

// The peak fields and the outside-allocator and rounding parts of p's breakdown, from the blocks
// allocated at its peak (p's requested parts set).
void FinishPhase(const Blocks& all, const StackProfile& stack, PhasePeak* p);
// p as the estimate's peak: its peak fields, breakdown and phase.
void TakePeak(const PhasePeak& p, Estimate* e);

// The step's model states as one rank holds them.
struct ModelStates {
  Blocks weights, cast_cache, grads, state;
  Blocks collective;              // gathered units: live in forward and backward
  Blocks buckets;                 // DDP's gradient buckets as rebuilt after the first step, kept
  Blocks step_only;               // ZeRO's fp32 gradient partition, made for the step
  uint64_t step_temporaries = 0;  // the optimizer step's temporaries at its peak
  // DDP's broadcasts when the model is wrapped (memory::DdpBroadcasts::at_wrap), the two in
  // flight that take the most: with the weights alone, before the first iteration.
  Blocks wrap_broadcast;
  bool operator==(const ModelStates&) const = default;
};

// The parts of a kept term's bytes by how the searched dim moves them (StepTerms::searched):
// `fixed`, those it does not move (a value whose symbolic shape holds none of it, an extra
// tensor its rule says is fixed, ops::SavedTensor; of a value with one dim k x + r affine in it,
// the share r / (k x + r): a decode step's [B, H, 1, past + seq] scores); `quadratic`, those
// that grow with its square (a value holding it in two dims, each exactly it: attention's
// [B, H, S, S] scores). A copy a node saves of a value (autocast's, MatMul's contiguous one) has
// the value's parts in its own bytes. The rest are read as growing in proportion to it.
struct TermParts {
  uint64_t fixed = 0, quadratic = 0;
};

// One saved activation of a micro-batch: the bytes, the checkpointed segment whose recomputation
// makes it (-1: kept outside the segments) and what it is (the value, or -1 for bytes a node's
// rule saves that are no graph value; the node that saves it, -1 for inputs and the loss).
// `fixed` and `quadratic`: its TermParts, kept with the terms one by one only.
struct SavedTerm {
  uint64_t bytes = 0;
  int32_t segment = -1;
  int32_t value = -1;
  int32_t node = -1;
  uint64_t fixed = 0;
  uint64_t quadratic = 0;
};

// The terms added up as they come: the saved activations outside the checkpointed segments and
// in each, and the largest transient.
class TermSums {
 public:
  explicit TermSums(int segments = 0) : in_segment_(static_cast<size_t>(std::max(segments, 0))) {}
  void AddSaved(uint64_t bytes, int segment, uint64_t count = 1) {
    (segment >= 0 ? in_segment_[static_cast<size_t>(segment)] : outside_).Add(bytes, count);
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

// The forward walk of an inference step (analytical.cc Infer): storage roots made, nodes run with
// their workspaces beside the roots alive, roots freed after their last use, in order. Its peak is
// the fullest node's (the first of those that tie): the roots alive there and its workspaces.
class LiveWalk {
 public:
  // Starts an empty walk; with `keep`, each step is kept (the curves replay them).
  void Start(bool keep);
  // A root of `bytes` made, with its parts (TermParts); its number, in the order made, for Free.
  int32_t Make(uint64_t bytes, TermParts parts = {}) {
    live_.Add(bytes);
    if (keep_) {
      steps_.push_back({Step::kMake, made_});
      made_bytes_.push_back(bytes);
      made_parts_.push_back(parts);
    }
    return made_++;
  }
  // Node `node` runs with `workspace` bytes beside the roots alive.
  void Run(int32_t node, uint64_t workspace) {
    // (Add's allocated bytes, without the copy: most nodes have no workspace, and few are fuller.)
    const uint64_t here = workspace == 0
                              ? live_.allocated
                              : base::SatAdd(live_.allocated, Blocks::BlockOf(workspace));
    if (here > peak_.allocated) {
      peak_ = live_;
      peak_.Add(workspace);
      peak_node_ = node;
    }
    if (keep_) {
      steps_.push_back({Step::kRun, node});
      run_bytes_.push_back(workspace);
    }
  }
  // Root number `made` (Make's), of `bytes`, freed.
  void Free(int32_t made, uint64_t bytes) {
    live_.Remove(bytes);
    if (keep_) steps_.push_back({Step::kFree, made});
  }
  // The blocks allocated at the fullest node, and that node (-1: none held anything).
  [[nodiscard]] const Blocks& peak() const { return peak_; }
  [[nodiscard]] int32_t peak_node() const { return peak_node_; }

  // Kept (with keep): the roots' bytes in the order made, the nodes' workspaces in the order run.
  [[nodiscard]] const std::vector<uint64_t>& made_bytes() const { return made_bytes_; }
  [[nodiscard]] const std::vector<TermParts>& made_parts() const { return made_parts_; }
  [[nodiscard]] const std::vector<uint64_t>& run_bytes() const { return run_bytes_; }
  // The same steps in the same order (their bytes aside).
  [[nodiscard]] bool SameShape(const LiveWalk& o) const { return steps_ == o.steps_; }
  // The kept steps again into *out (started by the caller), with root i's bytes made(i) and the
  // j-th node run's workspace run(j).
  template <typename Made, typename RunWs>
  void Replay(const Made& made, const RunWs& run, LiveWalk* out) const {
    size_t runs = 0;
    for (const Step& s : steps_) {
      switch (s.kind) {
        case Step::kMake:
          out->Make(made(static_cast<size_t>(s.index)));
          break;
        case Step::kRun:
          out->Run(s.index, run(runs++));
          break;
        case Step::kFree:
          out->Free(s.index, made(static_cast<size_t>(s.index)));
          break;
      }
    }
  }

 private:
  struct Step {
    enum Kind : int32_t { kMake, kRun, kFree } kind;
    int32_t index;  // kMake, kFree: the root's number; kRun: the node
    bool operator==(const Step&) const = default;
  };
  bool keep_ = true;
  Blocks live_, peak_;
  int32_t peak_node_ = -1;
  int32_t made_ = 0;
  std::vector<Step> steps_;
  std::vector<uint64_t> made_bytes_, run_bytes_;
  std::vector<TermParts> made_parts_;
};

struct StepTerms {
  ModelStates states;
  uint64_t workspace = 0;     // the cuBLAS workspaces
  uint64_t nccl_buffers = 0;  // outside the allocator
  int in_flight = 1;          // micro-batches whose saved activations a stage holds (1F1B)
  int segments = 0;           // checkpointed segments
  // With `keep`, each term one by one (what the search's curves need): in training the saved
  // activations of a micro-batch, and every node's forward and backward transient and the loss's
  // backward peak (in that order); in inference the forward walk's steps. Without, only their
  // sums, and the walk's peak (a plain estimate).
  // Each term kept also says its parts (TermParts) in `searched`, the dim the search moves (empty:
  // the batch, the leading dims of the data inputs): its fixed part -- a value whose symbolic
  // shape holds none of it (a weight's transpose, its gradient), a quantized weight's
  // dequantization, BatchNormalization's per-channel statistics -- and its part that grows with
  // its square. Curves through the origin (StepCurve) start each term at its fixed part, and
  // from one estimate read its quadratic part as growing with the square.
  bool keep = true;
  std::string searched;
  std::vector<SavedTerm> saved;
  std::vector<uint64_t> transients;
  std::vector<TermParts> transient_parts;  // each transient's parts
  TermSums sums;
  // An inference step: the forward walk is its terms (states hold the weights and the AMP cast
  // cache only, workspace the cuBLAS workspace; the training terms stay empty).
  bool inference = false;
  LiveWalk live;

  // Starts the terms of a training step with `segments` checkpointed segments: the saved
  // activations and transients empty (the states and workspaces are the caller's to set, before
  // or after; `keep` kept).
  void Start(int checkpointed_segments);
  // Starts the terms of an inference step: all of them empty but `keep`.
  void StartInference();
  // Terms a curve can be read through were kept: a node's transients, or a walk's nodes.
  [[nodiscard]] bool HasTerms() const {
    return inference ? !live.run_bytes().empty() : !transients.empty();
  }
  void AddSaved(const SavedTerm& s) {
    sums.AddSaved(s.bytes, s.segment);
    if (keep) saved.push_back(s);
  }
  void AddTransient(uint64_t bytes, TermParts parts = {}) {
    sums.AddTransient(bytes);
    if (keep) {
      transients.push_back(bytes);
      transient_parts.push_back(parts);
    }
  }
  // Everything but the terms' bytes is the same.
  [[nodiscard]] bool SameShape(const StepTerms& o) const;
};

// A training step's two phases' peaks from the terms' sums (Estimate::phases; the larger one's in
// the peak fields and breakdown); an inference step's peak from its walk's (the peak node's name
// is the caller's to set).
[[nodiscard]] Estimate StepPeaks(const StepTerms& t, const StackProfile& stack);

// The estimate in `ctx` (the analytical backend's, Estimator::Run's in that context), and its
// terms in *terms, kept one by one, their parts in `searched` (StepTerms::searched).
[[nodiscard]] Result<Estimate> EstimateWithTerms(const memory::EstimationContext& ctx,
                                                 StepTerms* terms, std::string_view searched = {});

class StepCurve {
 public:
  // The curves through terms[i] at at[i] (increasing values in [1, 2^24]), and with `origin`,
  // through each term's fixed part (terms[0]'s) at value 0 first: 2 or 3 points in all. Through
  // the origin and one estimate where a term has a quadratic part, a third point at twice the
  // value (the fixed part, the rest doubled, the quadratic part four times): parabolas. Nullopt
  // when the terms differ in anything but their bytes, hold none (StepTerms::HasTerms), or a term
  // falls as the value grows or is 2^46 bytes or more (base/size_curves.h). Terms with the same
  // bytes at every value (and, saved activations, in the same segment) have the same curve: each
  // such group is fitted once and read once per value -- in training with its number of terms (a
  // sum adds them alike, the largest transient is any of them), in inference by each of its terms
  // as the walk replays them. A transformer's layers repeat their terms: Qwen2.5-0.5B's 491 saved
  // activations are 8 groups, its 3,085 transients 32 to 37, which the search's curves read at
  // about 20 values each.
  [[nodiscard]] static std::optional<StepCurve> Fit(std::span<const int64_t> at,
                                                    std::span<const StepTerms* const> terms,
                                                    bool origin = false);
  // The terms at value v by the curves.
  [[nodiscard]] StepTerms At(int64_t v) const;
  // StepPeaks(At(v)), without the copy.
  [[nodiscard]] Estimate PeaksAt(int64_t v, const StackProfile& stack) const;

 private:
  // The walk at v through the curves into *out (started by the caller).
  void ReplayAt(int64_t v, LiveWalk* out) const;

  StepTerms shape_;             // the first traced value's terms: all but the curves' bytes
  base::SizeCurves saved_;      // training: per group of saved terms
  base::SizeCurves transient_;  // per group of transients (inference: of node runs' workspaces)
  base::SizeCurves made_;       // inference: per group of roots made
  // Each term's group (the curve it reads): saved terms', transients' (inference: node runs'),
  // roots made; and each saved group's segment and number of terms.
  std::vector<uint32_t> saved_group_, transient_group_, made_group_;
  std::vector<int32_t> group_segment_;
  std::vector<uint64_t> group_terms_;
};

}  // namespace memest::analytical

#endif  // MEMEST_ANALYTICAL_STEP_TERMS_H_
