// Timeline tests on tiny graphs with hand-computed, byte-exact peaks (symbolic/timeline.cc policy).
#include "symbolic/timeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/bind.h"
#include "memest/memest.h"
#include "symbolic/symbolic.h"
#include "symbolic/timeline_writer.h"
#include "testing/onnx_builder.h"

namespace memest::symbolic {
namespace {

using memest::testing::GraphBuilder;
using memest::testing::kFloat;

constexpr uint64_t kWorkspace = 33'554'432;  // h100-80gb cuBLAS workspace (memory-model.md §2.3)

// X[N,256] -Gemm(W1[512,256],B1[512])-> H -Relu-> R -Gemm(W2[10,512],B2[10])-> Y[N,10]
std::shared_ptr<const Model> LinearReluLinear() {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 256});
  b.AddInitializer("W1", {512, 256});
  b.AddInitializer("B1", {512});
  b.AddInitializer("W2", {10, 512});
  b.AddInitializer("B2", {10});
  memest::testing::SetIntAttr(b.AddNode("Gemm", {"X", "W1", "B1"}, {"H"}), "transB", 1);
  b.AddNode("Relu", {"H"}, {"R"});
  memest::testing::SetIntAttr(b.AddNode("Gemm", {"R", "W2", "B2"}, {"Y"}), "transB", 1);
  b.AddOutput("Y", kFloat);
  auto m = LoadModelFromBytes(b.Serialize(), "/tmp", "linear_relu_linear");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

// Block sizes (512-byte rounded, memory-model.md §1.3), fp32:
//   W1 524,288  B1 2,048  W2 20,480  B2 512 (40 B)  -> parameters P = 547,328
//   X[4,256] 4,096  targets[4] int64 512  H,R[4,512] 8,192 each  Y, log-probs [4,10] 512 each
constexpr uint64_t kParams = 524'288 + 2'048 + 20'480 + 512;
constexpr uint64_t kBatch = 4'096 + 512;

TEST(TimelineTest, LinearReluLinearAdamPeakIsTheFirstOptimizerStep) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.optimizer = Optimizer::kAdam;
  auto sim = SimulateModel(*model, o, /*record_events=*/true);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  // Step of iteration 1: weights + grads + 2 Adam states + the foreach sqrt copy
  // (memory-model.md §4.3) = 5 P, plus both cuBLAS workspaces (forward and autograd threads) and
  // the input batch.
  EXPECT_EQ(sim->estimate.peak_allocated, 5 * kParams + 2 * kWorkspace + kBatch);
  // Backward peak of iteration 1, for comparison: weights + both workspaces + batch + R (saved)
  // ... is lower: the step dominates for this tiny model.
  EXPECT_EQ(sim->estimate.peak_phase, Phase::kOptimizerStep);
  // The loop runs until an iteration starts as an earlier one did (symbolic::kMostIterations).
  ASSERT_GE(sim->iterations.size(), 3u);
  EXPECT_LT(sim->iterations.size(), static_cast<size_t>(symbolic::kMostIterations));
  EXPECT_EQ(sim->iterations[0].allocated, 5 * kParams + 2 * kWorkspace + kBatch);
  EXPECT_EQ(sim->iterations[1].allocated, sim->iterations[2].allocated);  // steady state
  const auto note = std::find_if(sim->estimate.diagnostics.begin(), sim->estimate.diagnostics.end(),
                                 [](const Diagnostic& d) { return d.code == "iterations"; });
  ASSERT_NE(note, sim->estimate.diagnostics.end());
  EXPECT_NE(note->message.find("iteration 3: allocated peak"), std::string::npos) << note->message;
  EXPECT_NE(note->message.find("later iterations"), std::string::npos) << note->message;
  // Large pool: the two 32 MiB workspaces are exact segments; the rest fits 2 MiB small segments.
  EXPECT_EQ((sim->estimate.peak_reserved - 2 * kWorkspace) % (2u << 20), 0u);
  EXPECT_GE(sim->estimate.peak_reserved, sim->estimate.peak_allocated);
  EXPECT_EQ(sim->estimate.breakdown.Total(), sim->estimate.peak_device);
  // Every malloc has a matching free or is still live at the end; allocated never goes negative.
  uint64_t mallocs = 0, frees = 0;
  for (const auto& e : sim->events) (e.malloc ? mallocs : frees) += e.bytes;
  EXPECT_GE(mallocs, frees);
}

