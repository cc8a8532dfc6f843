// symbolic/free_list.cc -- free blocks ordered by (size, address): the move assignment and the
// paths of a chunked bin's upper entries; the rest is inline in the header, with its policy.
//
// A chunk of upper that falls below kChunk / 8 entries goes into its neighbour (the next chunk,
// or the tail after the last chunk), which splits again if it passed 2 * kChunk; a bin whose
// upper empties so is one array again. A tail that empties takes upper's last chunk.
#include "symbolic/free_list.h"

#include <algorithm>
#include <utility>

namespace memest::symbolic {

FreeList& FreeList::operator=(FreeList&& other) noexcept {
  if (this == &other) return *this;
  bins_ = std::move(other.bins_);
  slot_ = std::exchange(other.slot_, {});
  occupied_ = std::exchange(other.occupied_, {});
  groups_ = std::exchange(other.groups_, 0);
  size_ = std::exchange(other.size_, 0);
  hint_bin_ = std::exchange(other.hint_bin_, 0);
  hint_index_ = std::exchange(other.hint_index_, 0);
  hint_chunk_ = std::exchange(other.hint_chunk_, 0);
  other.bins_.clear();
  return *this;
}

void FreeList::JudgeMoves(Bin& bin) {
  if (bin.moved > uint64_t{kMovesJudged} * kChunk) CutTail(bin);
  bin.moves = 0;
  bin.moved = 0;
}

void FreeList::CutTail(Bin& bin) {
  Entries& tail = bin.tail;
  // Chunks of kChunk from the tail's front, its last 1 to kChunk entries staying.
  const size_t kept = (tail.size() - 1) % kChunk + 1;
  size_t cut = 0;
  for (; cut + kept < tail.size(); cut += kChunk) {
    bin.upper.emplace_back(tail.begin() + static_cast<std::ptrdiff_t>(cut),
                           tail.begin() + static_cast<std::ptrdiff_t>(cut + kChunk));
  }
  tail.erase(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(cut));
}

void FreeList::RefillTail(Bin& bin) {
  bin.tail.swap(bin.upper.back());
  bin.upper.pop_back();
}

void FreeList::SplitIfFull(std::vector<Entries>& upper, size_t c) {
  if (upper[c].size() <= 2 * kChunk) return;
  const auto cut = upper[c].begin() + static_cast<std::ptrdiff_t>(kChunk);
  Entries smaller(cut, upper[c].end());
  upper[c].erase(cut, upper[c].end());
  upper.insert(upper.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(smaller));
}

size_t FreeList::ChunkOf(const std::vector<Entries>& upper, Key key) {
  if (!Below(upper.back().back(), key)) return upper.size();
  return static_cast<size_t>(
      std::partition_point(upper.begin(), upper.end() - 1,
                           [&](const Entries& c) { return !Below(c.back(), key); }) -
      upper.begin());
}

FreeList::Place FreeList::LastAtOrAbove(const std::vector<Entries>& upper, Key key) {
  size_t c = ChunkOf(upper, key);
  if (c == upper.size()) return Place{c - 1, upper[c - 1].size() - 1};
  const size_t i = FirstBelow(upper[c], key);
  if (i > 0) return Place{c, i - 1};
  if (c == 0) return Place{kNone, 0};
  --c;
  return Place{c, upper[c].size() - 1};
}

void FreeList::InsertUpper(Bin& bin, Key key, int64_t id) {
  std::vector<Entries>& upper = bin.upper;
  size_t c = ChunkOf(upper, key), i = 0;
  if (c == upper.size()) {
    i = upper[--c].size();  // below every entry of upper: the last chunk's end
  } else {
    i = FirstBelow(upper[c], key);
  }
  upper[c].insert(upper[c].begin() + static_cast<std::ptrdiff_t>(i),
                  Entry{key.first, key.second, id});
  SplitIfFull(upper, c);
}

void FreeList::EraseUpper(size_t b, Key key) {
  Bin& bin = BinAt(b);
  std::vector<Entries>& upper = bin.upper;
  if (upper.empty()) return;
  // Best fit's block, which the allocator takes (erases or replaces) right after finding it, is
  // where the last LowerBound found it, unless the list changed since.
  Place at{hint_chunk_, hint_index_};
  if (hint_bin_ != b || at.chunk >= upper.size() || at.index >= upper[at.chunk].size() ||
      !Is(upper[at.chunk][at.index], key)) {
    at = LastAtOrAbove(upper, key);
    if (at.chunk == kNone || !Is(upper[at.chunk][at.index], key)) return;
  }
  const size_t c = at.chunk;
  Entries& chunk = upper[c];
  chunk.erase(chunk.begin() + static_cast<std::ptrdiff_t>(at.index));
  --size_;
  if (chunk.size() >= kChunk / 8) return;
  // Into the next chunk's front (all its entries are smaller), or the tail's after the last.
  Entries& into = c + 1 < upper.size() ? upper[c + 1] : bin.tail;
  into.insert(into.begin(), chunk.begin(), chunk.end());
  upper.erase(upper.begin() + static_cast<std::ptrdiff_t>(c));
  if (c < upper.size()) SplitIfFull(upper, c);
}

std::optional<std::pair<FreeList::Key, int64_t>> FreeList::UpperLowerBound(size_t b,
                                                                           Key key) const {
  const std::vector<Entries>& upper = BinAt(b).upper;
  const Place at = LastAtOrAbove(upper, key);
  if (at.chunk != kNone) {
    hint_bin_ = b;
    hint_chunk_ = at.chunk;
    hint_index_ = at.index;
    const Entry& e = upper[at.chunk][at.index];
    return std::make_pair(Key{e.size, e.addr}, e.id);
  }
  // No entry of this bin is at or above the key: the next bin's smallest.
  const size_t next = NextOccupied(b);
  if (next == kNone) return std::nullopt;
  const Entries& tail = BinAt(next).tail;
  hint_bin_ = next;
  hint_index_ = tail.size() - 1;
  return std::make_pair(Key{tail.back().size, tail.back().addr}, tail.back().id);
}

}  // namespace memest::symbolic
