// Fused attention ops end to end (ops/attention.h): a small decoder as ONNX Runtime's transformer
// optimizer and ORT GenAI write it, with com.microsoft GroupQueryAttention over a KV cache, and an
// opset-23 Attention node in training, estimated through the public API under each
// Options::attention.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memest/memest.h"
#include "memory/context.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using testing::GraphBuilder;
using testing::kFloat;

constexpr int32_t kFloat16 = onnx::TensorProto::FLOAT16;
constexpr int32_t kInt32 = onnx::TensorProto::INT32;

// `layers` decoder layers over x [batch, seq, 256] in fp16: q, k, v projections (8 query heads
// and 2 key/value heads of 32), GroupQueryAttention over past_key_values.<i>.key/value
// [batch, 2, past, 32] giving present.<i>.key/value, and an output projection.
GraphBuilder GqaDecoder(int layers) {
  GraphBuilder b(17);
  b.AddOpset("com.microsoft", 1);
  b.AddInput("x", kFloat16, {"batch", "seq", 256});
  b.AddInput("seqlens_k", kInt32, {"batch"});
  b.AddInput("total_sequence_length", kInt32, {});
  std::string x = "x";
  for (int l = 0; l < layers; ++l) {
    const std::string p = "l" + std::to_string(l) + ".";
    const std::string past = "past_key_values." + std::to_string(l);
    const std::string present = "present." + std::to_string(l);
    b.AddInput(past + ".key", kFloat16, {"batch", 2, "past", 32});
    b.AddInput(past + ".value", kFloat16, {"batch", 2, "past", 32});
    b.AddInitializer(p + "Wq", {256, 256}, kFloat16);
    b.AddInitializer(p + "Wk", {256, 64}, kFloat16);
    b.AddInitializer(p + "Wv", {256, 64}, kFloat16);
    b.AddInitializer(p + "Wo", {256, 256}, kFloat16);
    b.AddNode("MatMul", {x, p + "Wq"}, {p + "q"});
    b.AddNode("MatMul", {x, p + "Wk"}, {p + "k"});
    b.AddNode("MatMul", {x, p + "Wv"}, {p + "v"});
    onnx::NodeProto& gqa =
        b.AddNode("GroupQueryAttention",
                  {p + "q", p + "k", p + "v", past + ".key", past + ".value", "seqlens_k",
                   "total_sequence_length"},
                  {p + "attn", present + ".key", present + ".value"}, p + "gqa", "com.microsoft");
    testing::SetIntAttr(gqa, "num_heads", 8);
    testing::SetIntAttr(gqa, "kv_num_heads", 2);
    b.AddNode("MatMul", {p + "attn", p + "Wo"}, {p + "y"});
    x = p + "y";
    b.AddOutput(present + ".key", kFloat16);
    b.AddOutput(present + ".value", kFloat16);
  }
  b.AddOutput(x, kFloat16);
  return b;
}

