// analytical/step_terms.cc -- the analytical estimate's terms, their peaks, and their curves
// (policy in step_terms.h; the formula at the top of analytical.cc).
#include "analytical/step_terms.h"

#include <algorithm>

#include "base/checked.h"
#include "base/distinct.h"
#include "memory/allocator_constants.h"
#include "memory/device.h"

namespace memest::analytical {
namespace {

using base::SatAdd;

using memory::kLargeBuffer;
using memory::kRoundLarge;  // the allocator's constants, memory-model.md §1.1
using memory::kSmallBuffer;
using memory::kSmallSize;

// What is allocated at the peak of forward and backward, with `saved` activations, the largest
// `transient` and the cuBLAS workspaces `ws`; and at the optimizer step's peak.
Blocks AtBackward(const ModelStates& m, const Blocks& saved, uint64_t transient, uint64_t ws) {
  Blocks all = m.weights;
  all.Add(m.cast_cache);
  all.Add(m.state);
  all.Add(saved);
  all.Add(m.grads);
  all.Add(transient);
  all.Add(ws);
  all.Add(m.collective);
  all.Add(m.buckets);
  return all;
}

Blocks AtStep(const ModelStates& m, uint64_t ws) {
  Blocks all = m.weights;
  all.Add(m.buckets);
  all.Add(m.state);
  all.Add(m.grads);
  all.Add(m.step_only);
  if (m.step_temporaries) all.Add(m.step_temporaries);
  all.Add(ws);
  return all;
}

}  // namespace

void TakePeak(const PhasePeak& p, Estimate* e) {
  e->peak_allocated = p.peak_allocated;
  e->peak_reserved = p.peak_reserved;
  e->peak_device = p.peak_device;
  e->breakdown = p.breakdown;
  e->peak_phase = p.phase;
}

void Blocks::Add(const Blocks& o) {
  requested = SatAdd(requested, o.requested);
  allocated = SatAdd(allocated, o.allocated);
  large = SatAdd(large, o.large);
  mid = SatAdd(mid, o.mid);
  small = SatAdd(small, o.small);
}

uint64_t Blocks::Reserved() const {
  return SatAdd(SatAdd(large, Blocks::RoundUp(mid, kLargeBuffer)),
                Blocks::RoundUp(small, kSmallBuffer));
}

Blocks FullestInFlight(const std::vector<uint64_t>& buffers) {
  Blocks fullest;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Blocks pair;
    pair.Add(buffers[i]);
    if (i > 0) pair.Add(buffers[i - 1]);
    const uint64_t r = pair.Reserved(), best = fullest.Reserved();
    if (r > best || (r == best && pair.allocated > fullest.allocated)) fullest = pair;
  }
  return fullest;
}

void FinishPhase(const Blocks& all, const StackProfile& stack, PhasePeak* p) {
  p->peak_allocated = all.allocated;
  p->peak_reserved = std::max(all.Reserved(), all.allocated);
  memory::SetOutsideAllocator(stack, &p->breakdown);
  // Breakdown fields hold requested bytes; allocated - requested is block rounding, reserved -
  // allocated the segment memory held free.
  Breakdown& bd = p->breakdown;
  const uint64_t requested = SatAdd(
      SatAdd(SatAdd(bd.weights, bd.gradients), SatAdd(bd.optimizer_state, bd.saved_activations)),
      SatAdd(bd.transient, bd.collective_buffers));
  const uint64_t allocated =
      std::clamp(p->peak_allocated, requested, std::max(requested, p->peak_reserved));
  bd.allocator_overhead = allocated - requested;
  bd.cached_free = p->peak_reserved - std::min(allocated, p->peak_reserved);
  p->peak_device = bd.Total();
}

