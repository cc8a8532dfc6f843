// The symbolic step on a GPU of limited memory (symbolic/symbolic.cc policy): simulated within
// the caching allocator's budget, with its release-and-retry, when the unlimited step would
// reserve more; Options::allocator.memory_fraction (torch.cuda.set_per_process_memory_fraction)
// and the fit verdict it adds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "memest/json.h"
#include "memest/memest.h"
#include "memory/device.h"

namespace memest {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const Model> Bundled(const std::string& name) {
  auto m = LoadModel((fs::path(MEMEST_SOURCE_DIR) / "datasets/models" / name).string());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

bool Has(const Estimate& e, const std::string& code) {
  return std::any_of(e.diagnostics.begin(), e.diagnostics.end(),
                     [&](const Diagnostic& d) { return d.code == code; });
}

// The fraction of `gpu`'s total memory whose limit (AllocatorSettings::ReservedLimit) is at least
// `bytes`.
double FractionFor(uint64_t bytes, const GpuProfile& gpu) {
  return std::min(1.0,
                  (static_cast<double>(bytes) + 1.0) / static_cast<double>(gpu.total_memory.bytes));
}

class BudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = Bundled("resnet18_train.onnx");
    ASSERT_NE(model_, nullptr);
    options_.batch = 64;
    options_.gpu = "h100-80gb";
    auto gpu = ResolveGpuProfile(options_);
    ASSERT_TRUE(gpu.ok());
    gpu_ = *gpu;
    auto est = MakeEstimator("symbolic");
    ASSERT_TRUE(est.ok());
    symbolic_ = std::move(est).value();
    auto free_run = symbolic_->Run(*model_, options_);
    ASSERT_TRUE(free_run.ok()) << free_run.status().ToString();
    unlimited_ = *free_run;
    // The bundled ResNet-18 at batch 64 holds cached free segments at its peak: the room the
    // release-and-retry path works in.
    ASSERT_LT(unlimited_.peak_allocated, unlimited_.peak_reserved);
  }

