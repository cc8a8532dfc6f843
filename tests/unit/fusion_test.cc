// Fused kernels in exported graphs (ops/fusion.h): decomposed LayerNorm and GELU chains, attention
// chains under SDPA, and dropout(p=0). Graphs are built here so each chain is exactly known.
#include "ops/fusion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memest/memest.h"
#include "memory/context.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using testing::GraphBuilder;
using testing::kFloat;

void Scalar(GraphBuilder& b, const std::string& name, float v) {
  onnx::TensorProto& t = b.AddInitializer(name, {});
  t.set_float_data(0, v);
}

// X[N,8,16] -MatMul W[16,16]-> h -LayerNorm chain (gamma, beta)-> Y. `leak` also outputs the
// chain's Sub (x - mean), so it can no longer be one kernel.
GraphBuilder LayerNormGraph(bool leak = false) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 8, 16});
  b.AddInitializer("W", {16, 16});
  b.AddInitializer("gamma", {16});
  b.AddInitializer("beta", {16});
  Scalar(b, "two", 2.0f);
  Scalar(b, "eps", 1e-5f);
  b.AddNode("MatMul", {"X", "W"}, {"h"});
  testing::SetIntsAttr(b.AddNode("ReduceMean", {"h"}, {"mean"}), "axes", {-1});
  b.AddNode("Sub", {"h", "mean"}, {"d"});
  b.AddNode("Pow", {"d", "two"}, {"p"});
  testing::SetIntsAttr(b.AddNode("ReduceMean", {"p"}, {"var"}), "axes", {-1});
  b.AddNode("Add", {"var", "eps"}, {"ve"});
  b.AddNode("Sqrt", {"ve"}, {"std"});
  b.AddNode("Div", {"d", "std"}, {"n"});
  b.AddNode("Mul", {"n", "gamma"}, {"g"});
  b.AddNode("Add", {"g", "beta"}, {"Y"});
  b.AddOutput("Y", kFloat);
  if (leak) b.AddOutput("d", kFloat);
  return b;
}

// X[N,64] -MatMul W-> x -GELU chain (erf form)-> Y.
GraphBuilder GeluGraph() {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 64});
  b.AddInitializer("W", {64, 64});
  Scalar(b, "sqrt2", static_cast<float>(std::sqrt(2.0)));
  Scalar(b, "one", 1.0f);
  Scalar(b, "half", 0.5f);
  b.AddNode("MatMul", {"X", "W"}, {"x"});
  b.AddNode("Div", {"x", "sqrt2"}, {"t"});
  b.AddNode("Erf", {"t"}, {"e"});
  b.AddNode("Add", {"e", "one"}, {"a"});
  b.AddNode("Mul", {"x", "a"}, {"m"});
  b.AddNode("Mul", {"m", "half"}, {"Y"});
  b.AddOutput("Y", kFloat);
  return b;
}

// Self-attention over X[N,32,16]: q, k, v projections, q k^T * scale, Softmax, Dropout(ratio),
// times v.
enum class BeforeSoftmax { kNothing, kWhereMask, kCast };

// kWhereMask: Where(mask, fill, scores), as GPT-2 exports write a causal masked_fill (fused);
// kCast: a Cast to float, a step the chain matcher does not take (not fused).
GraphBuilder AttentionGraph(float dropout_ratio, int64_t tokens = 32,
                            BeforeSoftmax before = BeforeSoftmax::kNothing) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", tokens, 16});
  for (const char* w : {"Wq", "Wk", "Wv"}) b.AddInitializer(w, {16, 16});
  Scalar(b, "scale", 0.25f);
  Scalar(b, "ratio", dropout_ratio);
  onnx::TensorProto& train = b.AddInitializer("train", {}, testing::kBool);
  train.add_int32_data(1);
  b.AddNode("MatMul", {"X", "Wq"}, {"q"});
  b.AddNode("MatMul", {"X", "Wk"}, {"k"});
  b.AddNode("MatMul", {"X", "Wv"}, {"v"});
  testing::SetIntsAttr(b.AddNode("Transpose", {"k"}, {"kt"}), "perm", {0, 2, 1});
  b.AddNode("MatMul", {"q", "kt"}, {"s"});
  b.AddNode("Mul", {"s", "scale"}, {"s2"});
  std::string scores = "s2";
  if (before == BeforeSoftmax::kWhereMask) {
    onnx::TensorProto& keep = b.AddInitializer("keep", {1}, testing::kBool);
    keep.add_int32_data(1);
    Scalar(b, "fill", -1e4f);
    b.AddNode("Where", {"keep", "fill", "s2"}, {"s3"});
    scores = "s3";
  } else if (before == BeforeSoftmax::kCast) {
    testing::SetIntAttr(b.AddNode("Cast", {"s2"}, {"s3"}), "to", kFloat);
    scores = "s3";
  }
  testing::SetIntAttr(b.AddNode("Softmax", {scores}, {"p"}, "attn_softmax"), "axis", -1);
  b.AddNode("Dropout", {"p", "ratio", "train"}, {"pd", "mask"});
  b.AddNode("MatMul", {"pd", "v"}, {"Y"});
  b.AddOutput("Y", kFloat);
  return b;
}

