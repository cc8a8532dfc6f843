// base/id_vector.h -- a vector indexed by an id: an int id (a node, a value, a simulated tensor,
// a sharding unit) or an enum (a memory category).
//
// Ids in memest are signed ints, with -1 for "none" (core/graph.h): indexing a std::vector with
// one needs a cast at every use, and a -1 that slips through reads out of bounds. IdVector takes
// the id type as written, converts it in one place and checks it there in builds without NDEBUG
// (a negative or out-of-range id asserts; the RelWithDebInfo default defines NDEBUG, so the check
// runs in a Debug build). Otherwise it is a std::vector<T>: same storage, same cost.
#ifndef MEMEST_BASE_ID_VECTOR_H_
#define MEMEST_BASE_ID_VECTOR_H_

#include <cassert>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace memest::base {

template <typename T, typename Id = int>
class IdVector {
  static_assert(std::is_integral_v<Id> || std::is_enum_v<Id>, "ids are integers or enums");

 public:
  using reference = typename std::vector<T>::reference;
  using const_reference = typename std::vector<T>::const_reference;

  IdVector() = default;
  explicit IdVector(size_t n, const T& value = T()) : v_(n, value) {}

  reference operator[](Id id) { return v_[Index(id)]; }
  const_reference operator[](Id id) const { return v_[Index(id)]; }

  void assign(size_t n, const T& value) { v_.assign(n, value); }
  void resize(size_t n) { v_.resize(n); }
  void reserve(size_t n) { v_.reserve(n); }
  void clear() { v_.clear(); }
  template <typename... Args>
  reference emplace_back(Args&&... args) {
    return v_.emplace_back(std::forward<Args>(args)...);
  }
  void push_back(const T& value) { v_.push_back(value); }
  size_t size() const { return v_.size(); }
  bool empty() const { return v_.empty(); }
  auto begin() { return v_.begin(); }
  auto end() { return v_.end(); }
  auto begin() const { return v_.begin(); }
  auto end() const { return v_.end(); }

 private:
  size_t Index(Id id) const {
    if constexpr (std::is_enum_v<Id>) {
      assert(static_cast<size_t>(id) < v_.size());
    } else {
      assert(id >= 0 && static_cast<size_t>(id) < v_.size());
    }
    return static_cast<size_t>(id);
  }

  std::vector<T> v_;
};

}  // namespace memest::base

#endif  // MEMEST_BASE_ID_VECTOR_H_
