// base/stats.h -- the robust summaries memest's fits and reports share (memest calibrate's
// stack fit, memest-train's device-level evaluation), so that a tool reproducing a fit computes
// exactly what the library does.
#ifndef MEMEST_BASE_STATS_H_
#define MEMEST_BASE_STATS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace memest::base {

// Linear-interpolated quantile q in [0, 1] of `v` (not empty).
inline double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

inline double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

// The mean of the smallest 90 % of `v` (not empty): robust to a few bad rows, yet every row a
// fitted coefficient moves counts, where a median would ignore a minority of convolutional models.
inline double TrimmedMean(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t keep = std::max<size_t>(1, v.size() - v.size() / 10);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += v[i];
  return sum / static_cast<double>(keep);
}

}  // namespace memest::base

#endif  // MEMEST_BASE_STATS_H_
