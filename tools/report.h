// tools/report.h -- renders memest results for people (table, markdown) and
// programs (JSON, CSV).
//
// Everything here is pure formatting: no function reads files, runs a backend
// or writes to a stream. The CLI (memest_main.cc) gathers a Report and prints
// what these functions return: results on stdout, diagnostics and errors on
// stderr.
//
// The JSON layout is a versioned schema (docs/json-schema.md). Rule: adding a
// field keeps the version; renaming or removing one, or changing its meaning or
// unit, bumps it.
#ifndef MEMEST_TOOLS_REPORT_H_
#define MEMEST_TOOLS_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memest/memest.h"
#include "memest/stack.h"
#include "tools/output_format.h"

namespace memest::cli {

// Output formats of -o: every one (tools/output_format.h).
using output::Format;
using output::ToString;
inline Result<Format> ParseFormat(std::string_view s) {
  return output::ParseFormat(s, {Format::kTable, Format::kJson, Format::kCsv, Format::kMd});
}

// Schema tags of the JSON documents; see docs/json-schema.md.
inline constexpr char kEstimateSchema[] = "memest.estimate/1";
inline constexpr char kBackendsSchema[] = "memest.backends/1";
inline constexpr char kGpusSchema[] = "memest.gpus/1";

// What one backend produced for one model.
struct BackendResult {
  std::string backend;
  // OK when `estimate` and `fit` hold a result. kUnavailable: the backend was
  // not built or is not implemented (shown as "unavailable: <reason>"). Any
  // other code: the backend failed.
  Status status;
  Estimate estimate;
  Fit fit;
  // --max-batch only: the largest batch that fits (0 when even batch 1 does
  // not); `estimate` and `fit` are then at that batch (at batch 1 when it is
  // 0).
  std::optional<int64_t> max_batch;
  int max_batch_evaluations = 0;
  int max_batch_traces = 0;                 // MaxBatchResult::traces
  int max_batch_replays = 0;                // MaxBatchResult::replays
  int64_t max_batch_replayed_requests = 0;  // MaxBatchResult::replayed_requests
};

// Three-valued fit status over several backends.
enum class Verdict { kFits, kDoesNotFit, kError };

// The conservative verdict: kDoesNotFit when any successful result does not
// fit; otherwise kError when a backend failed with a code other than
// kUnavailable, or when no backend produced a result; otherwise kFits. In
// --max-batch mode "does not fit" means max_batch == 0.
Verdict OverallVerdict(const std::vector<BackendResult>& results);

// The smallest max_batch over the successful results (the conservative answer);
// nullopt when no result carries one.
std::optional<int64_t> ConservativeMaxBatch(const std::vector<BackendResult>& results);

// The timeline --timeline wrote. Only the symbolic backend records one, so it can come from a
// different backend than the table: the report says which.
struct TimelineInfo {
  std::string path;              // as given on the command line
  std::string backend;           // the backend that drew it ("symbolic")
  std::optional<int64_t> batch;  // the batch it simulates (nullopt: bound by --dim only)
};

// Everything one `memest MODEL ...` run prints.
struct Report {
  std::string memest_version;  // "0.1.0"
  std::string model_path;      // as given on the command line
  ModelSummary model;
  Options options;  // as validated (options.gpu names `gpu`)
  GpuProfile gpu;
  StackProfile stack;  // the stack the estimates used (options.custom_stack, options.stack)
  std::string backend_request;         // the --backend argument: a name, a comma list or "all"
  std::vector<BackendResult> results;  // in ListBackends() order
  bool max_batch_mode = false;         // --max-batch or --max-dim: results carry the largest value
  // The searched dim: "batch" for --max-batch, the --max-dim name (e.g. "seq") otherwise.
  std::string max_dim = "batch";
  int64_t max_batch_limit = 0;  // the search limit passed to FindMaxBatch (--max-batch only)
  std::optional<TimelineInfo> timeline;  // --timeline only
  bool per_rank = false;                 // --per-rank: the table of Estimate::ranks
};

// Renders a Report in `format`. The text always ends with a newline. Table and
// markdown include the fit verdict line (and a `timeline:` line naming the
// backend that drew it); JSON follows memest.estimate/1 (with a "timeline"
// object when there is one); CSV is one header plus one row per backend.
std::string RenderReport(const Report& report, Format format);

// --list-backends: name, available, reason or description. JSON uses
// memest.backends/1.
std::string RenderBackends(const std::vector<BackendInfo>& backends, Format format,
                           std::string_view memest_version);

// --list-gpus: the GPU profiles (name, display name, total, usable, cuBLAS workspace,
// calibration), then the stack profiles (name, GPU it was calibrated on, context, library memory,
// convolution workspace coefficient, band). JSON uses memest.gpus/1 ("gpus" and "stacks") and
// carries each value's source.
std::string RenderGpus(const std::vector<GpuProfile>& gpus, const std::vector<StackProfile>& stacks,
                       Format format, std::string_view memest_version);

// --show-coverage: the rule table against every ONNX operator and, when `model` is given, the
// model's op types without a rule or shape rule. JSON uses memest.coverage/1; every other format
// prints the text form.
std::string RenderCoverage(const OpCoverage& all, const ModelCoverage* model,
                           std::string_view model_path, Format format,
                           std::string_view memest_version);

// One diagnostic as one stderr line (no trailing newline), e.g.
//   warning: [analytical] unknown_op: no rule for Foo (node "/x/Foo", op Foo)
// `backend` may be empty (model-level diagnostics).
std::string FormatDiagnostic(const Diagnostic& diagnostic, std::string_view backend);

// `s` with every byte sequence that is not valid UTF-8 replaced by U+FFFD (the
// JSON renderers here do the same; for text handed to other JSON writers).
std::string ReplaceInvalidUtf8(std::string_view s);

// "512 B", "1.50 KiB", "1.23 GiB" (binary units, two decimals above 1 KiB).
std::string FormatBytes(uint64_t bytes);

// Signed variant for headroom: "-1.23 GiB".
std::string FormatSignedBytes(int64_t bytes);

// `part` as a percentage of `whole` with one decimal ("12.3%"); "-" when whole
// is 0.
std::string FormatPercent(uint64_t part, uint64_t whole);

}  // namespace memest::cli

#endif  // MEMEST_TOOLS_REPORT_H_
