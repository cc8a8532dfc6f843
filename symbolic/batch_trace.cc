// symbolic/batch_trace.cc -- the step's allocator requests as polynomials in the searched value
// (policy in batch_trace.h).
#include "symbolic/batch_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

namespace memest::symbolic {
namespace {

using Wide = __int128;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr int64_t kMostValue = base::SizeCurves::kMostValue;

uint64_t Saturate(Wide v) {
  if (v <= 0) return 0;
  return v >= static_cast<Wide>(kMax) ? kMax : static_cast<uint64_t>(v);
}

// Whether a size s1 at v1 and s2 at v2 > v1 is a v + b v^2 with a, b >= 0 (BatchTrace::FitOver):
// it grows at least in proportion to the value and at most with its square. (s < 2^64 and
// v <= 2^24: the products stay within 128 bits.)
bool GrowsLikeItsValue(uint64_t s1, uint64_t s2, int64_t v1, int64_t v2) {
  const Wide a = s1, b = s2, x = v1, y = v2;
  return a * y <= b * x && b * x * x <= a * y * y;
}

// The size at value 0 of the line through s1 at v1 and s2 at v2 > v1, where it is a whole number
// of bytes at least 0 (a size k (v + r) with whole k and r: a decode step's past + 1 positions);
// nullopt otherwise.
std::optional<uint64_t> LineAtZero(uint64_t s1, uint64_t s2, int64_t v1, int64_t v2) {
  const Wide rise = static_cast<Wide>(s2) - s1, run = v2 - v1;
  if ((rise * v1) % run != 0) return std::nullopt;
  const Wide at0 = static_cast<Wide>(s1) - rise * v1 / run;
  if (at0 < 0) return std::nullopt;
  return static_cast<uint64_t>(at0);
}

}  // namespace

uint64_t PeakRequested(const std::vector<AllocatorRequest>& requests) {
  std::vector<uint64_t> sizes;  // by malloc
  uint64_t alive = 0, most = 0;
  for (const AllocatorRequest& r : requests) {
    if (r.freed < 0) {
      sizes.push_back(r.bytes);
      alive += r.bytes;
      most = std::max(most, alive);
    } else if (static_cast<size_t>(r.freed) < sizes.size()) {
      alive -= std::min(alive, sizes[static_cast<size_t>(r.freed)]);
    }
  }
  return most;
}

bool RunsOut(const StepTrace& trace, const AllocatorConfig& config) {
  CachingAllocatorModel alloc(config);
  std::vector<CachingAllocatorModel::Handle> handle;  // by malloc number
  handle.reserve(trace.requests.size());
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    // (The simulation also resets the peaks there, which no verdict here reads.)
    if (trace.prefill_requests > 0 && i == trace.prefill_requests && trace.cache_emptied) {
      alloc.EmptyCache();
    }
    const AllocatorRequest& r = trace.requests[i];
    if (r.freed >= 0) {
      if (static_cast<size_t>(r.freed) >= handle.size()) return false;  // no trace of a step
      alloc.Free(handle[static_cast<size_t>(r.freed)]);
      continue;
    }
    handle.push_back(alloc.Malloc(r.bytes));
    if (alloc.oom()) return true;
  }
  return false;
}

std::optional<BatchTrace> BatchTrace::Fit(const std::vector<Traced>& traces) {
  if (traces.size() < 2 || traces.size() > 3) return std::nullopt;
  return FitOver(traces, /*from_two=*/false);
}

std::optional<BatchTrace> BatchTrace::FitFromTwo(const std::vector<Traced>& traces) {
  if (traces.size() != 2) return std::nullopt;
  return FitOver(traces, /*from_two=*/true);
}

