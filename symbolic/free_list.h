// symbolic/free_list.h -- the caching-allocator model's free blocks of one pool, ordered by
// (size, address) for best fit (PyTorch keeps them in a std::set with the same order).
//
// Policy: size bins, as a segregated-fit allocator keeps them, and a bitmap of the bins that
// hold any. The bins split the sizes into ranges in increasing order -- one bin per 512 bytes
// below 32 KiB, then 64 bins per power of two -- so every entry of a bin sorts before every entry
// of the bins after it. A best-fit search looks in the request's own bin (its entries are the
// same size or within 1/64 of it) and otherwise takes the smallest entry of the next bin that
// holds any, found by two count-trailing-zeros on the bitmap. Each bin keeps its entries sorted
// by (size, address) from the largest down, so the best fit, which the allocator takes next, is
// usually the bin's last entry and taking it moves no other; an insert or erase moves only its
// bin's entries. So no search is a binary search over the whole list, whose branches a processor
// cannot predict (the sorted chunks this replaced spent most of the model's time there): a search
// costs about the same for ten free blocks (ResNet-50 training) and hundreds (a 100,000-node
// chain holds up to about 600), and an insert or erase grows with its bin only (many free blocks
// of one size share a bin: up to 122 in Qwen2.5-0.5B's training step).
//  * A bin whose inserts and erases move many entries is chunked: thousands of cached blocks of
//    one size can share a bin at large batches, and coalescing erases them at any address (the
//    10,000-node chain's max-batch search spent 85 % of its instructions moving the entries of
//    such arrays). A bin keeps its smallest entries in an array, its tail, and once chunked its
//    larger ones in `upper`: sorted arrays of kChunk to 2 * kChunk entries, mostly, so that an
//    insert or erase there moves one chunk's entries. Best fit mostly takes the tail's last
//    entry, and most inserts and erases land in the tail, so the inline paths look in the tail
//    only, and go to upper (out of line, free_list.cc) for a key above all of the tail's. A tail
//    past kBigBin entries whose last kMovesJudged moves (inserts and erases not at its end) moved
//    more than kChunk entries each on average is cut into chunks, its last kChunk or fewer
//    staying as the tail. So a bin that grows and shrinks at its end stays one array, and the
//    bins of ResNet-50 or of a 10,000-node chain at batch 64 (none past kBigBin entries) never
//    pay for chunks; the inline paths' checks for them cost about 1 % of ResNet-50's max-batch
//    search instructions (docs/speed-log.md, 2026-12-06).
//  * A bin is made when an entry first lands in it, and kept (emptied by Clear) until the list
//    goes: a table of 3,200 two-byte slots names each bin's place among those made. So a new
//    list (each simulation's allocator model has two) allocates only the bins its sizes reach --
//    a handful -- and a list that goes frees only those, where a table of bins up to the largest
//    size made and freed about 1,400 of them for a block of tens of GiB (a small MLP's search at
//    a batch of millions, when each replay made a model of its own: most of its instructions).
#ifndef MEMEST_SYMBOLIC_FREE_LIST_H_
#define MEMEST_SYMBOLIC_FREE_LIST_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace memest::symbolic {

class FreeList {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (size, addr)

  FreeList() = default;
  FreeList(const FreeList&) = default;
  FreeList& operator=(const FreeList&) = default;
  // A moved-from list is empty (its bitmap too), as a moved-from std::map is in practice.
  FreeList(FreeList&& other) noexcept { *this = std::move(other); }
  FreeList& operator=(FreeList&& other) noexcept;

