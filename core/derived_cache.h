// core/derived_cache.h -- what the layers above compute from one bound graph, kept beside it for
// the next estimate that asks with the same inputs (and, in a Graph, what they compute from the
// graph whatever its dims).
//
// A bound graph is shared by every estimate of the model at the same dims (core/bind_cache.h).
// The per-value facts derived from it (ops::ValueFacts: requires-grad, precision, views, sizes,
// fused chains, saved tensors) read only a few options besides, so a scheduler's queries that
// differ in the optimizer, the GPU's capacity or the fit policy can share them. This cache holds
// them with the bound graph: a result lives no longer than the graph it was derived from, and a
// copy of the graph starts with none.
//
// Policy:
//  * A result is found by its type and its key, compared with ==. The key must hold every input
//    of the derivation besides the bound graph: the caller's contract, met by construction when
//    the key is the derivation's own argument struct with a defaulted operator==.
//  * Bounds hold for each type of result (T and Key) apart: at most `keep` results (kEntries
//    unless the caller says), the most recently used kept, and fewer when their `values` --
//    the size of the graph a result grows with, or 1 for a result of fixed size -- add up to
//    more than kMaxValues (the newest result always stays).
//  * Thread-safe: one mutex around the table; make() runs outside it, so two threads that miss
//    the same key may both make the result; the first stored wins and both get it.
//  * make() may throw; nothing is stored then, and the exception reaches the caller.
#ifndef MEMEST_CORE_DERIVED_CACHE_H_
#define MEMEST_CORE_DERIVED_CACHE_H_

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace memest::core {

class DerivedCache {
 public:
  static constexpr size_t kEntries = 8;
  static constexpr size_t kMaxValues = 1'000'000;

  DerivedCache() = default;
  // A copy (or the target of an assignment) holds no results: they belong to the original.
  DerivedCache(const DerivedCache&) {}
  DerivedCache& operator=(const DerivedCache&) { return *this; }

  // The T stored under `key` by an earlier call, or make(key) (returning
  // std::shared_ptr<const T>) stored now, the key moved into the table. `values` and `keep`: the
  // result's weight and its type's count bound (policy above).
  template <typename T, typename Key, typename Make>
  std::shared_ptr<const T> GetOrMake(Key key, size_t values, Make make,
                                     size_t keep = kEntries) const;
  // The T stored under `key`, or null; a hit counts as a use, as in GetOrMake.
  template <typename T, typename Key>
  std::shared_ptr<const T> Find(const Key& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::static_pointer_cast<const T>(FindLocked(TypeTag<T, Key>(), key));
  }

  // Results held now (for tests).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

 private:
  struct Entry {
    const void* type = nullptr;  // TypeTag<T, Key>(): which T and Key `key` and `value` hold
    std::shared_ptr<const void> key;
    std::shared_ptr<const void> value;
    size_t values = 0;  // the result's weight
  };
  // One address per (T, Key) pair.
  template <typename T, typename Key>
  static const void* TypeTag() {
    static const char tag = 0;
    return &tag;
  }
  template <typename Key>
  std::shared_ptr<const void> FindLocked(const void* type, const Key& key) const;
  void Keep(Entry entry, size_t keep) const;

  mutable std::mutex mu_;
  mutable std::vector<Entry> entries_;  // most recently used first
};

template <typename Key>
std::shared_ptr<const void> DerivedCache::FindLocked(const void* type, const Key& key) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].type != type || !(*static_cast<const Key*>(entries_[i].key.get()) == key)) {
      continue;
    }
    std::rotate(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(i),
                entries_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    return entries_.front().value;
  }
  return nullptr;
}

template <typename T, typename Key, typename Make>
std::shared_ptr<const T> DerivedCache::GetOrMake(Key key, size_t values, Make make,
                                                 size_t keep) const {
  const void* type = TypeTag<T, Key>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto hit = FindLocked(type, key)) return std::static_pointer_cast<const T>(hit);
  }
  std::shared_ptr<const T> made = make(std::as_const(key));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto hit = FindLocked(type, key)) return std::static_pointer_cast<const T>(hit);
  Keep(Entry{type, std::make_shared<const Key>(std::move(key)), made, values}, keep);
  return made;
}

inline void DerivedCache::Keep(Entry entry, size_t keep) const {
  const void* type = entry.type;
  entries_.insert(entries_.begin(), std::move(entry));
  // Newest first: an entry of this type stays while its type's count and weight are in bounds.
  size_t count = 0;
  size_t values = 0;
  auto out = entries_.begin();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->type == type) {
      ++count;
      values += it->values;
      if (count > 1 && (count > keep || values > kMaxValues)) continue;
    }
    if (out != it) *out = std::move(*it);
    ++out;
  }
  entries_.erase(out, entries_.end());
}

}  // namespace memest::core

#endif  // MEMEST_CORE_DERIVED_CACHE_H_