// From two traces, curve j's sizes are {0, s1, s2} at {0, v1, v2} -- or {s1, s1, s1}, the same
// size at every value, where s1 == s2; or {s0, s1, s2} on the line through the two, where the size
// grows more slowly than the value (LineAtZero) -- and the parabola through {0, s1, s2} is
// a v + b v^2 with b = (s2 v1 - s1 v2) / (v1 v2 (v2 - v1)) and
// a = (s1 v2^2 - s2 v1^2) / (v1 v2 (v2 - v1)): both at least 0 exactly when
// s1 v2 <= s2 v1 <= s1 v2^2 / v1, which GrowsLikeItsValue checks.
std::optional<BatchTrace> BatchTrace::FitOver(const std::vector<Traced>& traces, bool from_two) {
  const size_t k = traces.size();
  bool loops = true;
  std::vector<int64_t> at;
  for (size_t i = 0; i < k; ++i) {
    if (traces[i].trace == nullptr || traces[i].at < 1 ||
        traces[i].trace->requests.size() != traces[0].trace->requests.size()) {
      return std::nullopt;
    }
    const StepTrace& t = *traces[i].trace;
    loops = loops && t.loops && t.previous_begins == traces[0].trace->previous_begins &&
            t.last_begins == traces[0].trace->last_begins;
    if (t.prefill_requests != traces[0].trace->prefill_requests ||
        (t.prefill_requests > 0 && t.cache_emptied != traces[0].trace->cache_emptied)) {
      return std::nullopt;
    }
    at.push_back(traces[i].at);
  }
  if (from_two) at.insert(at.begin(), 0);
  std::optional<base::SizeCurves> curves = base::SizeCurves::Over(at);
  if (!curves) return std::nullopt;
  BatchTrace t;
  t.curves_ = std::move(*curves);
  t.curves_.Reserve(traces[0].trace->requests.size());  // its mallocs, at most
  const std::vector<AllocatorRequest>& base = traces[0].trace->requests;
  if (base.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) return std::nullopt;
  t.freed_.reserve(base.size());
  t.prefill_requests_ = traces[0].trace->prefill_requests;
  t.cache_emptied_ = t.prefill_requests_ > 0 && traces[0].trace->cache_emptied;
  size_t alive = 0;
  for (size_t r = 0; r < base.size(); ++r) {
    const int64_t freed = base[r].freed;
    for (size_t i = 1; i < k; ++i) {
      if (traces[i].trace->requests[r].freed != freed) return std::nullopt;
    }
    t.freed_.push_back(static_cast<int32_t>(freed));
    if (freed >= 0) {
      if (static_cast<size_t>(freed) >= t.curves_.size() || alive == 0) return std::nullopt;
      --alive;
      continue;
    }
    uint64_t s[3] = {0, 0, 0};
    const size_t first = from_two ? 1 : 0;  // s[0] is the size at value 0
    for (size_t i = 0; i < k; ++i) s[first + i] = traces[i].trace->requests[r].bytes;
    if (from_two) {
      if (s[1] == s[2]) {
        s[0] = s[1];
      } else if (!GrowsLikeItsValue(s[1], s[2], at[1], at[2])) {
        // Slower than the value (faster than its square has no line to 0 at or above 0).
        const std::optional<uint64_t> at0 = LineAtZero(s[1], s[2], at[1], at[2]);
        if (!at0) return std::nullopt;
        s[0] = *at0;
      }
    }
    if (!t.curves_.Add(std::span<const uint64_t>(s, k + first))) return std::nullopt;
    t.most_alive_ = std::max(t.most_alive_, ++alive);
  }
  t.loops_ = loops && t.FindLoop(traces[0].trace->previous_begins, traces[0].trace->last_begins);
  t.SumAlive();
  return t;
}

void BatchTrace::SumAlive() {
  const double h = static_cast<double>(curves_.at(1) - curves_.at(0));
  double a = 0, b = 0, c = 0;
  alive_after_malloc_.reserve(curves_.size());
  size_t m = 0;
  for (const int32_t freed : freed_) {
    const double sign = freed >= 0 ? -1 : 1;
    const size_t j = freed >= 0 ? static_cast<size_t>(freed) : m++;
    a += sign * curves_.First(j);
    b += sign * (curves_.D1(j) - curves_.D2(j) * h);
    c += sign * curves_.D2(j);
    if (sign > 0) alive_after_malloc_.push_back({a, b, c});
  }
}

bool BatchTrace::FindLoop(size_t previous_begins, size_t last_begins) {
  if (previous_begins >= last_begins || last_begins >= freed_.size()) return false;
  size_t m = 0;  // mallocs before request i
  for (size_t i = 0; i < last_begins; ++i) {
    if (i == previous_begins) previous_first_malloc_ = m;
    m += freed_[i] < 0;
  }
  previous_begins_ = previous_begins;
  loop_begins_ = last_begins;
  loop_first_malloc_ = m;
  const size_t mallocs = curves_.size() - m;
  if (loop_first_malloc_ - previous_first_malloc_ != mallocs || mallocs > UINT32_MAX) return false;
  uint32_t r = 0;
  for (size_t i = last_begins; i < freed_.size(); ++i) {
    const int64_t f = freed_[i];
    if (f < 0) {
      loop_.push_back({LoopRequest::kMalloc, r++});
    } else if (static_cast<size_t>(f) >= loop_first_malloc_) {
      loop_.push_back({LoopRequest::kFreeOwn,
                       static_cast<uint32_t>(static_cast<size_t>(f) - loop_first_malloc_)});
    } else if (static_cast<size_t>(f) >= previous_first_malloc_) {
      loop_.push_back({LoopRequest::kFreePrevious,
                       static_cast<uint32_t>(static_cast<size_t>(f) - previous_first_malloc_)});
    } else {
      return false;  // an older malloc: not a loop of one iteration
    }
  }
  std::optional<std::vector<uint32_t>> carried = CarriedMallocs(loop_, mallocs);
  if (!carried) return false;
  carried_ = std::move(*carried);
  return true;
}