bool StepTerms::SameShape(const StepTerms& o) const {
  if (!(states == o.states) || workspace != o.workspace || nccl_buffers != o.nccl_buffers ||
      in_flight != o.in_flight || segments != o.segments || saved.size() != o.saved.size() ||
      transients.size() != o.transients.size() || inference != o.inference ||
      !live.SameShape(o.live)) {
    return false;
  }
  // A saved term is the same term where the same node saves it in the same segment: which value
  // holds it can differ (at a dim of 1 a view's root is another value, its bytes the same share).
  for (size_t i = 0; i < saved.size(); ++i) {
    const SavedTerm &a = saved[i], &b = o.saved[i];
    if (a.segment != b.segment || a.node != b.node) return false;
  }
  return true;
}

namespace {

// Both phases' peaks, from the terms' fixed parts and their sums.
Estimate PeaksOf(const StepTerms& t, const TermSums& sums, const StackProfile& stack) {
  const ModelStates& m = t.states;
  const Blocks saved = sums.Saved(t.in_flight);
  const uint64_t transient = sums.transient();
  const Blocks fwdbwd = AtBackward(m, saved, transient, t.workspace);
  const Blocks step = AtStep(m, t.workspace);
  PhasePeak backward;
  backward.phase = Phase::kBackward;
  backward.breakdown.weights = SatAdd(m.weights.requested, m.cast_cache.requested);
  backward.breakdown.gradients = m.grads.requested;
  backward.breakdown.optimizer_state = m.state.requested;
  backward.breakdown.saved_activations = saved.requested;
  backward.breakdown.transient = SatAdd(transient, t.workspace);
  backward.breakdown.collective_buffers = SatAdd(m.collective.requested, m.buckets.requested);
  backward.breakdown.nccl_buffers = t.nccl_buffers;
  FinishPhase(fwdbwd, stack, &backward);
  PhasePeak at_step;
  at_step.phase = Phase::kOptimizerStep;
  at_step.breakdown.weights = m.weights.requested;
  at_step.breakdown.gradients = SatAdd(m.grads.requested, m.step_only.requested);
  at_step.breakdown.optimizer_state = m.state.requested;
  at_step.breakdown.transient = SatAdd(m.step_temporaries, t.workspace);
  at_step.breakdown.collective_buffers = m.buckets.requested;
  at_step.breakdown.nccl_buffers = t.nccl_buffers;
  FinishPhase(step, stack, &at_step);

  // Each phase at its own peak (Estimate::phases); the one with more reserved bytes is the
  // estimate's, and of two that reserve the same segments the fuller one (more allocated), as the
  // symbolic backend describes the moment of its reserved peak (symbolic/timeline.cc).
  Estimate e;
  e.backend = "analytical";  // (the stack's band is the backend's)
  e.phases = {std::move(backward), std::move(at_step)};
  std::vector<Blocks> held = {fwdbwd, step};
  if (m.wrap_broadcast.requested > 0) {
    // DDP's wrap: the weights and its broadcasts' two buffers in flight, before the first
    // iteration (a frozen model with few activations can peak there).
    Blocks wrap = m.weights;
    wrap.Add(m.wrap_broadcast);
    PhasePeak at_wrap;
    at_wrap.phase = Phase::kUnknown;
    at_wrap.breakdown.weights = m.weights.requested;
    at_wrap.breakdown.collective_buffers = m.wrap_broadcast.requested;
    at_wrap.breakdown.nccl_buffers = t.nccl_buffers;
    FinishPhase(wrap, stack, &at_wrap);
    e.phases.push_back(std::move(at_wrap));
    held.push_back(wrap);
  }
  size_t peak = 0;
  for (size_t i = 1; i < held.size(); ++i) {
    const uint64_t r = held[i].Reserved(), best = held[peak].Reserved();
    if (r > best || (r == best && held[i].allocated > held[peak].allocated)) peak = i;
  }
  TakePeak(e.phases[peak], &e);
  return e;
}

// An inference step's peak: the weights (and the AMP cast cache), the walk's fullest node and the
// cuBLAS workspace `ws`.
Estimate InferencePeak(const ModelStates& m, const Blocks& walk_peak, uint64_t ws,
                       const StackProfile& stack) {
  Blocks all = m.weights;
  all.Add(m.cast_cache);
  all.Add(walk_peak);
  all.Add(ws);
  PhasePeak peak;
  peak.phase = Phase::kInference;
  peak.breakdown.weights = SatAdd(m.weights.requested, m.cast_cache.requested);
  // the roots alive at the peak + the workspaces
  peak.breakdown.transient = SatAdd(walk_peak.requested, ws);
  FinishPhase(all, stack, &peak);
  Estimate e;
  e.backend = "analytical";
  TakePeak(peak, &e);
  return e;
}

}  // namespace