// Item 6 of issue 14: the breakdown is one moment (the device peak, here the first optimizer
// step); `largest` is each category's own maximum over the step, and the reserved bytes beyond the
// allocated blocks are named cached-but-free rather than "overhead".
TEST(TimelineTest, LargestOfEachCategoryIsTakenOverTheStepNotAtThePeak) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.optimizer = Optimizer::kAdam;
  auto sim = SimulateModel(*model, o, false);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  const Estimate& e = sim->estimate;
  ASSERT_EQ(e.peak_phase, Phase::kOptimizerStep);
  ASSERT_TRUE(e.largest.has_value());
  // Requested parameter bytes (B2 is 40 bytes, not its 512-byte block).
  constexpr uint64_t kRequestedParams = 524'288 + 2'048 + 20'480 + 40;
  EXPECT_EQ(e.largest->weights.bytes, kRequestedParams);
  EXPECT_EQ(e.largest->weights.iteration, 0);  // allocated before the first iteration
  EXPECT_EQ(e.largest->gradients.bytes, kRequestedParams);
  EXPECT_EQ(e.largest->gradients.phase, Phase::kBackward);
  EXPECT_EQ(e.largest->optimizer_state.bytes, 2 * kRequestedParams);
  EXPECT_EQ(e.largest->optimizer_state.phase, Phase::kOptimizerStep);
  EXPECT_EQ(e.largest->optimizer_state.iteration, 1);
  // At the step only the input batch is left of the activations. Their maximum is at the loss of
  // iteration 1: X (4,096) and the int64 targets (32), R saved by Relu and the second Gemm (8,192)
  // and cross-entropy's fp32 log-probs (160).
  EXPECT_EQ(e.breakdown.saved_activations, 4'096u + 32u);
  EXPECT_EQ(e.largest->saved_activations.bytes, 4'096u + 32u + 8'192u + 160u);
  EXPECT_EQ(e.largest->saved_activations.phase, Phase::kForward);
  EXPECT_EQ(e.largest->saved_activations.iteration, 1);
  // The breakdown at the peak: requested bytes, then rounding (allocated - requested), then
  // cached-but-free (reserved - allocated); the peak here is also the allocated peak, so the
  // rounding is the 512-byte remainders: 472 for B2 in each of weights, grad, 2 states and the
  // sqrt copy, and 480 for the int64 targets (32 bytes).
  const Breakdown& bd = e.breakdown;
  const uint64_t requested =
      bd.weights + bd.gradients + bd.optimizer_state + bd.saved_activations + bd.transient;
  EXPECT_EQ(bd.allocator_overhead, 5 * 472 + 480);
  EXPECT_EQ(requested + bd.allocator_overhead, e.peak_allocated);
  EXPECT_EQ(requested + bd.allocator_overhead + bd.cached_free, e.peak_reserved);
  EXPECT_EQ(bd.Total(), e.peak_device);
}

TEST(TimelineTest, LinearReluLinearSgdPeaksInBackward) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.optimizer = Optimizer::kSgd;
  auto sim = SimulateModel(*model, o, false);
  ASSERT_TRUE(sim.ok());
  // Iteration 1 backward, at the first Gemm (W1's gradients): weights, both workspaces, the
  // batch, H's gradient (8,192) and the new W1/B1 gradients (526,336) next to the W2/B2 grads
  // (20,992), with Y (512) and the loss (512) still alive: weights + grads = 2 P.
  EXPECT_EQ(sim->estimate.peak_allocated,
            2 * kParams + 2 * kWorkspace + kBatch + 8'192 + 512 + 512);
  EXPECT_EQ(sim->estimate.peak_phase, Phase::kBackward);
}

TEST(TimelineTest, LinearReluLinearInferenceKeepsOnlyTheLiveTensors) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.mode = Mode::kInfer;
  auto sim = SimulateModel(*model, o, false);
  ASSERT_TRUE(sim.ok());
  // Relu: H and R alive together; one workspace; no targets in inference.
  EXPECT_EQ(sim->estimate.peak_allocated, kParams + kWorkspace + 4'096 + 8'192 + 8'192);
  EXPECT_EQ(sim->estimate.peak_phase, Phase::kInference);
}

TEST(TimelineTest, AdamWeightDecayAddsAGradientCopy) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options adam, adam_l2, adamw;
  adam.batch = adam_l2.batch = adamw.batch = 4;
  adam_l2.weight_decay = adamw.weight_decay = 0.01;
  adamw.optimizer = Optimizer::kAdamW;
  const auto a = SimulateModel(*model, adam, false);
  const auto l2 = SimulateModel(*model, adam_l2, false);
  const auto w = SimulateModel(*model, adamw, false);
  ASSERT_TRUE(a.ok() && l2.ok() && w.ok());
  // The L2 copy is freed before the sqrt copy (memory-model.md §4.3): the peak does not grow...
  EXPECT_EQ(l2->estimate.peak_allocated, a->estimate.peak_allocated);
  EXPECT_EQ(w->estimate.peak_allocated, a->estimate.peak_allocated);
}

