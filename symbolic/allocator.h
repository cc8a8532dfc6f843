// symbolic/allocator.h -- a model of PyTorch's CUDA caching allocator (one device, one stream).
//
// It replays a malloc/free stream and reports what torch.cuda.memory_stats() would: allocated,
// reserved and requested bytes with their peaks, segment counts, and whether a request would run
// out of memory against a capacity. The policy is stated at the top of allocator.cc with citations
// of docs/memory-model.md section 1.
//
// Not thread-safe (a simulation is single-threaded); each simulation owns its own instance.
#ifndef MEMEST_SYMBOLIC_ALLOCATOR_H_
#define MEMEST_SYMBOLIC_ALLOCATOR_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "base/id_vector.h"
#include "memest/status.h"
#include "memory/allocator_constants.h"
#include "symbolic/free_list.h"

namespace memest::symbolic {

// The allocator's size constants (memory-model.md §1.1) and segment sizes (§1.4), stated once in
// memory/.
using memory::AllocationSize;
using memory::kLargeBuffer;
using memory::kMiB;
using memory::kMinBlockSize;
using memory::kMinLargeAlloc;
using memory::kRoundLarge;
using memory::kSmallBuffer;
using memory::kSmallSize;

struct AllocatorConfig {
  bool expandable_segments = false;                     // memory-model.md §1.6
  std::optional<uint64_t> max_split_size;               // memory-model.md §1.2 (unset = unlimited)
  uint64_t max_non_split_rounding_size = kLargeBuffer;  // memory-model.md §1.2
  uint32_t roundup_power2_divisions = 0;  // memory-model.md §1.2/1.3 (same for all size bands)
  // Device bytes the allocator may reserve before a request fails (cudaMalloc fails); unlimited
  // by default.
  uint64_t capacity = std::numeric_limits<uint64_t>::max();

  bool operator==(const AllocatorConfig&) const = default;
};

struct AllocatorStats {
  uint64_t allocated = 0, peak_allocated = 0;  // block sizes handed out (allocated_bytes.all)
  uint64_t requested = 0, peak_requested = 0;  // caller sizes (requested_bytes.all)
  uint64_t reserved = 0, peak_reserved = 0;    // segment bytes (reserved_bytes.all)
  uint64_t segments = 0;                       // live segments
  uint64_t num_device_alloc = 0, num_device_free = 0, num_alloc_retries = 0, num_ooms = 0;
};

class CachingAllocatorModel {
 public:
  using Handle = int64_t;  // -1 = null (zero-byte request or OOM)

  explicit CachingAllocatorModel(AllocatorConfig config = {});
  // Back to a new model's state under `config`, keeping the memory of its tables: a model reset
  // answers every request as a new one does. (A search replays many values, each on a model of
  // its own: one model reset for each spares the tables' allocations.)
  void Reset(AllocatorConfig config);

  // Rounds a request like round_size (memory-model.md §1.3). Inline: every malloc runs it.
  static uint64_t RoundSize(uint64_t bytes, const AllocatorConfig& config) {
    if (bytes < kMinBlockSize) return kMinBlockSize;
    const uint32_t d = config.roundup_power2_divisions;
    if (d > 1 && bytes > kMinBlockSize * d) return RoundUpPower2Division(bytes, d);
    return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
  }
  // The next of `divisions` steps between powers of 2 at or above n (roundup_power2_divisions).
  static uint64_t RoundUpPower2Division(uint64_t n, uint32_t divisions);

  // Room for `blocks` blocks (live, free and cached) without moving the block table: a hint,
  // changes nothing but time. A simulation that knows its tensor count calls it once, first.
  void Reserve(size_t blocks) { blocks_.reserve(blocks); }
  // Allocates `bytes`. Returns -1 for a zero-byte request (nothing allocated) or when the request
  // would exceed `capacity` even after releasing cached segments (then oom() is true).
  Handle Malloc(uint64_t bytes);
  // Frees a live block. Freeing a handle that is not live (freed already, merged away, never
  // handed out) is a caller bug; PyTorch raises "invalid device pointer" for it. The model
  // records the first such call in misuse() and leaves its state unchanged.
  void Free(Handle h);
  // torch.cuda.empty_cache(): releases every free block that is a whole segment
  // (memory-model.md §1.5).
  void EmptyCache();

  bool oom() const { return oom_; }
  // Ok, or the first invalid Free() (an Internal error naming the handle).
  const Status& misuse() const { return misuse_; }
  const AllocatorStats& stats() const { return stats_; }
  // Size of the block behind a handle (what allocated_bytes counts for it).
  uint64_t BlockSize(Handle h) const;
  // Starts new peaks from the current values (reset_peak_memory_stats, memory-model.md §1.8).
  void ResetPeaks();
  // Where the block behind a live handle starts: what names it in a Layout().
  uint64_t Address(Handle h) const { return h < 0 ? 0 : blocks_[h].addr; }
  // Appends everything the model's later answers depend on, as words two states can be compared
  // by: each live segment (address, size, pool) with its blocks in address order (size, requested
  // bytes, free; each starts where the one before ends), the address the next segment gets, the
  // expandable segments, the current byte counts and the counters. Two models under one config
  // with equal layouts answer the same requests alike, block for block at the same addresses;
  // block ids, which no decision reads, are not in it. One pass over the live blocks.
  void AppendLayout(std::vector<uint64_t>* words) const;

 private:
  struct Block {  // 48 bytes: the fields in decreasing size, no padding between them
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t requested = 0;
    int64_t prev = -1, next = -1;  // neighbours in the same segment
    int segment = -1;
    bool free = true;
    bool small = false;  // pool
    bool alive = true;   // false once merged away (id reusable)
  };
  static_assert(sizeof(Block) == 48);
  struct Segment {
    uint64_t addr = 0;
    uint64_t size = 0;   // mapped bytes (expandable: grows by pages)
    int64_t first = -1;  // first block
    bool small = false;
    bool alive = true;
  };
  using FreeKey = FreeList::Key;  // (size, addr): best fit, lowest address

  Handle MallocExpandable(uint64_t rounded, uint64_t bytes, bool small);
  // Inlined, with NewBlock and ShouldSplit: every malloc runs them (callgrind).
  [[gnu::always_inline]] int64_t FindFree(uint64_t rounded, bool small);
  [[gnu::always_inline]] bool ShouldSplit(const Block& b, uint64_t rounded) const;
  Handle Hand(int64_t id, uint64_t rounded, uint64_t bytes);
  [[gnu::always_inline]] int64_t NewBlock(const Block& b);
  bool ReserveSegment(uint64_t size, bool small, int64_t* block);
  bool ReleaseCached();
  void InsertFree(int64_t id);
  void EraseFree(int64_t id);
  // Adds delta to *value and raises *peak to it (every malloc does, twice: kept inline).
  static void Bump(uint64_t* value, uint64_t* peak, uint64_t delta) {
    *value += delta;
    *peak = std::max(*peak, *value);
  }

  AllocatorConfig config_;
  AllocatorStats stats_;
  base::IdVector<Block, int64_t> blocks_;
  std::vector<int64_t> free_ids_;  // recycled block ids
  base::IdVector<Segment> segments_;
  // Free blocks -> block id, by (size, addr), per pool.
  FreeList free_small_, free_large_;
  uint64_t next_addr_ = kRoundLarge;      // virtual addresses of new segments
  int expandable_segment_[2] = {-1, -1};  // [small?] segment id in expandable mode
  bool oom_ = false;
  Status misuse_;
};

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_ALLOCATOR_H_