Blocks TermSums::Saved(int in_flight) const {
  Blocks one = outside_;
  if (!in_segment_.empty()) {
    one.Add(*std::max_element(
        in_segment_.begin(), in_segment_.end(),
        [](const Blocks& x, const Blocks& y) { return x.allocated < y.allocated; }));
  }
  // 1F1B: the stage holds the saved activations of this many micro-batches at once.
  Blocks all;
  for (int i = 0; i < in_flight; ++i) all.Add(one);
  return all;
}

void LiveWalk::Start(bool keep) {
  keep_ = keep;
  live_ = peak_ = Blocks();
  peak_node_ = -1;
  made_ = 0;
  steps_.clear();
  made_bytes_.clear();
  made_parts_.clear();
  run_bytes_.clear();
}

void StepTerms::Start(int checkpointed_segments) {
  inference = false;
  segments = checkpointed_segments;
  saved.clear();
  transients.clear();
  transient_parts.clear();
  sums = TermSums(checkpointed_segments);
}

void StepTerms::StartInference() {
  const bool keep_each = keep;
  std::string searched_dim = std::move(searched);
  *this = StepTerms();
  keep = keep_each;
  searched = std::move(searched_dim);
  inference = true;
  live.Start(keep);
}

Estimate StepPeaks(const StepTerms& t, const StackProfile& stack) {
  if (t.inference) return InferencePeak(t.states, t.live.peak(), t.workspace, stack);
  return PeaksOf(t, t.sums, stack);
}

namespace {

// The terms alike (StepCurve::Fit's policy): `count` terms numbered by their bytes in every one of
// `terms` (bytes_of(t, j): term j's in t), their segment (segment_of(j)) and the parts their curve
// is read through at the origin (origin_of(j), TermParts).
template <typename BytesOf, typename SegmentOf, typename OriginOf>
base::Distinct GroupTerms(std::span<const StepTerms* const> terms, size_t count,
                          const BytesOf& bytes_of, const SegmentOf& segment_of,
                          const OriginOf& origin_of) {
  return base::NumberDistinct(
      count, [](size_t) { return true; },
      [&](size_t j) {
        uint64_t h = 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(segment_of(j));
        const TermParts p = origin_of(j);
        h = (h ^ p.fixed) * 0xff51afd7ed558ccdULL;
        h = (h ^ p.quadratic) * 0xff51afd7ed558ccdULL;
        for (const StepTerms* t : terms) {
          h = (h ^ bytes_of(*t, j)) * 0xff51afd7ed558ccdULL;
          h ^= h >> 32;
        }
        return h;
      },
      [&](size_t a, size_t b) {
        const TermParts pa = origin_of(a), pb = origin_of(b);
        if (segment_of(a) != segment_of(b) || pa.fixed != pb.fixed ||
            pa.quadratic != pb.quadratic) {
          return false;
        }
        for (const StepTerms* t : terms) {
          if (bytes_of(*t, a) != bytes_of(*t, b)) return false;
        }
        return true;
      });
}

}  // namespace

