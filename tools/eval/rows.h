// tools/eval/rows.h -- the accuracy tools' names for measured rows: the library's reader and
// vocabulary (memest/measured_row.h), which memest-measure writes through too.
#ifndef MEMEST_TOOLS_EVAL_ROWS_H_
#define MEMEST_TOOLS_EVAL_ROWS_H_

#include "memest/measured_row.h"

namespace memest::eval {

using Level = TruthLevel;
inline constexpr const TruthLevel (&kLevels)[4] = kTruthLevels;
using Peaks = MeasuredPeaks;
using memest::MeasuredRow;
using memest::RowStatus;

}  // namespace memest::eval

#endif  // MEMEST_TOOLS_EVAL_ROWS_H_
