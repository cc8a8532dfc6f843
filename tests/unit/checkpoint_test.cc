// Where activation checkpointing cuts the graph (core/checkpoint.h), and what the symbolic
// backend and the measurement harness make of it.
#include "core/checkpoint.h"

#include <gtest/gtest.h>

#include "memest/memest.h"
#include "symbolic/symbolic.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using memest::testing::GraphBuilder;
using memest::testing::kFloat;

// X[N,64] -> 8 x (Mul by a parameter[64], Sigmoid): 16 nodes, one activation between
// nodes. Each Sigmoid saves its output and each Mul saves its input (memory-model.md §3.2).
std::shared_ptr<const Model> Chain(bool skip = false) {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 64});
  std::string cur = "X";
  for (int i = 0; i < 8; ++i) {
    const std::string k = std::to_string(i);
    b.AddInitializer("w" + k, {64});
    b.AddNode("Mul", {cur, "w" + k}, {"m" + k}, "mul" + k);
    b.AddNode("Sigmoid", {"m" + k}, {"s" + k}, "sig" + k);
    cur = "s" + k;
    if (skip && i == 4) {  // node 10 reads s2 (made by node 5) again
      b.AddNode("Add", {cur, "s2"}, {"a4"}, "skip");
      cur = "a4";
    }
  }
  b.AddOutput(cur, kFloat);
  auto m = LoadModelFromBytes(b.Serialize(), "/tmp", "chain");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

TEST(CheckpointSegmentsTest, EqualSegmentsOfTheNodeOrderAllButTheLast) {
  auto model = Chain();
  ASSERT_NE(model, nullptr);
  const core::Graph& g = model->graph();
  EXPECT_TRUE(core::CheckpointSegments(g, 0).empty());
  EXPECT_TRUE(core::CheckpointSegments(g, 1).empty());
  EXPECT_TRUE(core::CheckpointSegments(g, 17).empty());  // more segments than nodes
  const auto segs = core::CheckpointSegments(g, 4);
  ASSERT_EQ(segs.size(), 3u);  // the 4th segment runs normally (checkpoint_sequential)
  // Every cut between nodes of a chain has one activation crossing: the ideal cuts stand.
  EXPECT_EQ(segs[0].begin, 0);
  EXPECT_EQ(segs[0].end, 4);
  EXPECT_EQ(segs[1].begin, 4);
  EXPECT_EQ(segs[1].end, 8);
  EXPECT_EQ(segs[2].end, 12);
  // Segment 1 reads s1 (made by segment 0) and w2, w3; it hands s3 on.
  ASSERT_EQ(segs[1].inputs.size(), 1u);
  EXPECT_EQ(g.value(segs[1].inputs[0]).name, "s1");
  ASSERT_EQ(segs[1].outputs.size(), 1u);
  EXPECT_EQ(g.value(segs[1].outputs[0]).name, "s3");
  EXPECT_EQ(segs[1].parameters.size(), 2u);
  ASSERT_EQ(segs[0].inputs.size(), 1u);
  EXPECT_EQ(g.value(segs[0].inputs[0]).name, "X");
  const auto of = core::SegmentOfNode(g, segs);
  EXPECT_EQ(of[3], 0);
  EXPECT_EQ(of[4], 1);
  EXPECT_EQ(of[12], -1);
}

TEST(CheckpointSegmentsTest, CutsMoveToWhereFewerActivationsCross) {
  auto model = Chain(/*skip=*/true);  // 17 nodes; s2 (node 5) is read again by node 10
  ASSERT_NE(model, nullptr);
  const auto segs = core::CheckpointSegments(model->graph(), 2);
  ASSERT_EQ(segs.size(), 1u);
  // The ideal cut is before node 9 (17/2 rounded), the window a quarter segment (2 nodes) either
  // side: cuts 7..10 have s2 crossing next to the chain's activation, cut 11 only a4.
  EXPECT_EQ(segs[0].end, 11);
  // s2 is read inside the segment only, so it is not among the segment's outputs.
  ASSERT_EQ(segs[0].outputs.size(), 1u);
  EXPECT_EQ(model->graph().value(segs[0].outputs[0]).name, "a4");
}