  // Adds an entry; the key must not be in the list already (the allocator's keys are unique:
  // no two free blocks share an address).
  void Insert(Key key, int64_t id);
  // Removes the entry with exactly this key, if there is one.
  void Erase(Key key);
  // Erase(old_key) then Insert(new_key, id). `new_key` must not be present.
  void Replace(Key old_key, Key new_key, int64_t id);
  // Removes every entry. The bins made stay, empty, with their memory: a list cleared answers as a
  // new one does.
  void Clear();
  // The first entry at or after `key` (the best fit for a size, lowest address on ties).
  [[nodiscard]] std::optional<std::pair<Key, int64_t>> LowerBound(Key key) const;
  [[nodiscard]] size_t size() const { return size_; }
  // Calls f(key, id) for every entry, in key order. f must not change the list.
  template <typename F>
  void ForEach(F f) const {
    for (uint64_t groups = groups_; groups != 0; groups &= groups - 1) {
      const size_t g = static_cast<size_t>(std::countr_zero(groups));
      for (uint64_t bins = occupied_[g]; bins != 0; bins &= bins - 1) {
        const Bin& bin = BinAt(g * kBinsPerGroup + std::countr_zero(bins));
        for (auto e = bin.tail.rbegin(); e != bin.tail.rend(); ++e) f(Key{e->size, e->addr}, e->id);
        for (auto c = bin.upper.rbegin(); c != bin.upper.rend(); ++c) {
          for (auto e = c->rbegin(); e != c->rend(); ++e) f(Key{e->size, e->addr}, e->id);
        }
      }
    }
  }

 private:
  struct Entry {
    uint64_t size;
    uint64_t addr;
    int64_t id;
  };
  // Sorted by (size, addr), largest first: the best fit, which the allocator takes next, is
  // usually the last entry, and taking it moves no other.
  using Entries = std::vector<Entry>;
  // A bin's entries: `tail` holds the smallest (all of them until the bin is chunked), `upper` the
  // larger ones in chunks, in order (largest first, as within each), none empty. While upper
  // holds any, the tail holds one at least.
  struct Bin {
    Entries tail;
    std::vector<Entries> upper;
    // While the tail is past kBigBin entries: its moves since it was last judged, cut or cleared,
    // and the entries they moved.
    uint32_t moves = 0;
    uint64_t moved = 0;
  };
  static constexpr size_t kBigBin = 256;
  static constexpr uint32_t kMovesJudged = 64;
  static constexpr size_t kChunk = 64;  // a new chunk's entries; a chunk splits past twice this
  static constexpr size_t kBinsPerGroup = 64;          // one bit each in a group's word
  static constexpr size_t kGroups = 64;                // one bit each in groups_; BinOf uses 50
  static constexpr size_t kBins = 50 * kBinsPerGroup;  // BinOf(2^64 - 1) = 49 * 64 + 63
  static constexpr size_t kNone = ~size_t{0};

  static bool Below(const Entry& e, Key key) {
    return e.size < key.first || (e.size == key.first && e.addr < key.second);
  }
  static bool Is(const Entry& e, Key key) { return e.size == key.first && e.addr == key.second; }
  // The bin of a size: 512 bytes apiece below 32 KiB (group 0), then group g >= 1 splits sizes
  // of [2^(g+14), 2^(g+15)) bytes into 64 equal ranges. Increases with the size.
  static size_t BinOf(uint64_t size) {
    const uint64_t units = size >> 9;
    if (units < kBinsPerGroup) return static_cast<size_t>(units);
    const int group = std::bit_width(units) - 6;
    return static_cast<size_t>(group) * kBinsPerGroup + ((units >> (group - 1)) & 63);
  }
  // The first bin after `bin` that holds an entry, or kNone.
  [[nodiscard]] size_t NextOccupied(size_t bin) const;
  // Index of the first entry below key (the array's size when none is): the entries before it are
  // those at or above the key.
  [[nodiscard]] static size_t FirstBelow(const Entries& entries, Key key);
  [[gnu::always_inline]] void EraseAt(size_t b, size_t i);  // the tail's entry i
  void MarkEmpty(size_t b);
  // Counts a move of the tail that moved `moved` entries while it is past kBigBin, and cuts the
  // tail into chunks when such moves cost.
  static void NoteMove(Bin& bin, size_t moved);