std::vector<uint64_t> BatchTrace::DistinctAt(int64_t v) const {
  std::vector<uint64_t> at_v(curves_.distinct());
  for (size_t d = 0; d < at_v.size(); ++d) at_v[d] = curves_.DistinctBytes(d, v);
  return at_v;
}

bool BatchTrace::Matches(const StepTrace& step, int64_t v, const AllocatorConfig& config,
                         size_t prefix) const {
  const std::vector<AllocatorRequest>& trace = step.requests;
  if (trace.size() != std::min(prefix, freed_.size()) || v < 1 || v > kMostValue) return false;
  if (prefix != std::numeric_limits<size_t>::max() && prefix > freed_.size() &&
      (!loops_ || !step.loops || step.previous_begins != previous_begins_ ||
       step.last_begins != loop_begins_)) {
    return false;
  }
  // After a prefill: the step's requests begin where the curves' do (a trace that stopped within
  // the prefill has not seen where).
  const bool past_prefill = step.prefill_requests > 0 || trace.size() > prefill_requests_;
  if (past_prefill && (step.prefill_requests != prefill_requests_ ||
                       (prefill_requests_ > 0 && step.cache_emptied != cache_emptied_))) {
    return false;
  }
  const std::vector<uint64_t> at_v = DistinctAt(v);
  size_t m = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const AllocatorRequest here = freed_[i] >= 0
                                      ? AllocatorRequest{0, freed_[i]}
                                      : AllocatorRequest{at_v[curves_.DistinctOf(m++)], -1};
    if (!SameRequest(trace[i], here, config)) {
      return false;
    }
  }
  return true;
}

int64_t BatchTrace::LargestWithin(uint64_t bytes, int64_t limit) const {
  // After each malloc the requested bytes alive are a c x^2 + b x + a in x = v - v0 (SumAlive);
  // the answer is the least, over the mallocs, of the largest v at which that stays within
  // `bytes`.
  limit = std::min(limit, kMostValue);
  const double cap = static_cast<double>(bytes);
  const double v0 = static_cast<double>(curves_.at(0));
  double best = static_cast<double>(limit);
  for (const auto& [a, b, c] : alive_after_malloc_) {
    double x = 0;  // the largest x with c x^2 + b x + a <= cap, where the bytes grow
    if (c > 0) {
      const double disc = b * b - 4 * c * (a - cap);
      if (disc < 0) return 0;
      x = (-b + std::sqrt(disc)) / (2 * c);
    } else if (b > 0) {
      x = (cap - a) / b;
    } else if (a > cap) {
      return 0;
    } else {
      continue;
    }
    best = std::min(best, v0 + x);
  }
  return best < 1 ? 0 : static_cast<int64_t>(std::floor(best));
}

double BatchTrace::AliveGrowth(size_t end, int64_t v) const {
  // In the loop, the bytes alive are the last traced iteration's at the same place.
  if (loops_ && end > freed_.size()) {
    end = loop_begins_ + (end - freed_.size()) % loop_.size();
  }
  double growth = 0;
  size_t m = 0;
  for (size_t i = 0; i < end && i < freed_.size(); ++i) {
    const int32_t freed = freed_[i];
    growth += freed >= 0 ? -curves_.Growth(static_cast<size_t>(freed), v) : curves_.Growth(m++, v);
  }
  return growth;
}

