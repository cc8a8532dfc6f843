// symbolic/free_list.cc -- free blocks ordered by (size, address) (policy in the header).
#include "symbolic/free_list.h"

#include <algorithm>

namespace memest::symbolic {
namespace {

auto VectorLowerBound(const std::vector<std::pair<FreeList::Key, int64_t>>& entries,
                      FreeList::Key key) {
  return std::lower_bound(
      entries.begin(), entries.end(), key,
      [](const auto& entry, const FreeList::Key& k) { return entry.first < k; });
}

}  // namespace

void FreeList::Insert(Key key, int64_t id) {
  if (!tree_ && entries_.size() >= kTreeAbove) {
    tree_entries_.insert(entries_.begin(), entries_.end());
    entries_ = {};
    tree_ = true;
  }
  if (tree_) {
    tree_entries_.emplace(key, id);
    return;
  }
  entries_.insert(VectorLowerBound(entries_, key), {key, id});
}

void FreeList::Erase(Key key) {
  if (tree_) {
    tree_entries_.erase(key);
    return;
  }
  const auto it = VectorLowerBound(entries_, key);
  if (it != entries_.end() && it->first == key) entries_.erase(it);
}

std::optional<std::pair<FreeList::Key, int64_t>> FreeList::LowerBound(Key key) const {
  if (tree_) {
    const auto it = tree_entries_.lower_bound(key);
    if (it == tree_entries_.end()) return std::nullopt;
    return *it;
  }
  const auto it = VectorLowerBound(entries_, key);
  if (it == entries_.end()) return std::nullopt;
  return *it;
}

}  // namespace memest::symbolic
