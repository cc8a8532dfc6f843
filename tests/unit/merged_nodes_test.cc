// core/merged_nodes.h: an activation torch.onnx.export merged across two modules of the same
// structure is run again for the module that lost its own; other readers across modules are not.
#include "core/merged_nodes.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/graph.h"
#include "memest/memest.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

// A cell: x -> "/cell/pre" conv -> h; module /cell/left_a runs ReLU (its act_1) then a conv over
// h; the module `second` (/cell/left_b: the same structure) reads that ReLU's output with its
// conv at `second_reader` -- what the exporter's CSE leaves when left_b's own act_1 is merged;
// `own_act` gives left_b a node of its own at act_1 as well. The two convs' outputs are added.
std::shared_ptr<const Model> Cell(const std::string& second_reader, bool own_act = false) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 8, 4, 4});
  for (const char* w : {"pre.weight", "left_a.weight", "left_b.weight"}) {
    b.AddInitializer(w, {8, 8, 1, 1});
  }
  b.AddNode("Conv", {"x", "pre.weight"}, {"h"}, "/cell/pre/conv/Conv");
  b.AddNode("Relu", {"h"}, {"r"}, "/cell/left_a/act_1/Relu");
  b.AddNode("Conv", {"r", "left_a.weight"}, {"ya"}, "/cell/left_a/sep/conv/Conv");
  std::string into_b = "r";
  if (own_act) {
    b.AddNode("Sigmoid", {"h"}, {"s"}, "/cell/left_b/act_1/Sigmoid");
    b.AddNode("Add", {"r", "s"}, {"rs"}, "/cell/left_b/mix/Add");
    into_b = "rs";
  }
  b.AddNode("Conv", {into_b, "left_b.weight"}, {"yb"}, second_reader);
  b.AddNode("Add", {"ya", "yb"}, {"y"}, "/cell/Add");
  b.AddOutput("y", testing::kFloat, {"N", 8, 4, 4});
  auto m = LoadModelFromBytes(b.Serialize(), ".", "cell");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

bool Noted(const Model& m) {
  for (const Diagnostic& d : m.summary().diagnostics) {
    if (d.code == "merged_activations_split") return true;
  }
  return false;
}

TEST(MergedNodesTest, AModuleThatLostItsActivationRunsItsOwnCopy) {
  auto m = Cell("/cell/left_b/sep/conv/Conv");
  ASSERT_NE(m, nullptr);
  const core::Graph& g = m->graph();
  ASSERT_EQ(g.nodes.size(), 6u);
  EXPECT_TRUE(Noted(*m));
  // The copy, named for left_b, reads h and comes right before left_b's conv, its one reader.
  const core::Node& copy = g.nodes[3];
  EXPECT_EQ(copy.name, "/cell/left_b/act_1/Relu");
  EXPECT_EQ(copy.op_type, "Relu");
  EXPECT_EQ(copy.inputs[0], g.FindValue("h"));
  EXPECT_EQ(g.nodes[4].name, "/cell/left_b/sep/conv/Conv");
  EXPECT_EQ(g.nodes[4].inputs[0], copy.outputs[0]);
  EXPECT_EQ(g.value(copy.outputs[0]).producer, 3);
  ASSERT_EQ(g.value(copy.outputs[0]).consumers.size(), 1u);
  EXPECT_EQ(g.value(copy.outputs[0]).consumers[0], 4);
  // The original keeps left_a's conv; h has both ReLUs as readers, in node order.
  const int r = g.FindValue("r");
  ASSERT_EQ(g.value(r).consumers.size(), 1u);
  EXPECT_EQ(g.node(g.value(r).consumers[0]).name, "/cell/left_a/sep/conv/Conv");
  const auto& h_readers = g.value(g.FindValue("h")).consumers;
  EXPECT_EQ(std::vector<int>(h_readers.begin(), h_readers.end()), (std::vector<int>{1, 3}));
  // Node i is still proto node i, which reads the copy too (ONNX shape inference reads the proto),
  // and every node reads what earlier nodes made.
  EXPECT_EQ(g.proto->graph().node(4).input(0), g.value(copy.outputs[0]).name);
  EXPECT_EQ(g.proto->graph().node(3).output(0), g.value(copy.outputs[0]).name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    EXPECT_EQ(g.proto->graph().node(static_cast<int>(i)).name(), g.nodes[i].name);
    for (const int in : g.nodes[i].inputs) EXPECT_LT(g.value(in).producer, static_cast<int>(i));
  }
  // Each ReLU's output is kept for backward: one more of 8 x 4 x 4 floats a sample, at batch 2.
  auto plain = Cell("/cell/left_b/other/Conv");
  ASSERT_NE(plain, nullptr);
  Options o;
  o.batch = 2;
  auto est = MakeEstimator("symbolic");
  auto split = (*est)->Run(*m, o), merged = (*est)->Run(*plain, o);
  ASSERT_TRUE(split.ok() && merged.ok());
  ASSERT_TRUE(split->largest.has_value() && merged->largest.has_value());
  EXPECT_EQ(split->largest->saved_activations.bytes,
            merged->largest->saved_activations.bytes + 2 * 8 * 4 * 4 * 4);
}

