// What the loss on the first output keeps (memory/loss.h): cross-entropy's log-probabilities are
// fp32 under autocast and the logits' dtype otherwise.
#include "memory/loss.h"

#include <gtest/gtest.h>

#include "memest/memest.h"
#include "memory/context.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using memest::testing::GraphBuilder;
using memest::testing::kFloat;

// X[N,64] @ W[64,1000] -> logits [N,1000].
std::shared_ptr<const Model> Classifier() {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 64});
  b.AddInitializer("W", {64, 1000});
  b.AddNode("MatMul", {"X", "W"}, {"logits"}, "head");
  b.AddOutput("logits", kFloat);
  auto m = LoadModelFromBytes(b.Serialize(), "/tmp", "classifier");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

TEST(LossTest, LogProbsAreFp32UnderAutocastAndTheLogitsDtypeOtherwise) {
  auto model = Classifier();
  ASSERT_NE(model, nullptr);
  constexpr uint64_t kElements = 32 * 1000;
  for (auto [precision, bytes] :
       {std::pair{Precision::kFp32, 4}, std::pair{Precision::kAmpBf16, 4},
        std::pair{Precision::kAmpFp16, 4}, std::pair{Precision::kBf16, 2}}) {
    Options o;
    o.batch = 32;
    o.precision = precision;
    if (precision == Precision::kAmpFp16) o.gpu = "v100-32gb";
    auto ctx = memory::EstimationContext::Make(*model, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    const int logits = model->graph().outputs.front();
    const memory::LossTensors t =
        memory::LossTensorsFor((*ctx)->bound(), (*ctx)->facts(), o, logits);
    EXPECT_TRUE(t.cross_entropy);
    EXPECT_EQ(t.log_probs, kElements * bytes) << ToString(precision);
    EXPECT_EQ(t.targets, uint64_t{32} * 8);  // int64 class indices
    // The logits' gradient is in the logits' dtype: 2 bytes under autocast and in bf16.
    EXPECT_EQ(t.output_grad, kElements * (precision == Precision::kFp32 ? 4 : 2))
        << ToString(precision);
  }
}

// A loop that drops the logits once the loss exists (Options::outputs_held false) does not hold
// them through backward: the symbolic peak, in the loss's backward, is one logits tensor lower.
TEST(LossTest, DroppedOutputsAreFreedOnceTheLossExists) {
  auto model = Classifier();
  ASSERT_NE(model, nullptr);
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  Options o;
  o.batch = 4096;
  o.optimizer = Optimizer::kSgd;
  auto held = (*est)->Run(*model, o);
  o.outputs_held = false;
  auto dropped = (*est)->Run(*model, o);
  ASSERT_TRUE(held.ok() && dropped.ok());
  // The logits' block: the 16,384,000-byte request takes a 16 MiB segment whole, as the 384 KiB
  // left over is below the 1 MiB a large block must keep to be split (memory-model.md §1.4).
  EXPECT_EQ(held->peak_allocated - dropped->peak_allocated, uint64_t{16} << 20);
}

// The loop holds the logits through backward (Options::outputs_held, the default): no node saves
// them (the head's MatMul saves its input and weight, log_softmax its output), yet both backends
// keep them beside the loss's log-probs until the loss backward has run.
TEST(LossTest, HeldOutputsAreKeptThroughTheLossBackwardInBothBackends) {
  auto model = Classifier();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4096;
  o.optimizer = Optimizer::kSgd;
  auto analytical = MakeEstimator("analytical");
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(analytical.ok() && symbolic.ok());
  auto a = (*analytical)->Run(*model, o);
  auto s = (*symbolic)->Run(*model, o);
  ASSERT_TRUE(a.ok() && s.ok());
  constexpr uint64_t kInput = 4096 * 64 * 4, kLogits = 4096 * 1000 * 4, kTargets = 4096 * 8;
  // The input batch, the held logits, the log-probs and the targets.
  EXPECT_EQ(a->breakdown.saved_activations, kInput + kLogits + kLogits + kTargets);
  // The loss backward's peak: those and the log-probs' and the logits' gradients (and the two
  // cuBLAS workspaces). The symbolic backend's blocks of the four are 16 MiB each (a segment
  // taken whole, memory-model.md §1.4), the analytical's 512-byte rounded: within 2 % (without
  // the held logits the analytical peak is 13 % lower).
  EXPECT_GE(s->peak_allocated, kInput + 4 * kLogits + kTargets);
  EXPECT_NEAR(static_cast<double>(a->peak_allocated) / static_cast<double>(s->peak_allocated), 1.0,
              0.02);
  // A loop that drops them: the analytical peak is one logits tensor lower (a 512-byte multiple).
  o.outputs_held = false;
  auto dropped = (*analytical)->Run(*model, o);
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(a->peak_allocated - dropped->peak_allocated, kLogits);
}

}  // namespace
}  // namespace memest