std::shared_ptr<const Model> Load(const GraphBuilder& b) {
  auto m = LoadModelFromBytes(b.Serialize(), ".", "test");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::unique_ptr<memory::EstimationContext> Context(const Model& m, Options o) {
  auto ctx = memory::EstimationContext::Make(m, o);
  EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
  return ctx.ok() ? std::move(ctx).value() : nullptr;
}

Options Batch(int64_t n) {
  Options o;
  o.batch = n;
  return o;
}

Estimate Symbolic(const Model& m, const Options& o) {
  auto est = MakeEstimator("symbolic");
  auto e = (*est)->Run(m, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : Estimate{};
}

TEST(FusionTest, LayerNormChainSavesTheInputAndTwoStatistics) {
  auto m = Load(LayerNormGraph());
  ASSERT_NE(m, nullptr);
  auto ctx = Context(*m, Batch(4));
  ASSERT_NE(ctx, nullptr);
  const ops::Fusion& f = ctx->facts().fusion();
  ASSERT_EQ(f.chains().size(), 1u);
  const ops::FusedChain& c = f.chains()[0];
  EXPECT_EQ(c.kind, ops::FusedKind::kLayerNorm);
  EXPECT_EQ(c.nodes.size(), 9u);  // ReduceMean .. the bias Add, not the MatMul
  const core::Graph& g = m->graph();
  // x - mean, the variance and the normalised value never exist: 0 bytes.
  for (const char* v : {"mean", "d", "p", "var", "ve", "std", "n", "g"}) {
    EXPECT_TRUE(f.interior(g.FindValue(v))) << v;
    EXPECT_EQ(ctx->facts().bytes(g.FindValue(v)), 0u) << v;
  }
  EXPECT_FALSE(f.interior(g.FindValue("Y")));
  const auto saved = ctx->facts().Saved(c.nodes.back());
  ASSERT_EQ(saved.size(), 4u);
  EXPECT_EQ(saved[0].value, g.FindValue("h"));
  EXPECT_EQ(saved[1].value, g.FindValue("gamma"));
  EXPECT_EQ(saved[2].bytes, 4u * 8 * 4);  // mean: one fp32 per row (N=4 x 8 rows)
  EXPECT_EQ(saved[3].bytes, 4u * 8 * 4);  // rstd
  for (size_t n : c.nodes) {
    if (n != c.nodes.back()) {
      EXPECT_TRUE(ctx->facts().Saved(n).empty()) << n;
    }
  }
}

// The chains are found once per graph (ops/fusion.cc FusionSites) and sized on each bound graph:
// the statistics follow the batch, and what the chain saves follows the requires-grad flags of the
// options at hand, not those of the estimate that found it.
TEST(FusionTest, ChainsFoundOnceAreSizedAtEachBatchAndForEachFrozenSet) {
  auto m = Load(LayerNormGraph());
  ASSERT_NE(m, nullptr);
  const core::Graph& g = m->graph();
  auto saved_at = [&](const Options& o) {
    auto ctx = Context(*m, o);
    std::vector<ops::SavedTensor> out;
    if (ctx == nullptr || ctx->facts().fusion().chains().size() != 1) return out;
    const ops::FusedChain& c = ctx->facts().fusion().chains()[0];
    EXPECT_EQ(c.nodes.size(), 9u);
    const auto saved = ctx->facts().Saved(c.nodes.back());
    out.assign(saved.begin(), saved.end());
    return out;
  };
  const std::vector<ops::SavedTensor> at4 = saved_at(Batch(4)), at32 = saved_at(Batch(32));
  ASSERT_EQ(at4.size(), 4u);
  ASSERT_EQ(at32.size(), 4u);
  EXPECT_EQ(at4[2].bytes, 4u * 8 * 4);
  EXPECT_EQ(at32[2].bytes, 32u * 8 * 4);  // mean: one fp32 per row (N=32 x 8 rows)
  EXPECT_EQ(at32[3].bytes, 32u * 8 * 4);  // rstd
  // W frozen: h needs no gradient, but gamma and beta do, so the kernel still saves its list.
  Options w_frozen = Batch(32);
  w_frozen.freeze = "^W$";
  const std::vector<ops::SavedTensor> frozen_w = saved_at(w_frozen);
  ASSERT_EQ(frozen_w.size(), 4u);
  EXPECT_EQ(frozen_w[0].value, g.FindValue("h"));
  // Only W trains: nothing past h needs a gradient through the chain's weights, but h does
  // (W's gradient flows back through the chain), so the list is kept.
  Options gamma_beta_frozen = Batch(32);
  gamma_beta_frozen.freeze = "gamma|beta";
  EXPECT_EQ(saved_at(gamma_beta_frozen).size(), 4u);
  // Nothing trains: no gradient flows through the chain, which saves nothing.
  Options all_frozen = Batch(32);
  all_frozen.freeze = ".";
  auto ctx = Context(*m, all_frozen);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(ctx->facts().fusion().chains().size(), 1u);
  EXPECT_TRUE(ctx->facts().Saved(ctx->facts().fusion().chains()[0].nodes.back()).empty());
}

TEST(FusionTest, FusedLayerNormSavesLessThanTheChainAsWritten) {
  auto m = Load(LayerNormGraph());
  ASSERT_NE(m, nullptr);
  Options fused = Batch(64), written = Batch(64);
  written.fused_kernels = false;
  const Estimate a = Symbolic(*m, fused), b = Symbolic(*m, written);
  ASSERT_TRUE(a.largest && b.largest);
  // As written, x - mean (Pow, Div) and the normalised value (Mul's weight gradient) are saved
  // [64,8,16] fp32 tensors, and the [64,8,1] std; fused, the input h and two [64,8] fp32
  // statistics are: 2 x 32 KiB + 2 KiB against 32 KiB + 4 KiB.
  EXPECT_EQ(b.largest->saved_activations.bytes - a.largest->saved_activations.bytes,
            2u * 32768 + 2048 - (32768 + 4096));
}

// F.group_norm(h, 2, gamma, beta) as torch.onnx writes it: h[N,8,16] reshaped to [N,2,64],
// InstanceNormalization with constant ones and zeros, reshaped back to Shape(h), times gamma and
// plus beta, each unsqueezed to [8,1]. Without affine parameters torch.onnx multiplies by a
// Constant [1.0] and adds a Constant [0.0], unsqueezed; a chain that stops at the second Reshape
// (a view of the normalised tensor) is not fused.
enum class GroupNormTail { kAffine, kConstants, kNone };

GraphBuilder GroupNormGraph(GroupNormTail tail) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 8, 16});
  b.AddInitializer("W", {16, 16});
  b.AddInitializer("ones", {2});
  b.AddInitializer("zeros", {2});
  b.AddInt64Initializer("grouped", {0, 2, -1});
  b.AddInt64Initializer("axes", {1});
  b.AddNode("MatMul", {"X", "W"}, {"h"});
  b.AddNode("Reshape", {"h", "grouped"}, {"hg"});
  b.AddNode("InstanceNormalization", {"hg", "ones", "zeros"}, {"n"});
  b.AddNode("Shape", {"h"}, {"shape"});
  b.AddNode("Reshape", {"n", "shape"}, {tail == GroupNormTail::kNone ? "Y" : "nb"});
  if (tail == GroupNormTail::kAffine) {
    b.AddInitializer("gamma", {8});
    b.AddInitializer("beta", {8});
  } else if (tail == GroupNormTail::kConstants) {
    for (const auto& [name, v] : {std::pair{"gamma", 1.0f}, std::pair{"beta", 0.0f}}) {
      onnx::TensorProto t;
      t.set_data_type(kFloat);
      t.add_dims(1);
      t.add_float_data(v);
      testing::SetTensorAttr(b.AddNode("Constant", {}, {name}), "value", t);
    }
  }
  if (tail != GroupNormTail::kNone) {
    b.AddNode("Unsqueeze", {"gamma", "axes"}, {"g1"});
    b.AddNode("Mul", {"nb", "g1"}, {"m"});
    b.AddNode("Unsqueeze", {"beta", "axes"}, {"b1"});
    b.AddNode("Add", {"m", "b1"}, {"Y"});
  }
  b.AddOutput("Y", kFloat);
  return b;
}

