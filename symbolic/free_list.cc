// symbolic/free_list.cc -- free blocks ordered by (size, address): the move assignment; the list's
// operations are inline in the header, with its policy.
#include "symbolic/free_list.h"

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
  other.bins_.clear();
  return *this;
}

}  // namespace memest::symbolic
