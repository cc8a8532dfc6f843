// symbolic/free_list.cc -- free blocks ordered by (size, address) (policy in the header).
#include "symbolic/free_list.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace memest::symbolic {

size_t FreeList::NextOccupied(size_t bin) const {
  const size_t g = bin / kBinsPerGroup, s = bin % kBinsPerGroup;
  const uint64_t later_bins = s + 1 == kBinsPerGroup ? 0 : occupied_[g] & (~uint64_t{0} << (s + 1));
  if (later_bins != 0) return g * kBinsPerGroup + std::countr_zero(later_bins);
  const uint64_t later_groups = g + 1 == kGroups ? 0 : groups_ & (~uint64_t{0} << (g + 1));
  if (later_groups == 0) return kNone;
  const size_t next = static_cast<size_t>(std::countr_zero(later_groups));
  return next * kBinsPerGroup + std::countr_zero(occupied_[next]);
}

FreeList& FreeList::operator=(FreeList&& other) noexcept {
  if (this == &other) return *this;
  bins_ = std::move(other.bins_);
  occupied_ = std::exchange(other.occupied_, {});
  groups_ = std::exchange(other.groups_, 0);
  size_ = std::exchange(other.size_, 0);
  hint_bin_ = std::exchange(other.hint_bin_, 0);
  hint_index_ = std::exchange(other.hint_index_, 0);
  other.bins_.clear();
  return *this;
}

size_t FreeList::FirstBelow(size_t b, Key key) const {
  const Bin& bin = bins_[b];
  // Most searches stop at the bin's last entry, its smallest (below 64 KiB a bin holds one size
  // of the allocator's, all multiples of 512), or at its first, its largest.
  if (bin.empty() || Below(bin.front(), key)) return 0;
  if (!Below(bin.back(), key)) return bin.size();
  return static_cast<size_t>(std::partition_point(bin.begin() + 1, bin.end() - 1,
                                                  [&](const Entry& e) { return !Below(e, key); }) -
                             bin.begin());
}

void FreeList::Insert(Key key, int64_t id) {
  const size_t b = BinOf(key.first);
  if (b >= bins_.size()) bins_.resize(b + 1);
  Bin& bin = bins_[b];
  bin.insert(bin.begin() + static_cast<std::ptrdiff_t>(FirstBelow(b, key)),
             Entry{key.first, key.second, id});
  occupied_[b / kBinsPerGroup] |= uint64_t{1} << (b % kBinsPerGroup);
  groups_ |= uint64_t{1} << (b / kBinsPerGroup);
  ++size_;
}

void FreeList::EraseAt(size_t b, size_t i) {
  Bin& bin = bins_[b];
  bin.erase(bin.begin() + static_cast<std::ptrdiff_t>(i));
  --size_;
  if (!bin.empty()) return;
  const size_t g = b / kBinsPerGroup;
  occupied_[g] &= ~(uint64_t{1} << (b % kBinsPerGroup));
  if (occupied_[g] == 0) groups_ &= ~(uint64_t{1} << g);
}

void FreeList::Erase(Key key) {
  const size_t b = BinOf(key.first);
  if (b >= bins_.size()) return;
  const Bin& bin = bins_[b];
  if (hint_bin_ == b && hint_index_ < bin.size() && bin[hint_index_].size == key.first &&
      bin[hint_index_].addr == key.second) {
    EraseAt(b, hint_index_);
    return;
  }
  // The key, when present, is the last entry at or above it.
  const size_t i = FirstBelow(b, key);
  if (i > 0 && bin[i - 1].size == key.first && bin[i - 1].addr == key.second) EraseAt(b, i - 1);
}

void FreeList::Replace(Key old_key, Key new_key, int64_t id) {
  Erase(old_key);
  Insert(new_key, id);
}

std::optional<std::pair<FreeList::Key, int64_t>> FreeList::LowerBound(Key key) const {
  size_t b = BinOf(key.first), i = 0;
  if (b < bins_.size() && (i = FirstBelow(b, key)) > 0) {
    --i;  // in the key's own bin: the smallest entry at or above it
  } else {
    b = NextOccupied(b);
    if (b == kNone) return std::nullopt;
    i = bins_[b].size() - 1;  // the next bin's smallest
  }
  hint_bin_ = b;
  hint_index_ = i;
  const Entry& e = bins_[b][i];
  return std::make_pair(Key{e.size, e.addr}, e.id);
}

}  // namespace memest::symbolic
