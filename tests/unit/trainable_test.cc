// Trainable sets (Options::trainable / freeze, memory/trainable.h): frozen parameters keep their
// weights but get no gradient and no optimizer state, and a frozen prefix saves nothing. A
// trainable parameter that backward does not reach from the loss on the first output gets
// neither either, and the estimate warns (memory-model.md §4.2).
#include "memory/trainable.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "core/graph.h"
#include "memest/memest.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

std::shared_ptr<const Model> Load(const std::string& rel) {
  auto m = LoadModel((std::filesystem::path(MEMEST_SOURCE_DIR) / rel).string());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

Estimate EstimateWith(const char* backend, const Model& m, const Options& o) {
  auto est = MakeEstimator(backend);
  auto e = (*est)->Run(m, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : Estimate{};
}

TEST(TrainableTest, FreezingSelectsByNameAndCountsElements) {
  auto m = Load("datasets/real/mobilenet_v2_train.onnx");
  ASSERT_NE(m, nullptr);
  Options o;
  o.freeze = "^features\\.";
  auto s = memory::SelectTrainable(m->graph(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->parameters, 158);
  EXPECT_EQ(s->trained, 2);  // the classifier's weight and bias
  EXPECT_EQ(s->trained_elements, 1280u * 1000 + 1000);
  EXPECT_EQ(s->parameter_elements, 3504872u);
  Options keep;
  keep.trainable = "classifier";
  EXPECT_EQ(memory::SelectTrainable(m->graph(), keep)->trained, 2);
}

TEST(TrainableTest, FrozenParametersHaveNoGradientsOrStateAndAFrozenPrefixSavesNothing) {
  auto m = Load("datasets/real/mobilenet_v2_train.onnx");
  ASSERT_NE(m, nullptr);
  Options all;
  all.batch = 16;
  Options head = all;
  head.freeze = "^features\\.";
  const uint64_t head_bytes = (1280u * 1000 + 1000) * 4;
  for (const char* backend : {"analytical", "symbolic"}) {
    const Estimate a = EstimateWith(backend, *m, all), h = EstimateWith(backend, *m, head);
    EXPECT_EQ(h.breakdown.weights, a.breakdown.weights) << backend;  // frozen weights stay
    EXPECT_EQ(h.largest ? h.largest->optimizer_state.bytes : h.breakdown.optimizer_state,
              2 * head_bytes)
        << backend;
    EXPECT_LT(h.peak_allocated, a.peak_allocated / 2) << backend;
  }
  const Estimate s = EstimateWith("symbolic", *m, head);
  const Estimate full = EstimateWith("symbolic", *m, all);
  ASSERT_TRUE(s.largest.has_value() && full.largest.has_value());
  EXPECT_EQ(s.largest->gradients.bytes, head_bytes);
  // No convolution of the frozen features saves anything: what is left is the input batch and
  // the classifier's inputs, a small part of the full model's saves.
  EXPECT_LT(s.largest->saved_activations.bytes * 20, full.largest->saved_activations.bytes);
}

// A frozen backbone runs as inference does: each node's inputs and outputs are held at once, and
// an activation until its last reader (a residual's shortcut across its block). The analytical
// backend's forward counts them (analytical.cc NoGradRoots), so on ResNet-18 training only its
// classifier the allocated peak is the symbolic replay's within 1 %; counting only each node's
// outputs read 0.78 and 0.64 of it at batch 16 and 64.
TEST(TrainableTest, AFrozenBackboneHoldsEachNodesInputsAndOutputsAtOnce) {
  auto m = Load("datasets/models/resnet18_train.onnx");
  ASSERT_NE(m, nullptr);
  for (int64_t batch : {16, 64}) {
    Options o;
    o.batch = batch;
    o.trainable = "^fc\\.";
    const Estimate a = EstimateWith("analytical", *m, o), s = EstimateWith("symbolic", *m, o);
    EXPECT_GE(a.peak_allocated * 100, s.peak_allocated * 99) << batch;
    EXPECT_LE(a.peak_allocated * 100, s.peak_allocated * 101) << batch;
    // Its device peak, without the allocator's cached blocks, is said to read under.
    const auto said = [](const Estimate& e) {
      return std::any_of(e.diagnostics.begin(), e.diagnostics.end(), [](const Diagnostic& d) {
        return d.code == "frozen_without_allocator_model" && d.severity == Severity::kWarning;
      });
    };
    EXPECT_TRUE(said(a)) << batch;
    EXPECT_FALSE(said(s)) << batch;
    o.trainable.clear();
    EXPECT_FALSE(said(EstimateWith("analytical", *m, o))) << batch;
  }
}

TEST(TrainableTest, BadExpressionsAreUsageErrorsAndOtherBackendsRefuse) {
  auto m = Load("datasets/models/mlp_small_train.onnx");
  ASSERT_NE(m, nullptr);
  Options o;
  o.batch = 4;
  o.freeze = "([unclosed";
  auto est = MakeEstimator("symbolic");
  auto e = (*est)->Run(*m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("freeze"), std::string::npos);
  // Expressions that would make a backtracking engine exponential are matched in linear time
  // (POSIX ERE, glibc's automaton): a long hostile name still answers at once.
  {
    Options n = o;
    n.freeze = "(a|aa)+(a+)+$";
    EXPECT_TRUE(Validate(n).ok());
  }
  // One that matches no parameter names the first few, so that the user sees how they read.
  Options typo = o;
  typo.freeze.clear();
  typo.trainable = "^zzz";
  auto none = (*est)->Run(*m, typo);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(
                "trainable '^zzz' matches no parameter name (6 parameters, named like '0.weight', "
                "'0.bias', '3.weight')"),
            std::string::npos)
      << none.status().message();
  Options everything = o;
  everything.freeze = ".";
  auto frozen = (*est)->Run(*m, everything);
  ASSERT_TRUE(frozen.ok());
  bool warned = false;
  for (const Diagnostic& d : frozen->diagnostics) warned = warned || d.code == "nothing_trains";
  EXPECT_TRUE(warned);
  EXPECT_EQ(frozen->breakdown.optimizer_state, 0u);
}

// timm's StarReLU, s * relu(x) ** 2 + b, after a Linear, as torch.onnx.export writes it: the
// learnable scalars s and b are 1-element initializers named by the state_dict ("act.scale",
// "act.bias"), the exponent a constant. Named otherwise ("act_scale": no module path), the same
// initializers are constants.
std::shared_ptr<const Model> StarRelu(const std::string& scale, const std::string& bias) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 64});
  b.AddInitializer("fc.weight", {64, 64});
  b.AddInitializer(scale, {1});
  b.AddInitializer(bias, {1});
  b.AddInitializer("onnx::Pow_2", {});
  b.AddInitializer("half", {1});
  b.AddInitializer("input.1", {1});  // a TorchScript value name: a constant
  b.AddNode("MatMul", {"x", "fc.weight"}, {"h"});
  b.AddNode("Relu", {"h"}, {"r"});
  b.AddNode("Pow", {"r", "onnx::Pow_2"}, {"p"});
  b.AddNode("Mul", {scale, "p"}, {"s"});
  b.AddNode("Add", {"s", bias}, {"a"});
  b.AddNode("Mul", {"a", "half"}, {"m"});
  b.AddNode("Mul", {"m", "input.1"}, {"y"});
  b.AddOutput("y", testing::kFloat, {"N", 64});
  auto m = LoadModelFromBytes(b.Serialize(), ".", "star_relu");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

