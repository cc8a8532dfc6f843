// symbolic/allocator.cc -- model of PyTorch's CUDACachingAllocator (native backend).
//
// Policy (docs/memory-model.md §1; constants in allocator.h):
//  * Sizes are rounded up to 512 B (or to the next power-of-2 division when
//    roundup_power2_divisions is set) (memory-model.md §1.3). A zero-byte request allocates
//    nothing.
//  * Rounded sizes <= 1 MiB use the small pool, larger ones the large pool (memory-model.md §1.4
//    get_pool).
//  * Best fit: the smallest free block of the pool with size >= request, lowest address on ties
//    (memory-model.md §1.4 get_free_block). With max_split_size set, a request below it never takes
//    a block at or above it, and a request at or above it never takes a block 20 MiB
//    (max_non_split_rounding) larger than itself.
//  * No fitting block: cudaMalloc a segment of 2 MiB (request <= 1 MiB), 20 MiB (request < 10 MiB)
//    or the request rounded up to 2 MiB (memory-model.md §1.4 get_allocation_size).
//  * Split (memory-model.md §1.4 should_split): small pool when the remainder is >= 512 B; large
//    pool when the request is below max_split_size and the remainder is > 1 MiB. Otherwise the
//    whole block is handed out and `allocated` counts the whole block (an 11.5 MiB request on a
//    free 12 MiB block counts 12 MiB).
//  * Free merges with free neighbours of the same segment; memory is never returned to CUDA on
//    free (memory-model.md §1.4), so reserved only grows without memory pressure
//    (memory-model.md §1.5).
//  * A segment that would exceed `capacity`: release every free block that is a whole segment,
//    retry once, else out of memory (memory-model.md §1.5 steps 5-6).
//  * expandable_segments (memory-model.md §1.6): one growing segment per pool, mapped in pages of
//    2 MiB (small) / 20 MiB (large); a request that fits no free block extends the free tail (or
//    the end) by whole pages; any remainder >= 512 B is split off; empty_cache/OOM unmap free tail
//    pages.
#include "symbolic/allocator.h"

#include <algorithm>
#include <bit>