// PyTorch's native_group_norm saves its input, the weight and two [N, G] statistics
// (derivatives.yaml: native_group_norm_backward(grad, input, result1, result2, weight, ...)); as
// written, the normalised tensor is saved too (the Mul's, for gamma's gradient).
TEST(FusionTest, GroupNormChainSavesTheInputAndTwoStatistics) {
  for (GroupNormTail tail :
       {GroupNormTail::kAffine, GroupNormTail::kConstants, GroupNormTail::kNone}) {
    SCOPED_TRACE(static_cast<int>(tail));
    auto m = Load(GroupNormGraph(tail));
    ASSERT_NE(m, nullptr);
    auto ctx = Context(*m, Batch(8));
    ASSERT_NE(ctx, nullptr);
    const ops::Fusion& f = ctx->facts().fusion();
    if (tail == GroupNormTail::kNone) {
      EXPECT_TRUE(f.chains().empty());
      continue;
    }
    ASSERT_EQ(f.chains().size(), 1u);
    const ops::FusedChain& c = f.chains()[0];
    EXPECT_EQ(c.kind, ops::FusedKind::kGroupNorm);
    EXPECT_EQ(c.nodes.size(), 5u);
    const auto saved = ctx->facts().Saved(c.nodes.back());
    ASSERT_EQ(saved.size(), 4u);
    EXPECT_EQ(saved[0].value, m->graph().FindValue("h"));
    EXPECT_EQ(saved[1].value, m->graph().FindValue("gamma"));
    EXPECT_EQ(saved[2].bytes, 8u * 2 * 4);  // [N, G] fp32
    EXPECT_EQ(saved[3].bytes, 8u * 2 * 4);
    EXPECT_EQ(ctx->facts().bytes(m->graph().FindValue("n")), 0u);
    if (tail != GroupNormTail::kAffine) continue;
    Options written = Batch(8);
    written.fused_kernels = false;
    const Estimate a = Symbolic(*m, Batch(8)), b = Symbolic(*m, written);
    ASSERT_TRUE(a.largest && b.largest);
    // As written the normalised [8,8,16] fp32 tensor (4 KiB) is saved besides the input.
    EXPECT_GE(b.largest->saved_activations.bytes, a.largest->saved_activations.bytes + 4096);
  }
}

TEST(FusionTest, AChainWhoseInteriorIsReadOutsideIsNotFused) {
  auto m = Load(LayerNormGraph(/*leak=*/true));
  ASSERT_NE(m, nullptr);
  auto ctx = Context(*m, Batch(4));
  ASSERT_NE(ctx, nullptr);
  EXPECT_TRUE(ctx->facts().fusion().chains().empty());
}

TEST(FusionTest, GeluChainSavesOnlyItsInput) {
  auto m = Load(GeluGraph());
  ASSERT_NE(m, nullptr);
  auto ctx = Context(*m, Batch(8));
  ASSERT_NE(ctx, nullptr);
  const ops::Fusion& f = ctx->facts().fusion();
  ASSERT_EQ(f.chains().size(), 1u);
  EXPECT_EQ(f.chains()[0].kind, ops::FusedKind::kGelu);
  const auto saved = ctx->facts().Saved(f.chains()[0].nodes.back());
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].value, m->graph().FindValue("x"));
  Options off = Batch(8);
  off.fused_kernels = false;
  auto plain = Context(*m, off);
  EXPECT_TRUE(plain->facts().fusion().chains().empty());
}