// A 1-element initializer named as a module's state_dict names it is a parameter: it trains, and
// the product it scales keeps its other operand for the scalar's gradient (mul's backward; on
// the measured H100 caformer_m36 jobs, whose StarReLUs are these, the symbolic allocated peak was
// 17-20 % under until the squares were kept). One named otherwise stays a constant.
TEST(TrainableTest, AOneElementInitializerWithAStateDictNameIsAParameter) {
  auto named = StarRelu("act.scale", "act.bias");
  auto constants = StarRelu("act_scale", "act_bias");
  ASSERT_NE(named, nullptr);
  ASSERT_NE(constants, nullptr);
  const core::Graph& g = named->graph();
  for (const char* p : {"fc.weight", "act.scale", "act.bias"}) {
    EXPECT_TRUE(g.value(g.FindValue(p)).trainable) << p;
  }
  for (const char* c : {"onnx::Pow_2", "half", "input.1"}) {
    EXPECT_FALSE(g.value(g.FindValue(c)).trainable) << c;
  }
  EXPECT_EQ(named->summary().parameter_count, 64 * 64 + 2);
  EXPECT_EQ(constants->summary().parameter_count, 64 * 64);
  const core::Graph& c = constants->graph();
  EXPECT_FALSE(c.value(c.FindValue("act_scale")).trainable);
  Options o;
  o.batch = 8;
  const Estimate with = EstimateWith("symbolic", *named, o);
  const Estimate without = EstimateWith("symbolic", *constants, o);
  ASSERT_TRUE(with.largest.has_value() && without.largest.has_value());
  // The square p, 8 x 64 floats, is saved as well.
  EXPECT_EQ(with.largest->saved_activations.bytes,
            without.largest->saved_activations.bytes + 8 * 64 * 4);
}