namespace memest::symbolic {
namespace {

uint64_t RoundUp(uint64_t n, uint64_t m) { return (n + m - 1) / m * m; }

}  // namespace

CachingAllocatorModel::CachingAllocatorModel(AllocatorConfig config) : config_(config) {}

void CachingAllocatorModel::Reset(AllocatorConfig config) {
  config_ = config;
  stats_ = {};
  blocks_.clear();
  free_ids_.clear();
  segments_.clear();
  free_small_.Clear();
  free_large_.Clear();
  next_addr_ = kRoundLarge;
  expandable_segment_[0] = expandable_segment_[1] = -1;
  oom_ = false;
  misuse_ = Status::Ok();
}

// memory-model.md §1.3 roundup_power2_next_division
uint64_t CachingAllocatorModel::RoundUpPower2Division(uint64_t n, uint32_t divisions) {
  if (std::has_single_bit(n)) return n;
  const uint64_t floor_pow2 = std::bit_floor(n);
  const uint64_t step = floor_pow2 >> std::countr_zero(std::bit_ceil(uint64_t{divisions}));
  if (step == 0) return 2 * floor_pow2;
  return n % step == 0 ? n : (n & ~(step - 1)) + step;
}

void CachingAllocatorModel::ResetPeaks() {
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_requested = stats_.requested;
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocatorModel::AppendLayout(std::vector<uint64_t>* words) const {
  constexpr uint64_t kFlag = uint64_t{1} << 63;  // sizes and byte counts stay far below it
  words->reserve(words->size() + 2 * (segments_.size() + blocks_.size() - free_ids_.size()) + 16);
  for (const Segment& seg : segments_) {  // in the order of their addresses (next_addr_ grows)
    if (!seg.alive) continue;
    words->push_back(seg.addr);
    words->push_back(seg.size | (seg.small ? kFlag : 0));
    for (int64_t id = seg.first; id >= 0; id = blocks_[id].next) {
      const Block& b = blocks_[id];
      words->push_back(b.size);
      words->push_back(b.requested | (b.free ? kFlag : 0));
    }
  }
  for (const int seg : expandable_segment_) {
    words->push_back(seg < 0 ? ~uint64_t{0} : segments_[seg].addr);
  }
  const AllocatorStats& s = stats_;
  words->insert(words->end(),
                {next_addr_, s.allocated, s.requested, s.reserved, s.segments, s.num_device_alloc,
                 s.num_device_free, s.num_alloc_retries, s.num_ooms, uint64_t{oom_}});
}

inline int64_t CachingAllocatorModel::NewBlock(const Block& b) {
  if (!free_ids_.empty()) {
    const int64_t id = free_ids_.back();
    free_ids_.pop_back();
    blocks_[id] = b;
    return id;
  }
  blocks_.push_back(b);
  return static_cast<int64_t>(blocks_.size()) - 1;
}

void CachingAllocatorModel::InsertFree(int64_t id) {
  const Block& b = blocks_[id];
  (b.small ? free_small_ : free_large_).Insert(FreeKey{b.size, b.addr}, id);
}

void CachingAllocatorModel::EraseFree(int64_t id) {
  const Block& b = blocks_[id];
  (b.small ? free_small_ : free_large_).Erase(FreeKey{b.size, b.addr});
}

uint64_t CachingAllocatorModel::BlockSize(Handle h) const { return h < 0 ? 0 : blocks_[h].size; }

inline int64_t CachingAllocatorModel::FindFree(uint64_t rounded, bool small) {
  const auto found = (small ? free_small_ : free_large_).LowerBound(FreeKey{rounded, 0});
  if (!found) return -1;
  const uint64_t size = found->first.first;
  if (config_.max_split_size) {
    const uint64_t max_split = *config_.max_split_size;
    if (rounded < max_split && size >= max_split) return -1;
    if (rounded >= max_split && size >= rounded + config_.max_non_split_rounding_size) return -1;
  }
  return found->second;
}

inline bool CachingAllocatorModel::ShouldSplit(const Block& b, uint64_t rounded) const {
  const uint64_t remaining = b.size - rounded;
  if (b.small || config_.expandable_segments) return remaining >= kMinBlockSize;
  const bool below_max = !config_.max_split_size || rounded < *config_.max_split_size;
  return below_max && remaining > kSmallSize;
}

CachingAllocatorModel::Handle CachingAllocatorModel::Hand(int64_t id, uint64_t rounded,
                                                          uint64_t bytes) {
  if (ShouldSplit(blocks_[id], rounded)) {
    const Block& b = blocks_[id];
    const FreeKey taken{b.size, b.addr};
    Block rest;
    rest.addr = b.addr + rounded;
    rest.size = b.size - rounded;
    rest.segment = b.segment;
    rest.prev = id;
    rest.next = b.next;
    rest.small = b.small;
    const int64_t rest_id = NewBlock(rest);  // may reallocate blocks_: re-index below
    Block& block = blocks_[id];
    if (block.next >= 0) blocks_[block.next].prev = rest_id;
    block.next = rest_id;
    block.size = rounded;
    // The taken block's entry becomes the remainder's.
    (rest.small ? free_small_ : free_large_).Replace(taken, FreeKey{rest.size, rest.addr}, rest_id);
  } else {
    EraseFree(id);
  }
  Block& block = blocks_[id];
  block.free = false;
  block.requested = bytes;
  Bump(&stats_.allocated, &stats_.peak_allocated, block.size);
  Bump(&stats_.requested, &stats_.peak_requested, bytes);
  return id;
}

bool CachingAllocatorModel::ReserveSegment(uint64_t size, bool small, int64_t* block) {
  if (stats_.reserved + size > config_.capacity || stats_.reserved + size < stats_.reserved) {
    return false;
  }
  Segment seg;
  seg.addr = next_addr_;
  seg.size = size;
  seg.small = small;
  next_addr_ += size + kRoundLarge;  // a gap: blocks of different segments never touch
  Block b;
  b.addr = seg.addr;
  b.size = size;
  b.segment = static_cast<int>(segments_.size());
  b.small = small;
  *block = NewBlock(b);
  seg.first = *block;
  segments_.push_back(seg);
  InsertFree(*block);
  Bump(&stats_.reserved, &stats_.peak_reserved, size);
  ++stats_.segments;
  ++stats_.num_device_alloc;
  return true;
}

bool CachingAllocatorModel::ReleaseCached() {
  // Only free blocks can be released, so only the free lists are visited (PyTorch's pools hold
  // only free blocks too): a retry costs the free blocks, not every block ever made. Visited in
  // id order, as a scan of the block table would, so ids are recycled in the same order.
  std::vector<int64_t> free;
  free.reserve(free_small_.size() + free_large_.size());
  const auto add = [&free](FreeKey, int64_t id) { free.push_back(id); };
  free_small_.ForEach(add);
  free_large_.ForEach(add);
  std::sort(free.begin(), free.end());
  bool released = false;
  for (const int64_t i : free) {
    Block& b = blocks_[i];
    Segment& seg = segments_[b.segment];
    if (config_.expandable_segments) {
      // Unmap the whole pages at the end of a free tail block (memory-model.md §1.6).
      if (b.next >= 0) continue;
      const uint64_t page = b.small ? kSmallBuffer : kLargeBuffer;
      const uint64_t seg_end = seg.addr + seg.size;
      const uint64_t first_page = seg.addr + RoundUp(b.addr - seg.addr, page);
      if (first_page >= seg_end) continue;
      const uint64_t unmap = seg_end - first_page;
      EraseFree(i);
      b.size -= unmap;
      seg.size -= unmap;
      stats_.reserved -= unmap;
      ++stats_.num_device_free;
      released = true;
      if (b.size == 0) {
        if (b.prev >= 0) blocks_[b.prev].next = -1;
        if (seg.first == i) seg.first = -1;
        b.alive = false;
        free_ids_.push_back(i);
      } else {
        InsertFree(i);
      }
      continue;
    }
    if (b.prev >= 0 || b.next >= 0) continue;  // part of a split segment: cannot be released
    EraseFree(i);
    b.alive = false;
    free_ids_.push_back(i);
    seg.alive = false;
    stats_.reserved -= seg.size;
    --stats_.segments;
    ++stats_.num_device_free;
    released = true;
  }
  return released;
}

void CachingAllocatorModel::EmptyCache() { ReleaseCached(); }

CachingAllocatorModel::Handle CachingAllocatorModel::MallocExpandable(uint64_t rounded,
                                                                      uint64_t bytes, bool small) {
  int64_t id = FindFree(rounded, small);
  if (id >= 0) return Hand(id, rounded, bytes);
  const uint64_t page = small ? kSmallBuffer : kLargeBuffer;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int& seg_id = expandable_segment_[small ? 1 : 0];
    if (seg_id < 0) {
      Segment seg;
      seg.addr = next_addr_;
      seg.small = small;
      // A large virtual range (memory-model.md §1.6: 1.125 x GPU memory).
      next_addr_ += uint64_t{1} << 44;
      seg_id = static_cast<int>(segments_.size());
      segments_.push_back(seg);
      ++stats_.segments;
    }
    Segment& seg = segments_[seg_id];
    // The tail block, if free, grows; otherwise a new block starts at the end of the mapping.
    int64_t tail = seg.first;
    while (tail >= 0 && blocks_[tail].next >= 0) {
      tail = blocks_[tail].next;
    }
    const bool tail_free = tail >= 0 && blocks_[tail].free;
    const uint64_t have = tail_free ? blocks_[tail].size : 0;
    const uint64_t map = RoundUp(rounded - have, page);
    if (stats_.reserved + map > config_.capacity) {
      ++stats_.num_alloc_retries;
      if (attempt == 0 && ReleaseCached()) continue;
      ++stats_.num_ooms;
      oom_ = true;
      return -1;
    }
    Bump(&stats_.reserved, &stats_.peak_reserved, map);
    ++stats_.num_device_alloc;
    if (tail_free) {
      EraseFree(tail);
      blocks_[tail].size += map;
      seg.size += map;
      InsertFree(tail);
      return Hand(tail, rounded, bytes);
    }
    Block b;
    b.addr = seg.addr + seg.size;
    b.size = map;
    b.segment = seg_id;
    b.prev = tail;
    b.small = small;
    const int64_t nb = NewBlock(b);
    if (tail >= 0) {
      blocks_[tail].next = nb;
    } else {
      segments_[seg_id].first = nb;
    }
    segments_[seg_id].size += map;
    InsertFree(nb);
    return Hand(nb, rounded, bytes);
  }
  return -1;
}

CachingAllocatorModel::Handle CachingAllocatorModel::Malloc(uint64_t bytes) {
  if (bytes == 0) return -1;
  const uint64_t rounded = RoundSize(bytes, config_);
  const bool small = rounded <= kSmallSize;
  if (config_.expandable_segments) return MallocExpandable(rounded, bytes, small);
  int64_t id = FindFree(rounded, small);
  if (id < 0) {
    const uint64_t size = AllocationSize(rounded);
    if (!ReserveSegment(size, small, &id)) {
      ++stats_.num_alloc_retries;
      ReleaseCached();
      id = FindFree(rounded, small);
      if (id < 0 && !ReserveSegment(size, small, &id)) {
        ++stats_.num_ooms;
        oom_ = true;
        return -1;
      }
    }
  }
  return Hand(id, rounded, bytes);
}

void CachingAllocatorModel::Free(Handle h) {
  if (h < 0) return;
  int64_t id = h;
  {
    if (static_cast<uint64_t>(id) >= blocks_.size() || blocks_[id].free || !blocks_[id].alive) {
      if (misuse_.ok()) {
        misuse_ = Internal("allocator model: free of handle " + std::to_string(h) +
                           ", which is not a live block (a double free)");
      }
      return;
    }
    Block& b = blocks_[id];
    stats_.allocated -= b.size;
    stats_.requested -= b.requested;
    b.free = true;
    b.requested = 0;
  }
  // Right is absorbed into left. Inline at both calls (as a call, with the growth of free_ids_
  // in it, it was about 4 % of the allocator model's instructions in a max-batch search).
  auto merge = [&](int64_t left, int64_t right) __attribute__((always_inline)) {
    Block& l = blocks_[left];
    Block& r = blocks_[right];
    l.size += r.size;
    l.next = r.next;
    if (r.next >= 0) blocks_[r.next].prev = left;
    r.alive = false;
    free_ids_.push_back(right);
  };
  // The merged block's entry replaces a merged neighbour's (the previous one's when both merge).
  const int64_t prev = blocks_[id].prev;
  const int64_t next = blocks_[id].next;
  const bool with_prev = prev >= 0 && blocks_[prev].free;
  const bool with_next = next >= 0 && blocks_[next].free;
  if (!with_prev && !with_next) {
    InsertFree(id);
    return;
  }
  FreeList& list = blocks_[id].small ? free_small_ : free_large_;
  const int64_t kept = with_prev ? prev : next;
  const FreeKey replaced{blocks_[kept].size, blocks_[kept].addr};
  if (with_prev && with_next) EraseFree(next);
  if (with_prev) {
    merge(prev, id);
    id = prev;
  }
  if (with_next) merge(id, next);
  list.Replace(replaced, FreeKey{blocks_[id].size, blocks_[id].addr}, id);
}

}  // namespace memest::symbolic
