// symbolic/timeline_loop.cc -- the simulated training loop, run until it repeats itself.
//
// Policy (docs/memory-model.md §6; the step itself: symbolic/timeline.cc):
//  * Iterations run until one starts from the state an earlier one started from -- the
//    same tensors alive between iterations, in the same allocator blocks (IterationStart,
//    symbolic/loop_watch.h) -- at most kMostIterations (else the estimate warns, unsettled). From
//    there the loop repeats itself: what the estimate reports is what every iteration to come
//    reaches. The first iterations need not say it: the caching allocator can take several to
//    settle, and a later one can reserve more than the first three did. When the third iteration
//    starts with the tensors the second did (RequestsStart), every later one makes the second's
//    requests again -- its frees of the first iteration's tensors renamed to the mallocs of its
//    own that took their places between iterations (LoopCarriedRenamed) -- so from the third on
//    they are run through the allocator model without walking the graph (LoopRest), each moment
//    the estimate keeps taken where the walk made the request. Where that renaming fails (a freed
//    tensor with no successor), the third iteration is walked and its requests repeated instead.
//    A trace (TraceRequests) makes its third iteration's requests the same way: the second's
//    again, renamed, unless the renaming fails or it is asked to walk it (TraceWalk).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "symbolic/loop_watch.h"
#include "symbolic/sim.h"

namespace memest::symbolic::internal {
namespace {

// A tensor as one word: a value below 2^56 and its category above it (a handful of values).
std::optional<uint64_t> WithCategory(uint64_t value, Category c) {
  if (value == 0 || value >= (uint64_t{1} << 56)) return std::nullopt;
  return value | uint64_t{static_cast<uint8_t>(c)} << 56;
}

constexpr uint64_t kMadeFlag = uint64_t{1} << 63;  // a MadeWhere word that names a tensor

}  // namespace

template <typename Word>
bool Sim::CarriedTensors(std::vector<uint64_t>* words, Word word) const {
  words->clear();
  size_t alive = 0;
  bool fits = true;
  auto add = [&](Tensor t) {
    const Live* l = t < 0 ? nullptr : &tensors_[SlotOf(t)];
    if (l == nullptr || !l->alive || l->generation != GenerationOf(t)) {
      words->push_back(0);
      return;
    }
    ++alive;
    const std::optional<uint64_t> w = word(*l);
    fits = fits && w.has_value();
    words->push_back(w.value_or(0));
  };
  constexpr uint64_t kWeightsAsMade = 1, kWeightsListed = 2;
  if (weights_counted_ && made_before_changed_ == 0) {
    words->push_back(kWeightsAsMade);
    alive += weights_alive_;
  } else {
    words->push_back(kWeightsListed);
    for (size_t i = 0; i < g_.values.size(); ++i) {
      if (kind_[i] == core::ValueKind::kInitializer) add(value_[i]);
    }
  }
  for (int p : step_params_) add(param_grad_[p]);
  for (const std::vector<Tensor>* ts : {&inputs_, &state_, &buckets_, &other_micro_batches_}) {
    words->push_back(ts->size());
    for (Tensor t : *ts) add(t);
  }
  for (const base::IdVector<Tensor>* ts : {&gathered_, &unit_grads_}) {
    for (Tensor t : *ts) add(t);
  }
  for (Tensor t : {ws_forward_, ws_backward_, log_probs_, loss_, root_gathered_, flat_weights_,
                   flat_grads_, flat_state_}) {
    add(t);
  }
  return fits && alive == tensors_.size() - free_slots_.size();
}

bool Sim::IterationStart(std::vector<uint64_t>* words) const {
  const bool known = CarriedTensors(words, [this](const Live& l) {
    return WithCategory(alloc_.Address(l.handle), l.category);  // > 0: segments start at 2 MiB
  });
  if (known) alloc_.AppendLayout(words);
  return known;
}

bool Sim::RequestsStart(std::vector<uint64_t>* words) const {
  return CarriedTensors(words, [](const Live& l) { return WithCategory(l.bytes, l.category); });
}

void Sim::CountWeights() {
  weights_alive_ = 0;
  weights_counted_ = true;  // unless some weight was made otherwise: then they are listed
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const Live* w = kind_[i] == core::ValueKind::kInitializer ? Find(value_[i]) : nullptr;
    if (w == nullptr) continue;
    ++weights_alive_;
    weights_counted_ = weights_counted_ && w->made_in == 0;
  }
  made_before_changed_ = 0;
}

