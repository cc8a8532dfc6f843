// base/size_curves.h -- sizes in bytes as polynomials in a searched value (the batch, or a dim
// such as the sequence length), each through its sizes at two or three traced values: what the
// max-batch and max-dim searches read between and beyond their traces (the symbolic backend's
// allocator requests, symbolic/batch_trace.h; the analytical backend's terms,
// analytical/step_terms.h).
//
// Policy:
//  * Through two traces a size is the line through them (a batch dim times the rest); through
//    three, the parabola (eager attention's [B, H, S, S] scores grow with the square of the
//    sequence length). Each is kept in Newton's form over the traced values and read rounded
//    down, exactly: in 64-bit integers where the coefficients are integers small enough, else in
//    128 bits over the common denominator.
//  * A size that falls as the value grows, or that is 2^46 bytes or more, gets no curve: the
//    searches' models assume sizes that grow, and their products with values up to 2^24 stay far
//    inside 128 bits.
//  * A size that is neither a line nor a parabola (a workspace that is a fraction of its operands)
//    is off its curve elsewhere; the callers compare a trace at another value with the curves
//    before they trust them there.
//  * Sizes equal at every traced value have one curve: a training step's requests repeat the same
//    sizes layer after layer and iteration after iteration, so each size added names its curve,
//    each curve is fitted once, and a caller reading every size at one value can read each
//    curve there once (DistinctBytes).
#ifndef MEMEST_BASE_SIZE_CURVES_H_
#define MEMEST_BASE_SIZE_CURVES_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace memest::base {

class SizeCurves {
 public:
  SizeCurves() = default;  // no curves, no traced values

  // The largest size a curve passes through (exclusive) and the largest value it is read at.
  static constexpr uint64_t kMostBytes = uint64_t{1} << 46;
  static constexpr int64_t kMostValue = int64_t{1} << 24;

  // Curves through sizes at the values `at`: 2 or 3 of them, increasing, in [1, kMostValue] --
  // the first may be 0, the origin, where a caller that expects sizes proportional to the value
  // (or to its square) puts size 0; nullopt otherwise.
  [[nodiscard]] static std::optional<SizeCurves> Over(std::span<const int64_t> at);

  // Adds the curve through sizes[i] at at(i), one size per traced value: size j, numbered in the
  // order added (sizes equal to an earlier Add's share its curve). False, and nothing added, when
  // the sizes are not one per traced value, or a size is kMostBytes or more or falls as the value
  // grows.
  [[nodiscard]] bool Add(std::span<const uint64_t> sizes);

  void Reserve(size_t n) { of_.reserve(n); }
  size_t size() const { return of_.size(); }  // the sizes added
  size_t traced() const { return traced_; }
  int64_t at(size_t i) const { return v_[i]; }
  // The distinct curves, numbered in the order first added, and size j's among them.
  size_t distinct() const { return curves_.size(); }
  [[nodiscard]] uint32_t DistinctOf(size_t j) const { return of_[j]; }

  // Distinct curve d's bytes at value v in [0, kMostValue] (where the 128-bit arithmetic cannot
  // overflow), rounded down (0 where the polynomial is negative).
  [[nodiscard]] uint64_t DistinctBytes(size_t d, int64_t v) const {
    const Curve& c = curves_[d];
    if (c.narrow && v >= 1 && v <= kMostValue) {  // (inline: the searches read every curve often)
      const int64_t x = v - v_[0];
      const int64_t bytes = static_cast<int64_t>(c.first) + c.d1 * x + c.d2 * x * (v - v_[1]);
      return bytes <= 0 ? 0 : static_cast<uint64_t>(bytes);
    }
    return WideBytes(c, v);
  }
  // Size j's bytes at value v: its distinct curve's.
  [[nodiscard]] uint64_t Bytes(size_t j, int64_t v) const { return DistinctBytes(of_[j], v); }
  // Size j's growth per unit of the value at v (in doubles, for guesses that need no exactness).
  [[nodiscard]] double Growth(size_t j, int64_t v) const;
  // Size j as first + d1 x + d2 x (x - h) in x = v - at(0), h = at(1) - at(0), in doubles.
  [[nodiscard]] double First(size_t j) const { return static_cast<double>(curves_[of_[j]].first); }
  [[nodiscard]] double D1(size_t j) const { return curves_[of_[j]].slope1; }
  [[nodiscard]] double D2(size_t j) const { return curves_[of_[j]].slope2; }

 private:
  using Wide = __int128;
  // A size in Newton's form over the traced values v_[0..2]:
  //   bytes(v) = floor(first + d1 (v - v0) + d2 (v - v0) (v - v1)),
  // d1 = (bytes(v1) - first) / (v1 - v0), d2 the second divided difference (0 through two
  // traces). Both are integers for sizes that are integer polynomials (the usual case); else they
  // are kept as numerators over den_.
  struct Curve {
    uint64_t first = 0;
    bool integral = true;
    // Integral, with coefficients small enough that first + d1 x + d2 x y cannot overflow 64
    // bits at any value the curves are read at: Bytes() then needs no 128-bit arithmetic.
    bool narrow = false;
    int64_t d1 = 0, d2 = 0;           // when integral
    __int128 d1_num = 0, d2_num = 0;  // over den_, when not
    double slope1 = 0, slope2 = 0;    // d1 and d2, for the estimates that need no exactness
  };
  // The curve through sizes s0 at v0 and s1 at v0 + h (a line), and through three sizes at
  // v0 < v1 < v2 (h01 = v1 - v0, h12 = v2 - v1, den = den_).
  static Curve Line(uint64_t s0, uint64_t s1, int64_t h);
  static Curve Parabola(const uint64_t s[3], Wide h01, Wide h12, Wide den);
  // The curve first + d1 x + d2 x y with d1 = d1_num / den and d2 = d2_num / den (Parabola's), in
  // Int's arithmetic: int64_t where the numerators were worked out in 64 bits, else Wide.
  template <typename Int>
  static Curve OverDenominator(uint64_t first, Int d1_num, Int d2_num, Int den);
  uint64_t WideBytes(const Curve& c, int64_t v) const;  // Bytes() in 128 bits
  using Key = std::array<uint64_t, 3>;                  // a curve's traced_ sizes, 0 past them
  // Fits the curve through `key`, which no curve passes through yet, and places it in `slot`
  // (where the probe for it ended) or in a table grown for it. Returns its number.
  uint32_t NewCurve(const Key& key, size_t slot);
  size_t SlotOf(const Key& key) const;  // where a probe for a curve starts

  std::vector<Curve> curves_;  // distinct
  std::vector<uint32_t> of_;   // per size added: its curve
  std::vector<Key> keys_;      // per curve: the sizes it passes through
  // Open addressing over keys_: 1 + a curve's number, 0 for an empty slot; at most half full.
  std::vector<uint32_t> slots_;
  size_t traced_ = 0;
  int64_t v_[3] = {0, 0, 0};
  // (v1 - v0)(v2 - v1)(v2 - v0) through three traces, v1 - v0 through two
  Wide den_ = 1;
};

}  // namespace memest::base

#endif  // MEMEST_BASE_SIZE_CURVES_H_
