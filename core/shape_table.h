// core/shape_table.h -- every value's concrete dims at bound dims, in one array.
//
// A bound graph (core/bind.h) has a shape per value. One heap vector per value made a bind of a
// 100,000-node graph 200,000 mallocs (and as many frees when it was dropped): most of the bind.
// Here the dims of all values lie back to back in one pool, each value has an offset and a rank.
//
// Policy: a value's shape is set once while the graph is bound (setting it again leaves the old
// dims unused in the pool), and dims in the pool are never written again once filled, so values
// of the same shape may read the same place (Alias: the bind evaluates each distinct symbolic
// shape once, core/symbolic_shapes.h ShapeProgram); the spans handed out read the pool, so they
// are valid until the next Set or Emplace -- the bind sets every shape first and reads them
// after, and a bound graph is never changed once made.
#ifndef MEMEST_CORE_SHAPE_TABLE_H_
#define MEMEST_CORE_SHAPE_TABLE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/checked.h"

namespace memest::core {

// A value's concrete dims.
using Dims = std::span<const int64_t>;

// The product of dims[begin, end) (as far as dims reach); nullopt on a negative dim or overflow.
inline std::optional<uint64_t> DimProduct(Dims dims, size_t begin, size_t end) {
  uint64_t n = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) {
    if (dims[i] < 0) return std::nullopt;
    auto m = base::CheckedMul(n, static_cast<uint64_t>(dims[i]));
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

// A value's dims or nothing: a std::optional<Dims> whose operator* gives the span by value, so
// that `for (int64_t d : *table[id])` on the temporary a lookup returns is safe (std::optional's
// operator* gives a reference into the temporary, which a range-for does not keep alive: the
// fuzzer found that in core/bind.cc).
class MaybeDims : public std::optional<Dims> {
 public:
  using std::optional<Dims>::optional;
  Dims operator*() const { return std::optional<Dims>::operator*(); }
};

class ShapeTable {
 public:
  // `values` values, every shape unknown.
  void Reset(size_t values) {
    pool_.clear();
    offset_.assign(values, 0);
    rank_.assign(values, kUnknown);
  }
  // Room for `dims` dims in all, beside what the pool holds (a hint; changes nothing but time).
  void Reserve(size_t dims) { pool_.reserve(pool_.size() + dims); }
  [[nodiscard]] size_t size() const { return rank_.size(); }

  // Value id's dims, or nullopt when unknown. Valid until the next Set or Emplace.
  [[nodiscard]] MaybeDims operator[](size_t id) const {
    if (rank_[id] == kUnknown) return std::nullopt;
    return Dims(pool_.data() + offset_[id], static_cast<size_t>(rank_[id]));
  }
  // The same for an id that may be negative (none) or past the table: nullopt then.
  [[nodiscard]] MaybeDims Find(int id) const {
    if (id < 0 || static_cast<size_t>(id) >= size()) return std::nullopt;
    return (*this)[static_cast<size_t>(id)];
  }
  // Value id's dims are `dims` (which must not point into this table).
  void Set(size_t id, Dims dims) {
    std::span<int64_t> to = Emplace(id, dims.size());
    std::copy(dims.begin(), dims.end(), to.begin());
  }
  // Room for value id's `rank` dims, for the caller to fill (until the next Set or Emplace); the
  // value's shape is known from here on, unless Forget(id) follows.
  [[nodiscard]] std::span<int64_t> Emplace(size_t id, size_t rank) {
    offset_[id] = pool_.size();
    rank_[id] = static_cast<int32_t>(rank);
    pool_.resize(pool_.size() + rank);
    return std::span<int64_t>(pool_.data() + offset_[id], rank);
  }
  // Value id's dims are value `of`'s, which is known: both read the same place in the pool.
  void Alias(size_t id, size_t of) {
    offset_[id] = offset_[of];
    rank_[id] = rank_[of];
  }
  // Value id's shape is unknown again.
  void Forget(size_t id) { rank_[id] = kUnknown; }
  // One more value, of dims `dims` (nullopt: unknown), as a graph built by hand adds them.
  void Add(MaybeDims dims) {
    offset_.push_back(0);
    rank_.push_back(kUnknown);
    if (dims) Set(size() - 1, *dims);
  }

 private:
  static constexpr int32_t kUnknown = -1;
  std::vector<int64_t> pool_;
  std::vector<size_t> offset_;  // into pool_, per value
  std::vector<int32_t> rank_;   // per value; kUnknown when its shape is unknown
};

}  // namespace memest::core

#endif  // MEMEST_CORE_SHAPE_TABLE_H_
