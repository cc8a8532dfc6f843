// DDP's flat buffers (memory/ddp_buckets.h): the assignment reducer.cpp makes, the gradient
// buckets made at wrap time and rebuilt after the first backward, the symbolic timeline that
// frees the first for the second after the first step, and the buffers of DDP's broadcasts.
#include "memory/ddp_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "memory/context.h"
#include "memory/parallel.h"
#include "symbolic/symbolic.h"
#include "symbolic/timeline.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using memory::AssignBuckets;
using memory::BroadcastBuffers;
using memory::BucketedTensor;
using memory::DdpBuckets;
using memory::MakeDdpBuckets;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int32_t kF32 = 1, kF16 = 10;

uint64_t Sum(const std::vector<uint64_t>& v) {
  return std::accumulate(v.begin(), v.end(), uint64_t{0});
}

TEST(DdpBucketsTest, ABucketClosesOnceItReachesItsLimitAndNeverSplitsAGradient) {
  // 0.5 + 0.75 MiB reach the first limit (1 MiB); then 10 + 10 + 10 MiB reach 25 MiB only with
  // the third; the last 3 MiB close at the end.
  const std::vector<BucketedTensor> g = {{kMiB / 2, kF32},  {3 * kMiB / 4, kF32}, {10 * kMiB, kF32},
                                         {10 * kMiB, kF32}, {10 * kMiB, kF32},    {3 * kMiB, kF32}};
  EXPECT_EQ(AssignBuckets(g, {kMiB, 25 * kMiB}),
            (std::vector<uint64_t>{5 * kMiB / 4, 30 * kMiB, 3 * kMiB}));
  // A gradient larger than the cap is a bucket of its own, whole.
  EXPECT_EQ(AssignBuckets({{100 * kMiB, kF32}}, {kMiB, 25 * kMiB}),
            (std::vector<uint64_t>{100 * kMiB}));
  EXPECT_TRUE(AssignBuckets({}, {kMiB}).empty());
}

TEST(DdpBucketsTest, EachDtypeFillsItsOwnBucketsWithItsOwnLimits) {
  const std::vector<BucketedTensor> g = {
      {kMiB, kF16}, {kMiB / 2, kF32}, {kMiB, kF16}, {kMiB, kF32}, {kMiB / 4, kF16}};
  // fp16: 1 MiB reaches the first limit; then 1 + 0.25 MiB stay open under 25 MiB.
  // fp32: 0.5 + 1 MiB reach the first limit when the second comes.
  EXPECT_EQ(AssignBuckets(g, {kMiB, 25 * kMiB}),
            (std::vector<uint64_t>{kMiB, 3 * kMiB / 2, 5 * kMiB / 4}));
}

TEST(DdpBucketsTest, WrapTimeHoldsOneBucketPerDtypeAndTheRebuildFollowsTheReadyOrder) {
  // Forward reads the parameters in first_use order 0, 1, 2, 3; backward makes their gradients
  // ready in the reverse order: 8, 4, 2, 1 MiB.
  const std::vector<BucketedTensor> g = {
      {2 * kMiB, kF32, 2}, {kMiB, kF32, 3}, {4 * kMiB, kF32, 1}, {8 * kMiB, kF32, 0}};
  const DdpBuckets b = MakeDdpBuckets(g, 25.0);
  EXPECT_EQ(b.at_wrap, (std::vector<uint64_t>{15 * kMiB}));
  // 1 MiB reaches the first limit (1 MiB) alone; then 2 + 4 + 8 stay under 25 MiB.
  EXPECT_EQ(b.rebuilt, (std::vector<uint64_t>{kMiB, 14 * kMiB}));
  // A bucket_cap_mb DDP is given is the first limit too: 1 + 2 + 4 reach 5 MiB; then 8 alone.
  EXPECT_EQ(MakeDdpBuckets(g, 5.0).rebuilt, (std::vector<uint64_t>{7 * kMiB, 8 * kMiB}));
  const DdpBuckets mixed = MakeDdpBuckets({{3 * kMiB, kF32, 0}, {kMiB, kF16, 1}}, 25.0);
  // Listed in forward order (fp32, fp16), then handed over reversed.
  EXPECT_EQ(mixed.at_wrap, (std::vector<uint64_t>{kMiB, 3 * kMiB}));
}

