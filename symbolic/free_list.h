// symbolic/free_list.h -- the caching-allocator model's free blocks of one pool, ordered by
// (size, address) for best fit (PyTorch keeps them in a std::set with the same order).
//
// Policy: sorted runs ("chunks") of at most kChunkMax entries (key and id side by side, so that
// an insert or erase moves one array), kept in order, each with its last key in a separate sorted
// array. A search is two binary searches over contiguous memory: the chunk (over the last keys;
// none while there is one chunk) and the entry within it; an insert or erase moves at most one
// chunk's entries, and a full chunk splits in two. So the cost stays that of a small sorted
// vector whether the pool holds ten free blocks (ResNet-50 training: 76 at most at batch 900) or
// thousands (a 100,000-node chain goes past 512 at times), without a heap node per entry as a
// std::map needs. Keys are packed into one 128-bit integer (size high, address low), which
// orders exactly as the (size, address) pair.
#ifndef MEMEST_SYMBOLIC_FREE_LIST_H_
#define MEMEST_SYMBOLIC_FREE_LIST_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace memest::symbolic {

class FreeList {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (size, addr)
  static constexpr size_t kChunkMax = 64;

  // Adds an entry; the key must not be in the list already (the allocator's keys are unique:
  // no two free blocks share an address).
  void Insert(Key key, int64_t id);
  // Removes the entry with exactly this key, if there is one.
  void Erase(Key key);
  // Erase(old_key) then Insert(new_key, id), in one step: when the new key sorts into the same
  // chunk (the usual case: a block split or merged keeps most of its neighbours), the entries
  // between the two positions move by one and nothing else does. `new_key` must not be present.
  void Replace(Key old_key, Key new_key, int64_t id);
  // The first entry at or after `key` (the best fit for a size, lowest address on ties).
  [[nodiscard]] std::optional<std::pair<Key, int64_t>> LowerBound(Key key) const;
  [[nodiscard]] size_t size() const { return size_; }
  // Calls f(key, id) for every entry, in key order. f must not change the list.
  template <typename F>
  void ForEach(F f) const {
    for (const Chunk& c : chunks_) {
      for (const Entry& e : c) f(Unpack(e.key), e.id);
    }
  }

 private:
  using Packed = unsigned __int128;
  struct Entry {
    Packed key;
    int64_t id;
  };
  using Chunk = std::vector<Entry>;  // sorted by key

  static Packed Pack(Key key) { return (Packed{key.first} << 64) | key.second; }
  static Key Unpack(Packed p) { return {static_cast<uint64_t>(p >> 64), static_cast<uint64_t>(p)}; }
  // The order std::lower_bound searches a chunk by.
  static bool KeyBelow(const Entry& e, Packed key) { return e.key < key; }
  // The first chunk whose last key is >= p (chunks_.size() when none is).
  [[nodiscard]] size_t ChunkFor(Packed p) const;
  // The chunk and index of key p, or nullopt when it is not in the list.
  [[nodiscard]] std::optional<std::pair<size_t, size_t>> Locate(Packed p) const;
  // Removes entry i of chunk c (and the chunk, when it empties).
  void EraseAt(size_t c, size_t i);
  void SplitChunk(size_t c);

  std::vector<Chunk> chunks_;  // in key order; none is empty
  std::vector<Packed> last_;   // last_[c] = chunks_[c].back().key
  size_t size_ = 0;
  // Where the last LowerBound found its entry: the allocator takes that very block next (erases
  // or replaces it), so Locate looks there first. Never trusted blindly: a position whose key is
  // not the one sought (the list changed since) is passed over, and keys are unique.
  mutable size_t hint_chunk_ = 0, hint_index_ = 0;
};

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_FREE_LIST_H_
