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

TEST(HarnessAgreement, SymbolicAllocatedPeakMatchesTheCpuHarnessOnBundledModels) {
  const fs::path file = fs::path(MEMEST_SOURCE_DIR) / "datasets/measured/cpu/bundled.jsonl";
  auto rows = eval::ReadRowsFile(file.string());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_GE(rows->size(), 8u);
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(symbolic.ok());
  std::vector<double> errors;
  for (const eval::MeasuredRow& row : *rows) {
    SCOPED_TRACE(row.model_path + " batch " + std::to_string(row.options.batch.value_or(0)));
    ASSERT_EQ(row.status, eval::RowStatus::kOk);
    ASSERT_EQ(row.device_kind, "cpu");
    ASSERT_TRUE(row.peaks.tensor.has_value());
    auto model = LoadModel((fs::path(MEMEST_SOURCE_DIR) / row.model_path).string());
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    Options o = row.options;
    o.library_workspaces = false;
    auto e = (*symbolic)->Run(**model, o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const double measured = static_cast<double>(*row.peaks.tensor);
    const double error = (static_cast<double>(e->peak_allocated) - measured) / measured;
    std::printf("[ harness ] %-40s batch %4lld %-5s measured %10.1f MiB  symbolic %10.1f MiB  %+6.1f %%\n",
                row.model_path.c_str(), static_cast<long long>(row.options.batch.value_or(0)),
                ToString(row.options.mode), measured / 1048576.0,
                static_cast<double>(e->peak_allocated) / 1048576.0, 100.0 * error);
    EXPECT_LE(std::abs(error), 0.05);
    errors.push_back(std::abs(error));
  }
  std::sort(errors.begin(), errors.end());
  const double median = errors.size() % 2 ? errors[errors.size() / 2]
                                          : (errors[errors.size() / 2 - 1] + errors[errors.size() / 2]) / 2;
  std::printf("[ harness ] median |error| over %zu bundled rows: %.1f %%\n", errors.size(),
              100.0 * median);
  EXPECT_LE(median, 0.01);
}

}  // namespace
}  // namespace memest