TEST(DdpBucketsTest, ThereAreNeverMoreBucketsThanGradientsWhateverTheCapOrTheBytes) {
  std::vector<BucketedTensor> g;
  for (int i = 0; i < 1000; ++i) g.push_back({uint64_t{1} << 40, kF32, i});  // 1 TiB each
  const DdpBuckets tiny = MakeDdpBuckets(g, 1e-5);
  EXPECT_EQ(tiny.rebuilt.size(), 1000u);
  EXPECT_EQ(tiny.at_wrap.size(), 1u);
  EXPECT_EQ(Sum(tiny.rebuilt), uint64_t{1000} << 40);
  // 503 TiB in one gradient (the fuzz finding's graph): one bucket, not 21 million.
  const DdpBuckets huge = MakeDdpBuckets({{uint64_t{503} << 40, kF32, 0}}, 25.0);
  EXPECT_EQ(huge.rebuilt, (std::vector<uint64_t>{uint64_t{503} << 40}));
  // Bytes that overflow saturate instead of wrapping.
  const DdpBuckets sat =
      MakeDdpBuckets({{std::numeric_limits<uint64_t>::max() - 1, kF32, 0}, {5, kF32, 1}}, 1e6);
  EXPECT_EQ(sat.at_wrap, (std::vector<uint64_t>{std::numeric_limits<uint64_t>::max()}));
}

TEST(DdpBucketsTest, ABroadcastCopiesEachBucketOfSeveralTensorsInOrderOfItsFirstTensor) {
  constexpr uint64_t kLimit = 250 * kMiB;
  // fp32 100 + 100 + 60 MiB reach the limit with the third; the fp16 tensors (index 1 and 4) stay
  // open to the end, yet their bucket is broadcast second: it holds tensor 1.
  const std::vector<BucketedTensor> t = {
      {100 * kMiB, kF32}, {kMiB, kF16}, {100 * kMiB, kF32}, {60 * kMiB, kF32}, {kMiB, kF16}};
  EXPECT_EQ(BroadcastBuffers(t), (std::vector<uint64_t>{260 * kMiB, 2 * kMiB}));
  // A bucket of one tensor is viewed, not copied: 0 bytes, yet a bucket in flight. 300 MiB alone
  // reaches the limit; then 10 + 20 MiB close at the end.
  EXPECT_EQ(BroadcastBuffers({{300 * kMiB, kF32}, {10 * kMiB, kF32}, {20 * kMiB, kF32}}),
            (std::vector<uint64_t>{0, 30 * kMiB}));
  EXPECT_EQ(BroadcastBuffers({{kMiB, kF32}}), (std::vector<uint64_t>{0}));
  // Closed first, broadcast second: the fp32 tensor reaches the limit before the fp16 bucket
  // (tensors 0 and 2) closes at the end.
  EXPECT_EQ(BroadcastBuffers({{kMiB, kF16}, {300 * kMiB, kF32}, {kMiB, kF16}}),
            (std::vector<uint64_t>{2 * kMiB, 0}));
  EXPECT_TRUE(BroadcastBuffers({}).empty());
  EXPECT_EQ(BroadcastBuffers({{kMiB, kF32}, {kMiB, kF32}}, kLimit),
            (std::vector<uint64_t>{2 * kMiB}));
}

// A training step of batch 16 under MSE on `world_size` GPUs (DDP when it is above 1).
Options Step(int64_t world_size) {
  Options o;
  o.batch = 16;
  o.loss = Loss::kMse;
  o.parallel.world_size = world_size;
  return o;
}