TEST(TimelineTest, OptimizerImplementationsHaveTheirOwnTemporaries) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options single, fused, single_l2;
  single.batch = fused.batch = single_l2.batch = 4;
  single.optimizer_impl = single_l2.optimizer_impl = OptimizerImpl::kSingleTensor;
  fused.optimizer_impl = OptimizerImpl::kFused;
  single_l2.weight_decay = 0.01;
  const auto s = SimulateModel(*model, single, false);
  const auto f = SimulateModel(*model, fused, false);
  const auto l2 = SimulateModel(*model, single_l2, false);
  ASSERT_TRUE(s.ok() && f.ok() && l2.ok());
  // Facts 4.3. Single-tensor: weights + grads + 2 states, and for the largest parameter (W1,
  // 524,288) its sqrt and quotient together; with L2, W1's grad.add(param) copy as well.
  // Fused: no parameter-sized temporary at all, so the peak moves to the backward of iteration
  // 2 (the states exist by then): as in the SGD test below, H's gradient and Y and the loss are
  // alive next to the new W1/B1 gradients (8,192 + 512 + 512).
  constexpr uint64_t kW1 = 524'288;
  EXPECT_EQ(s->estimate.peak_allocated, 4 * kParams + 2 * kW1 + 2 * kWorkspace + kBatch);
  EXPECT_EQ(l2->estimate.peak_allocated, 4 * kParams + 3 * kW1 + 2 * kWorkspace + kBatch);
  EXPECT_EQ(f->estimate.peak_allocated, 4 * kParams + 2 * kWorkspace + kBatch + 8'192 + 512 + 512);
  EXPECT_EQ(s->estimate.peak_phase, Phase::kOptimizerStep);
}

// X[N,8] -Gemm(W[4096,8],B[4096])-> Y[N,4096]: logits large next to everything else.
TEST(TimelineTest, CrossEntropyBackwardHoldsBothGradientsAtOnce) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 8});
  b.AddInitializer("W", {4096, 8});
  b.AddInitializer("B", {4096});
  memest::testing::SetIntAttr(b.AddNode("Gemm", {"X", "W", "B"}, {"Y"}), "transB", 1);
  b.AddOutput("Y", kFloat);
  auto model = LoadModelFromBytes(b.Serialize(), "/tmp", "wide_linear");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Options o;
  o.batch = 64;
  o.optimizer = Optimizer::kSgd;
  auto sim = SimulateModel(**model, o, false);
  ASSERT_TRUE(sim.ok());
  // Iteration 2, loss backward: weights (131,072 + 16,384), X (2,048), targets (512), both
  // workspaces, the loss (512), and four [64,4096] fp32 tensors of 1 MiB: the logits Y (a graph
  // output), the saved log-probs, NllLossBackward's gradient of the log-probs and
  // LogSoftmaxBackward's gradient of Y (measured on the CPU harness, memory-model.md §3.1).
  constexpr uint64_t kLogits = 64 * 4096 * 4;
  EXPECT_EQ(sim->estimate.peak_allocated,
            131'072 + 16'384 + 2'048 + 512 + 2 * kWorkspace + 512 + 4 * kLogits);
  EXPECT_EQ(sim->estimate.peak_phase, Phase::kBackward);
}

TEST(TimelineTest, AmpCachesHalfPrecisionWeightCopies) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options fp32, amp;
  fp32.batch = amp.batch = 4;
  fp32.mode = amp.mode = Mode::kInfer;
  amp.precision = Precision::kAmpFp16;
  const auto a = SimulateModel(*model, fp32, false);
  const auto b = SimulateModel(*model, amp, false);
  ASSERT_TRUE(a.ok() && b.ok());
  // Linear is addmm(bias, x, W^T) under autocast: weights AND biases are fp32 leaves used by a
  // lower-precision op, so each gets a cached fp16 copy (memory-model.md §5.1): W1 262,144, B1
  // 1,024, W2 10,240, B2 512 (20 B rounded). H and R become fp16 (4,096 each). The fp32 peak is at
  // Relu (H and R alive); the AMP peak is at the second Gemm: every copy, R and Y (fp16, 512)
  // alive.
  EXPECT_EQ(a->estimate.peak_allocated, kParams + kWorkspace + 4'096 + 8'192 + 8'192);
  EXPECT_EQ(b->estimate.peak_allocated,
            kParams + kWorkspace + 4'096 + (262'144 + 1'024 + 10'240 + 512) + 4'096 + 512);
}

}  // namespace
}  // namespace memest::symbolic