void Sim::TraceNoted() {
  trace_->last_repeated = true;
  const int64_t own = mallocs_;
  const int64_t previous = own - static_cast<int64_t>(loop_blocks_.size());
  size_t malloc = 0;  // the noted iteration's mallocs, each made again with its recipe
  for (size_t i = 0; i < loop_requests_.size(); ++i) {
    if (loop_requests_[i].kind == LoopRequest::kMalloc) {
      trace_->recipes.push_back(malloc < loop_recipes_.size() ? loop_recipes_[malloc]
                                                              : SizeRecipe{});
      ++malloc;
    }
    const LoopWhere& w = loop_where_[i];
    trace_->moments.push_back({w.node, w.phase_byte, static_cast<uint8_t>(w.category),
                               static_cast<uint16_t>(iteration_ + 1)});
    Trace(StepRequest(loop_requests_[i], w.bytes, own, previous));
  }
  mallocs_ += loop_blocks_.size();
}

Status Sim::RepeatNoted(int first, const std::vector<uint32_t>& carried,
                        std::vector<uint64_t> start, bool loops) {
  if (run_ != nullptr) {
    FollowLoopRest(first, static_cast<uint32_t>(loop_blocks_.size()));
    LoopAtPeak();
    return EndOfRun(loops);
  }
  LoopRest(first, carried, std::move(start));
  LoopAtPeak();
  return Status::Ok();
}

Status Sim::Loop() {
  CountWeights();
  LoopWatch watch;
  std::vector<uint64_t> start;
  const bool fixed = iterations_ > 0;                          // exactly so many, never repeating
  const bool walks = requests_ == nullptr && run_ == nullptr;  // through the allocator model
  // RequestsStart() at the start of the last two traced iterations: whether the last starts as
  // the one before did. A trace notes it (StepTrace::loops) and makes its last iteration without
  // walking (TraceNoted); a run followed, or a walk looking for the loop's repeat, goes on
  // without walking (FollowLoopRest, LoopRest).
  const bool compares_requests = !walks || (!fixed && !record_);
  std::vector<uint64_t> requests_start[2];
  bool known[2] = {false, false};
  const int before_last = kTracedIterations - 1;
  // A walk, a run followed or a trace notes iteration before_last, whose requests every later one
  // makes again when the next starts as it did (LoopCarriedRenamed); where that fails, a walk or
  // a run followed notes iteration kTracedIterations instead, and a trace walks it. A trace asked
  // to walk every iteration (WalkEveryTraced) notes nothing.
  const bool notes_early = compares_requests && !walks_every_traced_;
  std::vector<uint64_t> made_where;  // MadeWhere at the start of iteration before_last
  std::vector<uint64_t> made_start;  // MadeState at the start of iteration kTracedIterations
  uint32_t previous_mallocs = 0;     // the iteration before the noted one made so many
  const int most = fixed ? iterations_ : kMostIterations + 1;
  // A step limited by a budget that ran out is not an estimate (symbolic/symbolic.cc keeps the
  // unlimited one), so it stops at the end of that iteration.
  for (int it = 1; it <= most && !alloc_.oom(); ++it) {
    if (compares_requests && (it == before_last || it == kTracedIterations)) {
      const int i = it - before_last;
      known[i] = RequestsStart(&requests_start[i]);
      if (trace_ != nullptr) {
        (i == 0 ? trace_->previous_begins : trace_->last_begins) = requests_->size();
      }
    }
    const bool loops = known[0] && known[1] && requests_start[0] == requests_start[1];
    if (trace_ != nullptr && it == kTracedIterations) trace_->loops = loops;
    if (noting_loop_ && it == kTracedIterations + 1) {
      noting_loop_ = false;
      // The noted iteration's mallocs are numbered as the iteration before's were.
      const auto carried = loop_blocks_.size() == previous_mallocs && !loop_requests_.empty()
                               ? LoopCarried()
                               : std::nullopt;
      if (carried) return RepeatNoted(it, *carried, std::move(made_start), loops);
    }
    if (run_ != nullptr && it > kTracedIterations && run_next_ == run_->after.size()) {
      return EndOfRun(loops);
    }
    // A walk that notes iteration before_last goes on without the walk from the next one, which
    // LoopRest's own watch compares with the later ones: the states before it are not taken (an
    // iteration that starts as before_last did is then seen one iteration later, as the next
    // repeated), and a walk that cannot go on without the walk compares from the one after.
    const bool watched = it > (notes_early ? kTracedIterations : 1);
    if (walks && watched && !fixed && IterationStart(&start)) {
      repeat_ = watch.Starts(it, &start);
      if (repeat_) return Status::Ok();
    }
    if (notes_early && it == kTracedIterations) {
      noting_loop_ = false;
      if (const auto carried =
              loops ? LoopCarriedRenamed(made_where, previous_mallocs) : std::nullopt) {
        if (trace_ != nullptr) {
          TraceNoted();
          return Status::Ok();
        }
        return RepeatNoted(it, *carried, {}, loops);
      }
    }
    // Noting the iteration about to be walked.
    if (notes_early && it == before_last) {
      previous_mallocs = made_;
      noting_loop_ = MadeWhere(&made_where);
      if (noting_loop_) StartNotingLoop();
    } else if (compares_requests && requests_ == nullptr && it == kTracedIterations) {
      previous_mallocs = made_;
      noting_loop_ = loops;
      if (noting_loop_) {
        if (walks) MadeState(it - 1, &made_start);
        StartNotingLoop();
      }
    }
    if (!fixed && it > kMostIterations) break;
    Iteration(it);
  }
  if (run_ != nullptr) return EndOfRun(false);  // a run longer than any loop is simulated
  return Status::Ok();                          // a trace, or unsettled (Run warns)
}