  // The chunked paths (free_list.cc).
  struct Place {
    size_t chunk, index;  // chunk kNone: no such entry
  };
  static void JudgeMoves(Bin& bin);
  static void CutTail(Bin& bin);
  static void RefillTail(Bin& bin);  // an emptied tail takes upper's last chunk
  // Splits upper's chunk c in two when it passed 2 * kChunk entries: its first kChunk stay.
  static void SplitIfFull(std::vector<Entries>& upper, size_t c);
  // The first chunk whose last (smallest) entry is below key, or upper.size() when none is.
  [[nodiscard]] static size_t ChunkOf(const std::vector<Entries>& upper, Key key);
  // Where upper's smallest entry at or above key is.
  [[nodiscard]] static Place LastAtOrAbove(const std::vector<Entries>& upper, Key key);
  // For a key above every entry of the bin's tail (which the inline paths searched).
  static void InsertUpper(Bin& bin, Key key, int64_t id);
  void EraseUpper(size_t b, Key key);
  [[nodiscard]] std::optional<std::pair<Key, int64_t>> UpperLowerBound(size_t b, Key key) const;

  // Bin b, which must have been made (its slot is not 0), and bin b made if it was not.
  [[nodiscard]] const Bin& BinAt(size_t b) const { return bins_[slot_[b] - 1]; }
  [[nodiscard]] Bin& BinAt(size_t b) { return bins_[slot_[b] - 1]; }
  Bin& MadeBin(size_t b);

  std::vector<Bin> bins_;                     // the bins made, in the order they were made
  std::array<uint16_t, kBins> slot_{};        // by BinOf: 1 + the bin's place in bins_, or 0
  std::array<uint64_t, kGroups> occupied_{};  // bit s of word g: bin 64g + s holds any
  uint64_t groups_ = 0;                       // bit g: occupied_[g] != 0
  size_t size_ = 0;
  // Where the last LowerBound found its entry: the allocator takes that very block next (erases
  // or replaces it), so Erase and Replace look there first. Never trusted blindly: a position
  // whose key is not the one sought (the list changed since) is passed over; keys are unique.
  mutable size_t hint_bin_ = 0, hint_index_ = 0;
  mutable size_t hint_chunk_ = 0;  // set for upper's entries: hint_index_ is in this chunk
};

// The list's operations, inline in the allocator model (allocator.cc), which runs them at every
// malloc and free: out of line, with their calls and the vector code around them, they took about
// a tenth more instructions of a symbolic estimate (docs/speed-log.md, 2026-12-01).

inline size_t FreeList::NextOccupied(size_t bin) const {
  const size_t g = bin / kBinsPerGroup, s = bin % kBinsPerGroup;
  const uint64_t later_bins = s + 1 == kBinsPerGroup ? 0 : occupied_[g] & (~uint64_t{0} << (s + 1));
  if (later_bins != 0) return g * kBinsPerGroup + std::countr_zero(later_bins);
  const uint64_t later_groups = g + 1 == kGroups ? 0 : groups_ & (~uint64_t{0} << (g + 1));
  if (later_groups == 0) return kNone;
  const size_t next = static_cast<size_t>(std::countr_zero(later_groups));
  return next * kBinsPerGroup + std::countr_zero(occupied_[next]);
}

inline FreeList::Bin& FreeList::MadeBin(size_t b) {
  if (slot_[b] == 0) {
    bins_.emplace_back();
    slot_[b] = static_cast<uint16_t>(bins_.size());
  }
  return BinAt(b);
}

inline size_t FreeList::FirstBelow(const Entries& bin, Key key) {
  // Most searches stop at the bin's last entry, its smallest (below 64 KiB a bin holds one size
  // of the allocator's, all multiples of 512), or at its first, its largest.
  if (bin.empty() || Below(bin.front(), key)) return 0;
  if (!Below(bin.back(), key)) return bin.size();
  return static_cast<size_t>(std::partition_point(bin.begin() + 1, bin.end() - 1,
                                                  [&](const Entry& e) { return !Below(e, key); }) -
                             bin.begin());
}

