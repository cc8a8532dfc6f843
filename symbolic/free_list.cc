// symbolic/free_list.cc -- free blocks ordered by (size, address) (policy in the header).
#include "symbolic/free_list.h"

#include <algorithm>
#include <iterator>

namespace memest::symbolic {

inline size_t FreeList::ChunkFor(Packed p) const {
  if (last_.size() == 1) return p <= last_[0] ? 0 : 1;
  return static_cast<size_t>(std::lower_bound(last_.begin(), last_.end(), p) - last_.begin());
}

void FreeList::SplitChunk(size_t c) {
  Chunk& lower = chunks_[c];
  const auto half = static_cast<std::ptrdiff_t>(lower.size() / 2);
  Chunk upper(lower.begin() + half, lower.end());
  lower.resize(static_cast<size_t>(half));
  const Packed lower_last = lower.back().key;
  chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(upper));
  last_.insert(last_.begin() + static_cast<std::ptrdiff_t>(c), lower_last);
}

void FreeList::Insert(Key key, int64_t id) {
  const Packed p = Pack(key);
  if (chunks_.empty()) {
    chunks_.push_back({{p, id}});
    last_.push_back(p);
    size_ = 1;
    return;
  }
  // Past every chunk's end: append to the last one.
  const size_t c = std::min(ChunkFor(p), chunks_.size() - 1);
  Chunk& chunk = chunks_[c];
  chunk.insert(std::lower_bound(chunk.begin(), chunk.end(), p, KeyBelow), Entry{p, id});
  last_[c] = chunk.back().key;
  ++size_;
  if (chunk.size() > kChunkMax) SplitChunk(c);
}

std::optional<std::pair<size_t, size_t>> FreeList::Locate(Packed p) const {
  if (hint_chunk_ < chunks_.size() && hint_index_ < chunks_[hint_chunk_].size() &&
      chunks_[hint_chunk_][hint_index_].key == p) {
    return std::make_pair(hint_chunk_, hint_index_);
  }
  const size_t c = ChunkFor(p);
  if (c == chunks_.size()) return std::nullopt;
  const Chunk& chunk = chunks_[c];
  // Chunk c ends at or after p, so the search stays inside it.
  const auto at = std::lower_bound(chunk.begin(), chunk.end(), p, KeyBelow);
  if (at->key != p) return std::nullopt;
  return std::make_pair(c, static_cast<size_t>(at - chunk.begin()));
}

void FreeList::Erase(Key key) {
  if (const auto at = Locate(Pack(key))) EraseAt(at->first, at->second);
}

void FreeList::EraseAt(size_t c, size_t i) {
  Chunk& chunk = chunks_[c];
  chunk.erase(chunk.begin() + static_cast<std::ptrdiff_t>(i));
  --size_;
  if (chunk.empty()) {
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c));
    last_.erase(last_.begin() + static_cast<std::ptrdiff_t>(c));
  } else {
    last_[c] = chunk.back().key;
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
                          (c + 1 == chunks_.size() || to < chunks_[c + 1].front().key);
  if (!same_chunk) {
    if (at) EraseAt(at->first, at->second);
    Insert(new_key, id);
    return;
  }
  Chunk& chunk = chunks_[c];
  const auto i = chunk.begin() + static_cast<std::ptrdiff_t>(at->second);
  if (to < from) {
    // Entries [j, i) move up by one; the new one goes to j.
    const auto j = std::lower_bound(chunk.begin(), i, to, KeyBelow);
    std::move_backward(j, i, i + 1);
    *j = Entry{to, id};
  } else {
    // Entries (i, j) move down by one; the new one goes to j - 1.
    const auto j = std::lower_bound(i + 1, chunk.end(), to, KeyBelow);
    std::move(i + 1, j, i);
    *(j - 1) = Entry{to, id};
  }
  last_[c] = chunk.back().key;
}

std::optional<std::pair<FreeList::Key, int64_t>> FreeList::LowerBound(Key key) const {
  const Packed p = Pack(key);
  const size_t c = ChunkFor(p);
  if (c == chunks_.size()) return std::nullopt;
  const Chunk& chunk = chunks_[c];
  // chunk's last key is >= p, so the entry is in this chunk.
  const auto at = std::lower_bound(chunk.begin(), chunk.end(), p, KeyBelow);
  hint_chunk_ = c;
  hint_index_ = static_cast<size_t>(at - chunk.begin());
  return std::make_pair(Unpack(at->key), at->id);
}

}  // namespace memest::symbolic