int64_t BatchTrace::BelowSameSegments(size_t requests, int64_t v,
                                      const AllocatorConfig& config) const {
  std::vector<bool> read(curves_.distinct());
  size_t m = 0;
  for (size_t i = 0; i < requests && i < freed_.size(); ++i) {
    if (freed_[i] < 0) read[curves_.DistinctOf(m++)] = true;
  }
  // The segment a size asks for, numbered so that it grows with the size: the small pool's and
  // the 1-10 MiB requests' (20 MiB, more than the next ones') as 0 and 1, then the bytes.
  const auto segment = [&](size_t d, int64_t at) -> uint64_t {
    const uint64_t rounded = CachingAllocatorModel::RoundSize(curves_.DistinctBytes(d, at), config);
    if (rounded <= kSmallSize) return 0;
    return rounded < kMinLargeAlloc ? 1 : AllocationSize(rounded);
  };
  int64_t below = 0;  // the answer so far: each curve's is looked for above it only
  for (size_t d = 0; d < read.size(); ++d) {
    if (!read[d]) continue;
    const uint64_t at_v = segment(d, v);
    if (segment(d, std::max<int64_t>(below, 1)) == at_v) continue;
    // A size never falls as the value grows (Fit), so neither does its segment: bisect for the
    // last value whose segment is smaller.
    int64_t lo = std::max<int64_t>(below, 1), hi = v;  // segment(lo) < at_v == segment(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (segment(d, mid) < at_v ? lo : hi) = mid;
    }
    below = lo;
  }
  return below;
}

BatchTrace::Replay BatchTrace::Run(int64_t v, const AllocatorConfig& config, AllocatorRun* kept,
                                   CachingAllocatorModel* on) const {
  if (on == nullptr) {
    CachingAllocatorModel own(config);
    return Run(v, config, kept, &own);
  }
  using Handle = CachingAllocatorModel::Handle;
  Replay out;
  CachingAllocatorModel& alloc = *on;
  alloc.Reset(config);
  std::vector<std::pair<uint64_t, uint64_t>>* after = kept ? &kept->after : nullptr;
  if (after != nullptr) {
    // Room for the traced requests and two of the loop's iterations at once: grown one push at a
    // time, the vector's moves were 1.4 % of a search's instructions
    // (vit_relpos_medium_patch16_cls_224).
    after->clear();
    after->reserve(freed_.size() + 2 * loop_.size());
  }
  alloc.Reserve(2 * most_alive_ + 64);
  uint64_t peak_allocated = 0;
  size_t done = 0;     // requests made
  size_t at_peak = 0;  // requests up to the last one that raised the allocated peak
  // After each request, when the run is kept: the allocated and reserved bytes.
  const auto note = [&]() __attribute__((always_inline)) {
    if (after != nullptr) after->emplace_back(alloc.stats().allocated, alloc.stats().reserved);
  };
  bool ok = true;  // false once a request failed for good
  // The malloc of `bytes` failed for good: how far the step was from the budget, and why.
  const auto ran_out = [&](uint64_t bytes) {
    ok = false;
    out.ran_out = true;
    const uint64_t segment = AllocationSize(CachingAllocatorModel::RoundSize(bytes, config));
    const Wide need = static_cast<Wide>(alloc.stats().reserved) + segment;
    out.short_by = Saturate(need - static_cast<Wide>(config.capacity));
    const Wide requested = static_cast<Wide>(alloc.stats().requested) + bytes;
    out.overhead = Saturate(std::max<Wide>(need, config.capacity) - requested);
  };
  // One request each: a free, or a malloc (its handle; ran_out where it failed). Inline at each
  // call: one lambda called for every request was about 7 % of a replay's instructions.
  const auto free_one = [&](Handle freed) __attribute__((always_inline)) {
    ++done;
    alloc.Free(freed);
    note();
  };
  const auto malloc_one = [&](uint64_t bytes) __attribute__((always_inline)) {
    ++done;
    const Handle made = alloc.Malloc(bytes);
    note();
    if (alloc.oom()) {
      ran_out(bytes);
    } else if (alloc.stats().allocated > peak_allocated) {
      peak_allocated = alloc.stats().allocated;
      at_peak = done;
    }
    return made;
  };
  LoopWatch watch;
  std::vector<uint64_t> state;
  // At the start of iteration `it`: whether it starts as an earlier one did.
  const auto repeats = [&](int it, const std::vector<Handle>& previous) {
    LoopStart(alloc, previous, carried_, &state);
    out.repeat = watch.Starts(it, &state);
    return out.repeat.has_value();
  };
  // Between a prefill and its decode step.
  const auto prefill_done = [&] {
    if (cache_emptied_) alloc.EmptyCache();
    alloc.ResetPeaks();
    peak_allocated = alloc.stats().allocated;
    at_peak = done;
  };
  // By malloc number; each written by its malloc before it is read (FitOver keeps only traces
  // whose frees follow their mallocs), so not filled first (filling it took 0.6 % of a search's
  // instructions, most of it in probes that fail early).
  const std::unique_ptr<Handle[]> handle = std::make_unique_for_overwrite<Handle[]>(curves_.size());
  // Each distinct curve's bytes at v, read once: a step's mallocs repeat a few dozen sizes (the
  // 6,914 of vit_relpos_medium_patch16_cls_224's trace 36), and a malloc's size is then one load.
  const std::vector<uint64_t> at_v = DistinctAt(v);
  std::vector<Handle> previous, own;
  size_t m = 0;
  for (size_t i = 0; ok && i < freed_.size(); ++i) {
    if (prefill_requests_ > 0 && i == prefill_requests_) prefill_done();
    if (loops_ && i == loop_begins_) {
      previous.assign(handle.get() + previous_first_malloc_, handle.get() + loop_first_malloc_);
      (void)repeats(kTracedIterations, previous);  // no iteration before it has a state
    }
    if (const int32_t freed = freed_[i]; freed >= 0) {
      free_one(handle[static_cast<size_t>(freed)]);
    } else {
      handle[m] = malloc_one(at_v[curves_.DistinctOf(m)]);
      ++m;
    }
  }
  if (ok && prefill_requests_ > 0 && prefill_requests_ == freed_.size()) prefill_done();
  if (ok && loops_) {
    previous.assign(handle.get() + loop_first_malloc_, handle.get() + curves_.size());
    own.assign(previous.size(), -1);
    // Every iteration of the loop mallocs the same sizes: read off the curves once.
    std::vector<uint64_t> bytes(previous.size());
    for (size_t r = 0; r < bytes.size(); ++r) {
      bytes[r] = at_v[curves_.DistinctOf(loop_first_malloc_ + r)];
    }
    for (int it = kTracedIterations + 1; ok && !repeats(it, previous); ++it) {
      if (it > kMostIterations) break;
      for (size_t i = 0; ok && i < loop_.size(); ++i) {
        const LoopRequest& q = loop_[i];
        switch (q.kind) {
          case LoopRequest::kMalloc:
            own[q.r] = malloc_one(bytes[q.r]);
            break;
          case LoopRequest::kFreeOwn:
            free_one(own[q.r]);
            break;
          case LoopRequest::kFreePrevious:
            free_one(previous[q.r]);
            break;
        }
      }
      std::swap(previous, own);
    }
  }
  if (!ok) out.repeat.reset();
  out.requests_run = done;
  out.at_peak = at_peak;
  out.stats = alloc.stats();
  if (kept != nullptr) {
    kept->config = config;
    kept->requests.clear();  // ListRequests lists them
    kept->loop_length = 0;
    kept->end = out.stats;
    kept->repeat = out.repeat;
  }
  return out;
}