// X[N,64] -> 8 blocks "blocks.<i>" of (Mul, Sigmoid, Mul, Sigmoid), then a head Mul: the
// repeated blocks of core/blocks.h, one module path per block as PyTorch's exporter writes them.
std::shared_ptr<const Model> BlockChain() {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 64});
  std::string cur = "X";
  for (int i = 0; i < 8; ++i) {
    const std::string k = std::to_string(i), at = "/blocks." + k + "/";
    for (const char* part : {"a", "b"}) {
      const std::string w = "blocks." + k + "." + part + ".weight", m = "m" + k + part;
      b.AddInitializer(w, {64});
      b.AddNode("Mul", {cur, w}, {m}, at + "Mul_" + part);
      b.AddNode("Sigmoid", {m}, {"s" + k + part}, at + "Sigmoid_" + part);
      cur = "s" + k + part;
    }
  }
  b.AddInitializer("head.weight", {64});
  b.AddNode("Mul", {cur, "head.weight"}, {"y"}, "/head/Mul");
  b.AddOutput("y", kFloat);
  auto m = LoadModelFromBytes(b.Serialize(), "/tmp", "blocks");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

TEST(CheckpointSegmentsTest, EveryBlockIsASegmentTheLastOneToo) {
  auto model = BlockChain();
  ASSERT_NE(model, nullptr);
  Options o;
  o.checkpoint_blocks = true;
  auto segs = core::CheckpointSegmentsFor(model->graph(), o);
  ASSERT_TRUE(segs.ok()) << segs.status().ToString();
  ASSERT_EQ(segs->size(), 8u);  // unlike checkpoint_sequential, the last block is checkpointed
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ((*segs)[i].begin, static_cast<int>(4 * i));
    EXPECT_EQ((*segs)[i].end, static_cast<int>(4 * i + 4));
    EXPECT_EQ((*segs)[i].parameters.size(), 2u);
    ASSERT_EQ((*segs)[i].inputs.size(), 1u);
  }
  EXPECT_EQ(model->graph().value((*segs)[0].inputs[0]).name, "X");
  // The head (node 32) is outside every segment.
  EXPECT_EQ(core::SegmentOfNode(model->graph(), *segs)[32], -1);
  // In inference nothing is checkpointed.
  o.mode = Mode::kInfer;
  auto infer = core::CheckpointSegmentsFor(model->graph(), o);
  ASSERT_TRUE(infer.ok());
  EXPECT_TRUE(infer->empty());
}

// Why checkpointing every block of the graph `b` builds is refused (Ok when it is not: the
// callers' expectations then fail).
Status BlocksRefusal(const GraphBuilder& b) {
  auto model = LoadModelFromBytes(b.Serialize(), "/tmp", "blocks");
  if (!model.ok()) return model.status();
  Options o;
  o.checkpoint_blocks = true;
  auto segs = core::CheckpointSegmentsFor((*model)->graph(), o);
  return segs.ok() ? Status::Ok() : segs.status();
}

TEST(CheckpointSegmentsTest, BlocksOnAGraphWithoutThemIsAnErrorNotANoOp) {
  GraphBuilder b(17);  // no name carries an index
  b.AddInput("X", kFloat, {"N", 64});
  b.AddInitializer("scale", {64});
  b.AddNode("Mul", {"X", "scale"}, {"m"}, "mul");
  b.AddNode("Sigmoid", {"m"}, {"y"}, "act");
  b.AddOutput("y", kFloat);
  const Status refused = BlocksRefusal(b);
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("no repeated blocks"), std::string::npos);
  // And the two ways to cut are not given together.
  Options o;
  o.checkpoint_blocks = true;
  o.checkpoint_segments = 4;
  EXPECT_FALSE(Validate(o).ok());
}