std::optional<StepCurve> StepCurve::Fit(std::span<const int64_t> at,
                                        std::span<const StepTerms* const> terms, bool origin) {
  if (at.size() != terms.size() || terms.empty() || terms[0] == nullptr || !terms[0]->HasTerms() ||
      terms.size() + (origin ? 1 : 0) > 3) {
    return std::nullopt;
  }
  for (const StepTerms* t : terms) {
    if (t == nullptr || !t->SameShape(*terms[0])) return std::nullopt;
  }
  const StepTerms& shape = *terms[0];
  // A term's parts where the curves start from the origin (none otherwise: unread, and no reason
  // to keep groups apart). Kept lists are as long as their terms' (StepTerms::keep), but the loss
  // of a part only moves a guess: read as none where one is missing.
  const auto parts_in = [origin](const std::vector<TermParts>& list) {
    return [&list, origin](size_t j) -> TermParts {
      return origin && j < list.size() ? list[j] : TermParts{};
    };
  };
  const auto made_parts = parts_in(shape.live.made_parts());
  const auto transient_parts = parts_in(shape.transient_parts);
  const auto saved_parts = [&](size_t j) -> TermParts {
    return origin ? TermParts{shape.saved[j].fixed, shape.saved[j].quadratic} : TermParts{};
  };
  const auto no_parts = [](size_t) { return TermParts{}; };  // workspaces: growing
  // Through the origin and one estimate, a term with a quadratic part needs a third point.
  const auto any_quadratic = [](size_t count, const auto& parts_of) {
    for (size_t j = 0; j < count; ++j) {
      if (parts_of(j).quadratic > 0) return true;
    }
    return false;
  };
  const bool squared =
      origin && terms.size() == 1 &&
      (shape.inference ? any_quadratic(shape.live.made_bytes().size(), made_parts)
                       : any_quadratic(shape.saved.size(), saved_parts) ||
                             any_quadratic(shape.transients.size(), transient_parts));
  const size_t first = origin ? 1 : 0;  // where the traced terms start among the points
  int64_t values[3] = {0, 0, 0};
  for (size_t i = 0; i < at.size(); ++i) values[first + i] = at[i];
  if (squared) values[2] = 2 * at[0];  // (at most 2^25: Over refuses values past its range)
  const std::span<const int64_t> points(values, at.size() + first + (squared ? 1 : 0));
  std::optional<base::SizeCurves> saved = base::SizeCurves::Over(points);
  std::optional<base::SizeCurves> transient = base::SizeCurves::Over(points);
  std::optional<base::SizeCurves> made = base::SizeCurves::Over(points);
  if (!saved || !transient || !made) return std::nullopt;
  uint64_t sizes[3] = {0, 0, 0};  // at the origin: the term's fixed part
  const std::span<const uint64_t> traced(sizes, points.size());
  // The curve of each term: `bytes_of(t, j)` the j-th of `count` terms' bytes in t, `parts_of(j)`
  // its parts (read with `origin` only): at twice the value of one estimate b, f + 2 (b - f - q)
  // + 4 q = 2 b - f + 2 q.
  const auto fit = [&](base::SizeCurves* curves, size_t count, const auto& bytes_of,
                       const auto& parts_of) {
    curves->Reserve(count);
    for (size_t j = 0; j < count; ++j) {
      const TermParts p = parts_of(j);
      if (origin) sizes[0] = p.fixed;
      for (size_t i = 0; i < terms.size(); ++i) sizes[first + i] = bytes_of(*terms[i], j);
      if (squared) {
        const uint64_t twice = base::SatMul(sizes[1], 2);
        sizes[2] = base::SatAdd(twice - std::min(twice, p.fixed), base::SatMul(p.quadratic, 2));
      }
      if (!curves->Add(traced)) return false;
    }
    return true;
  };
  StepCurve c;
  // The groups (policy in the header): each term's number, and each group's first term, whose
  // bytes the group's curve is fitted through.
  const auto no_segment = [](size_t) { return -1; };
  const auto made_bytes = [](const StepTerms& t, size_t j) { return t.live.made_bytes()[j]; };
  const auto run_bytes = [](const StepTerms& t, size_t j) { return t.live.run_bytes()[j]; };
  const auto saved_bytes = [](const StepTerms& t, size_t j) { return t.saved[j].bytes; };
  const auto transient_bytes = [](const StepTerms& t, size_t j) { return t.transients[j]; };
  const auto fit_groups = [&](base::SizeCurves* curves, base::Distinct groups,
                              std::vector<uint32_t>* group_of, const auto& bytes_of,
                              const auto& parts_of) {
    const std::vector<uint32_t> leader = std::move(groups.first);  // each group's first term
    *group_of = std::move(groups.number);
    return fit(
        curves, leader.size(), [&](const StepTerms& t, size_t g) { return bytes_of(t, leader[g]); },
        [&](size_t g) { return parts_of(leader[g]); });
  };
  bool fitted = false;
  if (shape.inference) {
    fitted = fit_groups(&*made,
                        GroupTerms(terms, shape.live.made_bytes().size(), made_bytes, no_segment,
                                   made_parts),
                        &c.made_group_, made_bytes, made_parts) &&
             fit_groups(
                 &*transient,
                 GroupTerms(terms, shape.live.run_bytes().size(), run_bytes, no_segment, no_parts),
                 &c.transient_group_, run_bytes, no_parts);
  } else {
    const auto segment = [&](size_t j) { return shape.saved[j].segment; };
    base::Distinct saved_groups =
        GroupTerms(terms, shape.saved.size(), saved_bytes, segment, saved_parts);
    for (const uint32_t j : saved_groups.first) c.group_segment_.push_back(segment(j));
    c.group_terms_.assign(saved_groups.first.size(), 0);
    for (const uint32_t g : saved_groups.number) ++c.group_terms_[g];
    fitted =
        fit_groups(&*saved, std::move(saved_groups), &c.saved_group_, saved_bytes, saved_parts) &&
        fit_groups(&*transient,
                   GroupTerms(terms, shape.transients.size(), transient_bytes, no_segment,
                              transient_parts),
                   &c.transient_group_, transient_bytes, transient_parts);
  }
  if (!fitted) return std::nullopt;
  c.shape_ = shape;
  c.saved_ = std::move(*saved);
  c.transient_ = std::move(*transient);
  c.made_ = std::move(*made);
  return c;
}

