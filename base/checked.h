// base/checked.h -- overflow-checked 64-bit arithmetic for dims and byte counts.
//
// Every product of dims or bytes on untrusted input goes through these helpers. They return
// std::nullopt on overflow (or on a negative operand where only non-negative values make sense),
// and callers turn that into a Status naming the tensor.
#ifndef MEMEST_BASE_CHECKED_H_
#define MEMEST_BASE_CHECKED_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <span>

namespace memest::base {

inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> CheckedMulS(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> CheckedAddS(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
// Saturating add for totals that are reported, not trusted for sizing.
inline uint64_t SatAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
inline uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

// Number of elements of a shape with non-negative dims; nullopt on a negative dim or overflow.
inline std::optional<uint64_t> CheckedNumel(std::span<const int64_t> dims) {
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    auto m = CheckedMul(n, static_cast<uint64_t>(d));
    if (!m) return std::nullopt;
    n = *m;
  }
  return n;
}

// Round `n` up to a multiple of `m` (m > 0); nullopt on overflow.
inline std::optional<uint64_t> CheckedRoundUp(uint64_t n, uint64_t m) {
  uint64_t q = n / m + (n % m != 0);
  return CheckedMul(q, m);
}

}  // namespace memest::base

#endif  // MEMEST_BASE_CHECKED_H_
