// core/name_index.h -- tensor name -> value id: one flat open-addressing table.
//
// The loader looks every tensor name up several times (each initializer, each node input and
// output, each value_info), and a node-based hash map paid a heap node per name plus three
// dependent cache misses per lookup: a quarter of loading a 100,000-node graph. This table keeps
// (hash, id, key) slots in one array, short keys inside the slot and longer ones back to back in
// one buffer, so an insertion allocates nothing but amortized growth and a lookup reads one slot
// (and one key when it is long).
//
// Policy: keys are compared byte for byte (a hash match alone is never trusted); the table holds
// at most half its slots, doubling past that, so probes stay short; ids are >= 0; names are
// shorter than 4 GiB (a model file is under 2 GiB).
#ifndef MEMEST_CORE_NAME_INDEX_H_
#define MEMEST_CORE_NAME_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memest::core {

class NameIndex {
 public:
  // Room for `names` names without rehashing.
  void Reserve(size_t names);
  // Maps `name` to `id` unless `name` is present: returns the id stored for `name` and whether
  // this call stored it.
  std::pair<int, bool> Insert(std::string_view name, int id);
  // The id of `name`, or -1.
  int Find(std::string_view name) const;
  // Asks the CPU to fetch the slot `name` hashes to, so that an Insert or Find of it a little
  // later does not wait for memory. A 100,000-node graph's table is 16 MiB, and each lookup was
  // a cache and TLB miss: the loader prefetches the names of the node a few ahead of the one it
  // reads. Does nothing while the table is small enough to stay in the caches (1 MiB). Changes
  // nothing but timing.
  void Prefetch(std::string_view name) const;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  // Half a cache line: a name of up to kInlineKey bytes (most tensor names of large generated
  // graphs) is compared in the slot itself, a longer one in keys_.
  static constexpr size_t kInlineKey = 16;
  struct Slot {
    uint32_t hash = 0;
    int32_t id = -1;  // -1: empty
    uint32_t key_size = 0;
    uint32_t key_offset = 0;  // into keys_, when key_size > kInlineKey
    char key[kInlineKey] = {};
  };
  static uint32_t Hash(std::string_view name);
  std::string_view KeyOf(const Slot& s) const;
  // The slot holding `name`, or the empty slot where it would go.
  size_t Probe(std::string_view name, uint32_t hash) const;
  void Rehash(size_t slots);

  std::vector<Slot> slots_;  // a power of two in size, or empty
  std::string keys_;         // names longer than kInlineKey, back to back
  size_t size_ = 0;
};

}  // namespace memest::core

#endif  // MEMEST_CORE_NAME_INDEX_H_
