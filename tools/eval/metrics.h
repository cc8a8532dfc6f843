// tools/eval/metrics.h -- the error metrics of the accuracy tables (docs/accuracy.md,
// "Definitions").
//
// For one pair (predicted p, measured m > 0), in bytes:
//   signed relative error   e = (p - m) / m
//   absolute relative error |e|
//   under-estimate          p < m (strictly; p == m is not an under-estimate)
//   within +-x %            |p - m| * 100 <= x * m, evaluated exactly in integers (the boundary
//                           |e| == x % counts as within)
//   bin                     floor(bytes / B), B = 1 GiB (2^30) or 8 GiB (2^33); a pair is in the
//                           right bin when bin(p) == bin(m). A value exactly on a boundary k * B
//                           belongs to bin k (the bin [k B, (k+1) B) it opens).
// Over a set of N absolute errors sorted ascending a_1 <= ... <= a_N:
//   median  a_((N+1)/2) for odd N; (a_(N/2) + a_(N/2+1)) / 2 for even N
//   mean    (a_1 + ... + a_N) / N (mean absolute percentage error, MAPE, when shown in %)
//   P90     nearest rank: a_k with k = ceil(0.9 N) (no interpolation; P90 of 10 values is a_9)
//   max     a_N
// The gap statistics are over p - m in bytes: median (same rule), P10 and P90 (nearest rank).
// Shares (within, under, bins) are counts / N. With N == 0 every statistic is absent.
// Pure functions; thread-safe.
#ifndef MEMEST_TOOLS_EVAL_METRICS_H_
#define MEMEST_TOOLS_EVAL_METRICS_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace memest::eval {

inline constexpr uint64_t kGiB = uint64_t{1} << 30;
inline constexpr uint64_t kBin1 = kGiB;      // GPUMemNet's MLP bins ("1 GB")
inline constexpr uint64_t kBin8 = 8 * kGiB;  // GPUMemNet's CNN / Transformer bins ("8 GB")

struct Pair {
  uint64_t predicted = 0;
  uint64_t measured = 0;  // > 0
};

double SignedRelativeError(const Pair& p);
double AbsRelativeError(const Pair& p);
bool IsUnder(const Pair& p);
bool IsWithin(const Pair& p, uint32_t percent);
uint64_t Bin(uint64_t bytes, uint64_t bin_bytes);
bool SameBin(const Pair& p, uint64_t bin_bytes);

// Statistics of a list of values (empty list: nullopt).
std::optional<double> Median(std::vector<double> values);
std::optional<double> Mean(const std::vector<double>& values);
// Nearest-rank percentile, 0 < q <= 100: the ceil(q/100 * N)-th smallest value.
std::optional<double> NearestRank(std::vector<double> values, double q);

struct ErrorStats {
  int64_t n = 0;
  // Fractions (0.1 = 10 %); nullopt when n == 0.
  std::optional<double> median, mean, p90, max;  // of |e|
  std::optional<double> median_signed;           // of e
  std::optional<double> median_gap;        // of p - m, in bytes (a constant offset shows here)
  std::optional<double> gap_p10, gap_p90;  // nearest-rank P10 / P90 of p - m, in bytes
  std::optional<double> within5, within10, within20, under, bin1, bin8;
};

// Pairs with measured == 0 are ignored (no relative error exists).
ErrorStats Summarize(const std::vector<Pair>& pairs);

}  // namespace memest::eval

#endif  // MEMEST_TOOLS_EVAL_METRICS_H_