TEST(MergedNodesTest, ReadersThatDoNotMirrorTheModuleReadTheOneNode) {
  // left_b's reader is not where left_a's is (/other, not /sep): a module reading a sibling's
  // activation, as a feature pyramid reads a backbone's.
  auto other = Cell("/cell/left_b/other/Conv");
  // left_b has a node of its own at act_1: its ReLU was not the one merged.
  auto own = Cell("/cell/left_b/sep/conv/Conv", /*own_act=*/true);
  // A reader in the node's parent module (/cell): the module's output, not a merge.
  auto parent = Cell("/cell/Conv");
  for (const auto& m : {other, own, parent}) {
    ASSERT_NE(m, nullptr);
    EXPECT_FALSE(Noted(*m));
    for (const core::Node& n : m->graph().nodes) EXPECT_NE(n.name, "/cell/left_b/act_1/Relu");
  }
  EXPECT_EQ(other->graph().nodes.size(), 5u);
}

// Two modules that lost their ReLU to the same merge get one copy each, in reading order.
TEST(MergedNodesTest, EachModuleThatLostItsActivationGetsItsOwnCopy) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 8, 4, 4});
  for (const char* w : {"pre.weight", "a.weight", "b.weight", "c.weight"}) {
    b.AddInitializer(w, {8, 8, 1, 1});
  }
  b.AddNode("Conv", {"x", "pre.weight"}, {"h"}, "/cell/pre/conv/Conv");
  b.AddNode("Relu", {"h"}, {"r"}, "/cell/a/act/Relu");
  b.AddNode("Conv", {"r", "a.weight"}, {"ya"}, "/cell/a/conv/Conv");
  b.AddNode("Conv", {"r", "b.weight"}, {"yb"}, "/cell/b/conv/Conv");
  b.AddNode("Conv", {"r", "c.weight"}, {"yc"}, "/cell/c/conv/Conv");
  b.AddNode("Sum", {"ya", "yb", "yc"}, {"y"}, "/cell/Sum");
  b.AddOutput("y", testing::kFloat, {"N", 8, 4, 4});
  auto m = LoadModelFromBytes(b.Serialize(), ".", "cell3");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const core::Graph& g = (*m)->graph();
  std::vector<std::string> names;
  for (const core::Node& n : g.nodes) names.push_back(n.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"/cell/pre/conv/Conv", "/cell/a/act/Relu",
                                      "/cell/a/conv/Conv", "/cell/b/act/Relu", "/cell/b/conv/Conv",
                                      "/cell/c/act/Relu", "/cell/c/conv/Conv", "/cell/Sum"}));
  for (const int k : {3, 5}) {
    EXPECT_EQ(g.nodes[static_cast<size_t>(k + 1)].inputs[0],
              g.nodes[static_cast<size_t>(k)].outputs[0]);
  }
  ASSERT_EQ(g.value(g.FindValue("r")).consumers.size(), 1u);
  EXPECT_EQ(g.value(g.FindValue("h")).consumers.size(), 3u);
}

}  // namespace
}  // namespace memest
