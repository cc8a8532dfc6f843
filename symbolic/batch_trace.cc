// symbolic/batch_trace.cc -- the step's allocator requests as polynomials in the searched value
// (policy in batch_trace.h).
#include "symbolic/batch_trace.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace memest::symbolic {
namespace {

using Wide = __int128;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
// Sizes and values the curves take: products of three of them stay far inside 128 bits.
constexpr uint64_t kMostBytes = uint64_t{1} << 46;
constexpr int64_t kMostValue = int64_t{1} << 24;

uint64_t Saturate(Wide v) {
  if (v <= 0) return 0;
  return v >= static_cast<Wide>(kMax) ? kMax : static_cast<uint64_t>(v);
}

// floor(a / b) for b > 0.
Wide FloorDiv(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

bool FitsInt64(Wide v) {
  return v >= std::numeric_limits<int64_t>::min() && v <= std::numeric_limits<int64_t>::max();
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

BatchTrace::Curve BatchTrace::Line(uint64_t s0, uint64_t s1, int64_t h) {
  // rise < 2^46 and h < 2^24: 64-bit arithmetic, no 128-bit division.
  const auto rise = static_cast<int64_t>(s1 - s0);
  Curve c;
  c.first = s0;
  c.d1_num = rise;
  c.integral = rise % h == 0;
  if (c.integral) {
    c.d1 = rise / h;
    c.narrow = c.d1 < (int64_t{1} << 37);  // as in Parabola (the sizes do not fall: d1 >= 0)
  }
  c.slope1 = static_cast<double>(rise) / static_cast<double>(h);
  return c;
}

BatchTrace::Curve BatchTrace::Parabola(const uint64_t s[3], Wide h01, Wide h12, Wide den) {
  // Newton's divided differences, over den: d1 = rise / h01, d2 = bend / (h01 h12 h02).
  const Wide rise = static_cast<Wide>(s[1]) - s[0];
  const Wide bend = (static_cast<Wide>(s[2]) - s[1]) * h01 - rise * h12;
  Curve c;
  c.first = s[0];
  c.d1_num = rise * (den / h01);
  c.d2_num = bend;
  c.integral = c.d1_num % den == 0 && c.d2_num % den == 0 && FitsInt64(c.d1_num / den) &&
               FitsInt64(c.d2_num / den);
  if (c.integral) {
    c.d1 = static_cast<int64_t>(c.d1_num / den);
    c.d2 = static_cast<int64_t>(c.d2_num / den);
    // |x|, |y| < 2^24 (values and traced values are at most kMostValue), so |d1 x| and
    // |d2 x y| stay under 2^61 and the sum with first (< 2^46) under 2^63.
    c.narrow = c.d1 > -(int64_t{1} << 37) && c.d1 < (int64_t{1} << 37) &&
               c.d2 > -(int64_t{1} << 13) && c.d2 < (int64_t{1} << 13);
  }
  c.slope1 = static_cast<double>(c.d1_num) / static_cast<double>(den);
  c.slope2 = static_cast<double>(c.d2_num) / static_cast<double>(den);
  return c;
}

std::optional<BatchTrace> BatchTrace::Fit(const std::vector<Traced>& traces) {
  const size_t k = traces.size();
  if (k < 2 || k > 3) return std::nullopt;
  bool loops = true;
  for (size_t i = 0; i < k; ++i) {
    if (traces[i].trace == nullptr || traces[i].at < 1 || traces[i].at > kMostValue ||
        (i > 0 && traces[i].at <= traces[i - 1].at) ||
        traces[i].trace->requests.size() != traces[0].trace->requests.size()) {
      return std::nullopt;
    }
    const StepTrace& t = *traces[i].trace;
    loops = loops && t.loops && t.previous_begins == traces[0].trace->previous_begins &&
            t.last_begins == traces[0].trace->last_begins;
  }
  BatchTrace t;
  for (size_t i = 0; i < k; ++i) t.v_[i] = traces[i].at;
  const Wide h01 = t.v_[1] - t.v_[0];
  const Wide h12 = k == 3 ? t.v_[2] - t.v_[1] : 1;
  const Wide h02 = k == 3 ? t.v_[2] - t.v_[0] : 1;
  t.den_ = k == 3 ? h01 * h12 * h02 : h01;
  const std::vector<AllocatorRequest>& base = traces[0].trace->requests;
  t.requests_ = base;
  size_t alive = 0;
  for (size_t r = 0; r < base.size(); ++r) {
    const int64_t freed = base[r].freed;
    for (size_t i = 1; i < k; ++i) {
      if (traces[i].trace->requests[r].freed != freed) return std::nullopt;
    }
    if (freed >= 0) {
      if (static_cast<size_t>(freed) >= t.curves_.size() || alive == 0) return std::nullopt;
      --alive;
      continue;
    }
    uint64_t s[3] = {0, 0, 0};
    for (size_t i = 0; i < k; ++i) {
      s[i] = traces[i].trace->requests[r].bytes;
      if (s[i] >= kMostBytes || (i > 0 && s[i] < s[i - 1])) return std::nullopt;
    }
    t.curves_.push_back(k == 2 ? Line(s[0], s[1], static_cast<int64_t>(h01))
                               : Parabola(s, h01, h12, t.den_));
    t.most_alive_ = std::max(t.most_alive_, ++alive);
  }
  t.loops_ = loops && t.FindLoop(traces[0].trace->previous_begins, traces[0].trace->last_begins);
  return t;
}

bool BatchTrace::FindLoop(size_t previous_begins, size_t last_begins) {
  if (previous_begins >= last_begins || last_begins >= requests_.size()) return false;
  size_t m = 0;  // mallocs before request i
  for (size_t i = 0; i < last_begins; ++i) {
    if (i == previous_begins) previous_first_malloc_ = m;
    m += requests_[i].freed < 0;
  }
  previous_begins_ = previous_begins;
  loop_begins_ = last_begins;
  loop_first_malloc_ = m;
  const size_t mallocs = curves_.size() - m;
  if (loop_first_malloc_ - previous_first_malloc_ != mallocs || mallocs > UINT32_MAX) return false;
  uint32_t r = 0;
  for (size_t i = last_begins; i < requests_.size(); ++i) {
    const int64_t f = requests_[i].freed;
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

uint64_t BatchTrace::Bytes(size_t m, int64_t v) const {
  const Curve& c = curves_[m];
  if (c.narrow && v >= 1 && v <= kMostValue) {
    const int64_t x = v - v_[0];
    const int64_t bytes = static_cast<int64_t>(c.first) + c.d1 * x + c.d2 * x * (v - v_[1]);
    return bytes <= 0 ? 0 : static_cast<uint64_t>(bytes);
  }
  return WideBytes(m, v);
}

uint64_t BatchTrace::WideBytes(size_t m, int64_t v) const {
  const Curve& c = curves_[m];
  const Wide x = static_cast<Wide>(v) - v_[0];
  const Wide y = static_cast<Wide>(v) - v_[1];
  if (c.integral) return Saturate(static_cast<Wide>(c.first) + c.d1 * x + c.d2 * x * y);
  return Saturate(
      FloorDiv(static_cast<Wide>(c.first) * den_ + c.d1_num * x + c.d2_num * x * y, den_));
}

double BatchTrace::Growth(size_t m, int64_t v) const {
  const Curve& c = curves_[m];
  return c.slope1 + c.slope2 * static_cast<double>(2 * v - v_[0] - v_[1]);
}

bool BatchTrace::Matches(const StepTrace& step, int64_t v, const AllocatorConfig& config,
                         size_t prefix) const {
  const std::vector<AllocatorRequest>& trace = step.requests;
  if (trace.size() != std::min(prefix, requests_.size()) || v < 1 || v > kMostValue) return false;
  if (prefix != std::numeric_limits<size_t>::max() && prefix > requests_.size() &&
      (!loops_ || !step.loops || step.previous_begins != previous_begins_ ||
       step.last_begins != loop_begins_)) {
    return false;
  }
  size_t m = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const AllocatorRequest& want = requests_[i];
    if (!SameRequest(trace[i], want.freed >= 0 ? want : AllocatorRequest{Bytes(m++, v), -1},
                     config)) {
      return false;
    }
  }
  return true;
}

int64_t BatchTrace::LargestWithin(uint64_t bytes, int64_t limit) const {
  // After each malloc the requested bytes alive are a c x^2 + b x + a in x = v - v0 (the sums of
  // the alive curves' coefficients); the answer is the least, over the mallocs, of the largest v
  // at which that stays within `bytes`.
  limit = std::min(limit, kMostValue);
  const double h = static_cast<double>(v_[1] - v_[0]);
  const double cap = static_cast<double>(bytes);
  double a = 0, b = 0, c = 0;
  double best = static_cast<double>(limit);
  size_t m = 0;
  for (const AllocatorRequest& r : requests_) {
    const double sign = r.freed >= 0 ? -1 : 1;
    const Curve& curve = curves_[r.freed >= 0 ? static_cast<size_t>(r.freed) : m++];
    a += sign * static_cast<double>(curve.first);
    b += sign * (curve.slope1 - curve.slope2 * h);
    c += sign * curve.slope2;
    if (sign < 0) continue;
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
    best = std::min(best, static_cast<double>(v_[0]) + x);
  }
  return best < 1 ? 0 : static_cast<int64_t>(std::floor(best));
}

double BatchTrace::AliveGrowth(size_t end, int64_t v) const {
  // In the loop, the bytes alive are the last traced iteration's at the same place.
  if (loops_ && end > requests_.size()) {
    end = loop_begins_ + (end - requests_.size()) % loop_.size();
  }
  double growth = 0;
  size_t m = 0;
  for (size_t i = 0; i < end && i < requests_.size(); ++i) {
    const AllocatorRequest& r = requests_[i];
    growth += r.freed >= 0 ? -Growth(static_cast<size_t>(r.freed), v) : Growth(m++, v);
  }
  return growth;
}

BatchTrace::Replay BatchTrace::Run(int64_t v, const AllocatorConfig& config,
                                   AllocatorRun* kept) const {
  using Handle = CachingAllocatorModel::Handle;
  Replay out;
  CachingAllocatorModel alloc(config);
  std::vector<std::pair<uint64_t, uint64_t>>* after = kept ? &kept->after : nullptr;
  if (after != nullptr) after->clear();
  alloc.Reserve(2 * most_alive_ + 64);
  uint64_t peak_allocated = 0;
  size_t done = 0;     // requests made
  size_t at_peak = 0;  // requests up to the last one that raised the allocated peak
  // One request: frees `freed`, or mallocs `bytes` into *made. False when it failed for good.
  const auto request = [&](Handle freed, uint64_t bytes, Handle* made) {
    ++done;
    if (made == nullptr) {
      alloc.Free(freed);
      if (after != nullptr) after->emplace_back(alloc.stats().allocated, alloc.stats().reserved);
      return true;
    }
    *made = alloc.Malloc(bytes);
    if (after != nullptr) after->emplace_back(alloc.stats().allocated, alloc.stats().reserved);
    if (alloc.oom()) {
      out.ran_out = true;
      const uint64_t segment =
          CachingAllocatorModel::AllocationSize(CachingAllocatorModel::RoundSize(bytes, config));
      const Wide need = static_cast<Wide>(alloc.stats().reserved) + segment;
      out.short_by = Saturate(need - static_cast<Wide>(config.capacity));
      const Wide requested = static_cast<Wide>(alloc.stats().requested) + bytes;
      out.overhead = Saturate(std::max<Wide>(need, config.capacity) - requested);
      return false;
    }
    if (alloc.stats().allocated > peak_allocated) {
      peak_allocated = alloc.stats().allocated;
      at_peak = done;
    }
    return true;
  };
  LoopWatch watch;
  std::vector<uint64_t> state;
  // At the start of iteration `it`: whether it starts as an earlier one did.
  const auto repeats = [&](int it, const std::vector<Handle>& previous) {
    LoopStart(alloc, previous, carried_, &state);
    out.repeat = watch.Starts(it, &state);
    return out.repeat.has_value();
  };
  std::vector<Handle> handle(curves_.size(), -1);  // by malloc number
  std::vector<Handle> previous, own;
  size_t m = 0;
  bool ok = true;
  for (size_t i = 0; ok && i < requests_.size(); ++i) {
    if (loops_ && i == loop_begins_) {
      previous.assign(handle.begin() + static_cast<ptrdiff_t>(previous_first_malloc_),
                      handle.begin() + static_cast<ptrdiff_t>(loop_first_malloc_));
      (void)repeats(kTracedIterations, previous);  // no iteration before it has a state
    }
    const AllocatorRequest& r = requests_[i];
    ok = r.freed >= 0 ? request(handle[static_cast<size_t>(r.freed)], 0, nullptr)
                      : request(-1, Bytes(m, v), &handle[m]);
    m += r.freed < 0;
  }
  if (ok && loops_) {
    previous.assign(handle.begin() + static_cast<ptrdiff_t>(loop_first_malloc_), handle.end());
    own.assign(previous.size(), -1);
    for (int it = kTracedIterations + 1; ok && !repeats(it, previous); ++it) {
      if (it > kMostIterations) break;
      for (size_t i = 0; ok && i < loop_.size(); ++i) {
        const LoopRequest& q = loop_[i];
        switch (q.kind) {
          case LoopRequest::kMalloc:
            ok = request(-1, Bytes(loop_first_malloc_ + q.r, v), &own[q.r]);
            break;
          case LoopRequest::kFreeOwn:
            ok = request(own[q.r], 0, nullptr);
            break;
          case LoopRequest::kFreePrevious:
            ok = request(previous[q.r], 0, nullptr);
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
    kept->end = out.stats;
    kept->repeat = out.repeat;
  }
  return out;
}

std::vector<AllocatorRequest> BatchTrace::RequestsAt(int64_t v, size_t count) const {
  std::vector<AllocatorRequest> out;
  const size_t traced = std::min(count, requests_.size());
  out.reserve(loops_ && count != std::numeric_limits<size_t>::max() ? count : traced);
  size_t m = 0;
  for (size_t i = 0; i < traced; ++i) {
    const AllocatorRequest& r = requests_[i];
    out.push_back(r.freed >= 0 ? r : AllocatorRequest{Bytes(m++, v), -1});
  }
  if (!loops_ || count <= requests_.size() || count == std::numeric_limits<size_t>::max()) {
    return out;
  }
  // The loop's iterations: each one's mallocs numbered on from the iteration before's.
  const size_t mallocs = curves_.size() - loop_first_malloc_;
  size_t previous = loop_first_malloc_, own = curves_.size();
  while (out.size() < count) {
    for (size_t i = 0; i < loop_.size() && out.size() < count; ++i) {
      const LoopRequest& q = loop_[i];
      const uint64_t bytes =
          q.kind == LoopRequest::kMalloc ? Bytes(loop_first_malloc_ + q.r, v) : 0;
      out.push_back(
          StepRequest(q, bytes, static_cast<int64_t>(own), static_cast<int64_t>(previous)));
    }
    previous = own;
    own += mallocs;
  }
  return out;
}

}  // namespace memest::symbolic