TEST(CheckpointSegmentsTest, InterleavedBlocksAreRefusedNamingTheNode) {
  GraphBuilder b(17);  // blocks.0, blocks.1, blocks.0 again: no block is a run of the node order
  b.AddInput("X", kFloat, {"N", 64});
  std::string cur = "X";
  int n = 0;
  for (int i : {0, 1, 0}) {
    const std::string k = std::to_string(i), out = "y" + std::to_string(n++);
    b.AddInitializer("blocks." + k + ".w" + out, {64});
    b.AddNode("Mul", {cur, "blocks." + k + ".w" + out}, {out}, "/blocks." + k + "/Mul_" + out);
    cur = out;
  }
  b.AddOutput(cur, kFloat);
  const Status refused = BlocksRefusal(b);
  EXPECT_EQ(refused.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("interleave"), std::string::npos);
  EXPECT_NE(refused.message().find("/blocks.1/"), std::string::npos);
}

Result<Estimate> Symbolic(const Model& m, int64_t batch, int64_t segments) {
  Options o;
  o.batch = batch;
  o.optimizer = Optimizer::kSgd;
  o.checkpoint_segments = segments;
  MEMEST_ASSIGN_OR_RETURN(auto est, MakeEstimator("symbolic"));
  return est->Run(m, o);
}

TEST(CheckpointTimelineTest, OneSegmentIsNoCheckpointing) {
  auto model = Chain();
  ASSERT_NE(model, nullptr);
  auto off = Symbolic(*model, 256, 0), one = Symbolic(*model, 256, 1);
  ASSERT_TRUE(off.ok() && one.ok());
  EXPECT_EQ(off->peak_allocated, one->peak_allocated);
  EXPECT_EQ(off->peak_reserved, one->peak_reserved);
}

TEST(CheckpointTimelineTest, CheckpointingTradesSavedActivationsForRecomputation) {
  auto model = Chain();
  ASSERT_NE(model, nullptr);
  // [256, 64] fp32 = 65,536 B per activation. Mul saves its activation input and Sigmoid its
  // output, so without checkpointing X and s0..s7 (9 activations) are kept at the end of the
  // forward. With 4 segments of 4 nodes the forward keeps X, s1, s3 (inputs of the checkpointed
  // segments) and s5, s6, s7 (saved by the last, normal segment): 3 activations fewer; the
  // recomputation in backward holds one segment's own (s_k of its two Sigmoids) at a time.
  auto off = Symbolic(*model, 256, 0), four = Symbolic(*model, 256, 4);
  ASSERT_TRUE(off.ok() && four.ok());
  constexpr uint64_t kAct = 256 * 64 * 4;
  EXPECT_EQ(off->peak_allocated - four->peak_allocated, 3 * kAct);
}

TEST(CheckpointTimelineTest, CheckpointingEveryBlockKeepsTheBlockInputsOnly) {
  auto model = BlockChain();
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 256;
  o.optimizer = Optimizer::kSgd;
  for (const char* backend : {"symbolic", "analytical"}) {
    auto est = MakeEstimator(backend);
    ASSERT_TRUE(est.ok());
    auto off = (*est)->Run(*model, o);
    Options blocks = o;
    blocks.checkpoint_blocks = true;
    auto on = (*est)->Run(*model, blocks);
    ASSERT_TRUE(off.ok() && on.ok()) << backend;
    // [256, 64] fp32 = 65,536 B per activation. Without checkpointing a block keeps its input
    // (the first Mul's), its first Sigmoid's output (also the second Mul's input) and its second
    // Sigmoid's output: X and 16 others at the end of the forward. Checkpointing every block keeps
    // X, the 7 block outputs the next block reads and s7b, which the head saves: 8 fewer, less the
    // one block recomputed at a time in backward (its 2 own) -- 6 fewer at least.
    constexpr uint64_t kAct = 256 * 64 * 4;
    EXPECT_GE(off->peak_allocated - on->peak_allocated, 6 * kAct) << backend;
    EXPECT_LE(off->peak_allocated - on->peak_allocated, 8 * kAct) << backend;
  }
}

}  // namespace
}  // namespace memest