void Sim::StartNotingLoop() {
  loop_noted_ok_ = true;
  loop_requests_.clear();
  loop_where_.clear();
  loop_recipes_.clear();
  loop_relabels_.clear();
  loop_live_start_ = live_;
  loop_peak_request_.reset();
  loop_blocks_.clear();
  loop_requests_.reserve(2 * size_t{made_});  // as many as the iteration before made
  loop_where_.reserve(2 * size_t{made_});
  loop_blocks_.reserve(made_);
}

void Sim::NoteLoopMalloc(const Live& t) {
  loop_requests_.push_back({LoopRequest::kMalloc, t.made_at});
  loop_where_.push_back({t.bytes, node_, static_cast<uint8_t>(phase_), t.category});
  loop_blocks_.push_back(t.handle);
}

void Sim::NoteLoopFree(const Live& l) {
  LoopRequest q{LoopRequest::kFreeOwn, l.made_at};
  if (l.made_in == iteration_ - 1) {
    q.kind = LoopRequest::kFreePrevious;
  } else if (l.made_in != iteration_) {
    loop_noted_ok_ = false;  // an older tensor: not an iteration that repeats
  }
  loop_requests_.push_back(q);
  loop_where_.push_back({l.bytes, node_, static_cast<uint8_t>(phase_), l.category});
}

void Sim::NoteLoopMoments(size_t i, int it) {
  const LoopRequest& q = loop_requests_[i];
  const LoopWhere& where = loop_where_[i];
  const AllocatorStats& s = Stats();
  if (q.kind != LoopRequest::kMalloc) {
    const uint64_t cached = s.reserved > s.allocated ? s.reserved - s.allocated : 0;
    if (cached > largest_cached_free_.bytes) {
      largest_cached_free_ = {cached, where.phase(), it, where.node};
    }
    return;
  }
  if (s.reserved > peak_reserved_seen_ ||
      (s.reserved == peak_reserved_seen_ && s.allocated > allocated_at_peak_)) {
    peak_reserved_seen_ = s.reserved;
    loop_peak_request_ = i;
    allocated_at_peak_ = s.allocated;
    peak_phase_ = where.phase();
    peak_node_ = where.node;
  }
  if (s.allocated > alloc_peak_seen_) {
    alloc_peak_seen_ = s.allocated;
    alloc_peak_phase_ = where.phase();
    alloc_peak_node_ = where.node;
    alloc_peak_iteration_ = it;
  }
  iteration_alloc_peak_ = std::max(iteration_alloc_peak_, s.allocated);
}

