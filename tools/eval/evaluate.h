// tools/eval/evaluate.h -- runs memest backends over measured rows.
//
// For each row the evaluator
//  * finds the model: "gpumemnet:<index>" is rebuilt in memory by the GPUMemNet importer
//    (datasets/gpumemnet/); any other path is a file, tried as given when absolute, else relative
//    to `root` and then to the folder of the rows file. When the row records model.sha256 and the
//    model found has another hash, the row is not evaluated (the measurement belongs to another
//    model) unless `allow_sha_mismatch`;
//  * builds Options from the row's config (mode, batch, dims, optimizer, weight_decay, precision,
//    loss) and picks the GPU profile from the device (memest::FindGpuProfileForDevice); CPU rows
//    use `cpu_profile` (it decides the cuBLAS workspaces counted in peak_allocated, see
//    docs/accuracy.md);
//  * times one Estimator::Run per backend (wall clock, steady_clock) and records whether the
//    estimate fits the device's capacity (the profile's usable memory, else the row's
//    device.total_memory; unknown for CPU rows).
// Not thread-safe (caches); one Evaluator per thread.
#ifndef MEMEST_TOOLS_EVAL_EVALUATE_H_
#define MEMEST_TOOLS_EVAL_EVALUATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "tools/eval/heldout.h"
#include "tools/eval/rows.h"

namespace memest::eval {

// GPUMemNet's 6,000 rows as measured rows, with their rebuilt ONNX bytes (index -> bytes).
// `data_dir` "" reads <root>/datasets/gpumemnet.
struct GpumemnetData {
  std::string dir;
  std::vector<MeasuredRow> rows;
  std::map<int, std::string> bytes;
  std::map<int, RowAttrs> attrs;  // arch, act, depth, step (1 | 2), index: for holdout clauses
};
Result<GpumemnetData> LoadGpumemnet(const std::string& data_dir, const std::string& root);

// The predicted bytes compared with a measured level: peak_allocated for tensor and allocated,
// peak_reserved for reserved, peak_device for device.
uint64_t PredictedAt(const Estimate& estimate, Level level);

// The profile CPU rows are predicted with: "cpu" when base/gpu_profiles.json has such a profile
// (a device without CUDA context or cuBLAS workspaces), else "a100-40gb" (the smallest cuBLAS
// workspace of the cited profiles).
std::string DefaultCpuProfile();

struct EvalConfig {
  std::vector<std::string> backends;  // available backend names, in table order
  std::string root = ".";             // the repository root (relative model paths)
  std::string gpumemnet_dir;          // "" = default search (see LoadGpumemnet)
  std::string cpu_profile;            // "" = DefaultCpuProfile()
  // The stack CUDA rows are predicted with, per GPU profile name ("" for every profile not
  // named); a profile with no entry gets the default stack.
  std::map<std::string, std::string> gpu_stacks;
  bool allow_sha_mismatch = false;
};

struct Prediction {
  Status status;  // OK when `estimate` holds a result
  Estimate estimate;
  double micros = 0;         // wall time of Estimator::Run
  std::optional<bool> fits;  // predicted fit, when the capacity is known
};

struct RowOutcome {
  std::string profile;                  // GPU profile used ("" when none could be chosen)
  std::optional<uint64_t> capacity;     // bytes a job may use on the row's device, when known
  Status setup;                         // model or profile failure: no backend ran
  std::vector<Prediction> predictions;  // one per backend (empty when !setup.ok())
};

struct Evaluation {
  std::vector<std::string> backends;
  std::vector<MeasuredRow> rows;
  std::vector<RowOutcome> outcomes;  // parallel to rows
};

// Backends that answered Unavailable for every row they were asked about (registered, but e.g.
// without weights) are taken out of `evaluation` (names and predictions) and returned with the
// first message as the reason.
std::vector<BackendInfo> DropUnavailable(Evaluation* evaluation);

class Evaluator {
 public:
  // Fails when a backend cannot be created.
  static Result<std::unique_ptr<Evaluator>> Create(EvalConfig config);

  // Rebuilt GPUMemNet models to use for "gpumemnet:<index>" paths (else loaded on first need).
  void AddGpumemnetBytes(std::map<int, std::string> bytes);

  RowOutcome EvaluateRow(const MeasuredRow& row);

  // Every row in order; `progress` (may be empty) is called after each row with (done, total).
  Evaluation EvaluateAll(std::vector<MeasuredRow> rows,
                         const std::function<void(size_t, size_t)>& progress = {});

 private:
  explicit Evaluator(EvalConfig config) : config_(std::move(config)) {}
  Result<std::shared_ptr<const Model>> ResolveModel(const MeasuredRow& row);
  Result<std::string> GpumemnetBytes(int index);

  struct FileModel {
    Status status;
    std::shared_ptr<const Model> model;
    std::string sha256;
  };

  EvalConfig config_;
  std::vector<std::unique_ptr<Estimator>> estimators_;
  std::map<std::string, FileModel> file_models_;  // by resolved path
  std::map<int, std::string> gpumemnet_bytes_;
  bool gpumemnet_loaded_ = false;
};

}  // namespace memest::eval

#endif  // MEMEST_TOOLS_EVAL_EVALUATE_H_
