// symbolic/batch_trace.cc -- the step's allocator requests as lines in the batch (policy in
// batch_trace.h).
#include "symbolic/batch_trace.h"

#include <algorithm>
#include <limits>

namespace memest::symbolic {
namespace {

using Wide = __int128;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint64_t Saturate(Wide v) {
  if (v <= 0) return 0;
  return v >= static_cast<Wide>(kMax) ? kMax : static_cast<uint64_t>(v);
}

// floor(a / b) for b > 0.
Wide FloorDiv(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

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

std::optional<BatchTrace> BatchTrace::Fit(const std::vector<AllocatorRequest>& at_b1, int64_t b1,
                                          const std::vector<AllocatorRequest>& at_b2, int64_t b2) {
  if (b1 < 1 || b2 <= b1 || at_b1.size() != at_b2.size()) return std::nullopt;
  BatchTrace t;
  t.b1_ = b1;
  t.span_ = b2 - b1;
  t.requests_ = at_b1;
  size_t alive = 0;
  for (size_t i = 0; i < at_b1.size(); ++i) {
    const AllocatorRequest& x = at_b1[i];
    const AllocatorRequest& y = at_b2[i];
    if (x.freed != y.freed) return std::nullopt;
    if (x.freed >= 0) {
      if (static_cast<size_t>(x.freed) >= t.rise_.size() || alive == 0) return std::nullopt;
      --alive;
      continue;
    }
    if (y.bytes < x.bytes || y.bytes - x.bytes > uint64_t{std::numeric_limits<int64_t>::max()}) {
      return std::nullopt;
    }
    t.at_b1_.push_back(x.bytes);
    t.rise_.push_back(static_cast<int64_t>(y.bytes - x.bytes));
    t.most_alive_ = std::max(t.most_alive_, ++alive);
  }
  return t;
}

uint64_t BatchTrace::LineBytes(uint64_t at_b1, int64_t rise, int64_t b) const {
  return Saturate(static_cast<Wide>(at_b1) + FloorDiv(static_cast<Wide>(rise) * (b - b1_), span_));
}

bool BatchTrace::Matches(const std::vector<AllocatorRequest>& trace, int64_t b,
                         const AllocatorConfig& config) const {
  if (trace.size() != requests_.size()) return false;
  size_t m = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const AllocatorRequest& want = requests_[i];
    if (trace[i].freed != want.freed) return false;
    if (want.freed >= 0) continue;
    const uint64_t line = LineBytes(want.bytes, rise_[m++], b);
    if (CachingAllocatorModel::RoundSize(line, config) !=
        CachingAllocatorModel::RoundSize(trace[i].bytes, config)) {
      return false;
    }
  }
  return true;
}

int64_t BatchTrace::LargestWithin(uint64_t bytes, int64_t limit) const {
  // The requested bytes alive after each malloc, at b1 and their rise over span_: the largest b
  // with every base + rise (b - b1) / span <= bytes.
  Wide base = 0, rise = 0;
  Wide best = limit;
  size_t m = 0;
  for (const AllocatorRequest& r : requests_) {
    if (r.freed >= 0) {
      base -= at_b1_[static_cast<size_t>(r.freed)];
      rise -= rise_[static_cast<size_t>(r.freed)];
      continue;
    }
    base += at_b1_[m];
    rise += rise_[m++];
    const Wide room = static_cast<Wide>(bytes) - base;
    if (rise == 0) {
      if (room < 0) return 0;
      continue;
    }
    best = std::min(best, b1_ + FloorDiv(room * span_, rise));
  }
  return best < 1 ? 0 : static_cast<int64_t>(best);
}

BatchTrace::Replay BatchTrace::Run(int64_t b, const AllocatorConfig& config) const {
  Replay out;
  CachingAllocatorModel alloc(config);
  alloc.Reserve(2 * most_alive_ + 64);
  std::vector<CachingAllocatorModel::Handle> handle(rise_.size(), -1);
  Wide alive_rise = 0;  // the rise of the requested bytes alive, over span_
  uint64_t peak_allocated = 0;
  size_t m = 0;
  for (const AllocatorRequest& r : requests_) {
    if (r.freed >= 0) {
      const auto k = static_cast<size_t>(r.freed);
      alloc.Free(handle[k]);
      alive_rise -= rise_[k];
      continue;
    }
    const uint64_t bytes = LineBytes(r.bytes, rise_[m], b);
    handle[m] = alloc.Malloc(bytes);
    alive_rise += rise_[m];
    ++m;
    if (alloc.oom()) {
      out.ran_out = true;
      const uint64_t segment =
          CachingAllocatorModel::AllocationSize(CachingAllocatorModel::RoundSize(bytes, config));
      const Wide need = static_cast<Wide>(alloc.stats().reserved) + segment;
      out.short_by = Saturate(need - static_cast<Wide>(config.capacity));
      out.bytes_per_batch = static_cast<double>(alive_rise) / static_cast<double>(span_);
      break;
    }
    if (alloc.stats().allocated > peak_allocated) {
      peak_allocated = alloc.stats().allocated;
      out.peak_bytes_per_batch = static_cast<double>(alive_rise) / static_cast<double>(span_);
    }
  }
  out.stats = alloc.stats();
  return out;
}

}  // namespace memest::symbolic
