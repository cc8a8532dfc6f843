// symbolic/free_list.cc -- free blocks ordered by (size, address) (policy in the header).
#include "symbolic/free_list.h"

#include <algorithm>
#include <iterator>

namespace memest::symbolic {

size_t FreeList::ChunkFor(Packed p) const {
  return static_cast<size_t>(std::lower_bound(last_.begin(), last_.end(), p) - last_.begin());
}

void FreeList::SplitChunk(size_t c) {
  Chunk upper;
  Chunk& lower = chunks_[c];
  const auto half = static_cast<std::ptrdiff_t>(lower.keys.size() / 2);
  upper.keys.assign(lower.keys.begin() + half, lower.keys.end());
  upper.ids.assign(lower.ids.begin() + half, lower.ids.end());
  lower.keys.resize(static_cast<size_t>(half));
  lower.ids.resize(static_cast<size_t>(half));
  const Packed lower_last = lower.keys.back();
  chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(upper));
  last_.insert(last_.begin() + static_cast<std::ptrdiff_t>(c), lower_last);
}

void FreeList::Insert(Key key, int64_t id) {
  const Packed p = Pack(key);
  if (chunks_.empty()) {
    chunks_.push_back({{p}, {id}});
    last_.push_back(p);
    size_ = 1;
    return;
  }
  // Past every chunk's end: append to the last one.
  const size_t c = std::min(ChunkFor(p), chunks_.size() - 1);
  Chunk& chunk = chunks_[c];
  const auto at = std::lower_bound(chunk.keys.begin(), chunk.keys.end(), p);
  const auto offset = at - chunk.keys.begin();
  chunk.keys.insert(at, p);
  chunk.ids.insert(chunk.ids.begin() + offset, id);
  last_[c] = chunk.keys.back();
  ++size_;
  if (chunk.keys.size() > kChunkMax) SplitChunk(c);
}

void FreeList::Erase(Key key) {
  const Packed p = Pack(key);
  const size_t c = ChunkFor(p);
  if (c == chunks_.size()) return;
  Chunk& chunk = chunks_[c];
  const auto at = std::lower_bound(chunk.keys.begin(), chunk.keys.end(), p);
  if (at == chunk.keys.end() || *at != p) return;
  const auto offset = at - chunk.keys.begin();
  chunk.keys.erase(at);
  chunk.ids.erase(chunk.ids.begin() + offset);
  --size_;
  if (chunk.keys.empty()) {
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c));
    last_.erase(last_.begin() + static_cast<std::ptrdiff_t>(c));
  } else {
    last_[c] = chunk.keys.back();
  }
}

std::optional<std::pair<FreeList::Key, int64_t>> FreeList::LowerBound(Key key) const {
  const Packed p = Pack(key);
  const size_t c = ChunkFor(p);
  if (c == chunks_.size()) return std::nullopt;
  const Chunk& chunk = chunks_[c];
  // chunk's last key is >= p, so the entry is in this chunk.
  const auto at = std::lower_bound(chunk.keys.begin(), chunk.keys.end(), p);
  return std::make_pair(Unpack(*at), chunk.ids[static_cast<size_t>(at - chunk.keys.begin())]);
}

}  // namespace memest::symbolic
