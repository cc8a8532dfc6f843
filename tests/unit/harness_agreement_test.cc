// Issue 3, item 7: the symbolic backend's allocated peak against the CPU measurement harness's
// measured tensor peak, on the committed rows (datasets/measured/cpu/, written by memest-measure
// with LibTorch 1.13 on the CPU; regenerate with the commands in datasets/measured/README.md).
//
// The comparison is like for like: the estimate is made with the row's own configuration and
// without GPU library workspaces (the CPU runs none); the harness follows the CUDA memory
// semantics the estimators model where the CPU kernels differ (native_dropout's bool mask).
// What the CPU cannot show (CUDA context, allocator segments) is not compared here.
//
// The test prints every bundled-model row and holds the target: every row within 5 %,
// and the median within 1 %. The rows run the optimizer the way torch.optim does for CPU
// parameters (single-tensor, the row's run.optimizer_impl), and the estimate is made with that
// implementation. What remains on ResNet-18 (-1 to -3 %) is the CPU convolution's im2col
// scratch, which a CUDA run does not allocate (cuDNN workspaces are modelled per GPU profile).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "tools/eval/rows.h"

namespace memest {
namespace {

namespace fs = std::filesystem;

// Prints each row; returns |error| per row.
std::vector<double> Compare(const std::string& name) {
  const fs::path file = fs::path(MEMEST_SOURCE_DIR) / "datasets/measured/cpu" / name;
  auto rows = ReadMeasuredRows(file.string());
  EXPECT_TRUE(rows.ok()) << rows.status().ToString();
  if (!rows.ok()) return {};
  auto symbolic = MakeEstimator("symbolic");
  EXPECT_TRUE(symbolic.ok());
  if (!symbolic.ok()) return {};
  std::vector<double> errors;
  for (const eval::MeasuredRow& row : *rows) {
    SCOPED_TRACE(row.model_path + " batch " + std::to_string(row.options.batch.value_or(0)));
    EXPECT_EQ(row.status, eval::RowStatus::kOk);
    EXPECT_EQ(row.device_kind, "cpu");
    if (!row.peaks.tensor.has_value()) {
      ADD_FAILURE() << "no tensor peak";
      continue;
    }
    auto model = LoadModel((fs::path(MEMEST_SOURCE_DIR) / row.model_path).string());
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) continue;
    Options o = row.options;
    o.library_workspaces = false;
    o.fused_kernels = false;  // the harness runs the chains op by op (ops/fusion.h)
    o.inplace_relu = false;   // and each ReLU out of place
    auto e = (*symbolic)->Run(**model, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (!e.ok()) continue;
    const double measured = static_cast<double>(*row.peaks.tensor);
    const double error = (static_cast<double>(e->peak_allocated) - measured) / measured;
    std::printf(
        "[ harness ] %-36s batch %3lld %-13s ckpt %lld  measured %8.1f MiB  symbolic %8.1f MiB  "
        "%+6.1f %%\n",
        row.model_path.c_str(), static_cast<long long>(row.options.batch.value_or(0)),
        ToString(o.optimizer_impl), static_cast<long long>(o.checkpoint_segments),
        measured / 1048576.0, static_cast<double>(e->peak_allocated) / 1048576.0, 100.0 * error);
    errors.push_back(std::abs(error));
  }
  return errors;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Every row of `name` (at least `min_rows`) within `row_bound`, the median within `median_bound`.
void ExpectAgreement(const std::string& name, size_t min_rows, double row_bound,
                     double median_bound) {
  const std::vector<double> errors = Compare(name);
  ASSERT_GE(errors.size(), min_rows);
  for (double e : errors) EXPECT_LE(e, row_bound);
  std::printf("[ harness ] median |error| over %zu rows of %s: %.1f %%\n", errors.size(),
              name.c_str(), 100.0 * Median(errors));
  EXPECT_LE(Median(errors), median_bound);
}

TEST(HarnessAgreement, SymbolicAllocatedPeakMatchesTheCpuHarnessOnBundledModels) {
  ExpectAgreement("bundled.jsonl", 8, 0.05, 0.01);
}

// The same models with activation checkpointing (2 and 4 segments) and with the foreach
// optimizer. With checkpointing the peak moves into the recomputed early layers, where the CPU
// convolution's im2col scratch (absent on CUDA) weighs most: ResNet-18 rows are lower by that.
TEST(HarnessAgreement, SymbolicMatchesTheHarnessWithCheckpointingAndForeach) {
  ExpectAgreement("bundled-options.jsonl", 24, 0.10, 0.01);
}

}  // namespace
}  // namespace memest