void Sim::LoopAtPeak() {
  if (!loop_peak_request_) return;
  base::IdVector<uint64_t, Category> live = loop_live_start_;
  auto relabel = loop_relabels_.begin();
  for (size_t k = 0; k <= *loop_peak_request_; ++k) {
    for (; relabel != loop_relabels_.end() && relabel->before <= k; ++relabel) {
      live[relabel->from] -= relabel->bytes;
      live[relabel->to] += relabel->bytes;
    }
    const LoopWhere& w = loop_where_[k];
    if (loop_requests_[k].kind == LoopRequest::kMalloc) {
      live[w.category] += w.bytes;
    } else {
      live[w.category] -= w.bytes;
    }
  }
  at_peak_ = live;
  loop_peak_request_.reset();
}

void Sim::FollowLoopRest(int first, uint32_t mallocs) {
  int64_t previous = mallocs_ - mallocs, own = mallocs_;  // the iterations' first malloc numbers
  // Past the requests the run lists, its iterations are the one they end with again (as long as
  // this loop's; AllocatorRun::loop_length): once an iteration of this loop was compared whole
  // up to there, the later ones are the run's, and only its states are read.
  bool compared_one = false;
  for (int it = first; it <= kMostIterations && run_next_ < run_->after.size(); ++it) {
    iteration_ = it;
    iteration_alloc_peak_ = Stats().allocated;
    if (run_next_ == run_->requests.size() &&
        (!compared_one || loop_requests_.empty() || run_->loop_length != loop_requests_.size() ||
         (run_->after.size() - run_next_) % loop_requests_.size() != 0)) {
      run_differs_at_ = run_next_;  // not listed, and not known to be the loop's
      return;
    }
    const bool compare = run_next_ < run_->requests.size();
    for (size_t i = 0; i < loop_requests_.size(); ++i) {
      if (compare) {
        FollowRequest(StepRequest(loop_requests_[i], loop_where_[i].bytes, own, previous));
        if (run_differs_at_) return;
      } else {
        TakeRunState();
      }
      NoteLoopMoments(i, it);
    }
    compared_one = compared_one || compare;
    sim_.iterations.push_back({it, iteration_alloc_peak_, Stats().reserved, /*walked=*/false});
    previous = own;
    own += mallocs;
  }
}

void Sim::MadeState(int made_in, std::vector<uint64_t>* words) const {
  std::vector<CachingAllocatorModel::Handle> made(made_, -1);  // by number (made_: made_in's)
  std::vector<uint32_t> alive;
  for (const Live& l : tensors_) {
    if (!l.alive || l.made_in != made_in) continue;
    made[l.made_at] = l.handle;
    alive.push_back(l.made_at);
  }
  std::sort(alive.begin(), alive.end());
  LoopStart(alloc_, made, alive, words);
}

std::optional<std::vector<uint32_t>> Sim::LoopCarried() const {
  if (!loop_noted_ok_ || alloc_.oom()) return std::nullopt;
  return CarriedMallocs(loop_requests_, loop_blocks_.size());
}

bool Sim::MadeWhere(std::vector<uint64_t>* words) const {
  return CarriedTensors(words, [](const Live& l) -> std::optional<uint64_t> {
    return kMadeFlag | uint64_t(static_cast<uint32_t>(l.made_in)) << 32 | l.made_at;
  });
}

std::optional<std::vector<uint32_t>> Sim::LoopCarriedRenamed(const std::vector<uint64_t>& before,
                                                             uint32_t before_mallocs) {
  std::vector<uint64_t> now;
  if (!loop_noted_ok_ || loop_requests_.empty() || !MadeWhere(&now) ||
      now.size() != before.size()) {
    return std::nullopt;
  }
  // The noted iteration's malloc that took the place of each of the iteration before's.
  const auto made_in = [](uint64_t w) { return static_cast<int>((w & ~kMadeFlag) >> 32); };
  const auto made_at = [](uint64_t w) { return static_cast<uint32_t>(w); };
  const int noted = iteration_;
  std::vector<int64_t> successor(before_mallocs, -1);
  for (size_t i = 0; i < now.size(); ++i) {
    const uint64_t was = before[i], is = now[i];
    if ((was & kMadeFlag) == 0 || made_in(was) != noted - 1 || made_at(was) >= before_mallocs) {
      continue;
    }
    if ((is & kMadeFlag) != 0 && made_in(is) == noted) successor[made_at(was)] = made_at(is);
  }
  for (LoopRequest& q : loop_requests_) {
    if (q.kind != LoopRequest::kFreePrevious) continue;
    if (q.r >= successor.size() || successor[q.r] < 0) return std::nullopt;
    q.r = static_cast<uint32_t>(successor[q.r]);
  }
  return LoopCarried();
}