// F.gelu(x, approximate="tanh") as torch.onnx writes it below opset 20 (the cube as Muls) is one
// kernel that saves its input; the same formula with a Pow is Python code (GPT-2's NewGELU), run op
// by op, and stays as written.
TEST(FusionTest, TanhGeluChainIsFusedOnlyWithItsCubeAsMuls) {
  for (bool pow : {false, true}) {
    SCOPED_TRACE(pow ? "Pow" : "Muls");
    GraphBuilder b(13);
    b.AddInput("X", kFloat, {"N", 64});
    b.AddInitializer("W", {64, 64});
    Scalar(b, "three", 3.0f);
    Scalar(b, "kappa", 0.044715f);
    Scalar(b, "beta", 0.7978846f);
    Scalar(b, "one", 1.0f);
    Scalar(b, "half", 0.5f);
    b.AddNode("MatMul", {"X", "W"}, {"x"});
    if (pow) {
      b.AddNode("Pow", {"x", "three"}, {"cube"});
    } else {
      b.AddNode("Mul", {"x", "x"}, {"sq"});
      b.AddNode("Mul", {"x", "sq"}, {"cube"});
    }
    b.AddNode("Mul", {"cube", "kappa"}, {"kc"});
    b.AddNode("Add", {"x", "kc"}, {"inner"});
    b.AddNode("Mul", {"inner", "beta"}, {"t"});
    b.AddNode("Tanh", {"t"}, {"th"});
    b.AddNode("Add", {"th", "one"}, {"a"});
    b.AddNode("Mul", {"x", "half"}, {"hx"});
    b.AddNode("Mul", {"hx", "a"}, {"Y"});
    b.AddOutput("Y", kFloat);
    auto m = Load(b);
    ASSERT_NE(m, nullptr);
    auto ctx = Context(*m, Batch(8));
    ASSERT_NE(ctx, nullptr);
    const ops::Fusion& f = ctx->facts().fusion();
    if (pow) {
      EXPECT_TRUE(f.chains().empty());
      continue;
    }
    ASSERT_EQ(f.chains().size(), 1u);
    EXPECT_EQ(f.chains()[0].kind, ops::FusedKind::kGelu);
    EXPECT_EQ(f.chains()[0].nodes.size(), 9u);
    const auto saved = ctx->facts().Saved(f.chains()[0].nodes.back());
    ASSERT_EQ(saved.size(), 1u);
    EXPECT_EQ(saved[0].value, m->graph().FindValue("x"));
    for (const char* v : {"sq", "cube", "kc", "inner", "t", "th", "a", "hx"}) {
      EXPECT_EQ(ctx->facts().bytes(m->graph().FindValue(v)), 0u) << v;
    }
  }
}

// nn.SiLU and nn.Mish as torch.onnx writes them: x * Sigmoid(x), x * Tanh(Softplus(x)) (either
// operand first). PyTorch's silu and mish save their input alone (derivatives.yaml); as written,
// the gate is saved too (by the Sigmoid or the Tanh and by the Mul). A gate over another tensor
// (squeeze-excite's x * Sigmoid(z)) is a real sigmoid and stays as written.
enum class Gate { kSilu, kSiluGateFirst, kMish, kOtherInput };

GraphBuilder SelfGatedGraph(Gate gate) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 64});
  b.AddInitializer("W", {64, 64});
  b.AddInitializer("V", {64, 64});
  b.AddNode("MatMul", {"X", "W"}, {"x"});
  b.AddNode("MatMul", {"X", "V"}, {"z"});
  switch (gate) {
    case Gate::kSilu:
    case Gate::kSiluGateFirst:
      b.AddNode("Sigmoid", {"x"}, {"g"});
      break;
    case Gate::kMish:
      b.AddNode("Softplus", {"x"}, {"sp"});
      b.AddNode("Tanh", {"sp"}, {"g"});
      break;
    case Gate::kOtherInput:
      b.AddNode("Sigmoid", {"z"}, {"g"});
      break;
  }
  if (gate == Gate::kSiluGateFirst) {
    b.AddNode("Mul", {"g", "x"}, {"y"});
  } else {
    b.AddNode("Mul", {"x", "g"}, {"y"});
  }
  b.AddNode("Add", {"y", "z"}, {"Y"});
  b.AddOutput("Y", kFloat);
  return b;
}

TEST(FusionTest, SiluAndMishChainsSaveOnlyTheirInput) {
  for (Gate gate : {Gate::kSilu, Gate::kSiluGateFirst, Gate::kMish, Gate::kOtherInput}) {
    SCOPED_TRACE(static_cast<int>(gate));
    auto m = Load(SelfGatedGraph(gate));
    ASSERT_NE(m, nullptr);
    auto ctx = Context(*m, Batch(8));
    ASSERT_NE(ctx, nullptr);
    const ops::Fusion& f = ctx->facts().fusion();
    Options written = Batch(8);
    written.fused_kernels = false;
    const Estimate a = Symbolic(*m, Batch(8)), b = Symbolic(*m, written);
    ASSERT_TRUE(a.largest && b.largest);
    if (gate == Gate::kOtherInput) {
      EXPECT_TRUE(f.chains().empty());
      EXPECT_EQ(a.largest->saved_activations.bytes, b.largest->saved_activations.bytes);
      continue;
    }
    ASSERT_EQ(f.chains().size(), 1u);
    const ops::FusedChain& c = f.chains()[0];
    EXPECT_EQ(c.kind, gate == Gate::kMish ? ops::FusedKind::kMish : ops::FusedKind::kSilu);
    EXPECT_EQ(c.nodes.size(), gate == Gate::kMish ? 3u : 2u);
    const auto saved = ctx->facts().Saved(c.nodes.back());
    ASSERT_EQ(saved.size(), 1u);
    EXPECT_EQ(saved[0].value, m->graph().FindValue("x"));
    EXPECT_EQ(ctx->facts().bytes(m->graph().FindValue("g")), 0u);
    // As written the gate, [8,64] fp32, is saved besides x: 2 KiB more.
    EXPECT_EQ(b.largest->saved_activations.bytes - a.largest->saved_activations.bytes, 2048u);
  }
}

// A fused chain's values inside do not exist, but its backward still makes the gradients of its
// inputs from outside, at its last node: the weight in front of a GELU or LayerNorm chain gets
// its gradient, fused or not (the symbolic backend once stopped at the chain's first node).
TEST(FusionTest, FusedChainsPassGradientsToTheirInputs) {
  for (bool layer_norm : {false, true}) {
    SCOPED_TRACE(layer_norm ? "LayerNorm" : "GELU");
    auto m = Load(layer_norm ? LayerNormGraph() : GeluGraph());
    ASSERT_NE(m, nullptr);
    const uint64_t params = layer_norm ? (16 * 16 + 16 + 16) * 4 : 64 * 64 * 4;
    for (bool fused : {true, false}) {
      Options o = Batch(1);
      o.fused_kernels = fused;
      auto ctx = Context(*m, o);
      ASSERT_NE(ctx, nullptr);
      EXPECT_EQ(ctx->facts().fusion().chains().size(), fused ? 1u : 0u);
      const Estimate e = Symbolic(*m, o);
      ASSERT_TRUE(e.largest.has_value());
      EXPECT_EQ(e.largest->gradients.bytes, params) << (fused ? "fused" : "as written");
    }
  }
}

