// memest/measured_row.h -- measured rows, schema `memest.measurement/1`
// (docs/measured-row-schema.md): the one reader, and the writer of what a row's id rests on.
//
// memest-measure writes rows (measurement/row.h adds the run's details: phases, iterations,
// attribution, provenance) and memest-eval, memest-train and the tests read them; both go through
// this header, so the configuration a row's id is computed from and the configuration a reader
// estimates with are the same object.
//
// Reader: only the fields estimates and accuracy tables need are kept; fields it does not know
// are ignored (the schema's versioning rule). A row that lacks a required field, holds a field of
// the wrong JSON type or an unknown enum value is InvalidArgument naming the source, the 1-based
// line and the field. Pure functions without shared state; thread-safe; never throw.
#ifndef MEMEST_MEASURED_ROW_H_
#define MEMEST_MEASURED_ROW_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memest/options.h"
#include "memest/status.h"

namespace memest {

inline constexpr char kMeasuredRowSchema[] = "memest.measurement/1";

// The truth levels of a measured row (docs/measured-row-schema.md, "peaks").
enum class TruthLevel { kTensor, kAllocated, kReserved, kDevice };
inline constexpr TruthLevel kTruthLevels[] = {TruthLevel::kDevice, TruthLevel::kReserved,
                                              TruthLevel::kAllocated, TruthLevel::kTensor};
const char* ToString(TruthLevel level);  // "tensor", "allocated", "reserved", "device"

// A row's peaks at each level; nullopt = not measured on that device.
struct MeasuredPeaks {
  std::optional<uint64_t> tensor;     // sum of live tensor nbytes
  std::optional<uint64_t> allocated;  // CUDA caching allocator allocated_bytes peak
  std::optional<uint64_t> reserved;   // CUDA caching allocator reserved_bytes peak
  std::optional<uint64_t> device;     // max (total - free) from cudaMemGetInfo, or nvidia-smi
  std::optional<uint64_t> Get(TruthLevel level) const;
};

enum class RowStatus { kOk, kOom, kError };
const char* ToString(RowStatus status);  // "ok", "oom", "error"

// The run a row describes: what `config` holds (mode, batch, dims, optimizer, weight_decay,
// precision, loss, checkpoint_segments, checkpoint_blocks, iterations).
struct MeasuredConfig {
  Options options;                      // the fields above; the rest at their defaults
  std::map<std::string, int64_t> dims;  // every bound dim except the one bound by batch
  std::optional<int> iterations = 3;    // null when not recorded (imported measurements)
};

// The `config` object as canonical JSON text (sorted keys, no spaces); optimizer and
// weight_decay are null in inference, checkpoint_segments is written only when above 1,
// checkpoint_blocks only when true.
std::string MeasuredConfigJson(const MeasuredConfig& config);
// sha256 of the canonical JSON {"config": <config>, "model_sha256": "<hex>"}: a row's id and
// the key a sweep resumes by.
std::string MeasuredRowId(const MeasuredConfig& config, const std::string& model_sha256);

struct MeasuredRow {
  std::string source;        // file name (or "gpumemnet" for rows built in memory)
  int line = 0;              // 1-based line in `source`
  std::string id;            // "" when the row has none
  std::string model_path;    // file path, or "gpumemnet:<row index>"
  std::string model_sha256;  // "" when absent
  std::string model_name;
  std::string family;  // "unknown" when absent or null
  // From `config`: mode, batch, dims, optimizer, weight_decay, precision, loss,
  // checkpoint_segments, checkpoint_blocks; from `run`: optimizer_impl (when present). `gpu` is
  // left at its default: the device picks the profile (FindGpuProfileForDevice).
  Options options;
  std::string device_kind;  // "cpu" | "cuda"
  std::string device_name;  // "" when absent
  std::optional<uint64_t> device_total_memory;
  RowStatus status = RowStatus::kOk;
  std::string error;
  MeasuredPeaks peaks;
  std::vector<std::string> used_for;  // empty: held out
};

// Parses one JSON line. `source` and `line` only name the row in errors:
// InvalidArgument("rows.jsonl:7: config.mode: expected one of train|infer, got \"fit\"").
[[nodiscard]] Result<MeasuredRow> ParseMeasuredRow(std::string_view text, const std::string& source,
                                                   int line);
// JSON Lines: one row per non-blank line. The first malformed line fails the whole call.
[[nodiscard]] Result<std::vector<MeasuredRow>> ParseMeasuredRows(std::string_view text,
                                                                 const std::string& source);
// Reads and parses a file (NotFound when it cannot be opened).
[[nodiscard]] Result<std::vector<MeasuredRow>> ReadMeasuredRows(const std::string& path);

}  // namespace memest

#endif  // MEMEST_MEASURED_ROW_H_