void BatchTrace::ListRequests(int64_t v, AllocatorRun* run) const {
  const size_t ran = run->after.size();
  run->loop_length = loops_ && ran > freed_.size() + loop_.size() ? loop_.size() : 0;
  run->requests = RequestsAt(v, run->loop_length > 0 ? freed_.size() + loop_.size() : ran);
}

std::vector<AllocatorRequest> BatchTrace::RequestsAt(int64_t v, size_t count) const {
  std::vector<AllocatorRequest> out;
  const size_t traced = std::min(count, freed_.size());
  out.reserve(loops_ && count != std::numeric_limits<size_t>::max() ? count : traced);
  const std::vector<uint64_t> at_v = DistinctAt(v);
  size_t m = 0;
  for (size_t i = 0; i < traced; ++i) {
    out.push_back(freed_[i] >= 0 ? AllocatorRequest{0, freed_[i]}
                                 : AllocatorRequest{at_v[curves_.DistinctOf(m++)], -1});
  }
  if (!loops_ || count <= freed_.size() || count == std::numeric_limits<size_t>::max()) {
    return out;
  }
  // The loop's iterations: each one's mallocs numbered on from the iteration before's.
  const size_t mallocs = curves_.size() - loop_first_malloc_;
  size_t previous = loop_first_malloc_, own = curves_.size();
  while (out.size() < count) {
    for (size_t i = 0; i < loop_.size() && out.size() < count; ++i) {
      const LoopRequest& q = loop_[i];
      const uint64_t bytes =
          q.kind == LoopRequest::kMalloc ? at_v[curves_.DistinctOf(loop_first_malloc_ + q.r)] : 0;
      out.push_back(
          StepRequest(q, bytes, static_cast<int64_t>(own), static_cast<int64_t>(previous)));
    }
    previous = own;
    own += mallocs;
  }
  return out;
}

}  // namespace memest::symbolic
