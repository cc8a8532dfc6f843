// symbolic/free_list.h -- the caching-allocator model's free blocks of one pool, ordered by
// (size, address) for best fit (PyTorch keeps them in a std::set with the same order).
//
// Policy: a sorted vector while the pool holds few free blocks -- the usual case: tens (76 at most
// for ResNet-50 training at batch 900), where a search of contiguous entries beats a tree and no
// change asks the heap for a node -- and a tree once it holds more than kTreeAbove, for graphs
// that leave hundreds or thousands of cached blocks (a 100,000-node chain: 87 on average, past
// 512 at times), where inserting into a vector would move them all each time. kTreeAbove = 128
// was the fastest of 64/128/256/512 in one run of bench/estimate_bench.cc (chain100k symbolic
// 304 ms against 349 ms at 512; ResNet-50 never reaches it, and at 64 its estimate took 1.8x as
// long). The switch is one way and changes no answer: both keep the same order.
#ifndef MEMEST_SYMBOLIC_FREE_LIST_H_
#define MEMEST_SYMBOLIC_FREE_LIST_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace memest::symbolic {

class FreeList {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (size, addr)
  static constexpr size_t kTreeAbove = 128;

  void Insert(Key key, int64_t id);
  // Removes the entry with exactly this key, if there is one.
  void Erase(Key key);
  // The first entry at or after `key` (the best fit for a size, lowest address on ties).
  [[nodiscard]] std::optional<std::pair<Key, int64_t>> LowerBound(Key key) const;
  [[nodiscard]] size_t size() const { return tree_ ? tree_entries_.size() : entries_.size(); }

 private:
  bool tree_ = false;
  std::vector<std::pair<Key, int64_t>> entries_;  // sorted, while !tree_
  std::map<Key, int64_t> tree_entries_;           // once tree_
};

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_FREE_LIST_H_
