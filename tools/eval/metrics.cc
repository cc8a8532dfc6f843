// tools/eval/metrics.cc -- see metrics.h for the definitions.
#include "tools/eval/metrics.h"

#include <algorithm>
#include <cmath>

namespace memest::eval {

double SignedRelativeError(const Pair& p) {
  const double diff = p.predicted >= p.measured ? static_cast<double>(p.predicted - p.measured)
                                                : -static_cast<double>(p.measured - p.predicted);
  return diff / static_cast<double>(p.measured);
}

double AbsRelativeError(const Pair& p) { return std::fabs(SignedRelativeError(p)); }

bool IsUnder(const Pair& p) { return p.predicted < p.measured; }

bool IsWithin(const Pair& p, uint32_t percent) {
  const unsigned __int128 diff =
      p.predicted >= p.measured ? p.predicted - p.measured : p.measured - p.predicted;
  return diff * 100 <= static_cast<unsigned __int128>(percent) * p.measured;
}

uint64_t Bin(uint64_t bytes, uint64_t bin_bytes) { return bytes / bin_bytes; }

bool SameBin(const Pair& p, uint64_t bin_bytes) {
  return Bin(p.predicted, bin_bytes) == Bin(p.measured, bin_bytes);
}

std::optional<double> Median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n % 2 == 1) return values[n / 2];
  return (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::optional<double> Mean(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

std::optional<double> NearestRank(std::vector<double> values, double q) {
  if (values.empty() || !(q > 0) || q > 100) return std::nullopt;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  // ceil(q/100 * n) computed on integers where q is a whole percentage, to avoid 0.9 * 10 =
  // 9.000000000000002 -> rank 10.
  size_t rank;
  const double q_floor = std::floor(q);
  if (q == q_floor) {
    const auto qi = static_cast<size_t>(q);
    rank = (qi * n + 99) / 100;
  } else {
    rank = static_cast<size_t>(std::ceil(q / 100.0 * static_cast<double>(n)));
  }
  rank = std::clamp<size_t>(rank, 1, n);
  return values[rank - 1];
}

ErrorStats Summarize(const std::vector<Pair>& pairs) {
  ErrorStats s;
  std::vector<double> abs, sig, gap;
  int64_t w5 = 0, w10 = 0, w20 = 0, under = 0, b1 = 0, b8 = 0;
  for (const Pair& p : pairs) {
    if (p.measured == 0) continue;
    sig.push_back(SignedRelativeError(p));
    gap.push_back(static_cast<double>(p.predicted) - static_cast<double>(p.measured));
    abs.push_back(AbsRelativeError(p));
    w5 += IsWithin(p, 5);
    w10 += IsWithin(p, 10);
    w20 += IsWithin(p, 20);
    under += IsUnder(p);
    b1 += SameBin(p, kBin1);
    b8 += SameBin(p, kBin8);
  }
  s.n = static_cast<int64_t>(abs.size());
  if (s.n == 0) return s;
  const double n = static_cast<double>(s.n);
  s.median = Median(abs);
  s.mean = Mean(abs);
  s.p90 = NearestRank(abs, 90);
  s.max = *std::max_element(abs.begin(), abs.end());
  s.median_signed = Median(sig);
  s.median_gap = Median(gap);
  s.gap_p10 = NearestRank(gap, 10);
  s.gap_p90 = NearestRank(gap, 90);
  s.within5 = w5 / n;
  s.within10 = w10 / n;
  s.within20 = w20 / n;
  s.under = under / n;
  s.bin1 = b1 / n;
  s.bin8 = b8 / n;
  return s;
}

}  // namespace memest::eval
