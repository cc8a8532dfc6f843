// memory/allocator_constants.h -- the size constants of PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp; docs/memory-model.md §1.1) and the segment a request asks
// for, stated once for every backend: the symbolic allocator model replays them, the analytical
// backend's closed form rounds and counts segments with them.
#ifndef MEMEST_MEMORY_ALLOCATOR_CONSTANTS_H_
#define MEMEST_MEMORY_ALLOCATOR_CONSTANTS_H_

#include <cstdint>

namespace memest::memory {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kMinBlockSize = 512;         // every block is a multiple (§1.3)
inline constexpr uint64_t kSmallSize = 1 * kMiB;       // largest request of the small pool
inline constexpr uint64_t kSmallBuffer = 2 * kMiB;     // a small-pool segment
inline constexpr uint64_t kLargeBuffer = 20 * kMiB;    // the segment of a 1-10 MiB request
inline constexpr uint64_t kMinLargeAlloc = 10 * kMiB;  // from here a request gets its own size
inline constexpr uint64_t kRoundLarge = 2 * kMiB;      // ... rounded up to this

// The segment a request of `rounded` bytes (a multiple of kMinBlockSize) asks cudaMalloc for when
// no free block fits (memory-model.md §1.4 get_allocation_size); saturating at the top of the
// range instead of wrapping.
inline constexpr uint64_t AllocationSize(uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  if (rounded > ~uint64_t{0} - (kRoundLarge - 1)) return ~uint64_t{0};
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_ALLOCATOR_CONSTANTS_H_
