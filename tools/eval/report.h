// tools/eval/report.h -- the accuracy tables: aggregation of an Evaluation into groups, and their
// markdown / CSV / JSON rendering (docs/accuracy.md is RenderMarkdown with `doc`).
//
// Groups:
//  * split: "held-out" (row.used_for empty) or "used" (the row trained or calibrated something);
//    the two are never mixed in one table;
//  * error groups: split x truth level x backend x family. A row counts at a level when its status
//    is ok, it measured that level (non-null, > 0) and the backend produced an estimate. Pairs:
//      tensor    -> predicted peak_allocated vs measured peaks.tensor
//      allocated -> predicted peak_allocated vs measured peaks.allocated
//      reserved  -> predicted peak_reserved  vs measured peaks.reserved
//      device    -> predicted peak_device    vs measured peaks.device
//    Family "all" is every family of the split together (emitted when the split has several);
//  * fit groups: split x backend x family. Counts rows by status, rows not evaluated (model or
//    profile missing), estimate failures, and for OOM / ok rows whose device capacity is known how
//    many the backend predicted "does not fit" (peak_device > capacity).
// Pure formatting; thread-safe.
#ifndef MEMEST_TOOLS_EVAL_REPORT_H_
#define MEMEST_TOOLS_EVAL_REPORT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "memest/memest.h"
#include "tools/eval/evaluate.h"
#include "tools/eval/metrics.h"
#include "tools/eval/rows.h"
#include "tools/output_format.h"

namespace memest::eval {

inline constexpr char kAccuracySchema[] = "memest.accuracy/1";
inline constexpr char kAllFamilies[] = "all";

enum class Split { kHeldOut, kUsed };
const char* ToString(Split split);  // "held-out", "used"

// memest-eval's --format: md, csv or json (tools/output_format.h).
using output::Format;
inline Result<Format> ParseFormat(std::string_view s) {
  return output::ParseFormat(s, {Format::kMd, Format::kCsv, Format::kJson});
}

struct ErrorGroup {
  Split split = Split::kHeldOut;
  Level level = Level::kDevice;
  std::string backend;
  std::string family;
  ErrorStats stats;
  std::optional<double> median_micros;  // of Estimator::Run over the group's rows
};

struct FitGroup {
  Split split = Split::kHeldOut;
  std::string backend;
  std::string family;
  int64_t rows = 0, ok = 0, oom = 0, error = 0;
  int64_t not_evaluated = 0;  // model or GPU profile not found: no backend ran
  int64_t failed = 0;         // the backend returned an error
  int64_t oom_known = 0;      // OOM rows whose device capacity is known (and estimated)
  int64_t oom_refused = 0;    // ... that the backend predicted "does not fit"
  int64_t ok_known = 0;       // ok rows whose capacity is known (and estimated)
  int64_t ok_refused = 0;     // ... predicted "does not fit" although they ran (false refusals)
  std::optional<double> median_micros;  // over every successful estimate of the group
};

struct Summary {
  std::vector<std::string> backends;
  std::vector<BackendInfo> unavailable;  // registered but not evaluated
  std::string cpu_profile;
  std::string machine;             // where timings were taken (free text)
  std::vector<std::string> notes;  // input notes (files, duplicates, sampling)
  std::vector<ErrorGroup> errors;  // ordered: split, level (device, reserved, allocated,
                                   // tensor), backend (as given), family ("all" first)
  std::vector<FitGroup> fits;      // ordered: split, backend, family
  std::map<Split, std::set<std::string>> used_tags;  // distinct used_for tags per split
  std::vector<std::string> failures;                 // one line per (backend or setup, error code)
  std::vector<std::string> row_errors;  // "N rows: <message>" for rows with status oom / error
  int64_t rows = 0;
  int64_t gpumemnet_rows = 0;  // family gpumemnet
  int64_t cpu_rows = 0;        // device.kind cpu
  int64_t cuda_rows = 0;       // device.kind cuda, other families
};

Summary Aggregate(const Evaluation& evaluation);

// The group, or nullptr.
const ErrorGroup* FindErrorGroup(const Summary& s, Split split, Level level,
                                 const std::string& backend, const std::string& family);

struct RenderOptions {
  // Full docs/accuracy.md: title, how to regenerate, truth statement, headline, comparison with
  // published figures, plots, tables, definitions, data license.
  bool doc = false;
  std::string command = "bash scripts/accuracy.sh";  // regenerating command (doc mode)
  std::string plots_dir;  // folder of the SVGs relative to the markdown file; "" = no plots
};

std::string RenderMarkdown(const Summary& s, const RenderOptions& options = {});
std::string RenderCsv(const Summary& s);
std::string RenderJson(const Summary& s);

// Percent text used in the tables: "12.3 %", "0.42 %", "—" for nullopt.
std::string Pct(std::optional<double> fraction);

}  // namespace memest::eval

#endif  // MEMEST_TOOLS_EVAL_REPORT_H_