// A chain of `layers` Linear layers of width `width` (fp32; at 1024, weight 4 MiB and bias
// 4 KiB: kLayer bytes of parameters each).
constexpr uint64_t kLayer = 4 * kMiB + 4096;
std::shared_ptr<const Model> Chain(int layers, int64_t width = 1024) {
  auto m = LoadModelFromBytes(testing::LinearStack(layers, width, /*relu=*/false).Serialize(), "",
                              "chain");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

// (malloc, bytes) of the collective buffers made and freed when the model is wrapped (iteration
// 0): the broadcast's copies, then the reducer's buckets.
std::vector<std::pair<bool, uint64_t>> WrapCollectives(const symbolic::Simulation& sim) {
  std::vector<std::pair<bool, uint64_t>> out;
  for (const symbolic::TimelineEvent& e : sim.events) {
    if (e.iteration == 0 && e.category == symbolic::Category::kCollective) {
      out.emplace_back(e.malloc, e.bytes);
    }
  }
  return out;
}

// The symbolic timeline of one DDP rank: when the model is wrapped, the broadcast's flat copy of
// the parameters (one bucket under 250 MiB), freed, then one bucket of every gradient, freed at
// the end of iteration 1 for the rebuilt ones (1 MiB first, then up to 25 MiB), which stay. These
// are the only collective buffers (the chain has no buffers to broadcast before a forward).
TEST(DdpBucketsTest, TheSymbolicTimelineRebuildsTheBucketsAfterTheFirstStep) {
  auto m = Chain(9);
  ASSERT_NE(m, nullptr);
  auto sim = symbolic::SimulateModel(*m, Step(2), /*record_events=*/true);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  std::vector<std::pair<int, uint64_t>> mallocs, frees;  // (iteration, bytes)
  for (const symbolic::TimelineEvent& e : sim->events) {
    if (e.category != symbolic::Category::kCollective) continue;
    (e.malloc ? mallocs : frees).emplace_back(e.iteration, e.bytes);
    EXPECT_EQ(e.phase, e.iteration == 0 ? Phase::kUnknown : Phase::kForward);
  }
  // Rebuilt in ready order: layer 8 (bias, weight) reaches 1 MiB; then layers 7..1 reach 25 MiB
  // with the seventh (6 layers are 24 MiB + 24 KiB); then layer 0 closes at the end.
  const std::vector<std::pair<int, uint64_t>> want_mallocs = {
      {0, 9 * kLayer}, {0, 9 * kLayer}, {1, kLayer}, {1, 7 * kLayer}, {1, kLayer}};
  EXPECT_EQ(mallocs, want_mallocs);
  EXPECT_EQ(frees, (std::vector<std::pair<int, uint64_t>>{{0, 9 * kLayer}, {1, 9 * kLayer}}));
  EXPECT_EQ(sim->estimate.breakdown.collective_buffers, 9 * kLayer);
}

// With gradient_as_bucket_view the buckets are the gradients: they are allocated at the wrap
// (and rebuilt) as without it, counted as gradients, and every gradient backward makes is copied
// in and freed within the backward: every gradient is held from the wrap on (in the forward,
// where one GPU holds none), once (not DDP's second copy).
TEST(DdpBucketsTest, WithBucketViewsTheBucketsHoldTheGradientsFromTheWrapOn) {
  auto m = Chain(9);
  ASSERT_NE(m, nullptr);
  Options o = Step(1);
  auto one = symbolic::SimulateModel(*m, o, /*record_events=*/true);
  o.parallel.world_size = 2;
  auto copies = symbolic::SimulateModel(*m, o, false);
  o.parallel.gradient_as_bucket_view = true;
  auto views = symbolic::SimulateModel(*m, o, /*record_events=*/true);
  ASSERT_TRUE(one.ok() && copies.ok() && views.ok()) << views.status().ToString();
  // Gradients are freed in the backward that made them (18 parameters an iteration), never by
  // zero_grad; the only other gradient freed is the bucket made at the wrap. The only collective
  // buffer is the wrap's broadcast.
  int frees_in_backward = 0;
  for (const symbolic::TimelineEvent& e : views->events) {
    if (e.category == symbolic::Category::kCollective) {
      EXPECT_EQ(e.iteration, 0);
    }
    if (e.category != symbolic::Category::kGradients || e.malloc) continue;
    if (e.phase == Phase::kBackward) {
      ++frees_in_backward;
    } else {
      EXPECT_EQ(e.bytes, 9 * kLayer) << "a gradient freed outside the backward";
    }
  }
  EXPECT_GT(frees_in_backward, 0);
  EXPECT_EQ(frees_in_backward % 18, 0);
  EXPECT_EQ(views->estimate.breakdown.collective_buffers, 0u);
  EXPECT_GE(views->estimate.breakdown.gradients, 9 * kLayer);
  EXPECT_LT(views->estimate.peak_allocated, copies->estimate.peak_allocated);
  // In iteration 2's forward one GPU holds no gradients; the views' buckets hold them all.
  auto forward_peak = [](const symbolic::Simulation& sim) {
    uint64_t most = 0;
    for (const symbolic::TimelineEvent& e : sim.events) {
      if (e.iteration == 2 && e.phase == Phase::kForward) most = std::max(most, e.allocated);
    }
    return most;
  };
  EXPECT_GE(forward_peak(*views), forward_peak(*one) + 9 * kLayer);
  // The analytical backend counts the rebuilt buckets as the gradients, and the gradient a
  // MatMul's backward makes for its weight (4 MiB) as that node's transient.
  auto ana = (*MakeEstimator("analytical"))->Run(*m, o);
  o.parallel.gradient_as_bucket_view = false;
  auto ana_copies = (*MakeEstimator("analytical"))->Run(*m, o);
  ASSERT_TRUE(ana.ok() && ana_copies.ok()) << ana.status().ToString();
  EXPECT_EQ(ana->breakdown.gradients, 9 * kLayer);
  EXPECT_EQ(ana->breakdown.collective_buffers, 0u);
  ASSERT_FALSE(ana->phases.empty());
  ASSERT_FALSE(ana_copies->phases.empty());
  ASSERT_EQ(ana->phases[0].phase, Phase::kBackward);
  EXPECT_GE(ana->phases[0].breakdown.transient,
            ana_copies->phases[0].breakdown.transient + 4 * kMiB);
}

// Gradient accumulation under DDP: the first micro-batches' backward runs under no_sync(), so
// with bucket views .grad stays a tensor of its own until the last micro-batch's backward copies
// it in: one free per parameter an iteration, not one per micro-batch.
TEST(DdpBucketsTest, WithBucketViewsOnlyTheLastMicroBatchCopiesTheGradientsIn) {
  auto m = Chain(9);
  ASSERT_NE(m, nullptr);
  Options o = Step(2);
  o.micro_batches = 2;
  o.parallel.gradient_as_bucket_view = true;
  auto sim = symbolic::SimulateModel(*m, o, /*record_events=*/true);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  int frees = 0;
  for (const symbolic::TimelineEvent& e : sim->events) {
    if (e.iteration == 2 && e.phase == Phase::kBackward && !e.malloc &&
        e.category == symbolic::Category::kGradients) {
      ++frees;
    }
  }
  EXPECT_EQ(frees, 18);
}

// A parameter read on two pipeline stages (a tied embedding and head) is ordered for each
// stage's buckets by its first reader on that stage.
TEST(DdpBucketsTest, AParameterReadOnTwoStagesIsOrderedByItsFirstReaderOnTheStage) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 1024});
  b.AddInitializer("shared.weight", {1024, 1024});
  b.AddNode("MatMul", {"x", "shared.weight"}, {"h"}, "/embed/MatMul");  // node 0
  std::string x = "h";
  for (int i = 0; i < 4; ++i) {  // nodes 1-8
    const std::string p = "layers." + std::to_string(i);
    b.AddInitializer(p + ".weight", {1024, 1024});
    b.AddNode("MatMul", {x, p + ".weight"}, {p + ".out"}, "/" + p + "/MatMul");
    x = p + ".out";
    b.AddNode("Relu", {x}, {p + ".relu"}, "/" + p + "/Relu");
    x = p + ".relu";
  }
  b.AddNode("MatMul", {x, "shared.weight"}, {"y"}, "/head/MatMul");  // node 9
  b.AddOutput("y", testing::kFloat, {"N", 1024});
  auto m = LoadModelFromBytes(b.Serialize(), "", "tied");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Options o = Step(2);
  o.parallel.pp = 2;
  o.micro_batches = 2;
  auto ctx = memory::EstimationContext::Make(**m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const int shared = (*m)->graph().FindValue("shared.weight");
  for (int stage : {0, 1}) {
    bool found = false;
    for (const memory::ParameterShare& s :
         memory::RankParameters((*ctx)->bound(), (*ctx)->facts(), (*ctx)->parallel(), stage)) {
      if (s.value != shared) continue;
      found = true;
      EXPECT_EQ(s.first_use, stage == 0 ? 0 : 9) << "stage " << stage;
    }
    EXPECT_TRUE(found) << "stage " << stage;
  }
}

