// Many GPUs (memory/parallel.h): model states per rank against the published numbers -- the ZeRO
// paper's 7.5 B-parameter model on 64 GPUs and DeepSpeed's own estimators -- and the estimate of
// a graph under DDP, ZeRO and FSDP, with the errors a bad layout draws.
#include "memory/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "datasets/zoo/families.h"
#include "memest/memest.h"
#include "memory/context.h"
#include "symbolic/symbolic.h"
#include "symbolic/timeline.h"
#include "testing/bundled.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using memory::RankStates;
using memory::ShardModelStates;
using testing::GraphBuilder;
using testing::kFloat;

Options Zero(Sharding stage, int64_t dp, Precision precision = Precision::kAmpFp16) {
  Options o;
  o.precision = precision;
  o.optimizer = Optimizer::kAdam;
  o.parallel.world_size = dp;
  o.parallel.sharding = stage;
  return o;
}

uint64_t ModelStates(const RankStates& r) { return r.weights + r.gradients + r.optimizer_state; }

// S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
// (SC'20, https://arxiv.org/abs/1910.02054), Figure 1: Psi = 7.5 B parameters, N_d = 64, mixed
// precision Adam (K = 12): 120 GB per GPU without partitioning, 31.4 GB with P_os, 16.6 GB with
// P_os+g, 1.9 GB with P_os+g+p (GB = 10^9 bytes).
TEST(ZeroPaperTest, SevenAndAHalfBillionParametersOnSixtyFourGpus) {
  const uint64_t psi = 7'500'000'000;
  const uint64_t largest = 0;  // the paper leaves the gathered layer out
  // Without partitioning: ZeRO-1 over one rank holds everything, 2 + 2 + 12 bytes per parameter.
  EXPECT_EQ(ModelStates(ShardModelStates(psi, largest, Zero(Sharding::kZero1, 1))),
            120'000'000'000u);
  const uint64_t pos = ModelStates(ShardModelStates(psi, largest, Zero(Sharding::kZero1, 64)));
  const uint64_t posg = ModelStates(ShardModelStates(psi, largest, Zero(Sharding::kZero2, 64)));
  const uint64_t posgp = ModelStates(ShardModelStates(psi, largest, Zero(Sharding::kZero3, 64)));
  EXPECT_EQ(pos, 4 * psi + 12 * psi / 64);   // 31.406 GB
  EXPECT_EQ(posg, 2 * psi + 14 * psi / 64);  // 16.641 GB
  EXPECT_EQ(posgp, 16 * psi / 64);           // 1.875 GB
  auto gb = [](uint64_t bytes) { return std::round(bytes / 1e8) / 10; };
  EXPECT_DOUBLE_EQ(gb(pos), 31.4);
  EXPECT_DOUBLE_EQ(gb(posg), 16.6);
  EXPECT_DOUBLE_EQ(gb(posgp), 1.9);
}

// DeepSpeed's estimate_zero2_model_states_mem_needs (deepspeed/runtime/zero/stage_1_and_2.py, as
// corrected by PR #5099): without offload 2P + 18P/N bytes per GPU (16-bit parameters, and per
// partition 16-bit and fp32 gradients, fp32 master weights and Adam's two fp32 moments); with the
// optimizer offloaded 2P.
TEST(DeepSpeedEstimatorTest, ZeroTwoPerGpu) {
  for (const auto& [p, n] : {std::pair<uint64_t, int64_t>{1'000'000'000, 8},
                             {6'700'000'000, 4},
                             {13'000'000'000, 64},
                             {125'000'000, 2}}) {
    const RankStates r = ShardModelStates(p, 0, Zero(Sharding::kZero2, n));
    EXPECT_EQ(ModelStates(r) + r.fp32_grad_buffer, 2 * p + 18 * p / static_cast<uint64_t>(n))
        << "P=" << p << " N=" << n;
    Options off = Zero(Sharding::kZero2, n);
    off.parallel.offload_optimizer = true;
    const RankStates o = ShardModelStates(p, 0, off);
    EXPECT_EQ(ModelStates(o) + o.fp32_grad_buffer + o.gathered, 2 * p);
    EXPECT_GT(o.host, 0u);
  }
}

// estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py): with parameters and
// optimizer offloaded 4L (the largest layer's 16-bit parameters and gradients, gathered); with
// the optimizer only, 4L + 2P/N. Without offload DeepSpeed prints 4L + 18P/N; memest keeps
// 4L + 20P/N at the step: the persistent 16-bit parameter and gradient partitions (2 + 2), the
// fp32 master weights and moments (4 + 8) and the step's fp32 gradient of the sub-group (4,
// stage3.py _prepare_fp32_grad_for_sub_group; the sub-group is the whole partition while it
// holds fewer than sub_group_size = 1e9 elements) -- 2P/N above DeepSpeed's own printout.
TEST(DeepSpeedEstimatorTest, ZeroThreePerGpu) {
  const uint64_t p = 6'400'000'000, l = 131'072'000;
  const int64_t n = 8;
  Options both = Zero(Sharding::kZero3, n);
  both.parallel.offload_optimizer = both.parallel.offload_params = true;
  const RankStates b = ShardModelStates(p, l, both);
  EXPECT_EQ(ModelStates(b) + b.fp32_grad_buffer + b.gathered, 4 * l);
  Options opt = Zero(Sharding::kZero3, n);
  opt.parallel.offload_optimizer = true;
  const RankStates o = ShardModelStates(p, l, opt);
  EXPECT_EQ(ModelStates(o) + o.fp32_grad_buffer + o.gathered, 4 * l + 2 * p / n);
  const RankStates z = ShardModelStates(p, l, Zero(Sharding::kZero3, n));
  const uint64_t memest = ModelStates(z) + z.fp32_grad_buffer + z.gathered;
  const uint64_t deepspeed = 4 * l + 18 * p / n;
  EXPECT_EQ(memest - deepspeed, 2 * p / n);
}

// A tower of `layers` Linear layers ("layers.<i>.weight" [1024, 1024] and ".bias").
constexpr int64_t kWidth = 1024;
std::shared_ptr<const Model> Tower(int layers) {
  auto m = LoadModelFromBytes(testing::LinearStack(layers, kWidth, /*relu=*/true).Serialize(), "",
                              "tower");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

constexpr uint64_t kUnit = kWidth * kWidth + kWidth;  // one layer's parameters

Result<Estimate> Analytical(const Model& m, Options o) {
  o.batch = 16;
  o.loss = Loss::kMse;
  return (*MakeEstimator("analytical"))->Run(m, o);
}

TEST(ParallelEstimateTest, ZeroPartitionsTheOptimizerStateOfTheGraphsParameters) {
  auto m = Tower(8);
  ASSERT_NE(m, nullptr);
  const uint64_t p = 8 * kUnit;
  for (Sharding s : {Sharding::kZero1, Sharding::kZero2, Sharding::kZero3}) {
    auto e = Analytical(*m, Zero(s, 4, Precision::kAmpBf16));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->breakdown.optimizer_state, (p / 4) * 12) << ToString(s);
    ASSERT_EQ(e->ranks.size(), 1u);
    EXPECT_EQ(e->ranks[0].first_rank, 0);
    EXPECT_EQ(e->ranks[0].last_rank, 3);
  }
  auto z1 = Analytical(*m, Zero(Sharding::kZero1, 4, Precision::kAmpBf16));
  auto z3 = Analytical(*m, Zero(Sharding::kZero3, 4, Precision::kAmpBf16));
  EXPECT_EQ(z1->breakdown.weights, 2 * p);
  EXPECT_EQ(z3->breakdown.weights, 2 * p / 4);
  EXPECT_LT(z3->peak_device, z1->peak_device);
}

TEST(ParallelEstimateTest, DdpCopiesEveryGradientIntoBucketsUnlessTheyAreViews) {
  auto m = Tower(4);
  ASSERT_NE(m, nullptr);
  Options o;
  o.parallel.world_size = 2;
  auto e = Analytical(*m, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->breakdown.gradients, 4 * kUnit * 4);
  EXPECT_EQ(e->breakdown.collective_buffers, e->breakdown.gradients);
  o.parallel.gradient_as_bucket_view = true;
  auto v = Analytical(*m, o);
  EXPECT_EQ(v->breakdown.collective_buffers, 0u);
  // One copy of the gradients, in two buckets (1 MiB, then the rest under 25 MiB), each a
  // 512-byte-rounded block.
  const uint64_t copy = 4 * kUnit * 4;
  EXPECT_GE(e->peak_allocated - v->peak_allocated, copy);
  EXPECT_LE(e->peak_allocated - v->peak_allocated, copy + 2 * 512);
}

TEST(ParallelEstimateTest, FsdpGathersTheCurrentAndNextUnitOrAllOfThemWithGradOp) {
  auto m = Tower(8);
  ASSERT_NE(m, nullptr);
  Options full = Zero(Sharding::kFsdpFull, 4, Precision::kAmpBf16);
  auto f = Analytical(*m, full);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  if (f->peak_phase == Phase::kBackward) {
    EXPECT_EQ(f->breakdown.collective_buffers, 2 * (2 * kUnit + kUnit));
  }
  EXPECT_EQ(f->breakdown.weights, 8 * kUnit * 4 / 4);  // fp32 shards
  Options grad_op = full;
  grad_op.parallel.sharding = Sharding::kFsdpGradOp;
  const RankStates g = ShardModelStates(
      [&] {
        std::vector<memory::ParameterShare> v;
        for (int u = 0; u < 8; ++u) v.push_back({-1, kUnit, kUnit * 4, true, u, u});
        return v;
      }(),
      grad_op);
  EXPECT_EQ(g.gathered, 2 * (8 * kUnit + kUnit));
  Options unit = full;
  unit.parallel.fsdp_unit = "layers\\.[0-3]\\.";  // four units of one layer, the rest root
  auto u = Analytical(*m, unit);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  unit.parallel.fsdp_unit = "nothing_matches";
  auto none = Analytical(*m, unit);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("matches no parameter"), std::string::npos);
}

TEST(ParallelEstimateTest, NcclBuffersPerCommunicatorOutsideTheAllocator) {
  auto m = Tower(4);
  ASSERT_NE(m, nullptr);
  Options o;
  o.parallel.world_size = 4;
  auto dp = Analytical(*m, o);
  ASSERT_TRUE(dp.ok());
  // 32 channels x 3 connections x 10 MiB (4 MiB Simple + LL128 + LL, in 2 MiB granules).
  const uint64_t per_communicator = 32 * 3 * (uint64_t{10} << 20);
  EXPECT_EQ(dp->breakdown.nccl_buffers, per_communicator);
  o.parallel.tp = 2;
  auto tp = Analytical(*m, o);
  ASSERT_TRUE(tp.ok()) << tp.status().ToString();
  EXPECT_EQ(tp->breakdown.nccl_buffers, 2 * per_communicator);  // dp and tp groups
  o.parallel.nccl_channels = 4;
  o.parallel.nccl_buffsize = 8u << 20;  // 8 MiB + LL128 + LL: 14 MiB
  EXPECT_EQ(Analytical(*m, o)->breakdown.nccl_buffers, 2 * 4 * 3 * (uint64_t{14} << 20));
  EXPECT_EQ(tp->peak_reserved + tp->breakdown.cuda_context + tp->breakdown.library_memory +
                tp->breakdown.nccl_buffers,
            tp->peak_device);
}

TEST(ParallelEstimateTest, OffloadMovesStatesToHostMemory) {
  auto m = Tower(8);
  ASSERT_NE(m, nullptr);
  Options o = Zero(Sharding::kZero3, 4, Precision::kAmpBf16);
  o.parallel.offload_optimizer = o.parallel.offload_params = true;
  auto e = Analytical(*m, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->breakdown.optimizer_state, 0u);
  EXPECT_EQ(e->host_bytes, 8 * kUnit / 4 * (2 + 2 + 4 + 8 + 4));
}

TEST(ParallelEstimateTest, BadLayoutsAreErrorsNamingTheNumbers) {
  auto m = Tower(2);
  ASSERT_NE(m, nullptr);
  Options o;
  o.parallel.world_size = 8;
  o.parallel.dp = 2;
  o.parallel.tp = 2;
  auto e = Analytical(*m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("2 x 2 x 1 != 8"), std::string::npos) << e.status().message();
  Options z = Zero(Sharding::kZero2, 2);
  z.parallel.tp = 2;  // dp = 1
  z.parallel.world_size = 2;
  auto ze = Analytical(*m, z);
  ASSERT_FALSE(ze.ok());
  EXPECT_NE(ze.status().message().find("dp=1"), std::string::npos) << ze.status().message();
  Options off;
  off.parallel.world_size = 2;
  off.parallel.offload_params = true;
  EXPECT_FALSE(Analytical(*m, off).ok());
  Options infer;
  infer.mode = Mode::kInfer;
  infer.parallel.world_size = 2;
  EXPECT_FALSE(Analytical(*m, infer).ok());
}

// Blocks named as scopes ("layer3/attn/...", datasets/zoo) are found too; the embedding lands on
// the first stage, the head on the last, and a vocabulary-parallel head splits the logits.
TEST(ParallelEstimateTest, ScopeNamedBlocksAreCutIntoStages) {
  zoo::TransformerConfig c;
  c.layers = 4;
  c.d_model = 64;
  c.heads = 4;
  c.ffn = 256;
  c.seq = 32;
  c.vocab = 512;
  auto m = LoadModelFromBytes(zoo::BuildTransformer(c, "t").model.SerializeAsString(), "", "t");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Options o;
  o.batch = 4;
  o.micro_batches = 2;
  o.loss = Loss::kCrossEntropy;
  o.parallel.world_size = 4;
  o.parallel.pp = 2;
  o.parallel.tp = 2;
  auto e = (*MakeEstimator("analytical"))->Run(**m, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->ranks.size(), 2u);
  EXPECT_EQ(e->ranks[0].layers, 2);
  EXPECT_EQ(e->ranks[1].layers, 2);
  EXPECT_EQ(e->ranks[0].first_rank, 0);
  EXPECT_EQ(e->ranks[0].last_rank, 1);
  EXPECT_EQ(e->ranks[1].first_rank, 2);
  EXPECT_EQ(e->ranks[1].last_rank, 3);
  // Stage 0 holds the token embedding (split over tp: 512 x 64 / 2 floats), stage 1 the head.
  EXPECT_GE(e->ranks[0].breakdown.weights, 512u * 64 * 4 / 2);
  bool named = false;
  for (const Diagnostic& d : e->diagnostics) {
    if (d.code == "parallel") named = d.message.find("'layer<index>'") != std::string::npos;
  }
  EXPECT_TRUE(named);
}

TEST(ParallelEstimateTest, BackendsWithoutAPerRankModelRefuseNamingTheOption) {
  auto m = Tower(2);
  ASSERT_NE(m, nullptr);
  Options o;
  o.batch = 4;
  o.parallel.world_size = 2;
  for (const char* name : {"learned", "measurement"}) {
    auto est = MakeEstimator(name);
    if (!est.ok()) continue;  // not built here
    auto e = (*est)->Run(*m, o);
    ASSERT_FALSE(e.ok()) << name;
    EXPECT_NE(e.status().message().find("world_size 2"), std::string::npos) << e.status().message();
  }
}

// One rank per pipeline stage in the symbolic timeline: 8 layers on 4 stages of 2 under 1F1B with
// 4 micro-batches of 4 rows. Each stage holds its own 2 layers' parameters; the middle stages
// receive their input and keep it, and each Relu keeps its output, so one micro-batch leaves
// 3 [4 x kWidth] fp32 tensors on a middle stage, and stage 1 (3 in flight) holds exactly one
// such set more than stage 2 (2 in flight).
TEST(ParallelTimelineTest, PipelineStagesHoldTheirLayersAndTheirMicroBatchesInFlight) {
  auto m = Tower(8);
  ASSERT_NE(m, nullptr);
  Options o;
  o.batch = 16;
  o.micro_batches = 4;
  o.loss = Loss::kMse;
  o.parallel.world_size = 4;
  o.parallel.pp = 4;
  auto ctx = memory::EstimationContext::Make(*m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  std::vector<symbolic::Simulation> stages;
  for (int s = 0; s < 4; ++s) {
    (*ctx)->set_stage(s);
    auto sim = symbolic::Simulate(**ctx, false);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    EXPECT_EQ(sim->estimate.largest->weights.bytes, 2 * kUnit * 4) << "stage " << s;
    EXPECT_EQ(sim->estimate.largest->optimizer_state.bytes, 2 * 2 * kUnit * 4) << "stage " << s;
    stages.push_back(std::move(*sim));
  }
  const uint64_t set = 3 * 4 * kWidth * 4;
  EXPECT_EQ(stages[1].estimate.largest->saved_activations.bytes,
            stages[2].estimate.largest->saved_activations.bytes + set);
  // The backend reports every stage and the worst; --timeline draws that stage's rank.
  auto e = (*MakeEstimator("symbolic"))->Run(*m, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->ranks.size(), 4u);
  EXPECT_EQ(e->ranks[1].in_flight, 3);
  uint64_t worst = 0;
  for (const RankPeak& r : e->ranks) worst = std::max(worst, r.peak_device);
  EXPECT_EQ(e->peak_device, worst);
  auto drawn = symbolic::SimulateModel(*m, o, true);
  ASSERT_TRUE(drawn.ok()) << drawn.status().ToString();
  EXPECT_EQ(drawn->estimate.peak_device, worst);
  // Checkpointing with stages is not modelled here: refused by name.
  o.checkpoint_segments = 2;
  auto refused = (*MakeEstimator("symbolic"))->Run(*m, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("checkpointing"), std::string::npos);
}

// The symbolic timeline of one FSDP rank: the unit being computed and the prefetched next one
// are gathered, and in backward the unit's unsharded gradients too -- at most 3 units in the
// compute dtype, the analytical backend's figure; every gathered buffer is freed by the step.
TEST(ParallelTimelineTest, FsdpGathersUnitsAndFreesThemBeforeTheStep) {
  auto m = Tower(8);
  ASSERT_NE(m, nullptr);
  Options o = Zero(Sharding::kFsdpFull, 4, Precision::kAmpBf16);
  o.batch = 16;
  o.loss = Loss::kMse;
  auto sim = symbolic::SimulateModel(*m, o, /*record_events=*/true);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  int64_t live = 0, most = 0;
  bool freed_before_step = true;
  for (const symbolic::TimelineEvent& e : sim->events) {
    if (e.category != symbolic::Category::kCollective) continue;
    live += e.malloc ? static_cast<int64_t>(e.bytes) : -static_cast<int64_t>(e.bytes);
    most = std::max(most, live);
    if (e.phase == Phase::kOptimizerStep && live != 0) freed_before_step = false;
  }
  EXPECT_EQ(most, static_cast<int64_t>(2 * 3 * kUnit));
  EXPECT_TRUE(freed_before_step);
  EXPECT_EQ(live, 0);
  // The optimizer state is one flat shard: 2 fp32 moments of a quarter of the parameters.
  EXPECT_EQ(sim->estimate.largest->optimizer_state.bytes, 8 * kUnit / 4 * 4 * 2);
}

TEST(ParallelTimelineTest, ZeroAndDdpAgreeWithTheAnalyticalModelStates) {
  auto m = Tower(8);
  ASSERT_NE(m, nullptr);
  for (Sharding s : {Sharding::kNone, Sharding::kZero1, Sharding::kZero2, Sharding::kZero3}) {
    Options o = Zero(s, 4, Precision::kAmpBf16);
    o.batch = 16;
    o.loss = Loss::kMse;
    auto sim = symbolic::SimulateModel(*m, o, false);
    auto ana = Analytical(*m, o);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    ASSERT_TRUE(ana.ok());
    EXPECT_EQ(sim->estimate.largest->optimizer_state.bytes, ana->breakdown.optimizer_state)
        << ToString(s);
    EXPECT_EQ(sim->estimate.breakdown.nccl_buffers, ana->breakdown.nccl_buffers);
  }
}

// The Hugging Face builder holds a tensor a Python variable still names with an Identity nothing
// reads (datasets/zoo/hf_decoder.cc): GPT-2's embeddings are held after the final norm, in the last
// layer's part of the graph. Such a hold stays on the stage that made its tensor; read on the last
// stage it made the embeddings a received activation there (and sent from stage 0), one hidden
// state per micro-batch more.
TEST(ParallelEstimateTest, AHeldTensorStaysOnTheStageThatMadeIt) {
  auto model = testing::HfModel("gpt2.json");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.dims["seq"] = 128;
  o.parallel.world_size = 2;
  o.parallel.pp = 2;
  o.micro_batches = 2;
  auto ctx = memory::EstimationContext::Make(*model, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const core::Graph& g = model->graph();
  const memory::ParallelPlan& plan = (*ctx)->parallel();
  int holds = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    if (n.op_type != "Identity" || n.outputs.empty() || n.outputs[0] < 0 ||
        !g.value(n.outputs[0]).consumers.empty()) {
      continue;
    }
    const int producer = g.value(n.inputs[0]).producer;
    ASSERT_GE(producer, 0);
    EXPECT_EQ(plan.stage_of_node(k), plan.stage_of_node(static_cast<size_t>(producer))) << n.name;
    ++holds;
  }
  EXPECT_GT(holds, 2 * 12);  // two or three a layer, and the embeddings'
  EXPECT_EQ(plan.stage_of_node(g.nodes.size() - 1), 1);
}

}  // namespace
}  // namespace memest