void StepCurve::ReplayAt(int64_t v, LiveWalk* out) const {
  // Each group's bytes once: a root is made, and mostly freed too; most share their group.
  std::vector<uint64_t> made(made_.size()), run(transient_.size());
  for (size_t g = 0; g < made.size(); ++g) made[g] = made_.Bytes(g, v);
  for (size_t g = 0; g < run.size(); ++g) run[g] = transient_.Bytes(g, v);
  shape_.live.Replay([&](size_t i) { return made[made_group_[i]]; },
                     [&](size_t j) { return run[transient_group_[j]]; }, out);
}

StepTerms StepCurve::At(int64_t v) const {
  StepTerms t = shape_;
  if (shape_.inference) {  // (the states and workspace as they are; the walk again)
    t.live.Start(/*keep=*/true);
    ReplayAt(v, &t.live);
    return t;
  }
  t.Start(shape_.segments);
  for (size_t j = 0; j < shape_.saved.size(); ++j) {
    SavedTerm term = shape_.saved[j];
    term.bytes = saved_.Bytes(saved_group_[j], v);
    t.AddSaved(term);
  }
  for (const uint32_t g : transient_group_) t.AddTransient(transient_.Bytes(g, v));
  return t;
}

Estimate StepCurve::PeaksAt(int64_t v, const StackProfile& stack) const {
  if (shape_.inference) {
    LiveWalk walk;
    walk.Start(/*keep=*/false);
    ReplayAt(v, &walk);
    return InferencePeak(shape_.states, walk.peak(), shape_.workspace, stack);
  }
  TermSums sums(shape_.segments);
  for (size_t g = 0; g < saved_.size(); ++g) {
    sums.AddSaved(saved_.Bytes(g, v), group_segment_[g], group_terms_[g]);
  }
  for (size_t g = 0; g < transient_.size(); ++g) sums.AddTransient(transient_.Bytes(g, v));
  return PeaksOf(shape_, sums, stack);
}

}  // namespace memest::analytical