// DDP's constructor broadcasts the parameters in buckets of 250 MiB, two in flight: with nine
// layers of 64 MiB + 16 KiB, three buckets. The third bucket's copy is made after the first's is
// freed, and the last two are freed in the order they were made, all before the reducer's bucket.
TEST(DdpBucketsTest, TheWrapBroadcastsTheParametersTwoBucketsInFlight) {
  auto m = Chain(9, 4096);
  ASSERT_NE(m, nullptr);
  auto sim = symbolic::SimulateModel(*m, Step(2), /*record_events=*/true);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  constexpr uint64_t kWeight = 64 * kMiB, kBias = 16 * 1024;
  const std::vector<std::pair<bool, uint64_t>> wrap = WrapCollectives(*sim);
  // In value order: w0, b0, ..., w3 reach the limit with w3; then b3, ..., w7; then b7, w8, b8.
  const uint64_t first = 4 * kWeight + 3 * kBias, second = 4 * kWeight + 4 * kBias,
                 third = kWeight + 2 * kBias;
  const std::vector<std::pair<bool, uint64_t>> want = {
      {true, first},
      {true, second},
      {false, first},
      {true, third},
      {false, second},
      {false, third},
      {true, 9 * (kWeight + kBias)}};  // the reducer's bucket last
  EXPECT_EQ(wrap, want);
}

