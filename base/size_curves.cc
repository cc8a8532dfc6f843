// base/size_curves.cc -- sizes as polynomials in a searched value (policy in size_curves.h).
#include "base/size_curves.h"

#include <algorithm>
#include <cstddef>
#include <limits>

namespace memest::base {
namespace {

using Wide = __int128;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint64_t Saturate(Wide v) {
  if (v <= 0) return 0;
  return v >= static_cast<Wide>(kMax) ? kMax : static_cast<uint64_t>(v);
}

// floor(a / b) for b > 0.
Wide FloorDiv(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

bool FitsInt64(Wide v) {
  return v >= std::numeric_limits<int64_t>::min() && v <= std::numeric_limits<int64_t>::max();
}

}  // namespace

std::optional<SizeCurves> SizeCurves::Over(std::span<const int64_t> at) {
  const size_t k = at.size();
  if (k < 2 || k > 3) return std::nullopt;
  for (size_t i = 0; i < k; ++i) {
    if (at[i] < (i == 0 ? 0 : 1) || at[i] > kMostValue || (i > 0 && at[i] <= at[i - 1])) {
      return std::nullopt;
    }
  }
  SizeCurves c;
  c.traced_ = k;
  for (size_t i = 0; i < k; ++i) c.v_[i] = at[i];
  const Wide h01 = c.v_[1] - c.v_[0];
  c.den_ = k == 3 ? h01 * (c.v_[2] - c.v_[1]) * (c.v_[2] - c.v_[0]) : h01;
  return c;
}

SizeCurves::Curve SizeCurves::Line(uint64_t s0, uint64_t s1, int64_t h) {
  // rise < 2^46 and h < 2^24: 64-bit arithmetic, no 128-bit division.
  const auto rise = static_cast<int64_t>(s1 - s0);
  Curve c;
  c.first = s0;
  c.d1_num = rise;
  c.integral = rise % h == 0;
  if (c.integral) {
    c.d1 = rise / h;
    c.narrow = c.d1 < (int64_t{1} << 37);  // as in Parabola (the sizes do not fall: d1 >= 0)
  }
  c.slope1 = static_cast<double>(rise) / static_cast<double>(h);
  return c;
}

template <typename Int>
SizeCurves::Curve SizeCurves::OverDenominator(uint64_t first, Int d1_num, Int d2_num, Int den) {
  Curve c;
  c.first = first;
  c.d1_num = d1_num;
  c.d2_num = d2_num;
  c.integral =
      d1_num % den == 0 && d2_num % den == 0 && FitsInt64(d1_num / den) && FitsInt64(d2_num / den);
  if (c.integral) {
    c.d1 = static_cast<int64_t>(d1_num / den);
    c.d2 = static_cast<int64_t>(d2_num / den);
    // |x|, |y| <= 2^24 (values and traced values are at most kMostValue), so |d1 x| and
    // |d2 x y| stay under 2^61 and the sum with first (< 2^46) under 2^63.
    c.narrow = c.d1 > -(int64_t{1} << 37) && c.d1 < (int64_t{1} << 37) &&
               c.d2 > -(int64_t{1} << 13) && c.d2 < (int64_t{1} << 13);
  }
  c.slope1 = static_cast<double>(d1_num) / static_cast<double>(den);
  c.slope2 = static_cast<double>(d2_num) / static_cast<double>(den);
  return c;
}

SizeCurves::Curve SizeCurves::Parabola(const uint64_t s[3], Wide h01, Wide h12, Wide den) {
  // Newton's divided differences, over den: d1 = rise / h01, d2 = bend / (h01 h12 h02). In 64
  // bits where every product fits (the values and sizes the searches trace): a 128-bit division
  // is a library call. (The sizes do not fall and stay below kMostBytes: both differences fit.)
  if (den <= std::numeric_limits<int64_t>::max()) {
    const auto d = static_cast<int64_t>(den), a = static_cast<int64_t>(h01),
               b = static_cast<int64_t>(h12);
    const auto rise = static_cast<int64_t>(s[1] - s[0]), up = static_cast<int64_t>(s[2] - s[1]);
    int64_t d1_num = 0, up_a = 0, rise_b = 0, bend = 0;
    if (!__builtin_mul_overflow(rise, d / a, &d1_num) && !__builtin_mul_overflow(up, a, &up_a) &&
        !__builtin_mul_overflow(rise, b, &rise_b) && !__builtin_sub_overflow(up_a, rise_b, &bend)) {
      return OverDenominator<int64_t>(s[0], d1_num, bend, d);
    }
  }
  const Wide rise = static_cast<Wide>(s[1]) - s[0];
  const Wide bend = (static_cast<Wide>(s[2]) - s[1]) * h01 - rise * h12;
  return OverDenominator<Wide>(s[0], rise * (den / h01), bend, den);
}

inline size_t SizeCurves::SlotOf(const Key& key) const {
  uint64_t h = key[0] * 0x9e3779b97f4a7c15ull + key[1] * 0xc2b2ae3d27d4eb4full + key[2];
  h = (h ^ (h >> 29)) * 0xff51afd7ed558ccdull;
  return static_cast<size_t>(h ^ (h >> 32)) & (slots_.size() - 1);
}

bool SizeCurves::Add(std::span<const uint64_t> s) {
  // Sizes that do not fall, below kMostBytes: the last one's bound is every one's.
  if (traced_ < 2 || s.size() != traced_ || s[traced_ - 1] >= kMostBytes || s[1] < s[0] ||
      (traced_ == 3 && s[2] < s[1])) {
    return false;
  }
  const Key key{s[0], s[1], traced_ == 3 ? s[2] : 0};
  size_t i = 0;  // the empty slot the probe ends at
  if (!slots_.empty()) {
    for (i = SlotOf(key); slots_[i] != 0; i = (i + 1) & (slots_.size() - 1)) {
      if (keys_[slots_[i] - 1] == key) {
        of_.push_back(slots_[i] - 1);
        return true;
      }
    }
  }
  of_.push_back(NewCurve(key, i));
  return true;
}

uint32_t SizeCurves::NewCurve(const Key& key, size_t slot) {
  const auto d = static_cast<uint32_t>(curves_.size());
  keys_.push_back(key);
  if (key[0] == key[traced_ - 1]) {  // the same size at every traced value (sizes do not fall)
    Curve flat;
    flat.first = key[0];
    flat.narrow = true;
    curves_.push_back(flat);
  } else {
    const Wide h01 = v_[1] - v_[0];
    curves_.push_back(traced_ == 2 ? Line(key[0], key[1], static_cast<int64_t>(h01))
                                   : Parabola(key.data(), h01, v_[2] - v_[1], den_));
  }
  if (2 * curves_.size() <= slots_.size()) {  // at most half full: it takes the probe's slot
    slots_[slot] = d + 1;
    return d;
  }
  // Twice as many slots, every curve placed again.
  slots_.assign(std::max<size_t>(64, 2 * slots_.size()), 0);
  for (uint32_t c = 0; c < curves_.size(); ++c) {
    size_t i = SlotOf(keys_[c]);
    while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = c + 1;
  }
  return d;
}

uint64_t SizeCurves::WideBytes(const Curve& c, int64_t v) const {
  const Wide x = static_cast<Wide>(v) - v_[0];
  const Wide y = static_cast<Wide>(v) - v_[1];
  if (c.integral) return Saturate(static_cast<Wide>(c.first) + c.d1 * x + c.d2 * x * y);
  return Saturate(
      FloorDiv(static_cast<Wide>(c.first) * den_ + c.d1_num * x + c.d2_num * x * y, den_));
}

double SizeCurves::Growth(size_t j, int64_t v) const {
  const Curve& c = curves_[of_[j]];
  return c.slope1 + c.slope2 * static_cast<double>(2 * v - v_[0] - v_[1]);
}

}  // namespace memest::base
