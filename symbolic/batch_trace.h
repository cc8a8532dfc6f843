// symbolic/batch_trace.h -- the step's allocator requests as lines in the batch, replayed through
// the allocator model at any batch without walking the graph again: what the max-batch search of
// the symbolic backend asks at most batches (api/max_batch.cc).
//
// Policy:
//  * Two traces of the step (TraceRequests, symbolic/timeline.h) at batches b1 < b2 that make the
//    same requests in the same order (the same frees of the same mallocs) give each malloc's size
//    as the line through its two sizes, rounded down:
//      bytes(b) = bytes(b1) + floor((bytes(b2) - bytes(b1)) (b - b1) / (b2 - b1)).
//    Sizes are affine in the batch for most graphs (a batch dim times the rest); a size that is
//    not (a [B, B] similarity matrix, a workspace that is a fraction of its operands) is off the
//    line elsewhere, and Matches() says so when a trace at that batch is compared.
//  * The caching allocator decides on rounded sizes only (allocator.cc RoundSize; the requested
//    bytes are only counted), so a trace matches the lines at b when each malloc rounds to the
//    size its line rounds to. Then Replay(b) hands the allocator model, request by request, what
//    Simulate at b hands it: the same allocated and reserved bytes, the same release-and-retry,
//    the same first request that fails.
//  * Replay stops at the first request that fails even after the cached segments are released
//    (PyTorch raises OutOfMemoryError there); what it reports then is how far the step was from
//    the budget and how fast the bytes alive there grow with the batch, for the next guess.
#ifndef MEMEST_SYMBOLIC_BATCH_TRACE_H_
#define MEMEST_SYMBOLIC_BATCH_TRACE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "symbolic/allocator.h"
#include "symbolic/timeline.h"

namespace memest::symbolic {

// The most requested bytes alive at once in a trace.
[[nodiscard]] uint64_t PeakRequested(const std::vector<AllocatorRequest>& requests);

class BatchTrace {
 public:
  // The lines through two traces of one step at batches b1 < b2; nullopt when the traces differ
  // in anything but the mallocs' sizes, or a size falls with the batch.
  [[nodiscard]] static std::optional<BatchTrace> Fit(const std::vector<AllocatorRequest>& at_b1,
                                                     int64_t b1,
                                                     const std::vector<AllocatorRequest>& at_b2,
                                                     int64_t b2);

  // Whether `trace`, taken at batch `b`, is what the lines give at b: the same requests, each
  // malloc rounding (under `config`) to the size its line rounds to.
  [[nodiscard]] bool Matches(const std::vector<AllocatorRequest>& trace, int64_t b,
                             const AllocatorConfig& config) const;

  // The largest batch in [1, limit] at which the requested bytes alive at once stay within
  // `bytes` by the lines; 0 when even batch 1 does not. Allocated and reserved bytes are at least
  // the requested ones, so no larger batch fits an allocator limited to `bytes`.
  [[nodiscard]] int64_t LargestWithin(uint64_t bytes, int64_t limit) const;

  struct Replay {
    AllocatorStats stats;  // at the end, or at the request that failed
    bool ran_out = false;
    // When ran_out: the bytes the failing request's segment lacked after the release, and the
    // growth per batch of the requested bytes alive there.
    uint64_t short_by = 0;
    double bytes_per_batch = 0;
    // The growth per batch of the requested bytes alive at the allocated peak.
    double peak_bytes_per_batch = 0;
  };
  // The step at batch `b` through an allocator model configured by `config` (its capacity the
  // budget), stopping at the first request that fails for good.
  [[nodiscard]] Replay Run(int64_t b, const AllocatorConfig& config) const;

 private:
  BatchTrace() = default;
  // A malloc's bytes at batch b on its line: `at_b1` at b1, rising by `rise` over span_.
  uint64_t LineBytes(uint64_t at_b1, int64_t rise, int64_t b) const;

  std::vector<AllocatorRequest> requests_;  // at b1
  std::vector<uint64_t> at_b1_;             // per malloc: bytes(b1)
  std::vector<int64_t> rise_;               // per malloc: bytes(b2) - bytes(b1)
  int64_t b1_ = 1;
  int64_t span_ = 1;  // b2 - b1
  size_t most_alive_ = 0;
};

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_BATCH_TRACE_H_
