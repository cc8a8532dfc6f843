// tools/eval/plots.h -- the accuracy plots as plain SVG text (no plotting library).
//
//  * scatter: predicted vs measured bytes, log2-log2 axes with byte-unit ticks (KiB/MiB/GiB), the
//    y = x diagonal, a shaded +-20 % band, one colour per truth level, legend with counts. Points
//    that fall on the same half-pixel are drawn once (the legend counts all rows);
//  * histogram: signed relative error in percent, one translucent bar series per truth level
//    (share of that level's rows per bin), a marker at 0, an overflow bin for the right tail.
// Pure functions; thread-safe.
#ifndef MEMEST_TOOLS_EVAL_PLOTS_H_
#define MEMEST_TOOLS_EVAL_PLOTS_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tools/eval/evaluate.h"
#include "tools/eval/rows.h"

namespace memest::eval {

struct ScatterSeries {
  std::string label;
  std::string color;                              // CSS colour
  std::vector<std::pair<double, double>> points;  // (measured, predicted) bytes, both > 0
};
std::string ScatterSvg(const std::string& title, const std::vector<ScatterSeries>& series);

struct HistogramSeries {
  std::string label;
  std::string color;
  std::vector<double> errors;  // signed relative errors (0.1 = +10 %)
};
std::string HistogramSvg(const std::string& title, const std::vector<HistogramSeries>& series);

// Byte label of a power of two: 1048576 -> "1 MiB", 3 << 30 -> "3 GiB".
std::string BytesLabel(double bytes);

// The colour of a truth level in every plot.
const char* LevelColor(Level level);

// file name ("scatter_<backend>.svg", "errors_<backend>.svg") -> SVG text, from the held-out
// rows of `evaluation` (same pairs as the error tables).
std::map<std::string, std::string> MakePlots(const Evaluation& evaluation);

}  // namespace memest::eval

#endif  // MEMEST_TOOLS_EVAL_PLOTS_H_