inline void FreeList::Insert(Key key, int64_t id) {
  const size_t b = BinOf(key.first);
  Bin& bin = MadeBin(b);
  ++size_;
  Entries& tail = bin.tail;
  // Most inserts find their bin empty (a split's remainder, a freed block of a new size).
  if (tail.empty()) {
    tail.push_back(Entry{key.first, key.second, id});
    occupied_[b / kBinsPerGroup] |= uint64_t{1} << (b % kBinsPerGroup);
    groups_ |= uint64_t{1} << (b / kBinsPerGroup);
    return;
  }
  const size_t i = FirstBelow(tail, key);
  if (i == 0 && !bin.upper.empty()) [[unlikely]] {
    InsertUpper(bin, key, id);
    return;
  }
  tail.insert(tail.begin() + static_cast<std::ptrdiff_t>(i), Entry{key.first, key.second, id});
  if (tail.size() > kBigBin) [[unlikely]] {
    NoteMove(bin, tail.size() - 1 - i);
  }
}

inline void FreeList::NoteMove(Bin& bin, size_t moved) {
  bin.moved += moved;
  if (++bin.moves == kMovesJudged) JudgeMoves(bin);
}

inline void FreeList::EraseAt(size_t b, size_t i) {
  Bin& bin = BinAt(b);
  Entries& tail = bin.tail;
  --size_;
  if (i + 1 == tail.size()) {
    tail.pop_back();  // the bin's smallest, which best fit takes most often
    if (!tail.empty()) return;
    if (bin.upper.empty()) {
      MarkEmpty(b);
    } else {
      RefillTail(bin);
    }
    return;
  }
  tail.erase(tail.begin() + static_cast<std::ptrdiff_t>(i));  // leaves one at least
  if (tail.size() > kBigBin) [[unlikely]] {
    NoteMove(bin, tail.size() - i);
  }
}

inline void FreeList::MarkEmpty(size_t b) {
  const size_t g = b / kBinsPerGroup;
  occupied_[g] &= ~(uint64_t{1} << (b % kBinsPerGroup));
  if (occupied_[g] == 0) groups_ &= ~(uint64_t{1} << g);
}

inline void FreeList::Erase(Key key) {
  const size_t b = BinOf(key.first);
  if (slot_[b] == 0) return;
  const Entries& tail = BinAt(b).tail;
  if (hint_bin_ == b && hint_index_ < tail.size() && Is(tail[hint_index_], key)) {
    EraseAt(b, hint_index_);
    return;
  }
  // The key, when present, is the last entry at or above it: in the tail, or above all of it.
  const size_t i = FirstBelow(tail, key);
  if (i > 0) {
    if (Is(tail[i - 1], key)) EraseAt(b, i - 1);
  } else {
    EraseUpper(b, key);
  }
}

inline void FreeList::Clear() {
  for (Bin& bin : bins_) {
    bin.tail.clear();
    bin.upper.clear();
    bin.moves = 0;
    bin.moved = 0;
  }
  occupied_ = {};
  groups_ = 0;
  size_ = 0;
  hint_bin_ = hint_index_ = hint_chunk_ = 0;
}

inline void FreeList::Replace(Key old_key, Key new_key, int64_t id) {
  Erase(old_key);
  Insert(new_key, id);
}

inline std::optional<std::pair<FreeList::Key, int64_t>> FreeList::LowerBound(Key key) const {
  size_t b = BinOf(key.first), i = 0;
  if (slot_[b] != 0 && (i = FirstBelow(BinAt(b).tail, key)) > 0) {
    --i;  // in the key's own bin: the smallest entry at or above it
  } else {
    if (slot_[b] != 0 && !BinAt(b).upper.empty()) [[unlikely]] {
      return UpperLowerBound(b, key);
    }
    b = NextOccupied(b);
    if (b == kNone) return std::nullopt;
    i = BinAt(b).tail.size() - 1;  // the next bin's smallest
  }
  hint_bin_ = b;
  hint_index_ = i;
  const Entry& e = BinAt(b).tail[i];
  return std::make_pair(Key{e.size, e.addr}, e.id);
}

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_FREE_LIST_H_