  // The estimate with the allocator limited to `limit` bytes.
  Estimate Within(uint64_t limit) {
    Options o = options_;
    o.allocator.memory_fraction = FractionFor(limit, gpu_);
    auto e = symbolic_->Run(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? *e : Estimate{};
  }

  std::shared_ptr<const Model> model_;
  Options options_;
  GpuProfile gpu_;
  std::unique_ptr<Estimator> symbolic_;
  Estimate unlimited_;
};

TEST_F(BudgetTest, AStepThatStaysWithinTheLimitIsTheUnlimitedOne) {
  const Estimate e = Within(unlimited_.peak_reserved);
  EXPECT_EQ(e.peak_reserved, unlimited_.peak_reserved);
  EXPECT_EQ(e.peak_allocated, unlimited_.peak_allocated);
  EXPECT_EQ(e.peak_device, unlimited_.peak_device);
  EXPECT_FALSE(Has(e, "allocator_retries"));
  EXPECT_FALSE(Has(e, "out_of_memory"));
}

TEST_F(BudgetTest, AStepThatNeedsMoreThanTheLimitRunsOutAndShowsWhatItNeeds) {
  // Below the allocated peak no release can help.
  const uint64_t limit = unlimited_.peak_allocated / 2;
  const Estimate e = Within(limit);
  EXPECT_TRUE(Has(e, "out_of_memory"));
  EXPECT_EQ(e.peak_reserved, unlimited_.peak_reserved);
  EXPECT_EQ(e.peak_device, unlimited_.peak_device);
  Options o = options_;
  o.allocator.memory_fraction = FractionFor(limit, gpu_);
  const Fit f = CheckFit(e, gpu_, o);
  EXPECT_FALSE(f.fits);
  EXPECT_LT(f.headroom, 0);
  EXPECT_GT(f.reserved_limit, 0u);
}

// Between the allocated and the reserved peak, releasing the cached segments decides: every
// limit there either fits within it (noted allocator_retries) or runs out (noted out_of_memory,
// with the unlimited peaks), and some limit there fits only through the release.
TEST_F(BudgetTest, ReleasingTheCacheLetsAStepFitThatWouldReserveMore) {
  int fitted_by_release = 0;
  for (int k = 1; k < 10; ++k) {
    const uint64_t limit =
        unlimited_.peak_allocated + (unlimited_.peak_reserved - unlimited_.peak_allocated) * k / 10;
    const Estimate e = Within(limit);
    Options o = options_;
    o.allocator.memory_fraction = FractionFor(limit, gpu_);
    const Fit f = CheckFit(e, gpu_, o);
    if (Has(e, "allocator_retries")) {
      ++fitted_by_release;
      EXPECT_LE(e.peak_reserved, f.reserved_limit) << k;
      EXPECT_GE(e.peak_allocated, unlimited_.peak_allocated / 2) << k;
      EXPECT_TRUE(f.fits) << k;
    } else {
      EXPECT_TRUE(Has(e, "out_of_memory")) << k;
      EXPECT_EQ(e.peak_reserved, unlimited_.peak_reserved) << k;
      EXPECT_FALSE(f.fits) << k;
    }
  }
  EXPECT_GT(fitted_by_release, 0);
}

// The GPU's own memory is a budget too: usable memory less the context, the library memory and
// the margin. Without a fraction, a margin that leaves less than the unlimited reserve makes the
// step run within it.
TEST_F(BudgetTest, TheGpuBudgetIsUsableMemoryLessWhatLivesOutsideTheAllocator) {
  auto stack = ResolveStack(options_.stack);
  ASSERT_TRUE(stack.ok());
  const uint64_t budget = memory::AllocatorBudget(options_, gpu_, *stack, /*nccl_buffers=*/0);
  EXPECT_EQ(budget,
            gpu_.usable_memory.bytes - stack->cuda_context.bytes - stack->library_memory.bytes);
  Options o = options_;
  o.fit.margin_bytes = budget - unlimited_.peak_allocated / 2;  // leaves half the allocated peak
  EXPECT_EQ(memory::AllocatorBudget(o, gpu_, *stack, 0), unlimited_.peak_allocated / 2);
  auto e = symbolic_->Run(*model_, o);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(Has(*e, "out_of_memory"));
  EXPECT_FALSE(CheckFit(*e, gpu_, o).fits);
  o.fit.margin_bytes = 0;
  o.allocator.memory_fraction = 0.5;
  EXPECT_EQ(memory::AllocatorBudget(o, gpu_, *stack, 0),
            *o.allocator.ReservedLimit(gpu_.total_memory.bytes))
      << "the smaller of the two limits";
}

// Under a fraction the margin is kept free within the limit: the process's share is the GPU it
// sees. So a margin cannot be spent by the step the way the whole GPU's margin cannot.
TEST_F(BudgetTest, TheMarginIsKeptFreeWithinTheLimitToo) {
  auto stack = ResolveStack(options_.stack);
  ASSERT_TRUE(stack.ok());
  Options o = options_;
  o.allocator.memory_fraction = FractionFor(unlimited_.peak_reserved, gpu_);
  const uint64_t limit = *o.allocator.ReservedLimit(gpu_.total_memory.bytes);
  EXPECT_EQ(memory::AllocatorBudget(o, gpu_, *stack, 0), limit);
  auto free = symbolic_->Run(*model_, o);
  ASSERT_TRUE(free.ok());
  EXPECT_TRUE(CheckFit(*free, gpu_, o).fits) << "the unlimited step's reserve fits its limit";
  o.fit.margin_bytes = 64ull << 20;
  EXPECT_EQ(memory::AllocatorBudget(o, gpu_, *stack, 0), limit - o.fit.margin_bytes);
  auto kept = symbolic_->Run(*model_, o);
  ASSERT_TRUE(kept.ok());
  const Fit f = CheckFit(*kept, gpu_, o);
  EXPECT_LE(kept->peak_reserved + o.fit.margin_bytes, limit)
      << "simulated within the limit less the margin";
  EXPECT_EQ(f.fits, f.headroom >= 0);
  EXPECT_LE(f.headroom, static_cast<int64_t>(limit - o.fit.margin_bytes - kept->peak_reserved));
}

TEST(MemoryFractionTest, TheLimitIsTheShareOfTotalMemoryRoundedDown) {
  AllocatorSettings a;
  EXPECT_FALSE(a.ReservedLimit(1000).has_value());
  a.memory_fraction = 0.5;
  EXPECT_EQ(a.ReservedLimit(1001), 500u);
  a.memory_fraction = 1.0;
  EXPECT_EQ(a.ReservedLimit(85'017'493'504), 85'017'493'504u);
}

// A GPU of 1,000 bytes, all usable, and an estimate that reserves 300 of them (400 on the device).
GpuProfile ThousandByteGpu() {
  GpuProfile gpu;
  gpu.total_memory.bytes = 1000;
  gpu.usable_memory.bytes = 1000;
  return gpu;
}
Estimate ReservesThreeHundred() {
  Estimate e;
  e.peak_reserved = 300;
  e.peak_device = 400;
  return e;
}

TEST(MemoryFractionTest, TheVerdictNeedsTheReservedPeakWithinTheLimit) {
  const GpuProfile gpu = ThousandByteGpu();
  Estimate e = ReservesThreeHundred();
  Options o;
  EXPECT_TRUE(CheckFit(e, gpu, o).fits);
  EXPECT_EQ(CheckFit(e, gpu, o).reserved_limit, 0u);
  o.allocator.memory_fraction = 0.3;
  Fit f = CheckFit(e, gpu, o);
  EXPECT_TRUE(f.fits);
  EXPECT_EQ(f.reserved_limit, 300u);
  EXPECT_EQ(f.headroom, 0);
  o.allocator.memory_fraction = 0.25;
  f = CheckFit(e, gpu, o);
  EXPECT_FALSE(f.fits);
  EXPECT_EQ(f.headroom, -50);
  EXPECT_TRUE(CheckFit(e, gpu, o.fit).fits) << "the policy-only overload ignores the fraction";
}

// The fit policy's safety holds within the limit: a margin (a share of the limit plus bytes)
// and, judged on the interval's top, what the interval adds to the point estimate.
TEST(MemoryFractionTest, TheMarginAndTheIntervalAreKeptFreeWithinTheLimit) {
  const GpuProfile gpu = ThousandByteGpu();
  Estimate e = ReservesThreeHundred();
  Options o;
  o.allocator.memory_fraction = 0.31;  // limit 310
  EXPECT_EQ(CheckFit(e, gpu, o).headroom, 10);
  o.fit.margin_bytes = 15;
  Fit f = CheckFit(e, gpu, o);
  EXPECT_FALSE(f.fits);
  EXPECT_EQ(f.headroom, -5);
  o.fit.margin_bytes = 0;
  o.fit.margin_fraction = 0.1;  // of the limit: 31
  EXPECT_EQ(CheckFit(e, gpu, o).headroom, -21);
  o.fit.margin_fraction = 0;
  e.device_high = 420;  // the interval adds 20 to the device peak
  o.fit.on = FitOn::kUpper;
  f = CheckFit(e, gpu, o);
  EXPECT_FALSE(f.fits);
  EXPECT_EQ(f.headroom, -10);
  o.fit.on = FitOn::kPoint;
  EXPECT_EQ(CheckFit(e, gpu, o).headroom, 10) << "on the point estimate the interval adds nothing";
}

// The analytical backend models no cached segments, so under a fraction it says so.
TEST(MemoryFractionTest, TheAnalyticalBackendSaysItDoesNotModelTheAllocator) {
  auto model = Bundled("resnet18_train.onnx");
  ASSERT_NE(model, nullptr);
  auto analytical = MakeEstimator("analytical");
  ASSERT_TRUE(analytical.ok());
  Options o;
  o.batch = 64;
  auto plain = (*analytical)->Run(*model, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(Has(*plain, "fraction_without_allocator_model"));
  o.allocator.memory_fraction = 0.5;
  auto capped = (*analytical)->Run(*model, o);
  ASSERT_TRUE(capped.ok());
  EXPECT_TRUE(Has(*capped, "fraction_without_allocator_model"));
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(symbolic.ok());
  auto simulated = (*symbolic)->Run(*model, o);
  ASSERT_TRUE(simulated.ok());
  EXPECT_FALSE(Has(*simulated, "fraction_without_allocator_model"));
}

TEST(MemoryFractionTest, OnlySharesInZeroToOneAreValid) {
  Options o;
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    o.allocator.memory_fraction = bad;
    EXPECT_EQ(Validate(o).code(), ErrorCode::kInvalidArgument) << bad;
  }
  for (double good : {1e-3, 0.5, 1.0}) {
    o.allocator.memory_fraction = good;
    EXPECT_TRUE(Validate(o).ok()) << good;
  }
}

TEST(MemoryFractionTest, JsonReadsAndWritesIt) {
  auto o = OptionsFromJson(R"({"allocator": {"memory_fraction": 0.25}})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(o->allocator.memory_fraction.has_value());
  EXPECT_DOUBLE_EQ(*o->allocator.memory_fraction, 0.25);
  auto back = OptionsFromJson(OptionsToJson(*o));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->allocator.memory_fraction, o->allocator.memory_fraction);
  auto unset = OptionsFromJson(R"({"allocator": {"memory_fraction": null}})");
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->allocator.memory_fraction.has_value());
  EXPECT_FALSE(OptionsFromJson(R"({"allocator": {"memory_fraction": "half"}})").ok());
  EXPECT_FALSE(OptionsFromJson(R"({"allocator": {"memory_fraction": 2}})").ok());
}

}  // namespace
}  // namespace memest
