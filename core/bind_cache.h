// core/bind_cache.h -- the bound graphs of one model, kept for the next estimate at the same dims.
//
// A scheduler asks one loaded model many questions: batches x GPUs x option sets. Binding the
// dims (core/bind.h) depends on four options only -- batch, micro_batches, dims and
// allow_unknown_shapes -- so every query that shares them shares one BoundGraph (and, through
// it, what later stages derive from it under equal inputs: core/derived_cache.h).
//
// Policy:
//  * The key is exactly those four options; anything else an estimate reads is not bound here.
//  * The cache keeps the kEntries most recently used bound graphs, and fewer for large graphs:
//    the entries together hold at most kMaxValues values (about 100 bytes each; the newest entry
//    stays whatever its size), so a million-node graph keeps one (README, "Memory of memest
//    itself"). Small graphs keep up to kSmallEntries: an entry past the kEntries-th stays while
//    all kept hold at most kMaxValues / kSmallShare, so a scheduler asking a ResNet about 25
//    batches in any order binds each once. Those extra entries, with what core/derived_cache.h
//    keeps beside each, cost most for graphs of a few thousand nodes; asked at 32 batches x 8
//    option sets (scripts/cache_rss.py), peak RSS goes from 21 to 32 MiB for ResNet-50 and from 34
//    to 67 MiB for a 2,000-node chain, and stays 98 MiB for a 10,000-node one (which keeps no
//    more). Errors are not kept: a failing bind runs again and fails again the same way.
//  * Thread-safe: one mutex around the table; Bind itself runs outside it, so two threads that
//    miss the same key may both bind; the first to store its graph wins, and the other thread
//    gets that one (equal to its own).
#ifndef MEMEST_CORE_BIND_CACHE_H_
#define MEMEST_CORE_BIND_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/bind.h"
#include "core/graph.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::core {

class BindCache {
 public:
  static constexpr size_t kEntries = 4;
  static constexpr size_t kSmallEntries = 32;
  // Entries past the kEntries-th stay while all kept hold at most the values budget / kSmallShare.
  static constexpr size_t kSmallShare = 32;
  static constexpr size_t kMaxValues = 2'000'000;

  explicit BindCache(size_t max_values = kMaxValues) : max_values_(max_values) {}

  // Bind(graph, options), or the bound graph an earlier call made at the same key. `graph` must
  // be the same graph on every call (the model that owns this cache).
  [[nodiscard]] Result<std::shared_ptr<const BoundGraph>> Get(const Graph& graph,
                                                              const Options& options);
  // Forgets every bound graph (those handed out stay valid). For benchmarks of a first estimate.
  void Clear();

 private:
  struct Key {
    std::optional<int64_t> batch;
    int64_t micro_batches = 1;
    std::map<std::string, int64_t> dims;
    bool allow_unknown_shapes = false;
    bool operator==(const Key& o) const {
      return batch == o.batch && micro_batches == o.micro_batches && dims == o.dims &&
             allow_unknown_shapes == o.allow_unknown_shapes;
    }
  };
  static Key KeyOf(const Options& options);

  const size_t max_values_;
  std::mutex mu_;
  // Most recently used first; at most kSmallEntries.
  std::vector<std::pair<Key, std::shared_ptr<const BoundGraph>>> entries_;
};

}  // namespace memest::core

#endif  // MEMEST_CORE_BIND_CACHE_H_