TEST(FusionTest, DropoutOfRatioZeroIsAnIdentity) {
  auto m = Load(AttentionGraph(0.0f));
  ASSERT_NE(m, nullptr);
  auto ctx = Context(*m, Batch(2));  // eager attention: the chain stays as written
  ASSERT_NE(ctx, nullptr);
  const core::Graph& g = m->graph();
  EXPECT_TRUE(ctx->facts().fusion().chains().empty());
  const size_t dropout = static_cast<size_t>(g.value(g.FindValue("pd")).producer);
  EXPECT_TRUE(ctx->facts().fusion().identity_dropout(dropout));
  EXPECT_TRUE(ctx->facts().Saved(dropout).empty());
  EXPECT_EQ(ctx->facts().root(g.FindValue("pd")), g.FindValue("p"));
  EXPECT_EQ(ctx->facts().bytes(g.FindValue("mask")), 0u);

  auto m2 = Load(AttentionGraph(0.1f));  // a real dropout keeps its mask
  auto ctx2 = Context(*m2, Batch(2));
  const size_t dropout2 =
      static_cast<size_t>(m2->graph().value(m2->graph().FindValue("pd")).producer);
  EXPECT_FALSE(ctx2->facts().fusion().identity_dropout(dropout2));
  EXPECT_FALSE(ctx2->facts().Saved(dropout2).empty());
}

TEST(FusionTest, AttentionAFusedKernelCannotTakeIsReportedNotSilentlyEager) {
  auto masked = Load(AttentionGraph(0.1f, 32, BeforeSoftmax::kCast));
  auto mlp = Load(testing::SmallMlp());
  ASSERT_NE(masked, nullptr);
  ASSERT_NE(mlp, nullptr);
  Options o = Batch(2);
  o.attention = Attention::kSdpaMemEfficient;
  auto has = [](const Estimate& e, const std::string& code) {
    for (const Diagnostic& d : e.diagnostics) {
      if (d.code == code) return d.message;
    }
    return std::string();
  };
  const Estimate m = Symbolic(*masked, o);
  EXPECT_NE(has(m, "attention_unclassified").find("'attn_softmax'"), std::string::npos);
  EXPECT_EQ(has(m, "attention_not_found"), "");
  // Costed as written: the same as eager attention.
  EXPECT_EQ(m.peak_allocated, Symbolic(*masked, Batch(2)).peak_allocated);
  EXPECT_NE(has(Symbolic(*mlp, o), "attention_not_found"), "");
  // A chain that matches says nothing (a causal masked_fill is part of the chain); eager says
  // nothing.
  EXPECT_EQ(has(Symbolic(*Load(AttentionGraph(0.1f)), o), "attention_unclassified"), "");
  auto causal = Load(AttentionGraph(0.1f, 32, BeforeSoftmax::kWhereMask));
  ASSERT_NE(causal, nullptr);
  auto ctx = Context(*causal, o);
  ASSERT_EQ(ctx->facts().fusion().chains().size(), 1u);
  bool keeps_mask = false;
  for (const ops::SavedTensor& t :
       ctx->facts().Saved(ctx->facts().fusion().chains()[0].nodes.back())) {
    keeps_mask = keeps_mask || t.what == "attn_mask";
  }
  EXPECT_TRUE(keeps_mask);
  EXPECT_EQ(has(Symbolic(*causal, o), "attention_unclassified"), "");
  EXPECT_EQ(has(Symbolic(*mlp, Batch(2)), "attention_not_found"), "");
}

TEST(FusionTest, AttentionIsFusedOnlyUnderAFusedSdpaKernel) {
  auto m = Load(AttentionGraph(0.1f));
  ASSERT_NE(m, nullptr);
  const core::Graph& g = m->graph();
  for (Attention a : {Attention::kEager, Attention::kSdpaMath}) {
    Options o = Batch(2);
    o.attention = a;
    EXPECT_TRUE(Context(*m, o)->facts().fusion().chains().empty()) << ToString(a);
  }
  for (Attention a : {Attention::kSdpaMemEfficient, Attention::kAuto}) {
    Options o = Batch(2);
    o.attention = a;
    auto ctx = Context(*m, o);
    ASSERT_EQ(ctx->facts().fusion().chains().size(), 1u) << ToString(a);
    const ops::FusedChain& c = ctx->facts().fusion().chains()[0];
    EXPECT_EQ(c.kind, ops::FusedKind::kAttention);
    // The 32 x 32 scores, probabilities and the mask never exist.
    for (const char* v : {"s", "s2", "p", "pd", "mask"}) {
      EXPECT_EQ(ctx->facts().bytes(g.FindValue(v)), 0u) << v;
    }
    const auto saved = ctx->facts().Saved(c.nodes.back());
    ASSERT_EQ(saved.size(), 5u);
    EXPECT_EQ(saved[0].value, g.FindValue("q"));
    EXPECT_EQ(saved[2].value, g.FindValue("v"));
    EXPECT_EQ(saved[3].value, g.FindValue("Y"));
    EXPECT_EQ(saved[4].bytes, 2u * 32 * 4);  // logsumexp: one fp32 per query row (32: no padding)
  }
  Options eager = Batch(64), sdpa = Batch(64);
  sdpa.attention = Attention::kSdpaMemEfficient;
  EXPECT_LT(Symbolic(*m, sdpa).peak_allocated, Symbolic(*m, eager).peak_allocated);
}

