// FindMaxDim (memest/estimator.h): the largest sequence length that fits, on a graph whose
// attention makes the peak grow with the square of the length.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "memest/memest.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

std::shared_ptr<const Model> Attention() {
  auto m = LoadModelFromBytes(testing::SelfAttention().Serialize(), "", "attention");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

TEST(MaxDimTest, FindsTheLongestSequenceThatFitsAndItsSuccessorDoesNot) {
  auto m = Attention();
  ASSERT_NE(m, nullptr);
  Options o;
  o.batch = 4;
  o.loss = Loss::kMse;
  o.gpu = "l4-24gb";
  for (const char* backend : {"analytical", "symbolic"}) {
    auto est = MakeEstimator(backend);
    ASSERT_TRUE(est.ok());
    auto r = FindMaxDim(**est, *m, o, "seq");
    ASSERT_TRUE(r.ok()) << backend << ": " << r.status().ToString();
    ASSERT_GT(r->batch, 1) << backend;
    auto gpu = FindGpuProfile(o.gpu);
    ASSERT_TRUE(gpu.ok());
    Options at = o, next = o;
    at.dims["seq"] = r->batch;
    next.dims["seq"] = r->batch + 1;
    auto a = (*est)->Run(*m, at), n = (*est)->Run(*m, next);
    ASSERT_TRUE(a.ok() && n.ok());
    EXPECT_TRUE(CheckFit(*a, *gpu, o.fit).fits) << backend;
    EXPECT_FALSE(CheckFit(*n, *gpu, o.fit).fits) << backend;
    EXPECT_EQ(a->peak_device, r->at_batch.peak_device) << backend;
    // The quadratic peak is found in a few dozen estimates, not thousands.
    EXPECT_LT(r->evaluations, 64) << backend;
  }
}

// The symbolic backend's replay reads the quadratic sizes off two traces and the origin
// (parabolas: every size that changes is the bytes of a tensor over the sequence, without a
// constant part) and gives the exact search's answer with one estimate.
TEST(MaxDimTest, TheSymbolicReplayFollowsTheQuadraticPeak) {
  auto m = Attention();
  ASSERT_NE(m, nullptr);
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  for (const char* gpu : {"l4-24gb", "h100-80gb"}) {
    for (int64_t batch : {1, 4, 32}) {
      Options o;
      o.batch = batch;
      o.loss = Loss::kMse;
      o.gpu = gpu;
      auto fast = FindMaxDim(**est, *m, o, "seq");
      auto exact = FindMaxDim(**est, *m, o, "seq", int64_t{1} << 24, MaxBatchSearch::kExact);
      ASSERT_TRUE(fast.ok() && exact.ok()) << gpu;
      EXPECT_EQ(fast->batch, exact->batch) << gpu << " batch " << batch;
      EXPECT_EQ(fast->evaluations, 1) << gpu << " batch " << batch;
      EXPECT_EQ(fast->traces, 3) << gpu << " batch " << batch;  // 2 for the curves, 1 check
      std::printf("%s batch %lld: seq %lld, replay %d replays; exact %d estimates\n", gpu,
                  static_cast<long long>(batch), static_cast<long long>(fast->batch), fast->replays,
                  exact->evaluations);
    }
  }
}

TEST(MaxDimTest, TheSearchedDimMustBeASymbolicInputDimAndNotAlsoBound) {
  auto m = Attention();
  ASSERT_NE(m, nullptr);
  auto est = MakeEstimator("analytical");
  ASSERT_TRUE(est.ok());
  Options o;
  o.batch = 1;
  auto unknown = FindMaxDim(**est, *m, o, "tokens");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'seq'"), std::string::npos);  // lists the dims
  o.dims["seq"] = 128;
  auto both = FindMaxDim(**est, *m, o, "seq");
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace memest
