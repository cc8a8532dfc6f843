// tools/eval/rows.h -- reading measured rows (docs/measured-row-schema.md, `memest.measurement/1`)
// for the accuracy tool.
//
// Only the fields the accuracy tables need are kept; fields this reader does not know are ignored
// (the schema's versioning rule). A row that lacks a required field, holds a field of the wrong
// JSON type or an unknown enum value is an error that names the file and the 1-based line.
//
// Pure functions without shared state; thread-safe.
#ifndef MEMEST_TOOLS_EVAL_ROWS_H_
#define MEMEST_TOOLS_EVAL_ROWS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memest/options.h"
#include "memest/status.h"

namespace memest::eval {

inline constexpr char kRowSchema[] = "memest.measurement/1";

// The truth levels of a measured row (README "What the numbers mean").
enum class Level { kTensor, kAllocated, kReserved, kDevice };
inline constexpr Level kLevels[] = {Level::kDevice, Level::kReserved, Level::kAllocated,
                                    Level::kTensor};
// "tensor", "allocated", "reserved", "device".
const char* ToString(Level level);

struct Peaks {
  std::optional<uint64_t> tensor, allocated, reserved, device;  // null = not measured
  std::optional<uint64_t> Get(Level level) const;
};

enum class RowStatus { kOk, kOom, kError };
const char* ToString(RowStatus status);  // "ok", "oom", "error"

struct MeasuredRow {
  std::string source;        // file name (or "gpumemnet" for rows built in memory)
  int line = 0;              // 1-based line in `source`
  std::string id;            // "" when the row has none
  std::string model_path;    // file path, or "gpumemnet:<row index>"
  std::string model_sha256;  // "" when absent
  std::string model_name;
  std::string family;  // "unknown" when absent or null
  // From `config`: mode, batch, dims, optimizer, weight_decay, precision, loss; from `run`:
  // optimizer_impl (when present). `gpu` is left at
  // its default; the evaluator picks the profile from the device.
  Options options;
  std::string device_kind;  // "cpu" | "cuda"
  std::string device_name;  // "" when absent
  std::optional<uint64_t> device_total_memory;
  RowStatus status = RowStatus::kOk;
  std::string error;
  Peaks peaks;
  std::vector<std::string> used_for;  // empty: held out
};

// Parses one JSON line. `source` and `line` only name the row in errors:
// InvalidArgument("rows.jsonl:7: config.mode: expected one of train|infer, got \"fit\"").
Result<MeasuredRow> ParseRow(std::string_view text, const std::string& source, int line);

// Parses JSON Lines: one row per non-blank line. The first malformed line fails the whole call.
Result<std::vector<MeasuredRow>> ParseRows(std::string_view text, const std::string& source);

// Reads and parses a file (NotFound when it cannot be opened).
Result<std::vector<MeasuredRow>> ReadRowsFile(const std::string& path);

}  // namespace memest::eval

#endif  // MEMEST_TOOLS_EVAL_ROWS_H_
