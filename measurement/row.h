// measurement/row.h -- measured rows in the `memest.measurement/1` schema
// (docs/measured-row-schema.md), shared by memest-measure and the tests.
//
// A row records what was run (model + configuration), where (device, LibTorch, host, memest
// commit) and what it cost. No row exists without a run: an "error" row is written only for a
// configuration that was attempted and failed (its peaks are null).
//
// Pure formatting: nothing here runs a model or touches LibTorch. Thread-safe.
#ifndef MEMEST_MEASUREMENT_ROW_H_
#define MEMEST_MEASUREMENT_ROW_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "measurement/executor.h"
#include "memest/options.h"

namespace memest::measurement {

struct RowRequest {
  std::string model_path;    // relative to the repository root when inside it
  std::string model_sha256;  // of the .onnx file
  std::string model_name;    // file stem
  std::string family;        // mlp | cnn | transformer | rnn | real | gpumemnet ("" -> null)
  Options options;           // mode, batch, optimizer, weight_decay, precision, loss
  std::map<std::string, int64_t> dims;  // every bound dim except the one bound by batch
  int iterations = 3;
  std::string tool;  // "memest-measure 0.1.0"
  // Run settings outside the configuration (recorded under "run", not part of the id).
  uint64_t seed = 0;
  std::string optimizer_impl;  // "single-tensor" | "foreach"
};

// The configuration a row records (memest/measured_row.h MeasuredConfig).
MeasuredConfig ConfigOf(const RowRequest& request);
// Its canonical JSON (MeasuredConfigJson) and the row's id (MeasuredRowId).
std::string ConfigJson(const RowRequest& request);
std::string RowId(const RowRequest& request);

// One row, as a single line of JSON (no trailing newline). `measurement` is the result of a run
// (status "ok" or "oom"); when it is null the row has status "error" with `error`, and `device`
// says where it was attempted.
std::string MakeRow(const RowRequest& request, const Measurement* measurement,
                    const std::string& error, const DeviceInfo& device);

// The memest commit the harness was built from (configure-time `git rev-parse HEAD`), or
// "unknown".
std::string GitCommit();

// Checks `line` against the schema: every required key present with the right JSON type, status
// one of ok|oom|error, peaks null or non-negative integers. OK or InvalidArgument naming the
// first problem. Used by the tests and by --sweep when it resumes.
Status ValidateRow(const std::string& line);

// The "id" field of a row line, or "" when the line is not a JSON object with a string id.
std::string RowIdOf(const std::string& line);

}  // namespace memest::measurement

#endif  // MEMEST_MEASUREMENT_ROW_H_