std::shared_ptr<const Model> Load(const GraphBuilder& b) {
  auto m = LoadModelFromBytes(b.Serialize(), ".", "attention_test");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

Options Decode(int64_t seq, int64_t past, Attention attention) {
  Options o;
  o.mode = Mode::kInfer;
  o.batch = 2;
  o.dims["seq"] = seq;
  o.dims["past"] = past;
  o.attention = attention;
  return o;
}

std::string Message(const Estimate& e, const std::string& code) {
  for (const memest::Diagnostic& d : e.diagnostics) {
    if (d.code == code) return d.message;
  }
  return "";
}

TEST(AttentionTest, GroupQueryAttentionDecoderEstimatesWithItsKvCache) {
  auto m = Load(GqaDecoder(2));
  ASSERT_NE(m, nullptr);
  const core::Graph& g = m->graph();
  // One decode step after 100 tokens, flash (fp16, no explicit mask, a single query).
  const Options o = Decode(1, 100, Attention::kAuto);
  auto ctx = memory::EstimationContext::Make(*m, o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  // The present outputs have the past's layout, one token longer; the KV cache rule names both.
  const int present = g.FindValue("present.1.value");
  ASSERT_GE(present, 0);
  const core::MaybeDims dims = (*ctx)->bound().shapes[static_cast<size_t>(present)];
  ASSERT_TRUE(dims.has_value());
  EXPECT_EQ(std::vector<int64_t>(dims->begin(), dims->end()),
            (std::vector<int64_t>{2, 2, 101, 32}));
  EXPECT_EQ((*ctx)->facts().bytes(present), 2u * 2 * 101 * 32 * 2);
  const memory::KvCache& kv = (*ctx)->kv_cache();
  EXPECT_EQ(kv.values().size(), 8u);  // 2 layers x (past, present) x (key, value)
  EXPECT_EQ(kv.layers(), 2);
  EXPECT_EQ(kv.bytes_per_token(), 2u * 2 * 2 * 32 * 2);  // layers x k/v x heads x dim x fp16
  const std::vector<ops::AttentionCall>& calls = (*ctx)->facts().fusion().attention_calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].kernel, ops::AttentionKernel::kFlash) << calls[0].reason;
  EXPECT_FALSE(calls[0].chain);

  for (const char* backend : {"analytical", "symbolic"}) {
    SCOPED_TRACE(backend);
    auto est = MakeEstimator(backend);
    ASSERT_TRUE(est.ok());
    auto e = (*est)->Run(*m, o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(Message(*e, "unknown_op"), "");
    EXPECT_NE(Message(*e, "attention_kernel").find("2 flash"), std::string::npos)
        << Message(*e, "attention_kernel");
    // The past inputs and the present outputs are all held at the end of the step.
    const uint64_t cache = 2u * (2 * 2 * 100 * 32 * 2 + 2 * 2 * 101 * 32 * 2);
    EXPECT_GE(e->peak_allocated, cache);
    // An fp8 cache halves what the cache holds: the rule recognised the present outputs.
    Options fp8 = o;
    fp8.kv_cache_dtype = KvCacheDtype::kFp8;
    auto small = (*est)->Run(*m, fp8);
    ASSERT_TRUE(small.ok()) << small.status().ToString();
    EXPECT_LT(small->peak_allocated, e->peak_allocated);
  }
}

// A prefill of 256 tokens after 64: the math composite (eager, on a fused op) holds the fp32
// [2, 8, 256, 320] scores and probabilities for the call; the memory-efficient kernel holds none
// of it. Flash cannot run it (causal with 256 queries over 320 keys): forcing it is refused,
// naming the node, as PyTorch refuses it.
TEST(AttentionTest, FusedOpUnderEagerCostsTheMathCompositesScores) {
  auto m = Load(GqaDecoder(1));
  ASSERT_NE(m, nullptr);
  auto est = MakeEstimator("symbolic");
  auto eager = (*est)->Run(*m, Decode(256, 64, Attention::kEager));
  auto me = (*est)->Run(*m, Decode(256, 64, Attention::kSdpaMemEfficient));
  ASSERT_TRUE(eager.ok()) << eager.status().ToString();
  ASSERT_TRUE(me.ok()) << me.status().ToString();
  const uint64_t probs = 2u * 8 * 256 * 320 * 4;
  EXPECT_GE(eager->peak_allocated, me->peak_allocated + 2 * probs);
  EXPECT_NE(Message(*eager, "attention_kernel").find("1 math"), std::string::npos)
      << Message(*eager, "attention_kernel");
  // sdpa-mem-efficient on a graph whose only attention is a fused op is not "without effect".
  EXPECT_EQ(Message(*me, "attention_not_found"), "");
  // (The graph is fp16 already; flash needs a half precision option.)
  Options forced = Decode(256, 64, Attention::kSdpaFlash);
  forced.precision = Precision::kAmpFp16;
  auto flash = (*est)->Run(*m, forced);
  ASSERT_FALSE(flash.ok());
  EXPECT_EQ(flash.status().code(), ErrorCode::kInvalidArgument) << flash.status().ToString();
  EXPECT_NE(flash.status().message().find("'l0.gqa'"), std::string::npos)
      << flash.status().ToString();
  EXPECT_NE(flash.status().message().find("is_causal"), std::string::npos)
      << flash.status().ToString();
  // A single query is not causal (decode): flash runs it.
  forced.dims["seq"] = 1;
  auto decode = (*est)->Run(*m, forced);
  EXPECT_TRUE(decode.ok()) << decode.status().ToString();
}

// An opset-23 Attention node in training: under eager it keeps the probabilities (math), under
// sdpa-mem-efficient q, k, v, out and a logsumexp.
TEST(AttentionTest, OnnxAttentionNodeInTrainingKeepsWhatTheChosenKernelKeeps) {
  GraphBuilder b(23);
  b.AddInput("X", kFloat, {"N", 64, 32});
  for (const char* w : {"Wq", "Wk", "Wv"}) b.AddInitializer(w, {32, 32});
  b.AddNode("MatMul", {"X", "Wq"}, {"q"});
  b.AddNode("MatMul", {"X", "Wk"}, {"k"});
  b.AddNode("MatMul", {"X", "Wv"}, {"v"});
  onnx::NodeProto& a = b.AddNode("Attention", {"q", "k", "v"}, {"Y"}, "attn");
  testing::SetIntAttr(a, "q_num_heads", 4);
  testing::SetIntAttr(a, "kv_num_heads", 4);
  b.AddOutput("Y", kFloat);
  auto m = Load(b);
  ASSERT_NE(m, nullptr);
  auto saved = [&](Attention attention) {
    Options o;
    o.batch = 8;
    o.attention = attention;
    auto ctx = memory::EstimationContext::Make(*m, o);
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    const int node = m->graph().value(m->graph().FindValue("Y")).producer;
    uint64_t extra = 0;
    for (const ops::SavedTensor& t : (*ctx)->facts().Saved(static_cast<size_t>(node))) {
      extra += t.value < 0 ? t.bytes : 0;
    }
    return extra;
  };
  // Math: q and k scaled (8 x 64 x 32 fp32 each) and the [8, 4, 64, 64] probabilities.
  EXPECT_EQ(saved(Attention::kEager), 2u * 8 * 64 * 32 * 4 + 8u * 4 * 64 * 64 * 4);
  // Memory-efficient: the seed and offset, the logsumexp [8, 4, 64].
  EXPECT_EQ(saved(Attention::kSdpaMemEfficient), 16u + 8 * 4 * 64 * 4);
}

// -----------------------------------------------------------------------------
// Golden check: one ONNX Attention node and the MatMul, Softmax, MatMul chain an exporter writes
// for the same call are the same attention. Under a fused kernel (sdpa-flash, sdpa-mem-efficient,
// auto) they must run the same kernel for the same reason, keep the same bytes and reach the same
// analytical peak; under eager and sdpa-math the chain is costed as written and the node as the
// math composite, which keep the same bytes (q, k, v, the probabilities) while the composite adds
// its temporaries. q, k, v [N, 64, 32] are projections of X by parameters (one head of 32; the
// node's scale 1, as the chain has none).

GraphBuilder OneHeadAttention(bool fused) {
  GraphBuilder b(23);
  b.AddInput("X", kFloat, {"N", 64, 32});
  for (const char* w : {"Wq", "Wk", "Wv"}) b.AddInitializer(w, {32, 32});
  b.AddNode("MatMul", {"X", "Wq"}, {"q"});
  b.AddNode("MatMul", {"X", "Wk"}, {"k"});
  b.AddNode("MatMul", {"X", "Wv"}, {"v"});
  if (fused) {
    onnx::NodeProto& a = b.AddNode("Attention", {"q", "k", "v"}, {"Y"}, "attn");
    testing::SetIntAttr(a, "q_num_heads", 1);
    testing::SetIntAttr(a, "kv_num_heads", 1);
    testing::SetFloatAttr(a, "scale", 1.0f);
  } else {
    testing::SetIntsAttr(b.AddNode("Transpose", {"k"}, {"kt"}), "perm", {0, 2, 1});
    b.AddNode("MatMul", {"q", "kt"}, {"s"});
    testing::SetIntAttr(b.AddNode("Softmax", {"s"}, {"p"}, "attn"), "axis", -1);
    b.AddNode("MatMul", {"p", "v"}, {"Y"});
  }
  b.AddOutput("Y", kFloat);
  return b;
}

TEST(AttentionTest, AnAttentionNodeAndItsDecomposedChainCostTheSameUnderEveryOption) {
  auto op = Load(OneHeadAttention(true));
  auto chain = Load(OneHeadAttention(false));
  ASSERT_NE(op, nullptr);
  ASSERT_NE(chain, nullptr);
  auto analytical = MakeEstimator("analytical");
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(analytical.ok() && symbolic.ok());
  const uint64_t activation = 8u * 64 * 32 * 4;  // q, k, v, the output: [8, 64, 32] fp32
  uint64_t eager_saved = 0;
  for (Attention a : {Attention::kEager, Attention::kSdpaMath, Attention::kSdpaFlash,
                      Attention::kSdpaMemEfficient, Attention::kAuto}) {
    for (Precision p : {Precision::kFp32, Precision::kAmpBf16}) {
      if (a == Attention::kSdpaFlash && p == Precision::kFp32) continue;  // refused by options
      // Eager under autocast is not the composite: the chain's MatMuls run in bf16 and its
      // Softmax in fp32, while the math composite upcasts q, k and v first.
      const bool math = a == Attention::kEager || a == Attention::kSdpaMath;
      if (math && p != Precision::kFp32) continue;
      SCOPED_TRACE(std::string(ToString(a)) + (p == Precision::kFp32 ? " fp32" : " amp-bf16"));
      Options o;
      o.batch = 8;
      o.attention = a;
      o.precision = p;
      auto op_ctx = memory::EstimationContext::Make(*op, o);
      auto chain_ctx = memory::EstimationContext::Make(*chain, o);
      ASSERT_TRUE(op_ctx.ok()) << op_ctx.status().ToString();
      ASSERT_TRUE(chain_ctx.ok()) << chain_ctx.status().ToString();
      const auto& op_calls = (*op_ctx)->facts().fusion().attention_calls();
      const auto& chain_calls = (*chain_ctx)->facts().fusion().attention_calls();
      ASSERT_EQ(op_calls.size(), 1u);
      if (math) {
        // The chain stays as written (no kernel decided); the node runs the math composite.
        EXPECT_TRUE(chain_calls.empty());
        EXPECT_TRUE((*chain_ctx)->facts().fusion().chains().empty());
        EXPECT_EQ(op_calls[0].kernel, ops::AttentionKernel::kMath);
      } else {
        ASSERT_EQ(chain_calls.size(), 1u);
        EXPECT_EQ(op_calls[0].kernel, chain_calls[0].kernel);
        EXPECT_EQ(op_calls[0].reason, chain_calls[0].reason);
        EXPECT_NE(op_calls[0].kernel, ops::AttentionKernel::kMath);
      }
      auto e_op = (*analytical)->Run(*op, o);
      auto e_chain = (*analytical)->Run(*chain, o);
      auto s_op = (*symbolic)->Run(*op, o);
      auto s_chain = (*symbolic)->Run(*chain, o);
      ASSERT_TRUE(e_op.ok() && e_chain.ok() && s_op.ok() && s_chain.ok());
      // What autograd keeps is the same tensors: q, k (the chain's MatMul copies the transposed
      // k, the composite scales a copy), v and the probabilities; or q, k, v, out and the
      // kernel's logsumexp and RNG state.
      EXPECT_EQ(e_op->breakdown.saved_activations, e_chain->breakdown.saved_activations);
      if (a == Attention::kEager) eager_saved = e_op->breakdown.saved_activations;
      if (math) {
        // The composite's scores and backward buffers come on top of the chain's links.
        EXPECT_GE(e_op->peak_allocated, e_chain->peak_allocated);
        EXPECT_GE(s_op->peak_allocated, s_chain->peak_allocated);
      } else {
        EXPECT_LT(e_op->breakdown.saved_activations, eager_saved);  // no [8, 64, 64] matrix
        EXPECT_EQ(e_op->peak_allocated, e_chain->peak_allocated);
        // The symbolic backend walks the chain's links backwards: the output's gradient dies
        // before the last link makes dq and dk, which the one kernel call holds together with
        // its backward buffers.
        const uint64_t buffers =
            ops::AttentionKernelBackwardWorkspace(op_calls[0].kernel, op_calls[0].site);
        EXPECT_GE(s_op->peak_allocated, s_chain->peak_allocated);
        EXPECT_LE(s_op->peak_allocated, s_chain->peak_allocated + activation + buffers);
      }
    }
  }
}

}  // namespace
}  // namespace memest