// Grouped-query attention as transformers writes it: 4 query heads over 2 key/value heads,
// k and v repeated by repeat_kv (Unsqueeze, Expand, Reshape) before MatMul(q, k^T). The chain
// from the Softmax is the same; the fused kernel saves the repeated k and v. Without a mask,
// transformers' SDPA path passes k and v unrepeated with enable_gqa, which PyTorch up to 2.11
// runs with flash only: flash (bf16) fuses the chain, a forced memory-efficient kernel is
// refused, and auto in fp32 (no flash) runs the math composite, the chain as written.
TEST(FusionTest, GroupedQueryAttentionWithRepeatedKvIsFused) {
  GraphBuilder b(17);
  b.AddInput("Q", kFloat, {"N", 4, 32, 8});
  b.AddInput("K", kFloat, {"N", 2, 32, 8});
  b.AddInput("V", kFloat, {"N", 2, 32, 8});
  b.AddInitializer("Wq", {8, 8});
  b.AddInt64Initializer("axis2", {2});
  b.AddInt64Initializer("rep", {1, 1, 2, 1, 1});
  b.AddInt64Initializer("heads", {0, 4, -1, 8});
  Scalar(b, "scale", 0.35f);
  b.AddNode("MatMul", {"Q", "Wq"}, {"q"});
  for (const std::string t : {"K", "V"}) {
    b.AddNode("Unsqueeze", {t, "axis2"}, {t + "u"});
    b.AddNode("Expand", {t + "u", "rep"}, {t + "e"});
    b.AddNode("Reshape", {t + "e", "heads"}, {t + "r"});
  }
  testing::SetIntsAttr(b.AddNode("Transpose", {"Kr"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.AddNode("MatMul", {"q", "kt"}, {"s"});
  b.AddNode("Mul", {"s", "scale"}, {"s2"});
  testing::SetIntAttr(b.AddNode("Softmax", {"s2"}, {"p"}), "axis", -1);
  b.AddNode("MatMul", {"p", "Vr"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto m = Load(b);
  ASSERT_NE(m, nullptr);
  const core::Graph& g = m->graph();
  Options o = Batch(2);
  o.attention = Attention::kSdpaFlash;
  o.precision = Precision::kAmpBf16;
  auto ctx = Context(*m, o);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(ctx->facts().fusion().chains().size(), 1u);
  const ops::FusedChain& c = ctx->facts().fusion().chains()[0];
  EXPECT_EQ(c.kind, ops::FusedKind::kAttention);
  EXPECT_TRUE(ctx->facts().fusion().attention_calls().at(0).site.grouped_kv);
  EXPECT_TRUE(ctx->facts().fusion().unmatched_attention().empty());
  for (const char* v : {"s", "s2", "p"}) EXPECT_EQ(ctx->facts().bytes(g.FindValue(v)), 0u) << v;
  const auto saved = ctx->facts().Saved(c.nodes.back());
  ASSERT_GE(saved.size(), 4u);
  // k and v are fp32 graph inputs: autocast hands the kernel bf16 copies, which it saves.
  EXPECT_EQ(saved[1].value, -1);
  EXPECT_EQ(saved[1].bytes, ctx->facts().bytes(g.FindValue("kt")) / 2);
  EXPECT_EQ(saved[2].value, -1);
  EXPECT_EQ(saved[2].bytes, ctx->facts().bytes(g.FindValue("Vr")) / 2);
  const core::MaybeDims vr = ctx->bound().shapes[static_cast<size_t>(g.FindValue("Vr"))];
  ASSERT_TRUE(vr.has_value());
  EXPECT_EQ(std::vector<int64_t>(vr->begin(), vr->end()), (std::vector<int64_t>{2, 4, 32, 8}));

  Options me = Batch(2);
  me.attention = Attention::kSdpaMemEfficient;
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  auto refused = (*est)->Run(*m, me);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("enable_gqa"), std::string::npos)
      << refused.status().message();

  Options autofp32 = Batch(2);
  autofp32.attention = Attention::kAuto;
  auto math = Context(*m, autofp32);
  ASSERT_NE(math, nullptr);
  EXPECT_TRUE(math->facts().fusion().chains().empty());
  ASSERT_EQ(math->facts().fusion().attention_calls().size(), 1u);
  EXPECT_EQ(math->facts().fusion().attention_calls()[0].kernel, ops::AttentionKernel::kMath);
  EXPECT_NE(math->facts().fusion().attention_calls()[0].reason.find("enable_gqa"),
            std::string::npos);
}

// Multi-query attention as Falcon writes it: 4 query heads over one key/value head that the
// MatMuls broadcast (no repeat_kv), and that Falcon passes to SDPA as it is, without enable_gqa.
// No fused kernel takes k/v with fewer heads than q then, so auto runs the math composite; on
// bf16 inputs the chain is costed as that composite (fp32 scores, probabilities and
// _safe_softmax's bool mask), in fp32 as written. A forced flash kernel is refused.
TEST(FusionTest, BroadcastKeyValueHeadsRunTheMathComposite) {
  GraphBuilder b(17);
  b.AddInput("Q", kFloat, {"N", 4, 32, 8});
  b.AddInput("K", kFloat, {"N", 1, 32, 8});
  b.AddInput("V", kFloat, {"N", 1, 32, 8});
  b.AddInitializer("Wq", {8, 8});
  Scalar(b, "scale", 0.35f);
  b.AddNode("MatMul", {"Q", "Wq"}, {"q"});
  testing::SetIntsAttr(b.AddNode("Transpose", {"K"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.AddNode("MatMul", {"q", "kt"}, {"s"});
  b.AddNode("Mul", {"s", "scale"}, {"s2"});
  testing::SetIntAttr(b.AddNode("Softmax", {"s2"}, {"p"}), "axis", -1);
  b.AddNode("MatMul", {"p", "V"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto m = Load(b);
  ASSERT_NE(m, nullptr);

  Options bf16 = Batch(2);
  bf16.attention = Attention::kAuto;
  bf16.precision = Precision::kAmpBf16;
  auto ctx = Context(*m, bf16);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(ctx->facts().fusion().attention_calls().size(), 1u);
  const ops::AttentionCall& call = ctx->facts().fusion().attention_calls()[0];
  EXPECT_EQ(call.kernel, ops::AttentionKernel::kMath);
  EXPECT_NE(call.reason.find("broadcast"), std::string::npos) << call.reason;
  EXPECT_TRUE(call.site.broadcast_kv);
  EXPECT_EQ(call.site.batch, 2u);
  EXPECT_EQ(call.site.q_heads, 4u);
  EXPECT_EQ(call.site.kv_heads, 1u);
  EXPECT_FALSE(call.as_written);
  ASSERT_EQ(ctx->facts().fusion().chains().size(), 1u);
  // The composite's fp32 copies: q*sqrt(scale) [2, 4, 32, 8], k^T*sqrt(scale) and v at their own
  // single head [2, 1, 32, 8] (not repeated), the probabilities [2, 4, 32, 32].
  const auto saved = ctx->facts().Saved(ctx->facts().fusion().chains()[0].nodes.back());
  ASSERT_EQ(saved.size(), 4u);
  EXPECT_EQ(saved[0].bytes, 2u * 4 * 32 * 8 * 4);
  EXPECT_EQ(saved[1].bytes, 2u * 1 * 32 * 8 * 4);
  EXPECT_EQ(saved[2].bytes, 2u * 1 * 32 * 8 * 4);
  EXPECT_EQ(saved[3].bytes, 2u * 4 * 32 * 32 * 4);
  // The call's workspace at the chain's last node: fp32 scores, the bool mask, fp32 q and k.
  EXPECT_EQ(ctx->facts().Workspace(ctx->facts().fusion().chains()[0].nodes.back()),
            2u * 4 * 32 * 32 * (4 + 1) + 2u * 4 * 32 * 8 * 4 + 2u * 1 * 32 * 8 * 4);

  Options fp32 = Batch(2);
  fp32.attention = Attention::kAuto;
  auto written = Context(*m, fp32);
  ASSERT_NE(written, nullptr);
  EXPECT_TRUE(written->facts().fusion().chains().empty());
  ASSERT_EQ(written->facts().fusion().attention_calls().size(), 1u);
  EXPECT_TRUE(written->facts().fusion().attention_calls()[0].as_written);

  Options flash = bf16;
  flash.attention = Attention::kSdpaFlash;
  auto est = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok());
  auto refused = (*est)->Run(*m, flash);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("broadcast"), std::string::npos)
      << refused.status().message();
}

TEST(FusionTest, TheMemoryEfficientKernelPadsItsLogsumexpRows) {
  auto m = Load(AttentionGraph(0.0f, /*tokens=*/33));
  ASSERT_NE(m, nullptr);
  auto lse = [&](Attention a, Precision p) {
    Options o = Batch(2);
    o.attention = a;
    o.precision = p;
    auto ctx = Context(*m, o);
    const ops::FusedChain& c = ctx->facts().fusion().chains().at(0);
    return ctx->facts().Saved(c.nodes.back()).back().bytes;
  };
  // 33 query rows: 64 for the memory-efficient kernel (rows padded to 32), 33 for flash.
  EXPECT_EQ(lse(Attention::kSdpaMemEfficient, Precision::kFp32), 2u * 64 * 4);
  EXPECT_EQ(lse(Attention::kSdpaFlash, Precision::kAmpBf16), 2u * 33 * 4);
  // auto: fp32 runs memory-efficient; bf16 on an sm 9.0 GPU (the default H100) runs flash.
  EXPECT_EQ(lse(Attention::kAuto, Precision::kFp32), 2u * 64 * 4);
  EXPECT_EQ(lse(Attention::kAuto, Precision::kAmpBf16), 2u * 33 * 4);
}

// Under auto, PyTorch's dispatcher takes flash only without an explicit attention mask
// (sdp_utils.cpp, check_for_attn_mask): a chain with a masked_fill (GPT-2's causal mask, written
// as Where) runs the memory-efficient kernel -- its logsumexp rows padded to 32, the mask kept in
// q's dtype -- and the attention_kernel diagnostic says so; the same chain without the mask runs
// flash in bf16.
TEST(FusionTest, AMaskedChainRunsMemoryEfficientUnderAutoAnUnmaskedOneFlash) {
  auto masked = Load(AttentionGraph(0.0f, /*tokens=*/33, BeforeSoftmax::kWhereMask));
  auto plain = Load(AttentionGraph(0.0f, /*tokens=*/33));
  ASSERT_NE(masked, nullptr);
  ASSERT_NE(plain, nullptr);
  Options o = Batch(2);
  o.attention = Attention::kAuto;
  o.precision = Precision::kAmpBf16;
  auto ctx = Context(*masked, o);
  ASSERT_EQ(ctx->facts().fusion().attention_calls().size(), 1u);
  const ops::AttentionCall& call = ctx->facts().fusion().attention_calls()[0];
  EXPECT_TRUE(call.chain);
  EXPECT_EQ(call.kernel, ops::AttentionKernel::kMemEfficient);
  ASSERT_EQ(ctx->facts().fusion().chains().size(), 1u);
  const auto saved = ctx->facts().Saved(ctx->facts().fusion().chains()[0].nodes.back());
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(saved.back().bytes, 2u * 64 * 4);  // 33 rows padded to 64
  bool mask_copy = false;  // the bool [1] mask as bf16, its last dim padded to 8
  for (const ops::SavedTensor& t : saved) mask_copy |= t.what == "attn_mask" && t.bytes == 16;
  EXPECT_TRUE(mask_copy);
  const Estimate e = Symbolic(*masked, o);
  std::string kernel;
  for (const Diagnostic& d : e.diagnostics) {
    if (d.code == "attention_kernel") kernel = d.message;
  }
  EXPECT_NE(kernel.find("1 memory-efficient"), std::string::npos) << kernel;
  EXPECT_NE(kernel.find("explicit attention mask"), std::string::npos) << kernel;
  EXPECT_NE(kernel.find("'attn_softmax'"), std::string::npos) << kernel;

  auto flash = Context(*plain, o);
  ASSERT_EQ(flash->facts().fusion().attention_calls().size(), 1u);
  EXPECT_EQ(flash->facts().fusion().attention_calls()[0].kernel, ops::AttentionKernel::kFlash);
  EXPECT_EQ(flash->facts().Saved(flash->facts().fusion().chains()[0].nodes.back()).back().bytes,
            2u * 33 * 4);
}

// Under auto, a call no fused kernel takes stays as written: on a GPU below compute capability
// 5.0 only the math composite runs, so the chain is not fused, and the diagnostic says why.
TEST(FusionTest, AChainAutoGivesTheMathKernelStaysAsWritten) {
  auto m = Load(AttentionGraph(0.1f));
  ASSERT_NE(m, nullptr);
  Options o = Batch(2);
  o.attention = Attention::kAuto;
  GpuProfile old = *FindGpuProfile("h100-80gb");
  old.name = "sm37";
  old.sm_major = 3;
  old.sm_minor = 7;
  o.custom_gpu = std::make_shared<const GpuProfile>(old);
  auto ctx = Context(*m, o);
  ASSERT_NE(ctx, nullptr);
  EXPECT_TRUE(ctx->facts().fusion().chains().empty());
  ASSERT_EQ(ctx->facts().fusion().attention_calls().size(), 1u);
  EXPECT_EQ(ctx->facts().fusion().attention_calls()[0].kernel, ops::AttentionKernel::kMath);
  EXPECT_EQ(Symbolic(*m, o).peak_allocated, Symbolic(*m,
                                                     [&] {
                                                       Options eager = o;
                                                       eager.attention = Attention::kEager;
                                                       return eager;
                                                     }())
                                                .peak_allocated);
}

// Under autocast a lower-precision op saves the low copy of an fp32 activation it reads (a
// softmax output into a matmul: half its bytes), and an fp32-list op the fp32 copy of a low one (a
// matmul output into pow: twice its bytes); in fp32 both save the graph values themselves.
TEST(FusionTest, AutocastSavesTheCastCopiesOfActivations) {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 8});
  b.AddInitializer("W1", {8, 8});
  b.AddInitializer("W2", {8, 8});
  Scalar(b, "two", 2.0f);
  b.AddNode("MatMul", {"X", "W1"}, {"h"});
  testing::SetIntAttr(b.AddNode("Softmax", {"h"}, {"s"}), "axis", -1);
  b.AddNode("MatMul", {"s", "W2"}, {"y"}, "second_matmul");
  b.AddNode("Pow", {"y", "two"}, {"p"}, "pow");
  b.AddOutput("p", kFloat);
  auto m = Load(b);
  ASSERT_NE(m, nullptr);
  const core::Graph& g = m->graph();
  auto node = [&](const char* name) {
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      if (g.nodes[k].name == name) return k;
    }
    return g.nodes.size();
  };
  auto saved_copy = [&](const memory::EstimationContext& ctx, const char* name) -> uint64_t {
    for (const ops::SavedTensor& t : ctx.facts().Saved(node(name))) {
      if (t.value < 0 && t.copy == ops::SavedTensor::Copy::kAutocast) return t.bytes;
    }
    return 0;
  };
  Options amp = Batch(4);
  amp.precision = Precision::kAmpBf16;
  auto ctx = Context(*m, amp);
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(saved_copy(*ctx, "second_matmul"), 4u * 8 * 2);  // s as bf16
  EXPECT_EQ(saved_copy(*ctx, "pow"), 4u * 8 * 4);            // y as fp32
  auto fp32 = Context(*m, Batch(4));
  ASSERT_NE(fp32, nullptr);
  EXPECT_EQ(saved_copy(*fp32, "second_matmul"), 0u);
  EXPECT_EQ(saved_copy(*fp32, "pow"), 0u);
  bool saves_s = false;
  for (const ops::SavedTensor& t : fp32->facts().Saved(node("second_matmul"))) {
    saves_s |= t.value == g.FindValue("s");
  }
  EXPECT_TRUE(saves_s);
}

// Under autocast a pass-through op follows type promotion: an fp32 activation beside a bf16 one
// makes its result fp32 (gelu_new's x + 0.044715 * pow(x, 3), pow being on the fp32 list), while
// a scalar constant and an fp32 parameter leave it bf16 (a Linear's bias, written MatMul then Add,
// is cast with the product by addmm).
TEST(FusionTest, AnFp32ActivationPromotesAPassThroughOpUnderAutocast) {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 8});
  b.AddInitializer("W", {8, 8});
  b.AddInitializer("bias", {8});
  Scalar(b, "three", 3.0f);
  b.AddNode("MatMul", {"X", "W"}, {"h"});
  b.AddNode("Add", {"h", "bias"}, {"biased"});
  b.AddNode("Mul", {"biased", "three"}, {"scaled"});
  b.AddNode("Pow", {"scaled", "three"}, {"cube"});
  b.AddNode("Add", {"scaled", "cube"}, {"sum"});
  b.AddOutput("sum", kFloat);
  auto m = Load(b);
  ASSERT_NE(m, nullptr);
  const core::Graph& g = m->graph();
  Options amp = Batch(4);
  amp.precision = Precision::kAmpBf16;
  auto ctx = Context(*m, amp);
  ASSERT_NE(ctx, nullptr);
  const ops::ValueFacts& f = ctx->facts();
  EXPECT_TRUE(f.low(g.FindValue("h")));
  EXPECT_TRUE(f.low(g.FindValue("biased")));  // the bias is a parameter: addmm's
  EXPECT_TRUE(f.low(g.FindValue("scaled")));  // a scalar never promotes
  EXPECT_FALSE(f.low(g.FindValue("cube")));   // pow: the fp32 list
  EXPECT_FALSE(f.low(g.FindValue("sum")));    // bf16 + fp32 activation
  EXPECT_EQ(f.bytes(g.FindValue("sum")), 4u * 8 * 4);
}

TEST(FusionTest, FlashAttentionInFp32IsRefused) {
  auto m = Load(AttentionGraph(0.0f));
  ASSERT_NE(m, nullptr);
  Options o = Batch(2);
  o.attention = Attention::kSdpaFlash;
  auto est = MakeEstimator("symbolic");
  auto e = (*est)->Run(*m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("flash"), std::string::npos);
  o.precision = Precision::kAmpBf16;
  EXPECT_TRUE((*est)->Run(*m, o).ok());
}

}  // namespace
}  // namespace memest