// x -> trunk -> h; h -> head -> "y" and h -> aux -> Relu -> "aux": two outputs, `aux_first`
// choosing which is the first (where the loss is taken). Each weight is 64 x 64 floats.
std::shared_ptr<const Model> TwoHeads(bool aux_first) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 64});
  for (const char* w : {"trunk.weight", "head.weight", "aux.weight"}) b.AddInitializer(w, {64, 64});
  b.AddNode("MatMul", {"x", "trunk.weight"}, {"h"});
  b.AddNode("MatMul", {"h", "head.weight"}, {"y"});
  b.AddNode("MatMul", {"h", "aux.weight"}, {"a"});
  b.AddNode("Relu", {"a"}, {"aux"});
  for (const char* out : aux_first ? std::vector{"aux", "y"} : std::vector{"y", "aux"}) {
    b.AddOutput(out, testing::kFloat, {"N", 64});
  }
  auto m = LoadModelFromBytes(b.Serialize(), ".", "two_heads");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

TEST(TrainableTest, AParameterBackwardDoesNotReachGetsNoGradientOrStateAndIsNamed) {
  constexpr uint64_t kWeight = 64 * 64 * 4;
  for (const bool aux_first : {false, true}) {
    SCOPED_TRACE(aux_first ? "loss on aux" : "loss on y");
    auto m = TwoHeads(aux_first);
    ASSERT_NE(m, nullptr);
    Options o;
    o.batch = 8;
    for (const char* backend : {"analytical", "symbolic"}) {
      SCOPED_TRACE(backend);
      const Estimate e = EstimateWith(backend, *m, o);
      // Adam's two moments for the trunk and the head the loss reads, none for the other head.
      EXPECT_EQ(e.largest ? e.largest->optimizer_state.bytes : e.breakdown.optimizer_state,
                2 * 2 * kWeight);
      if (e.largest) {
        EXPECT_EQ(e.largest->gradients.bytes, 2 * kWeight);
      }
      const auto warning = std::find_if(e.diagnostics.begin(), e.diagnostics.end(), [](auto& d) {
        return d.code == "parameters_without_gradient";
      });
      ASSERT_NE(warning, e.diagnostics.end());
      EXPECT_EQ(warning->severity, Severity::kWarning);
      const std::string unreached = aux_first ? "'head.weight'" : "'aux.weight'";
      EXPECT_NE(warning->message.find("1 trainable parameter tensor(s) (4096 elements, e.g. " +
                                      unreached + ")"),
                std::string::npos)
          << warning->message;
    }
  }
  // Every parameter of a stack reaches its one output: no warning.
  auto stack = LoadModelFromBytes(testing::LinearStack(3, 64, true).Serialize(), ".", "stack");
  ASSERT_TRUE(stack.ok());
  Options o;
  o.batch = 8;
  for (const Diagnostic& d : EstimateWith("symbolic", **stack, o).diagnostics) {
    EXPECT_NE(d.code, "parameters_without_gradient") << d.message;
  }
}