namespace memest::symbolic {
namespace {

TEST(TimelineWriterTest, FormatsFollowTheExtension) {
  EXPECT_EQ(*TimelineFormatFor("a.json"), TimelineFormat::kJson);
  EXPECT_EQ(*TimelineFormatFor("a.csv"), TimelineFormat::kCsv);
  EXPECT_EQ(*TimelineFormatFor("dir/a.svg"), TimelineFormat::kSvg);
  EXPECT_EQ(*TimelineFormatFor("a.htm"), TimelineFormat::kHtml);
  EXPECT_EQ(TimelineFormatFor("a.txt").status().code(), ErrorCode::kInvalidArgument);
}

// The public API (memest/timeline.h) simulates and writes in one call; a path that cannot be
// written names the path and the system's reason.
TEST(TimelineWriterTest, ThePublicApiWritesTheFileOrSaysWhyNot) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  const std::string path = ::testing::TempDir() + "memest_timeline_test.csv";
  ASSERT_TRUE(memest::WriteTimeline(*model, o, path, "t").ok());
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("index,kind,bytes", 0), 0u) << header;
  const Status bad = memest::WriteTimeline(*model, o, "/nonexistent/dir/t.csv", "t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("/nonexistent/dir/t.csv"), std::string::npos);
  EXPECT_NE(bad.message().find("No such file"), std::string::npos) << bad.message();
  EXPECT_EQ(memest::WriteTimeline(*model, o, "t.txt", "t").code(), ErrorCode::kInvalidArgument);
}

TEST(TimelineWriterTest, EveryEventIsWrittenAndThePictureMarksThePeak) {
  auto model = LinearReluLinear();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  auto sim = SimulateModel(*model, o, true);
  ASSERT_TRUE(sim.ok());
  const auto json = nlohmann::json::parse(RenderTimeline(*sim, TimelineFormat::kJson, "t"));
  EXPECT_EQ(json["schema"], "memest.timeline/1");
  ASSERT_EQ(json["events"].size(), sim->events.size());
  uint64_t max_allocated = 0;
  for (const auto& e : json["events"])
    max_allocated = std::max<uint64_t>(max_allocated, e["allocated"]);
  EXPECT_EQ(max_allocated, sim->estimate.peak_allocated);
  const std::string csv = RenderTimeline(*sim, TimelineFormat::kCsv, "t");
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), sim->events.size() + 1);
  const std::string svg = RenderTimeline(*sim, TimelineFormat::kSvg, "a <title>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("a &lt;title&gt;"), std::string::npos);  // escaped
  EXPECT_NE(svg.find("peak allocated"), std::string::npos);
  EXPECT_NE(RenderTimeline(*sim, TimelineFormat::kHtml, "t").find("<svg"), std::string::npos);
}

// ResNet-18 as torchvision runs it: each ReLU after a batch norm writes into the norm's output
// (Options::inplace_relu), so the forward makes no tensor there, 9 of its 17 ReLUs (the 8 after
// a residual Add stay out of place); autograd keeps the same bytes either way, and the peak is
// no higher.
TEST(TimelineTest, AReluAfterABatchNormMakesNoTensorAndKeepsTheSameBytes) {
  auto model = LoadModel(std::string(MEMEST_SOURCE_DIR) + "/datasets/models/resnet18_train.onnx");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const core::Graph& g = (*model)->graph();
  auto relu_tensors = [&](const Simulation& sim) {
    int made = 0;
    for (const TimelineEvent& e : sim.events) {
      made += e.malloc && e.iteration == 1 && e.phase == Phase::kForward && e.node >= 0 &&
              g.node(e.node).op_type == "Relu";
    }
    return made;
  };
  Options o;
  o.batch = 8;
  auto in_place = SimulateModel(**model, o, /*record_events=*/true);
  o.inplace_relu = false;
  auto as_written = SimulateModel(**model, o, /*record_events=*/true);
  ASSERT_TRUE(in_place.ok() && as_written.ok());
  EXPECT_EQ(relu_tensors(*as_written), 17);
  EXPECT_EQ(relu_tensors(*in_place), 8);
  ASSERT_TRUE(in_place->estimate.largest && as_written->estimate.largest);
  EXPECT_EQ(in_place->estimate.largest->saved_activations.bytes,
            as_written->estimate.largest->saved_activations.bytes);
  EXPECT_LE(in_place->estimate.peak_allocated, as_written->estimate.peak_allocated);
}

}  // namespace
}  // namespace memest::symbolic
