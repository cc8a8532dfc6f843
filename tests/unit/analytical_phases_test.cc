// The analytical backend's phases (Estimate::phases): the forward and backward's peak and the
// optimizer step's, each whole, the larger being the estimate's; and the JSON that carries them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "memest/json.h"
#include "memest/memest.h"

namespace memest {
namespace {

class AnalyticalPhasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto est = MakeEstimator("analytical");
    ASSERT_TRUE(est.ok()) << est.status().ToString();
    estimator_ = std::move(est).value();
    auto model =
        LoadModel(std::string(MEMEST_SOURCE_DIR) + "/datasets/models/mlp_small_train.onnx");
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
  }
  Estimate At(int64_t batch) {
    Options o;
    o.batch = batch;
    auto e = estimator_->Run(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : Estimate{};
  }

  std::unique_ptr<Estimator> estimator_;
  std::shared_ptr<const Model> model_;
};

// At batch 1 the small MLP's peak is the optimizer step's (Adam's state and temporaries outweigh
// one sample's activations: both phases reserve the same segments, and the step's moment is the
// fuller); the backward's phase still says what grows with the batch, and the step's is the same
// at every batch.
TEST_F(AnalyticalPhasesTest, BelowTheStepsPeakTheBackwardsPhaseSaysWhatGrows) {
  const Estimate one = At(1), two = At(2);
  ASSERT_EQ(one.phases.size(), 2u);
  ASSERT_EQ(two.phases.size(), 2u);
  EXPECT_EQ(one.peak_phase, Phase::kOptimizerStep);
  EXPECT_EQ(one.phases[0].phase, Phase::kBackward);
  EXPECT_EQ(one.phases[1].phase, Phase::kOptimizerStep);
  EXPECT_EQ(one.phases[1].peak_device, one.peak_device);
  EXPECT_EQ(one.breakdown.saved_activations, 0u) << "the step's moment holds no activations";
  EXPECT_GT(one.phases[0].breakdown.saved_activations, 0u);
  EXPECT_LE(one.phases[0].peak_device, one.peak_device);
  EXPECT_LT(one.phases[0].peak_allocated, one.peak_allocated);
  EXPECT_GT(two.phases[0].breakdown.saved_activations, one.phases[0].breakdown.saved_activations);
  EXPECT_EQ(two.phases[1].peak_device, one.phases[1].peak_device);
}

// Past the batch where the activations outgrow the step, the backward's phase is the estimate's.
TEST_F(AnalyticalPhasesTest, AtALargeBatchTheBackwardIsThePeak) {
  const Estimate e = At(4096);
  ASSERT_EQ(e.phases.size(), 2u);
  EXPECT_EQ(e.peak_phase, Phase::kBackward);
  EXPECT_EQ(e.phases[0].peak_device, e.peak_device);
  EXPECT_EQ(e.phases[0].breakdown.saved_activations, e.breakdown.saved_activations);
  EXPECT_GT(e.phases[0].peak_device, e.phases[1].peak_device);
}

TEST_F(AnalyticalPhasesTest, InferenceHasNoPhases) {
  Options o;
  o.batch = 8;
  o.mode = Mode::kInfer;
  auto e = estimator_->Run(*model_, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->phases.empty());
  EXPECT_FALSE(nlohmann::json::parse(EstimateToJson(*e)).contains("phases"));
}

TEST_F(AnalyticalPhasesTest, TheJsonCarriesEachPhaseWithItsPeakAndBreakdown) {
  const Estimate e = At(1);
  const nlohmann::json j = nlohmann::json::parse(EstimateToJson(e));
  ASSERT_TRUE(j.contains("phases"));
  ASSERT_EQ(j["phases"].size(), 2u);
  EXPECT_EQ(j["phases"][0]["phase"], "backward");
  EXPECT_EQ(j["phases"][1]["phase"], "optimizer_step");
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(j["phases"][i]["peak"]["device"].get<uint64_t>(), e.phases[i].peak_device);
    EXPECT_EQ(j["phases"][i]["peak"]["reserved"].get<uint64_t>(), e.phases[i].peak_reserved);
    EXPECT_EQ(j["phases"][i]["peak"]["allocated"].get<uint64_t>(), e.phases[i].peak_allocated);
    EXPECT_EQ(j["phases"][i]["breakdown"]["saved_activations"].get<uint64_t>(),
              e.phases[i].breakdown.saved_activations);
  }
}

}  // namespace
}  // namespace memest