// An If's branches read the encoder's output from the outer graph, which is not one of the If's
// inputs: backward through the If counts every parameter as reached (no warning, state for all).
TEST(TrainableTest, ANodeWithASubgraphThatBackwardReachesCountsEveryParameter) {
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", 64});
  b.AddInput("cond", testing::kBool, {});
  b.AddInitializer("encoder.weight", {64, 64});
  b.AddNode("MatMul", {"x", "encoder.weight"}, {"h"}, "/encoder/MatMul");
  auto branch = [](const char* op, const std::string& out) {
    onnx::GraphProto g;
    g.set_name(out + "_body");
    onnx::NodeProto* n = g.add_node();
    n->set_op_type(op);
    n->add_input("h");  // the outer graph's value
    n->add_output(out);
    const std::vector<testing::TestDim> dims = {"N", 64};
    testing::SetTensorType(*g.add_output(), testing::kFloat, &dims);
    g.mutable_output(0)->set_name(out);
    return g;
  };
  onnx::NodeProto& if_node = b.AddNode("If", {"cond"}, {"y"}, "/head/If");
  testing::SetGraphAttr(if_node, "then_branch", branch("Relu", "then_y"));
  testing::SetGraphAttr(if_node, "else_branch", branch("Neg", "else_y"));
  b.AddOutput("y", testing::kFloat, {"N", 64});
  auto m = LoadModelFromBytes(b.Serialize(), ".", "if_head");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Options o;
  o.batch = 8;
  for (const char* backend : {"analytical", "symbolic"}) {
    SCOPED_TRACE(backend);
    const Estimate e = EstimateWith(backend, **m, o);
    EXPECT_EQ(e.largest ? e.largest->optimizer_state.bytes : e.breakdown.optimizer_state,
              2u * 64 * 64 * 4);
    for (const Diagnostic& d : e.diagnostics) EXPECT_NE(d.code, "parameters_without_gradient");
  }
}

// Under pipeline parallelism a stage without the loss seeds its backward with the gradients of
// what it sent, and only of the sent values that lead to the loss: a branch of stage 0 read by an
// auxiliary head on stage 1 gets no gradient there either. Stage 0 (layers 0-1 and the branch;
// the deepest in flight under 1F1B, so the stage whose peaks the simulation reports) holds the
// gradients of its two layers alone, and their state.
TEST(TrainableTest, APipelineStageGivesNoGradientToABranchOnlyAnAuxiliaryHeadReads) {
  constexpr int64_t kWidth = 1024;
  constexpr uint64_t kWeight = kWidth * kWidth * 4;
  testing::GraphBuilder b(17);
  b.AddInput("x", testing::kFloat, {"N", kWidth});
  for (const char* w : {"branch.weight", "aux.weight"}) b.AddInitializer(w, {kWidth, kWidth});
  std::string x = "x";
  for (int i = 0; i < 4; ++i) {
    const std::string p = "layers." + std::to_string(i);
    b.AddInitializer(p + ".weight", {kWidth, kWidth});
    b.AddNode("MatMul", {x, p + ".weight"}, {p + ".out"}, "/" + p + "/MatMul");
    x = p + ".out";
    if (i == 0) b.AddNode("MatMul", {"x", "branch.weight"}, {"branch"}, "/branch/MatMul");
    if (i == 2) b.AddNode("MatMul", {"branch", "aux.weight"}, {"aux"}, "/aux/MatMul");
  }
  b.AddOutput(x, testing::kFloat, {"N", kWidth});
  b.AddOutput("aux", testing::kFloat, {"N", kWidth});
  auto m = LoadModelFromBytes(b.Serialize(), ".", "pipeline_aux");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Options o;
  o.batch = 64;
  o.parallel.pp = 2;
  o.parallel.world_size = 2;
  o.micro_batches = 4;
  const Estimate e = EstimateWith("symbolic", **m, o);
  ASSERT_TRUE(e.largest.has_value());
  EXPECT_EQ(e.largest->gradients.bytes, 2 * kWeight);
  EXPECT_EQ(e.largest->optimizer_state.bytes, 2 * 2 * kWeight);
}

}  // namespace
}  // namespace memest
