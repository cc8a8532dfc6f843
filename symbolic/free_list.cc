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

std::optional<std::pair<size_t, size_t>> FreeList::Locate(Packed p) const {
  if (hint_chunk_ < chunks_.size() && hint_index_ < chunks_[hint_chunk_].keys.size() &&
      chunks_[hint_chunk_].keys[hint_index_] == p) {
    return std::make_pair(hint_chunk_, hint_index_);
  }
  const size_t c = ChunkFor(p);
  if (c == chunks_.size()) return std::nullopt;
  const std::vector<Packed>& keys = chunks_[c].keys;
  // Chunk c ends at or after p, so the search stays inside it.
  const auto at = std::lower_bound(keys.begin(), keys.end(), p);
  if (*at != p) return std::nullopt;
  return std::make_pair(c, static_cast<size_t>(at - keys.begin()));
}

void FreeList::Erase(Key key) {
  if (const auto at = Locate(Pack(key))) EraseAt(at->first, at->second);
}

void FreeList::EraseAt(size_t c, size_t i) {
  Chunk& chunk = chunks_[c];
  chunk.keys.erase(chunk.keys.begin() + static_cast<std::ptrdiff_t>(i));
  chunk.ids.erase(chunk.ids.begin() + static_cast<std::ptrdiff_t>(i));
  --size_;
  if (chunk.keys.empty()) {
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c));
    last_.erase(last_.begin() + static_cast<std::ptrdiff_t>(c));
  } else {
    last_[c] = chunk.keys.back();
  }
}

void FreeList::Replace(Key old_key, Key new_key, int64_t id) {
  const Packed from = Pack(old_key);
  const Packed to = Pack(new_key);
  const auto at = Locate(from);
  // The new key stays in the old one's chunk when it sorts after the previous chunk and before
  // the next.
  const size_t c = at ? at->first : 0;
  const bool same_chunk = at && (c == 0 || to > last_[c - 1]) &&
                          (c + 1 == chunks_.size() || to < chunks_[c + 1].keys.front());
  if (!same_chunk) {
    if (at) EraseAt(at->first, at->second);
    Insert(new_key, id);
    return;
  }
  std::vector<Packed>& keys = chunks_[c].keys;
  std::vector<int64_t>& ids = chunks_[c].ids;
  const auto i = static_cast<std::ptrdiff_t>(at->second);
  if (to < from) {
    // Entries [j, i) move up by one; the new one goes to j.
    const auto j = std::lower_bound(keys.begin(), keys.begin() + i, to) - keys.begin();
    std::move_backward(keys.begin() + j, keys.begin() + i, keys.begin() + i + 1);
    std::move_backward(ids.begin() + j, ids.begin() + i, ids.begin() + i + 1);
    keys[static_cast<size_t>(j)] = to;
    ids[static_cast<size_t>(j)] = id;
  } else {
    // Entries (i, j) move down by one; the new one goes to j - 1.
    const auto j = std::lower_bound(keys.begin() + i + 1, keys.end(), to) - keys.begin();
    std::move(keys.begin() + i + 1, keys.begin() + j, keys.begin() + i);
    std::move(ids.begin() + i + 1, ids.begin() + j, ids.begin() + i);
    keys[static_cast<size_t>(j - 1)] = to;
    ids[static_cast<size_t>(j - 1)] = id;
  }
  last_[c] = keys.back();
}

std::optional<std::pair<FreeList::Key, int64_t>> FreeList::LowerBound(Key key) const {
  const Packed p = Pack(key);
  const size_t c = ChunkFor(p);
  if (c == chunks_.size()) return std::nullopt;
  const Chunk& chunk = chunks_[c];
  // chunk's last key is >= p, so the entry is in this chunk.
  const auto at = std::lower_bound(chunk.keys.begin(), chunk.keys.end(), p);
  hint_chunk_ = c;
  hint_index_ = static_cast<size_t>(at - chunk.keys.begin());
  return std::make_pair(Unpack(*at), chunk.ids[hint_index_]);
}

}  // namespace memest::symbolic