// A model that trains its last layer only: what the step adds to the weights (the gradient, its
// Adam state and bucket of one 64 MiB layer, activations of 256 KiB) is less than the wrap's two
// broadcast buffers in flight (four weights each), so both backends peak at the wrap, before the
// first iteration: the weights and those two buffers. The analytical backend reports the wrap
// as a third phase; on one GPU there is no wrap.
TEST(DdpBucketsTest, AModelThatTrainsLittlePeaksAtTheWrapInBothBackends) {
  auto m = Chain(9, 4096);
  ASSERT_NE(m, nullptr);
  Options o = Step(2);
  o.trainable = "^layers\\.8\\.";
  auto sim = symbolic::SimulateModel(*m, o, /*record_events=*/false);
  auto ana = (*MakeEstimator("analytical"))->Run(*m, o);
  ASSERT_TRUE(sim.ok() && ana.ok()) << ana.status().ToString();
  constexpr uint64_t kWeight = 64 * kMiB, kBias = 16 * 1024;
  const uint64_t weights = 9 * (kWeight + kBias);
  const uint64_t in_flight = (4 * kWeight + 3 * kBias) + (4 * kWeight + 4 * kBias);
  EXPECT_EQ(sim->estimate.peak_allocated, weights + in_flight);
  EXPECT_EQ(ana->peak_allocated, weights + in_flight);
  EXPECT_EQ(ana->peak_phase, Phase::kUnknown);
  ASSERT_EQ(ana->phases.size(), 3u);
  EXPECT_EQ(ana->phases[2].phase, Phase::kUnknown);
  EXPECT_EQ(ana->breakdown.weights, weights);
  EXPECT_EQ(ana->breakdown.collective_buffers, in_flight);
  EXPECT_GE(ana->peak_device, sim->estimate.peak_device - sim->estimate.peak_device / 50);
  // The step's own peaks stay below the wrap's.
  EXPECT_LT(ana->phases[0].peak_allocated, ana->peak_allocated);
  EXPECT_LT(ana->phases[1].peak_allocated, ana->peak_allocated);
  o.parallel.world_size = 1;
  auto one = (*MakeEstimator("analytical"))->Run(*m, o);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->phases.size(), 2u);
  EXPECT_LT(one->peak_allocated, weights + in_flight);
}

