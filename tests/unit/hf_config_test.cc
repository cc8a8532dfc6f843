// Graphs from Hugging Face config.json files (datasets/zoo/hf.h): the published parameter count
// of every family, counted by memest's own loader on the generated graph; the graphs bind and
// estimate at batch 2, seq 64 with the analytical and symbolic backends; attention chains fuse
// under SDPA; prefill/decode KV-cache outputs have the right shapes; bad configs name the field.
// The configs are the real files in tests/data/hf/ (README.md there gives their sources).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/graph.h"
#include "core/symbolic_shapes.h"
#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "datasets/zoo/zoo.h"
#include "memest/memest.h"
#include "memory/context.h"
#include "ops/fusion.h"
#include "symbolic/symbolic.h"
#include "tests/testing/bundled.h"

namespace memest {
namespace {

using nlohmann::json;
using zoo::HfGraphOptions;

std::string ConfigPath(const std::string& file) {
  return std::string(MEMEST_SOURCE_DIR) + "/tests/data/hf/" + file;
}

json Config(const std::string& file) {
  auto j = zoo::LoadHfConfig(ConfigPath(file));
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : json::object();
}

zoo::HfModel Build(const json& config, HfGraphOptions o = {}) {
  auto m = zoo::BuildHfModel(config, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : zoo::HfModel{};
}

std::shared_ptr<const Model> Load(const zoo::HfModel& m) {
  auto loaded = LoadModelFromBytes(zoo::SerializeModel(m.model), ".", m.architecture);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? *loaded : nullptr;
}

struct Published {
  const char* file;
  const char* architecture;
  int64_t parameters;
  bool tied;
};

// Sources: tests/data/hf/README.md and docs/hf-config.md.
const std::vector<Published>& PublishedCounts() {
  static const auto* counts = new std::vector<Published>{
      {"llama-2-7b-hf.json", "LlamaForCausalLM", 6'738'415'616, false},
      {"llama-2-13b-hf.json", "LlamaForCausalLM", 13'015'864'320, false},
      {"meta-llama-3-8b.json", "LlamaForCausalLM", 8'030'261'248, false},
      {"tinyllama-1.1b-chat-v1.0.json", "LlamaForCausalLM", 1'100'048'384, false},
      {"mistral-7b-v0.1.json", "MistralForCausalLM", 7'241'732'096, false},
      {"qwen2-0.5b-instruct.json", "Qwen2ForCausalLM", 494'032'768, true},
      {"qwen2.5-0.5b.json", "Qwen2ForCausalLM", 494'032'768, true},
      {"qwen2-1.5b-instruct.json", "Qwen2ForCausalLM", 1'543'714'304, true},
      {"qwen2-7b.json", "Qwen2ForCausalLM", 7'615'616'512, false},
      {"qwen3-0.6b.json", "Qwen3ForCausalLM", 596'049'920, true},
      {"qwen3-8b.json", "Qwen3ForCausalLM", 8'190'735'360, false},
      {"qwen3-32b.json", "Qwen3ForCausalLM", 32'762'123'264, false},
      {"gemma-2b.json", "GemmaForCausalLM", 2'506'172'416, true},
      {"gemma-7b.json", "GemmaForCausalLM", 8'537'680'896, true},
      {"phi-2.json", "PhiForCausalLM", 2'779'683'840, false},
      {"phi-3.5-mini-instruct.json", "Phi3ForCausalLM", 3'821'079'552, false},
      {"gpt2.json", "GPT2LMHeadModel", 124'439'808, true},
      {"gpt2-medium.json", "GPT2LMHeadModel", 354'823'168, true},
      {"pythia-160m.RECONSTRUCTED.json", "GPTNeoXForCausalLM", 162'322'944, false},
      {"gpt-neox-20b.RECONSTRUCTED.json", "GPTNeoXForCausalLM", 20'554'567'680, false},
      {"falcon-7b.RECONSTRUCTED.json", "FalconForCausalLM", 6'921'720'704, true},
      {"mixtral-8x7b-v0.1.json", "MixtralForCausalLM", 46'702'792'704, false},
      {"bert-base-uncased.json", "BertModel", 109'482'240, false},
      {"bert-large-uncased.json", "BertModel", 335'141'888, false},
      {"roberta-base.json", "RobertaModel", 124'645'632, false},
      {"roberta-large.json", "RobertaModel", 355'359'744, false},
      {"t5-small.json", "T5ForConditionalGeneration", 60'506'624, true},
      {"t5-base.json", "T5ForConditionalGeneration", 222'903'552, true},
      // Not a published file: Llama-2-70B's shape (hidden 8192, 80 layers, 64 heads, 8 kv heads,
      // intermediate 28672, vocab 32000); 68,976,648,192 is the count widely reported for
      // Llama-2-70b-hf.
      {"llama-2-70b-shape.json", "LlamaForCausalLM", 68'976'648'192, false},
  };
  return *counts;
}

// memest's own count (core/loader.cc) on the generated graph equals the published count, for
// every family, tied embeddings once; so does the builder's.
TEST(HfConfigTest, ParameterCountsEqualThePublishedOnes) {
  for (const Published& p : PublishedCounts()) {
    SCOPED_TRACE(p.file);
    const zoo::HfModel m = Build(Config(p.file));
    EXPECT_EQ(m.architecture, p.architecture);
    EXPECT_EQ(m.tied, p.tied);
    EXPECT_EQ(m.parameters, p.parameters);
    auto model = Load(m);
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->summary().parameter_count, p.parameters);
    EXPECT_EQ(model->summary().parameter_bytes, static_cast<uint64_t>(p.parameters) * 4);
  }
}

// Every phase of a decoder has the same parameters; the count does not depend on the phase.
TEST(HfConfigTest, EveryPhaseHasTheSameParameters) {
  const json c = Config("qwen2-0.5b-instruct.json");
  for (auto phase : {HfGraphOptions::kTrain, HfGraphOptions::kPrefill, HfGraphOptions::kDecode}) {
    HfGraphOptions o;
    o.phase = phase;
    o.logits_last_only = phase != HfGraphOptions::kTrain;
    auto model = Load(Build(c, o));
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->summary().parameter_count, 494'032'768) << zoo::PhaseName(phase);
  }
}

bool HasDiagnostic(const Estimate& e, const std::string& code) {
  for (const Diagnostic& d : e.diagnostics) {
    if (d.code == code) return true;
  }
  return false;
}

Options Train(int64_t seq) {
  Options o;
  o.batch = 2;
  o.dims["seq"] = seq;
  o.dims["tgt_seq"] = seq;
  return o;
}

// A bf16 prefill under --attention auto.
Options Prefill(int64_t batch, int64_t seq) {
  Options o;
  o.mode = Mode::kInfer;
  o.precision = Precision::kBf16;
  o.batch = batch;
  o.dims["seq"] = seq;
  o.attention = Attention::kAuto;
  return o;
}

// One config per family: the training graph binds at batch 2, seq 64 and both estimators give
// an estimate above the model states with every shape known.
TEST(HfConfigTest, EveryFamilyEstimatesAtBatch2Seq64) {
  const char* files[] = {"tinyllama-1.1b-chat-v1.0.json",
                         "mistral-7b-v0.1.json",
                         "mixtral-8x7b-v0.1.json",
                         "qwen2-0.5b-instruct.json",
                         "qwen3-0.6b.json",
                         "gemma-2b.json",
                         "phi-2.json",
                         "phi-3.5-mini-instruct.json",
                         "gpt2.json",
                         "pythia-160m.RECONSTRUCTED.json",
                         "falcon-7b.RECONSTRUCTED.json",
                         "bert-base-uncased.json",
                         "roberta-base.json",
                         "t5-small.json"};
  for (const char* file : files) {
    SCOPED_TRACE(file);
    const zoo::HfModel m = Build(Config(file));
    auto model = Load(m);
    ASSERT_NE(model, nullptr);
    for (const char* backend : {"analytical", "symbolic"}) {
      SCOPED_TRACE(backend);
      auto est = MakeEstimator(backend);
      ASSERT_TRUE(est.ok());
      Options o = Train(64);
      if (m.model_type != "t5") o.dims.erase("tgt_seq");
      auto e = (*est)->Run(*model, o);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      EXPECT_FALSE(HasDiagnostic(*e, "unknown_shapes"));
      // Weights, gradients and Adam's two moments: 16 bytes per parameter, and activations.
      EXPECT_GT(e->peak_allocated, static_cast<uint64_t>(m.parameters) * 16);
    }
  }
}

// Fused chains of `kind` the context's value facts found.
size_t ChainsOf(const memory::EstimationContext& ctx, ops::FusedKind kind) {
  size_t n = 0;
  for (const ops::FusedChain& chain : ctx.facts().fusion().chains()) n += chain.kind == kind;
  return n;
}

// Under SDPA every layer's attention is one fused chain (grouped-query attention included: k and
// v repeated by Unsqueeze, Expand, Reshape before the MatMul), and it saves less than eager. In
// bf16 PyTorch picks flash for the causal decoders and encoders, memory-efficient for t5 (its
// position bias is an explicit attn_mask).
TEST(HfConfigTest, AttentionFusesInEveryLayerUnderSdpa) {
  struct Case {
    const char* file;
    size_t chains;
  };
  for (const Case& c :
       {Case{"tinyllama-1.1b-chat-v1.0.json", 22}, Case{"qwen3-0.6b.json", 28},
        Case{"gemma-2b.json", 18}, Case{"gpt2.json", 12},
        Case{"pythia-160m.RECONSTRUCTED.json", 12}, Case{"falcon-7b.RECONSTRUCTED.json", 32},
        Case{"bert-base-uncased.json", 12}, Case{"t5-small.json", 18}}) {
    SCOPED_TRACE(c.file);
    auto model = Load(Build(Config(c.file)));
    ASSERT_NE(model, nullptr);
    Options o = Train(1024);
    if (std::string(c.file) != "t5-small.json") o.dims.erase("tgt_seq");
    o.attention = Attention::kAuto;
    o.precision = Precision::kAmpBf16;
    auto ctx = memory::EstimationContext::Make(*model, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    EXPECT_EQ(ChainsOf(**ctx, ops::FusedKind::kAttention), c.chains);
    EXPECT_TRUE((*ctx)->facts().fusion().unmatched_attention().empty());
    auto est = MakeEstimator("symbolic");
    o.optimizer = Optimizer::kSgd;  // no optimizer state: the peak is in backward
    auto fused = (*est)->Run(*model, o);
    o.attention = Attention::kEager;
    auto eager = (*est)->Run(*model, o);
    ASSERT_TRUE(fused.ok() && eager.ok());
    EXPECT_FALSE(HasDiagnostic(*fused, "attention_unclassified"));
    EXPECT_LT(fused->peak_allocated, eager->peak_allocated);
  }
}

// transformers' SDPA path passes is_causal and builds no mask when there is no padding mask: with
// fused attention the graph's causal mask (ConstantOfShape -> Trilu, shared by every layer) is
// read by no kernel, so it takes 0 bytes; eager attention reads it (masked_fill), so it is made.
// At a 32k prefill that is a [32768, 32768] bool mask: 1 GiB.
TEST(HfConfigTest, FusedAttentionTakesTheCausalMaskAsIsCausal) {
  HfGraphOptions prefill;
  prefill.phase = HfGraphOptions::kPrefill;
  auto model = Load(Build(Config("qwen2.5-0.5b.json"), prefill));
  ASSERT_NE(model, nullptr);
  const core::Graph& g = model->graph();
  int mask = -1;
  for (const core::Node& n : g.nodes) {
    if (n.op_type == "Trilu") mask = n.outputs[0];
  }
  ASSERT_GE(mask, 0);
  Options o = Prefill(1, 32768);
  auto fused = memory::EstimationContext::Make(*model, o);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  for (const ops::AttentionCall& call : (*fused)->facts().fusion().attention_calls()) {
    EXPECT_EQ(call.kernel, ops::AttentionKernel::kFlash);
    EXPECT_TRUE(call.site.causal && call.site.masks.empty());
  }
  EXPECT_EQ((*fused)->facts().bytes(mask), 0u);
  o.attention = Attention::kEager;
  auto eager = memory::EstimationContext::Make(*model, o);
  ASSERT_TRUE(eager.ok()) << eager.status().ToString();
  EXPECT_EQ((*eager)->facts().bytes(mask), 32768ull * 32768);
}

// Falcon-7b's multi-query attention broadcasts its one k/v head over the 71 query heads
// (FalconAttention.forward: no repeat_kv, SDPA called without enable_gqa), so the graph repeats
// nothing and PyTorch's SDPA runs the math composite: bf16 upcast to fp32 [b, 71, s, s] scores.
// Measured on an H100 (datasets/h100-lm-torch211/, call 7): 35,220 MiB allocated at 8 x 2048.
TEST(HfConfigTest, FalconMultiQueryRunsTheMathComposite) {
  HfGraphOptions prefill;
  prefill.phase = HfGraphOptions::kPrefill;
  auto model = Load(Build(Config("falcon-7b.RECONSTRUCTED.json"), prefill));
  ASSERT_NE(model, nullptr);
  for (const core::Node& n : model->graph().nodes) EXPECT_NE(n.op_type, "Expand") << n.name;
  auto ctx = memory::EstimationContext::Make(*model, Prefill(8, 2048));
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const auto& calls = (*ctx)->facts().fusion().attention_calls();
  ASSERT_EQ(calls.size(), 32u);
  for (const ops::AttentionCall& call : calls) {
    EXPECT_EQ(call.kernel, ops::AttentionKernel::kMath);
    EXPECT_TRUE(call.site.broadcast_kv);
    EXPECT_EQ(call.site.q_heads, 71u);
    EXPECT_FALSE(call.as_written);
  }
  // The scores and probabilities in fp32 and the bool mask beside them: 9 bytes per score.
  const size_t last = (*ctx)->facts().fusion().chains().at(0).nodes.back();
  EXPECT_GE((*ctx)->facts().Workspace(last), 8ull * 71 * 2048 * 2048 * 9);
}

// transformers' gelu_pytorch_tanh is F.gelu(approximate="tanh"), one kernel (Gemma's MLP), and
// is written so that memest fuses it; gelu_new is Python code (GPT-2's NewGELUActivation), op by
// op.
TEST(HfConfigTest, GeluPytorchTanhIsOneKernelGeluNewIsNot) {
  struct Case {
    const char* file;
    size_t gelu;
  };
  for (const Case& c : {Case{"gemma-2b.json", 18}, Case{"gpt2.json", 0}}) {
    SCOPED_TRACE(c.file);
    auto model = Load(Build(Config(c.file)));
    ASSERT_NE(model, nullptr);
    Options o = Train(256);
    o.dims.erase("tgt_seq");
    auto ctx = memory::EstimationContext::Make(*model, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    EXPECT_EQ(ChainsOf(**ctx, ops::FusedKind::kGelu), c.gelu);
  }
}

// NewGELUActivation returns 0.5 * x * (1 + tanh(...)): Python makes the left factor 0.5 * x first
// and holds it while the rest runs, so the graph makes that Mul before the Pow of every MLP.
TEST(HfConfigTest, GeluNewMakesHalfOfItsInputFirst) {
  auto model = Load(Build(Config("gpt2.json")));
  ASSERT_NE(model, nullptr);
  const core::Graph& g = model->graph();
  int pows = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (g.nodes[k].op_type != "Pow") continue;
    ++pows;
    const core::Value& x = g.value(g.nodes[k].inputs.at(0));
    bool half_before = false;  // a Mul reading x, made before the Pow
    for (int reader : x.consumers) {
      half_before |=
          g.nodes[static_cast<size_t>(reader)].op_type == "Mul" && static_cast<size_t>(reader) < k;
    }
    EXPECT_TRUE(half_before) << g.nodes[k].Describe();
  }
  EXPECT_EQ(pows, 12);  // one a layer
}

// The concrete shape of graph output `name` at the given dims.
std::vector<int64_t> OutputShape(const Model& model, const std::string& name,
                                 const std::map<std::string, int64_t>& dims) {
  const core::Graph& g = model.graph();
  auto shapes = core::EvaluateShapes(g, *g.symbolic, dims);
  EXPECT_TRUE(shapes.ok()) << shapes.status().ToString();
  const int id = g.FindValue(name);
  EXPECT_GE(id, 0) << name;
  if (!shapes.ok() || id < 0 || !shapes->shapes[static_cast<size_t>(id)]) return {};
  return *shapes->shapes[static_cast<size_t>(id)];
}

// Prefill: present.{i}.key/value [batch, kv, seq, hd]; decode: past + seq positions, by Concat;
// logits on the last position only when asked. Names as optimum's export.
TEST(HfConfigTest, KvCacheOutputsHaveTheirShapes) {
  const json c = Config("mistral-7b-v0.1.json");  // 8 kv heads of 128
  HfGraphOptions prefill;
  prefill.phase = HfGraphOptions::kPrefill;
  auto p = Load(Build(c, prefill));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(OutputShape(*p, "present.0.key", {{"batch", 2}, {"seq", 100}}),
            (std::vector<int64_t>{2, 8, 100, 128}));
  EXPECT_EQ(OutputShape(*p, "present.31.value", {{"batch", 2}, {"seq", 100}}),
            (std::vector<int64_t>{2, 8, 100, 128}));
  EXPECT_EQ(OutputShape(*p, "logits", {{"batch", 2}, {"seq", 100}}),
            (std::vector<int64_t>{2, 100, 32000}));
  EXPECT_EQ(p->summary().data_inputs.size(), 1u);

  HfGraphOptions decode;
  decode.phase = HfGraphOptions::kDecode;
  decode.logits_last_only = true;
  const zoo::HfModel dm = Build(c, decode);
  auto d = Load(dm);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->summary().data_inputs.size(), 1u + 2 * 32);
  EXPECT_EQ(d->summary().symbolic_dims, (std::vector<std::string>{"batch", "past", "seq"}));
  const std::map<std::string, int64_t> dims = {{"batch", 3}, {"seq", 1}, {"past", 4095}};
  EXPECT_EQ(OutputShape(*d, "present.0.key", dims), (std::vector<int64_t>{3, 8, 4096, 128}));
  EXPECT_EQ(OutputShape(*d, "present.31.value", dims), (std::vector<int64_t>{3, 8, 4096, 128}));
  EXPECT_EQ(OutputShape(*d, "logits", dims), (std::vector<int64_t>{3, 1, 32000}));
  ASSERT_GE(dm.model.graph().output_size(), 3);
  EXPECT_EQ(dm.model.graph().output(0).name(), "logits");
  EXPECT_EQ(dm.model.graph().output(1).name(), "present.0.key");
  EXPECT_EQ(dm.model.graph().output(2).name(), "present.0.value");
  EXPECT_EQ(dm.model.graph().input(1).name(), "past_key_values.0.key");

  // Inference with the cache: the outputs' bytes (the cache) are in the estimate.
  auto est = MakeEstimator("analytical");
  Options o;
  o.mode = Mode::kInfer;
  o.batch = 3;
  o.dims = {{"seq", 1}, {"past", 4095}};
  auto e = (*est)->Run(*d, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const uint64_t cache = uint64_t{2} * 32 * 3 * 8 * 4096 * 128 * 4;  // k and v, fp32
  EXPECT_GT(e->peak_allocated, static_cast<uint64_t>(dm.parameters) * 4 + cache);
}

// Qwen3: the per-head q_norm/k_norm ([head_dim] RMSNorm weights, state_dict names) sit between the
// projections and the rotary, decomposed in fp32 like the other RMSNorms; q/k/v/o have no bias;
// head_dim (128) is the config's, not hidden / heads (1024 / 16 = 64); the head reads the tied
// embedding on 0.6B and its own lm_head.weight on 8B.
TEST(HfConfigTest, Qwen3HasPerHeadQkNormsBeforeTheRotary) {
  const zoo::HfModel m = Build(Config("qwen3-0.6b.json"));
  EXPECT_EQ(m.model_type, "qwen3");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_TRUE(m.notes.empty());  // use_sliding_window false: no window note
  std::map<std::string, std::vector<int64_t>> params;
  for (const auto& t : m.model.graph().initializer()) {
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
      params[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
    }
  }
  EXPECT_EQ(params["model.layers.0.self_attn.q_norm.weight"], (std::vector<int64_t>{128}));
  EXPECT_EQ(params["model.layers.27.self_attn.k_norm.weight"], (std::vector<int64_t>{128}));
  EXPECT_EQ(params["model.layers.0.self_attn.q_proj.weight"], (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(params["model.layers.0.self_attn.k_proj.weight"], (std::vector<int64_t>{1024, 1024}));
  EXPECT_EQ(params["model.layers.0.self_attn.o_proj.weight"], (std::vector<int64_t>{2048, 1024}));
  for (const auto& [name, dims] : params) {
    EXPECT_EQ(name.find(".bias"), std::string::npos) << name;
  }
  EXPECT_EQ(params.count("lm_head.weight"), 0u);  // tied: read through a Transpose
  EXPECT_EQ(params.size(), 1u + 28 * 11 + 1);     // embedding, 11 per layer, final norm

  // q_norm's weight multiplies a Reshape'd [b, s, 16, 128] projection normalised over its last
  // axis; the result is transposed to [b, 16, s, 128] and fed to the rotary (Mul by cos).
  auto model = Load(m);
  ASSERT_NE(model, nullptr);
  const core::Graph& g = model->graph();
  auto shapes = core::EvaluateShapes(g, *g.symbolic, {{"batch", 2}, {"seq", 64}});
  ASSERT_TRUE(shapes.ok()) << shapes.status().ToString();
  auto shape = [&](int id) { return shapes->shapes[static_cast<size_t>(id)]; };
  const int w = g.FindValue("model.layers.0.self_attn.q_norm.weight");
  ASSERT_GE(w, 0);
  ASSERT_EQ(g.value(w).consumers.size(), 1u);
  const core::Node& scale = g.node(g.value(w).consumers.front());
  EXPECT_EQ(scale.op_type, "Mul");
  ASSERT_TRUE(shape(scale.outputs[0]));
  EXPECT_EQ(*shape(scale.outputs[0]), (std::vector<int64_t>{2, 64, 16, 128}));
  ASSERT_EQ(g.value(scale.outputs[0]).consumers.size(), 1u);
  const core::Node& transpose = g.node(g.value(scale.outputs[0]).consumers.front());
  EXPECT_EQ(transpose.op_type, "Transpose");
  EXPECT_EQ(*shape(transpose.outputs[0]), (std::vector<int64_t>{2, 16, 64, 128}));
  bool rotary = false;
  for (int c : g.value(transpose.outputs[0]).consumers) {
    rotary |= g.node(c).op_type == "Mul";
  }
  EXPECT_TRUE(rotary);

  // Untied from 8B on.
  const zoo::HfModel big = Build(Config("qwen3-8b.json"));
  EXPECT_FALSE(big.tied);
  EXPECT_EQ(big.head_dim, 128);
  bool head = false;
  for (const auto& t : big.model.graph().initializer()) head |= t.name() == "lm_head.weight";
  EXPECT_TRUE(head);
}

// Qwen3's prefill and decode: present.{i}.key/value [batch, 8, ., 128] (head_dim from the
// config), the keys after q/k norm and rotary; every phase has the published count.
TEST(HfConfigTest, Qwen3PrefillAndDecodeHaveTheirShapes) {
  const json c = Config("qwen3-0.6b.json");
  HfGraphOptions prefill;
  prefill.phase = HfGraphOptions::kPrefill;
  auto p = Load(Build(c, prefill));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->summary().parameter_count, 596'049'920);
  EXPECT_EQ(OutputShape(*p, "present.27.key", {{"batch", 2}, {"seq", 64}}),
            (std::vector<int64_t>{2, 8, 64, 128}));
  EXPECT_EQ(OutputShape(*p, "logits", {{"batch", 2}, {"seq", 64}}),
            (std::vector<int64_t>{2, 64, 151936}));

  HfGraphOptions decode;
  decode.phase = HfGraphOptions::kDecode;
  decode.logits_last_only = true;
  auto d = Load(Build(c, decode));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->summary().parameter_count, 596'049'920);
  EXPECT_EQ(d->summary().data_inputs.size(), 1u + 2 * 28);
  const std::map<std::string, int64_t> dims = {{"batch", 3}, {"seq", 1}, {"past", 4095}};
  EXPECT_EQ(OutputShape(*d, "present.0.key", dims), (std::vector<int64_t>{3, 8, 4096, 128}));
  EXPECT_EQ(OutputShape(*d, "present.27.value", dims), (std::vector<int64_t>{3, 8, 4096, 128}));
  EXPECT_EQ(OutputShape(*d, "logits", dims), (std::vector<int64_t>{3, 1, 151936}));
  auto est = MakeEstimator("symbolic");
  Options o;
  o.mode = Mode::kInfer;
  o.batch = 3;
  o.dims = {{"seq", 1}, {"past", 4095}};
  auto e = (*est)->Run(*d, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const uint64_t cache = uint64_t{2} * 28 * 3 * 8 * 4096 * 128 * 4;  // k and v, fp32
  EXPECT_GT(e->peak_allocated, uint64_t{596'049'920} * 4 + cache);
}

// The analytical backend counts no cached or split blocks in inference, which a prefill's cache
// leaves (docs/accuracy-lm.md): it says so on a prefill, and only there (a decode step has its
// own warning; training and the symbolic backend, which simulates the allocator, do not).
TEST(HfConfigTest, TheAnalyticalBackendWarnsThatAPrefillSplitsTheAllocatorsSegments) {
  const json c = Config("gpt2.json");
  HfGraphOptions prefill, decode;
  prefill.phase = HfGraphOptions::kPrefill;
  decode.phase = HfGraphOptions::kDecode;
  auto p = Load(Build(c, prefill)), d = Load(Build(c, decode)), t = Load(Build(c));
  ASSERT_TRUE(p && d && t);
  Options infer;
  infer.mode = Mode::kInfer;
  infer.batch = 2;
  infer.dims = {{"seq", 128}};
  Options train = infer;
  train.mode = Mode::kTrain;
  auto warns = [](const std::string& backend, const Model& m, const Options& o) {
    auto e = (*MakeEstimator(backend))->Run(m, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() && std::any_of(e->diagnostics.begin(), e->diagnostics.end(), [](const auto& x) {
             return x.code == "prefill_without_allocator_model" && x.severity == Severity::kWarning;
           });
  };
  EXPECT_TRUE(warns("analytical", *p, infer));
  EXPECT_FALSE(warns("symbolic", *p, infer));
  Options decode_step = infer;
  decode_step.dims = {{"seq", 1}, {"past", 64}};
  EXPECT_FALSE(warns("analytical", *d, decode_step));
  EXPECT_FALSE(warns("analytical", *t, train));
}

// A decode step over transformers' DynamicCache: each layer's past is released at its Concat, so
// the step holds one cache (the present, past + 1 tokens) and one layer's past beside it, not a
// past and a present of every layer (memory/kv_cache.h; datasets/h100-lm-torch211 calls 11, 18).
TEST(HfConfigTest, ADecodeStepHoldsOneCacheNotTwo) {
  HfGraphOptions decode;
  decode.phase = HfGraphOptions::kDecode;
  decode.logits_last_only = true;
  auto d = Load(Build(Config("qwen3-0.6b.json"), decode));
  ASSERT_NE(d, nullptr);
  Options o;
  o.mode = Mode::kInfer;
  o.precision = Precision::kBf16;
  o.batch = 8;
  o.dims = {{"seq", 1}, {"past", 4095}};
  const uint64_t weights = uint64_t{596'049'920} * 2;
  const uint64_t cache = uint64_t{2} * 28 * 8 * 8 * 4096 * 128 * 2;  // k and v of 4,096 tokens
  for (const char* backend : {"symbolic", "analytical"}) {
    auto est = MakeEstimator(backend);
    ASSERT_TRUE(est.ok());
    auto e = (*est)->Run(*d, o);
    ASSERT_TRUE(e.ok()) << backend << ": " << e.status().ToString();
    EXPECT_GT(e->peak_allocated, weights + cache) << backend;
    EXPECT_LT(e->peak_allocated, weights + cache + cache / 10) << backend;  // was two caches
    // The step is estimated without the prefill before it, and says so.
    EXPECT_TRUE(std::any_of(e->diagnostics.begin(), e->diagnostics.end(), [](const auto& d) {
      return d.code == "decode_after_prefill" && d.severity == Severity::kWarning;
    })) << backend;
  }
}

// A decode step after the prefill of its past on the same allocator (Options::prefill,
// memory-model.md §10.2): the cache's blocks sit in segments the prefill reserved, so the step
// reserves more than on a fresh allocator while it allocates the same; emptying the cache between
// them releases only the segments that hold none of it, which the step then reserves again. The
// other backends have no allocator to carry over and refuse the option.
TEST(HfConfigTest, ADecodeStepAfterItsPrefillReservesWhatThePrefillLeft) {
  const auto [d, p] = testing::HfDecodeAfterPrefill("qwen3-0.6b.json");
  ASSERT_NE(d, nullptr);
  ASSERT_NE(p, nullptr);
  Options o;
  o.mode = Mode::kInfer;
  o.precision = Precision::kBf16;
  o.attention = Attention::kAuto;
  o.batch = 64;
  o.dims = {{"seq", 1}, {"past", 1000}};
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(symbolic.ok());
  auto alone = (*symbolic)->Run(*d, o);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  o.prefill = DecodePrefill{p};
  auto kept = (*symbolic)->Run(*d, o);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  o.prefill->cache_emptied = true;
  auto emptied = (*symbolic)->Run(*d, o);
  ASSERT_TRUE(emptied.ok()) << emptied.status().ToString();
  // The same tensors: the prefill leaves the parameters and the cache, nothing else.
  for (const auto* e : {&*kept, &*emptied}) {
    EXPECT_LT(e->peak_allocated, alone->peak_allocated + alone->peak_allocated / 100);
    EXPECT_GT(e->peak_allocated, alone->peak_allocated - alone->peak_allocated / 100);
    EXPECT_TRUE(std::any_of(e->diagnostics.begin(), e->diagnostics.end(), [](const auto& x) {
      return x.code == "decode_after_prefill" && x.severity == Severity::kInfo;
    }));
  }
  EXPECT_GT(emptied->peak_reserved, alone->peak_reserved + (uint64_t{512} << 20));
  // Emptied, the step makes new segments for what the released ones held: about as much as the
  // cached blocks it found when they were kept, more or less with the prefill's layout (6 MiB
  // more once the SiLU chains were fused, 131 MiB less once the builder held tensors as Python
  // does, less before), never a cache's worth (6.8 GiB here).
  EXPECT_LT(emptied->peak_reserved, kept->peak_reserved + kept->peak_reserved / 20);
  EXPECT_GT(emptied->peak_reserved, kept->peak_reserved - kept->peak_reserved / 20);
  // Nothing released: the step reserves at least what the prefill alone did.
  Options pre = o;
  pre.prefill.reset();
  pre.dims = {{"seq", 1000}};
  auto prefill_alone = symbolic::SimulateModel(*p, pre, /*record_events=*/false);
  ASSERT_TRUE(prefill_alone.ok()) << prefill_alone.status().ToString();
  EXPECT_GE(kept->peak_reserved, prefill_alone->iterations.front().reserved);
  // Every other backend refuses the option, naming it (never a step estimated alone instead).
  for (const BackendInfo& info : ListBackends()) {
    if (!info.available) continue;
    const std::string& backend = info.name;
    auto est = MakeEstimator(backend);
    ASSERT_TRUE(est.ok()) << backend;
    if ((*est)->supports().prefill) continue;
    auto refused = (*est)->Run(*d, o);
    ASSERT_FALSE(refused.ok()) << backend;
    EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument) << backend;
    EXPECT_NE(refused.status().message().find("prefill"), std::string::npos) << backend;
  }
}

// A decode step whose prefill runs out of memory does not fit, even where the cache emptied
// between them leaves the step's own peaks (reset after the prefill) within the GPU: the estimate
// is then the prefill's, noted. Qwen3-0.6B at batch 16 and past 4096 on a100-40gb: the prefill's
// eager attention scores alone are 4 GiB a layer. Asked twice (the second answered from what the
// bound graph kept), and with the cache kept, where the step's peaks include the prefill's.
TEST(HfConfigTest, ADecodeStepWhosePrefillRunsOutDoesNotFit) {
  const auto [d, p] = testing::HfDecodeAfterPrefill("qwen3-0.6b.json");
  ASSERT_TRUE(d && p);
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(symbolic.ok());
  Options o;
  o.gpu = "a100-40gb";
  o.mode = Mode::kInfer;
  o.batch = 16;
  o.dims = {{"seq", 1}, {"past", 4096}};
  auto gpu = ResolveGpuProfile(o);
  ASSERT_TRUE(gpu.ok());
  auto alone = (*symbolic)->Run(*d, o);  // the step on a fresh allocator fits
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  EXPECT_TRUE(CheckFit(*alone, *gpu, o).fits);
  auto has = [](const Estimate& e, const std::string& code) {
    return std::any_of(e.diagnostics.begin(), e.diagnostics.end(),
                       [&code](const Diagnostic& x) { return x.code == code; });
  };
  for (const bool emptied : {true, true, false}) {
    o.prefill = DecodePrefill{p};
    o.prefill->cache_emptied = emptied;
    auto e = (*symbolic)->Run(*d, o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_FALSE(CheckFit(*e, *gpu, o).fits) << (emptied ? "emptied" : "kept");
    EXPECT_GT(e->peak_device, gpu->usable_memory.bytes);
    EXPECT_TRUE(has(*e, "out_of_memory"));
    EXPECT_EQ(has(*e, "prefill_out_of_memory"), emptied);
    if (!emptied) continue;
    // Its notes say whose peaks they are, and a timeline draws the same simulation.
    for (const Diagnostic& x : e->diagnostics) {
      if (x.code == "out_of_memory" || x.code == "decode_after_prefill") {
        EXPECT_NE(x.message.find("prefill's"), std::string::npos) << x.message;
        EXPECT_EQ(x.message.find("peaks are the step's"), std::string::npos) << x.message;
      }
    }
    auto drawn = symbolic::SimulateModel(*d, o, /*record_events=*/true);
    ASSERT_TRUE(drawn.ok()) << drawn.status().ToString();
    EXPECT_EQ(drawn->estimate.peak_reserved, e->peak_reserved);
    EXPECT_EQ(drawn->estimate.peak_device, e->peak_device);
    EXPECT_FALSE(drawn->events.empty());
  }
}

// A prefill fills the past of a decode step whose past dim is bound, from outputs named for each
// past input; anything else is an error that says what is missing.
TEST(HfConfigTest, APrefillNeedsADecodeStepItsOutputsFill) {
  HfGraphOptions decode, prefill;
  decode.phase = HfGraphOptions::kDecode;
  prefill.phase = HfGraphOptions::kPrefill;
  auto d = Load(Build(Config("qwen3-0.6b.json"), decode));
  auto p = Load(Build(Config("qwen3-0.6b.json"), prefill));
  auto other = Load(Build(Config("gpt2.json"), prefill));  // 12 layers, not 28
  ASSERT_TRUE(d && p && other);
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(symbolic.ok());
  Options o;
  o.mode = Mode::kInfer;
  o.batch = 2;
  o.dims = {{"seq", 1}, {"past", 64}};
  o.prefill = DecodePrefill{other};
  auto e = (*symbolic)->Run(*d, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("no output present.12.key"), std::string::npos)
      << e.status().ToString();
  o.prefill = DecodePrefill{p};
  Options on_prefill = o;
  on_prefill.dims = {{"seq", 8}};
  e = (*symbolic)->Run(*p, on_prefill);  // the prefill graph has no past to fill
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("needs a decode step"), std::string::npos)
      << e.status().ToString();
  o.prefill->past_dim = "history";
  e = (*symbolic)->Run(*d, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("bind the dim 'history'"), std::string::npos)
      << e.status().ToString();
  o.prefill->past_dim = "past";
  o.mode = Mode::kTrain;
  EXPECT_FALSE(Validate(o).ok());
  o.mode = Mode::kInfer;
  o.prefill->model = nullptr;
  EXPECT_FALSE(Validate(o).ok());
}

// Checkpointing every block of a decoder (transformers' gradient_checkpointing_enable): one
// segment per layer, from its first node to its last; the embedding, the final norm and the head
// are outside every segment.
TEST(HfConfigTest, CheckpointingBlocksCheckpointsEveryDecoderLayer) {
  auto m = Load(Build(Config("qwen3-0.6b.json")));
  ASSERT_NE(m, nullptr);
  Options o;
  o.checkpoint_blocks = true;
  auto segs = core::CheckpointSegmentsFor(m->graph(), o);
  ASSERT_TRUE(segs.ok()) << segs.status().ToString();
  ASSERT_EQ(segs->size(), 28u);
  const core::Graph& g = m->graph();
  for (size_t l = 0; l < segs->size(); ++l) {
    const std::string layer = "model.layers." + std::to_string(l) + "/";
    EXPECT_EQ(g.node((*segs)[l].begin).name.rfind(layer, 0), 0u) << g.node((*segs)[l].begin).name;
    EXPECT_EQ(g.node((*segs)[l].end - 1).name.rfind(layer, 0), 0u);
  }
  const std::vector<int> of = core::SegmentOfNode(g, *segs);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const std::string& name = g.nodes[k].name;
    if (name.rfind("model.norm", 0) == 0 || name.rfind("lm_head", 0) == 0 ||
        name.rfind("model.embed_tokens", 0) == 0) {
      EXPECT_EQ(of[k], -1) << name;
    }
  }
}

// A decode step of GPT-2 (learned positions from past to past + seq) and of a mixture of experts
// bind for any batch and seq: routing divides nothing exactly.
TEST(HfConfigTest, DecodeBindsForEveryBatchAndSeq) {
  for (const char* file : {"gpt2.json", "mixtral-8x7b-v0.1.json", "falcon-7b.RECONSTRUCTED.json"}) {
    SCOPED_TRACE(file);
    HfGraphOptions o;
    o.phase = HfGraphOptions::kDecode;
    auto model = Load(Build(Config(file), o));
    ASSERT_NE(model, nullptr);
    auto est = MakeEstimator("symbolic");
    for (int64_t batch : {1, 3}) {
      for (int64_t seq : {1, 7}) {
        Options opt;
        opt.mode = Mode::kInfer;
        opt.batch = batch;
        opt.dims = {{"seq", seq}, {"past", 33}};
        auto e = (*est)->Run(*model, opt);
        EXPECT_TRUE(e.ok()) << batch << " " << seq << ": " << e.status().ToString();
      }
    }
  }
}

// The estimate's time does not depend on seq: binding evaluates shapes once per estimate.
TEST(HfConfigTest, PrefillBindsAtLongSequences) {
  HfGraphOptions o;
  o.phase = HfGraphOptions::kPrefill;
  o.logits_last_only = true;
  auto model = Load(Build(Config("meta-llama-3-8b.json"), o));
  ASSERT_NE(model, nullptr);
  auto est = MakeEstimator("symbolic");
  uint64_t previous = 0;
  for (int64_t seq : {2048, 32768}) {
    Options opt;
    opt.mode = Mode::kInfer;
    opt.batch = 1;
    opt.dims = {{"seq", seq}};
    auto e = (*est)->Run(*model, opt);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_GT(e->peak_allocated, previous);
    previous = e->peak_allocated;
  }
}

// Small configs of every family pass ONNX's checker and its strict shape inference (over the
// symbolic dims: ONNX 1.12 cannot propagate a Range over a computed bound, which memest's own
// shape pass does; the estimates above check that every shape is known).
TEST(HfConfigTest, SmallGraphsPassTheOnnxChecker) {
  const std::vector<json> configs = {
      {{"model_type", "llama"},
       {"vocab_size", 100},
       {"hidden_size", 32},
       {"intermediate_size", 64},
       {"num_hidden_layers", 2},
       {"num_attention_heads", 4},
       {"num_key_value_heads", 2}},
      {{"model_type", "mixtral"},
       {"vocab_size", 100},
       {"hidden_size", 32},
       {"intermediate_size", 64},
       {"num_hidden_layers", 1},
       {"num_attention_heads", 4},
       {"num_key_value_heads", 2},
       {"num_local_experts", 4},
       {"num_experts_per_tok", 2}},
      {{"model_type", "qwen3"},
       {"vocab_size", 100},
       {"hidden_size", 32},
       {"intermediate_size", 64},
       {"num_hidden_layers", 2},
       {"num_attention_heads", 4},
       {"num_key_value_heads", 2},
       {"head_dim", 16}},
      {{"model_type", "phi"},
       {"vocab_size", 100},
       {"hidden_size", 32},
       {"intermediate_size", 64},
       {"num_hidden_layers", 1},
       {"num_attention_heads", 4},
       {"qk_layernorm", true},
       {"resid_pdrop", 0.1}},
      {{"model_type", "gpt2"},
       {"vocab_size", 100},
       {"n_embd", 32},
       {"n_layer", 1},
       {"n_head", 4},
       {"n_positions", 64}},
      {{"model_type", "gpt_neox"},
       {"vocab_size", 100},
       {"hidden_size", 32},
       {"intermediate_size", 64},
       {"num_hidden_layers", 1},
       {"num_attention_heads", 4}},
      {{"model_type", "bert"},
       {"vocab_size", 100},
       {"hidden_size", 32},
       {"intermediate_size", 64},
       {"num_hidden_layers", 1},
       {"num_attention_heads", 4},
       {"max_position_embeddings", 64}},
      {{"model_type", "t5"},
       {"vocab_size", 100},
       {"d_model", 32},
       {"d_kv", 8},
       {"d_ff", 64},
       {"num_layers", 1},
       {"num_heads", 4},
       {"feed_forward_proj", "gated-gelu"},
       {"tie_word_embeddings", false}},
  };
  for (const json& c : configs) {
    SCOPED_TRACE(c.dump());
    std::vector<HfGraphOptions::Phase> phases = {HfGraphOptions::kTrain};
    if (c["model_type"] != "bert" && c["model_type"] != "t5") {
      phases.push_back(HfGraphOptions::kPrefill);
      phases.push_back(HfGraphOptions::kDecode);
    }
    for (auto phase : phases) {
      HfGraphOptions o;
      o.phase = phase;
      const zoo::HfModel m = Build(c, o);
      const Status s = zoo::ValidateStructure(m.model);
      EXPECT_TRUE(s.ok()) << zoo::PhaseName(phase) << ": " << s.ToString();
    }
  }
}

Status BuildError(const json& config, HfGraphOptions o = {}) {
  auto m = zoo::BuildHfModel(config, o);
  return m.ok() ? Status::Ok() : m.status();
}

void ExpectError(const Status& s, ErrorCode code, const std::string& text) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
}

// Qwen3Config's defaults where the file says nothing: head_dim 128 (not hidden / heads), 32 kv
// heads, untied, no attention bias; attention_bias true adds q/k/v/o biases; a sliding window
// is noted only with use_sliding_window.
TEST(HfConfigTest, Qwen3Defaults) {
  json c = {{"model_type", "qwen3"},   {"vocab_size", 100},      {"hidden_size", 64},
            {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 32}};
  const zoo::HfModel m = Build(c);
  EXPECT_EQ(m.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.kv_heads, 32);
  EXPECT_FALSE(m.tied);
  // embed + head 2 * 100 * 64; per layer q/k/v/o 4 * 64 * 4096, MLP 3 * 64 * 96, norms
  // 2 * 64 + 2 * 128; final norm 64.
  const int64_t layer = 4 * 64 * 4096 + 3 * 64 * 96 + 2 * 64 + 2 * 128;
  EXPECT_EQ(m.parameters, 2 * 100 * 64 + 2 * layer + 64);
  EXPECT_TRUE(m.notes.empty());

  c["attention_bias"] = true;
  EXPECT_EQ(Build(c).parameters, m.parameters + 2 * (4096 + 4096 + 4096 + 64));
  c["num_key_value_heads"] = nullptr;  // null: as many as the heads
  EXPECT_EQ(Build(c).kv_heads, 32);
  c["num_key_value_heads"] = 8;
  c["head_dim"] = 16;
  EXPECT_EQ(Build(c).head_dim, 16);

  c["use_sliding_window"] = true;
  const zoo::HfModel windowed = Build(c);
  ASSERT_EQ(windowed.notes.size(), 1u);
  EXPECT_NE(windowed.notes[0].find("sliding_window 4096"), std::string::npos) << windowed.notes[0];
  c["num_attention_heads"] = 12;
  ExpectError(BuildError(c), ErrorCode::kInvalidModel,
              "'num_attention_heads' = 12 is not divisible by 'num_key_value_heads' = 8 (qwen3)");
}

TEST(HfConfigTest, BadConfigsNameTheField) {
  json llama = Config("llama-2-7b-hf.json");
  {
    json c = llama;
    c.erase("num_attention_heads");
    ExpectError(BuildError(c), ErrorCode::kInvalidModel,
                "config.json: missing 'num_attention_heads' (llama)");
  }
  {
    json c = llama;
    c["num_key_value_heads"] = 5;
    ExpectError(BuildError(c), ErrorCode::kInvalidModel,
                "'num_attention_heads' = 32 is not divisible by 'num_key_value_heads' = 5");
  }
  {
    json c = llama;
    c["hidden_size"] = 4100;
    ExpectError(BuildError(c), ErrorCode::kInvalidModel,
                "'hidden_size' = 4100 is not divisible by 'num_attention_heads' = 32 (and there "
                "is no 'head_dim')");
  }
  {
    json c = llama;
    c["num_hidden_layers"] = 0;
    ExpectError(BuildError(c), ErrorCode::kInvalidModel,
                "'num_hidden_layers' = 0 must be at least 1");
  }
  {
    json c = llama;
    c["intermediate_size"] = "big";
    ExpectError(BuildError(c), ErrorCode::kInvalidModel, "'intermediate_size' = \"big\" must be");
  }
  {
    json c = llama;
    c["vocab_size"] = int64_t{1} << 40;
    ExpectError(BuildError(c), ErrorCode::kInvalidModel,
                "'vocab_size' = 1099511627776 exceeds "
                "the limit 16777216");
  }
  {
    json c = llama;  // every dim within its bound, the whole past the parameter limit
    c["num_hidden_layers"] = 1024;
    c["hidden_size"] = 131072;
    c["intermediate_size"] = 1048576;
    c["num_attention_heads"] = 1024;
    c["num_key_value_heads"] = 1024;
    ExpectError(BuildError(c), ErrorCode::kInvalidModel, "parameters (the limit)");
  }
  {
    json c = llama;
    c["model_type"] = "mamba";
    ExpectError(BuildError(c), ErrorCode::kInvalidModel,
                "unsupported model_type 'mamba' (supported: llama, mistral");
  }
  {
    json c = llama;
    c.erase("model_type");
    c["architectures"] = {"MambaForCausalLM"};
    ExpectError(BuildError(c), ErrorCode::kInvalidModel, "unknown architecture 'MambaForCausalLM'");
  }
  {
    json c = llama;
    c.erase("model_type");  // architectures alone still identifies the family
    EXPECT_TRUE(BuildError(c).ok());
    c.erase("architectures");
    ExpectError(BuildError(c), ErrorCode::kInvalidModel, "missing 'model_type'");
  }
  {
    json c = Config("mixtral-8x7b-v0.1.json");
    c["num_experts_per_tok"] = 9;
    ExpectError(BuildError(c), ErrorCode::kInvalidModel,
                "'num_experts_per_tok' = 9 exceeds 'num_local_experts' = 8");
  }
  {
    json c = Config("falcon-7b.RECONSTRUCTED.json");
    c["alibi"] = true;
    ExpectError(BuildError(c), ErrorCode::kInvalidModel, "'alibi'");
  }
  {
    json c = llama;
    c["hidden_act"] = "tanhshrink";
    ExpectError(BuildError(c), ErrorCode::kInvalidModel, "'hidden_act' = \"tanhshrink\"");
  }
  HfGraphOptions o;
  o.source = "bert.json";
  o.phase = HfGraphOptions::kDecode;
  ExpectError(BuildError(Config("bert-base-uncased.json"), o), ErrorCode::kInvalidArgument,
              "bert.json: phase decode");
  EXPECT_EQ(BuildError(json::array()).code(), ErrorCode::kInvalidModel);
}

TEST(HfConfigTest, LoadHfConfigReportsUnreadableFiles) {
  EXPECT_EQ(zoo::LoadHfConfig(ConfigPath("no-such.json")).status().code(), ErrorCode::kNotFound);
  const std::string dir = ::testing::TempDir();
  const std::string bad = dir + "/hf_bad_config.json";
  std::ofstream(bad) << "{\"model_type\": \"llama\",";
  auto r = zoo::LoadHfConfig(bad);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel);
  EXPECT_NE(r.status().message().find("not JSON"), std::string::npos) << r.status().message();
  std::filesystem::remove(bad);
  EXPECT_EQ(zoo::LoadHfConfig(dir).status().code(), ErrorCode::kInvalidModel);
}

// The graph's parameters carry the state_dict's names, so --freeze/--trainable patterns written
// for the PyTorch module work on it.
TEST(HfConfigTest, ParametersHaveStateDictNames) {
  const zoo::HfModel m = Build(Config("tinyllama-1.1b-chat-v1.0.json"));
  std::vector<std::string> names;
  for (const auto& t : m.model.graph().initializer()) {
    if (t.data_location() == onnx::TensorProto::EXTERNAL) names.push_back(t.name());
  }
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "model.layers.21.mlp.down_proj.weight"),
            names.end());
  EXPECT_EQ(names.back(), "lm_head.weight");
  auto model = Load(m);
  ASSERT_NE(model, nullptr);
  Options o = Train(64);
  o.dims.erase("tgt_seq");
  o.freeze = "^model\\.(embed_tokens|layers\\.([0-9]|1[0-9]))\\.";
  auto est = MakeEstimator("analytical");
  auto frozen = (*est)->Run(*model, o);
  ASSERT_TRUE(frozen.ok()) << frozen.status().ToString();
  o.freeze.clear();
  auto full = (*est)->Run(*model, o);
  ASSERT_TRUE(full.ok());
  EXPECT_LT(frozen->peak_allocated, full->peak_allocated);
}

}  // namespace
}  // namespace memest
