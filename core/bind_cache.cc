#include "core/bind_cache.h"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace memest::core {

BindCache::Key BindCache::KeyOf(const Options& options) {
  return Key{options.batch, options.micro_batches, options.dims, options.allow_unknown_shapes};
}

Result<std::shared_ptr<const BoundGraph>> BindCache::Get(const Graph& graph,
                                                         const Options& options) {
  Key key = KeyOf(options);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (!(entries_[i].first == key)) continue;
      std::shared_ptr<const BoundGraph> hit = entries_[i].second;
      std::rotate(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(i),
                  entries_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return hit;
    }
  }
  MEMEST_ASSIGN_OR_RETURN(BoundGraph bound, Bind(graph, options));
  auto made = std::make_shared<const BoundGraph>(std::move(bound));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [k, v] : entries_) {
    if (k == key) return v;  // another thread bound the same key meanwhile
  }
  entries_.insert(entries_.begin(), {std::move(key), made});
  // The newest entry always stays; older ones go past kMaxValues in all, and past the
  // kEntries-th, past a kSmallShare-th of it or past kSmallEntries.
  size_t values = 0, keep = 0;
  while (keep < entries_.size() && keep < kSmallEntries) {
    values += entries_[keep].second->dtypes.size();
    const size_t limit = keep < kEntries ? max_values_ : max_values_ / kSmallShare;
    if (keep > 0 && values > limit) break;
    ++keep;
  }
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(keep), entries_.end());
  return made;
}

void BindCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

}  // namespace memest::core