// A model with buffers (BatchNormalization's running statistics), a one-element constant and a
// shape: the wrap broadcasts the parameters, trained or frozen, and the buffers in one bucket;
// the first micro-batch of each iteration broadcasts the buffers (two tensors: a flat copy of
// 512 bytes) in its forward, before its first node. The constant and the shape are the export's,
// broadcast by neither.
TEST(DdpBucketsTest, TheFirstForwardOfEachIterationBroadcastsTheBuffers) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 64});
  for (const char* p : {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}) {
    b.AddInitializer(p, {64});
  }
  b.AddInitializer("fc.weight", {64, 64});
  b.AddInitializer("half", {1});
  b.AddInt64Initializer("shape", {-1, 64});
  b.AddNode("BatchNormalization",
            {"x", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, {"h"}, "/bn/BN");
  b.AddNode("MatMul", {"h", "fc.weight"}, {"y"}, "/fc/MatMul");
  b.AddNode("Mul", {"y", "half"}, {"z"}, "/Mul");
  b.AddNode("Reshape", {"z", "shape"}, {"out"}, "/Reshape");
  b.AddOutput("out", testing::kFloat, {"N", 64});
  auto m = LoadModelFromBytes(b.Serialize(), "", "bn");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Options o = Step(2);
  o.micro_batches = 2;
  o.freeze = "^bn\\.weight";  // frozen, yet a parameter the wrap broadcasts
  auto sim = symbolic::SimulateModel(**m, o, /*record_events=*/true);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  // (iteration, bytes) of the collective mallocs: at the wrap the broadcast's and the reducer's
  // bucket; then the buffers' broadcast and, in iteration 1, the rebuilt bucket.
  std::vector<std::pair<int, uint64_t>> made, freed;
  for (const symbolic::TimelineEvent& e : sim->events) {
    if (e.category != symbolic::Category::kCollective) continue;
    EXPECT_EQ(e.phase, e.iteration == 0 ? Phase::kUnknown : Phase::kForward);
    (e.malloc ? made : freed).emplace_back(e.iteration, e.bytes);
  }
  // The parameters gamma, beta and the weight, then the two statistics: 4 x 256 + 16,384 bytes;
  // then the bucket of the gradients of beta and the weight.
  constexpr uint64_t kStates = 4 * 256 + 64 * 64 * 4, kGrads = 256 + 64 * 64 * 4, kStats = 512;
  std::vector<std::pair<int, uint64_t>> want_made = {
      {0, kStates}, {0, kGrads}, {1, kStats}, {1, kGrads}};
  std::vector<std::pair<int, uint64_t>> want_freed = {{0, kStates}, {1, kStats}, {1, kGrads}};
  for (int it = 2; it <= static_cast<int>(sim->iterations.size()); ++it) {
    want_made.emplace_back(it, kStats);  // once an iteration, not once a micro-batch
    want_freed.emplace_back(it, kStats);
  }
  EXPECT_EQ(made, want_made);
  EXPECT_EQ(freed, want_freed);
}

// A bucket of one tensor is viewed, yet holds its place in flight: with buckets A (a bias and a
// weight of 250 MiB), B (one weight of 250 MiB) and C, A's copy is freed before C's is made.
TEST(DdpBucketsTest, ABroadcastBucketOfOneTensorHoldsItsPlaceInFlight) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 1024});
  b.AddInitializer("a.bias", {64000});
  b.AddInitializer("a.weight", {1024, 64000});
  b.AddInitializer("b.weight", {64000, 1024});
  b.AddInitializer("c.weight", {1024, 1024});
  b.AddInitializer("c.bias", {1024});
  b.AddNode("MatMul", {"x", "a.weight"}, {"a.mm"}, "/a/MatMul");
  b.AddNode("Add", {"a.mm", "a.bias"}, {"a.out"}, "/a/Add");
  b.AddNode("MatMul", {"a.out", "b.weight"}, {"b.out"}, "/b/MatMul");
  b.AddNode("MatMul", {"b.out", "c.weight"}, {"c.mm"}, "/c/MatMul");
  b.AddNode("Add", {"c.mm", "c.bias"}, {"c.out"}, "/c/Add");
  b.AddOutput("c.out", testing::kFloat, {"N", 1024});
  auto m = LoadModelFromBytes(b.Serialize(), "", "views");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto sim = symbolic::SimulateModel(**m, Step(2), /*record_events=*/true);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  const std::vector<std::pair<bool, uint64_t>> wrap = WrapCollectives(*sim);
  constexpr uint64_t kA = 64000 * 4 + 1024 * 64000 * 4, kB = 64000 * 1024 * 4;
  constexpr uint64_t kC = 1024 * 1024 * 4 + 1024 * 4;
  const std::vector<std::pair<bool, uint64_t>> want = {
      {true, kA}, {false, kA}, {true, kC}, {false, kC}, {true, kA + kB + kC}};
  EXPECT_EQ(wrap, want);
}

}  // namespace
}  // namespace memest