void Sim::LoopRest(int first, const std::vector<uint32_t>& carried, std::vector<uint64_t> start) {
  LoopWatch watch;
  if (!start.empty()) (void)watch.Starts(first - 1, &start);
  std::vector<CachingAllocatorModel::Handle> previous = loop_blocks_, own(previous.size(), -1);
  std::vector<uint64_t> state;
  for (int it = first; it <= kMostIterations + 1; ++it) {
    LoopStart(alloc_, previous, carried, &state);
    repeat_ = watch.Starts(it, &state);
    if (repeat_ || it > kMostIterations) return;
    iteration_ = it;
    iteration_alloc_peak_ = Stats().allocated;
    for (size_t i = 0; i < loop_requests_.size(); ++i) {
      const LoopRequest& q = loop_requests_[i];
      if (q.kind == LoopRequest::kMalloc) {
        own[q.r] = alloc_.Malloc(loop_where_[i].bytes);
        if (alloc_.oom()) {
          oom_at_ = {loop_where_[i].bytes, loop_where_[i].phase(), it, loop_where_[i].node};
          return;
        }
      } else {
        alloc_.Free(q.kind == LoopRequest::kFreeOwn ? own[q.r] : previous[q.r]);
      }
      NoteLoopMoments(i, it);
    }
    sim_.iterations.push_back({it, iteration_alloc_peak_, Stats().reserved, /*walked=*/false});
    std::swap(previous, own);
  }
}

Status Sim::EndOfRun(bool loops) {
  MEMEST_RETURN_IF_ERROR(EndOfRunMade());
  if (!loops || !run_->repeat) {
    return InvalidArgument(
        "following an allocator run: the step does not repeat its iterations as traced, or the "
        "run did not see the loop repeat itself");
  }
  repeat_ = run_->repeat;
  return Status::Ok();
}

Status Sim::EndOfRunMade() {
  if (run_differs_at_ || run_next_ != run_->after.size()) {
    return InvalidArgument("the step's request " +
                           std::to_string(run_differs_at_.value_or(run_next_)) +
                           " is not the allocator run's");
  }
  run_stats_ = run_->end;
  return Status::Ok();
}

std::string Sim::IterationsNote() const {
  auto mib = [](uint64_t b) { return std::to_string(b >> 20) + " MiB"; };
  const int simulated = static_cast<int>(sim_.iterations.size());
  // Iteration i's figures; past the simulated ones, those of the iteration it repeats.
  auto figures = [&](int i) -> const IterationPeak& {
    if (i > simulated && repeat_)
      i = repeat_->from + (i - repeat_->from) % (repeat_->at - repeat_->from);
    return sim_.iterations[static_cast<size_t>(i - 1)];
  };
  auto text = [&](const IterationPeak& f) {
    return "allocated peak " + mib(f.allocated) + ", reserved " + mib(f.reserved);
  };
  std::string note;
  for (int i = 1; i <= kTracedIterations && (repeat_ || i <= simulated); ++i) {
    note +=
        (note.empty() ? "" : "; ") + ("iteration " + std::to_string(i) + ": ") + text(figures(i));
  }
  // Later iterations: those simulated past kTracedIterations, and every repeating one (each comes
  // again later).
  IterationPeak later;
  bool any = false;
  auto take = [&](const IterationPeak& f) {
    any = true;
    later.allocated = std::max(later.allocated, f.allocated);
    later.reserved = std::max(later.reserved, f.reserved);
  };
  const int last = repeat_ ? repeat_->at - 1 : simulated;
  for (int i = kTracedIterations + 1; i <= last; ++i) take(figures(i));
  if (repeat_) {
    for (int i = repeat_->from; i < repeat_->at; ++i) take(figures(i));
  }
  if (any) {
    note += "; later iterations: " + text(later) +
            (repeat_ ? " (simulated until an iteration started as an earlier one had)"
                     : " (the most of those simulated)");
  }
  return note;
}

}  // namespace memest::symbolic::internal
