// Serving with vLLM (memest/serving.h) and the KV cache rule (memory/kv_cache.h): the cache's
// bytes per token and dtypes, the paged cache that takes no memory in the profile forward, the
// start-up arithmetic (hand-computed from the policy), vLLM's defaults per GPU, the errors, and
// one published vLLM start-up against the estimate (the sampler's bytes come from vLLM's source,
// not from that log: docs/serving.md).
#include "memest/serving.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "memest/memest.h"
#include "memory/context.h"

namespace memest {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

std::shared_ptr<const Model> HfGraph(const std::string& file, zoo::HfGraphOptions::Phase phase,
                                     bool last_logits = true) {
  auto config = zoo::LoadHfConfig(std::string(MEMEST_SOURCE_DIR) + "/tests/data/hf/" + file);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  zoo::HfGraphOptions o;
  o.phase = phase;
  o.logits_last_only = last_logits;
  auto built = zoo::BuildHfModel(*config, o);
  EXPECT_TRUE(built.ok()) << built.status().ToString();
  auto model = LoadModelFromBytes(zoo::SerializeModel(built->model), ".", file);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? *model : nullptr;
}

std::unique_ptr<Estimator> Symbolic() { return std::move(MakeEstimator("symbolic")).value(); }

Options Bf16On(const std::string& gpu) {
  Options o;
  o.mode = Mode::kInfer;
  o.precision = Precision::kBf16;
  o.gpu = gpu;
  return o;
}

// Llama-3-8B: 32 layers x (keys + values) x 8 kv heads x head_dim 128 x 2 bytes per token.
TEST(KvCacheTest, BytesPerTokenFollowTheCacheDtype) {
  auto m = HfGraph("meta-llama-3-8b.json", zoo::HfGraphOptions::kDecode);
  ASSERT_NE(m, nullptr);
  Options o = Bf16On("h100-80gb");
  o.batch = 2;
  o.dims = {{"seq", 1}, {"past", 100}};
  for (auto [dtype, bytes] : {std::pair{KvCacheDtype::kAuto, 2}, std::pair{KvCacheDtype::kFp8, 1},
                              std::pair{KvCacheDtype::kInt8, 1}}) {
    o.kv_cache_dtype = dtype;
    auto ctx = memory::EstimationContext::Make(*m, o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    const memory::KvCache& kv = (*ctx)->kv_cache();
    EXPECT_EQ(kv.layers(), 32);
    EXPECT_EQ(kv.values().size(), 128u);  // 64 past inputs + 64 present outputs
    EXPECT_EQ(kv.bytes_per_token(), uint64_t{32} * 2 * 8 * 128 * bytes) << ToString(dtype);
    // A past input holds batch x 100 tokens of one layer's keys.
    const int past0 = kv.values().front();
    EXPECT_EQ((*ctx)->facts().bytes(past0), uint64_t{2} * 8 * 100 * 128 * bytes);
  }
  // Under fp32 the cache follows the graph's dtype.
  o.precision = Precision::kFp32;
  o.kv_cache_dtype = KvCacheDtype::kAuto;
  auto ctx = memory::EstimationContext::Make(*m, o);
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ((*ctx)->kv_cache().bytes_per_token(), uint64_t{32} * 2 * 8 * 128 * 4);
}

TEST(KvCacheTest, APagedCacheTakesNoMemoryAndNeverAppliesSilently) {
  auto m = HfGraph("tinyllama-1.1b-chat-v1.0.json", zoo::HfGraphOptions::kDecode);
  ASSERT_NE(m, nullptr);
  Options o = Bf16On("h100-80gb");
  o.batch = 4;
  o.dims = {{"seq", 1}, {"past", 2048}};
  auto plain = Symbolic()->Run(*m, o);
  o.paged_kv_cache = true;
  auto paged = Symbolic()->Run(*m, o);
  ASSERT_TRUE(plain.ok() && paged.ok());
  // TinyLlama: 22 layers x 2 x 4 kv heads x 64 x 2 B per token; the past alone is 4 x 2048 tokens.
  // The paged estimate lacks about that much: not exactly, as the two peaks fall at different
  // moments (a plain past tensor is released at its layer's Concat, memory/kv_cache.h).
  const uint64_t past = uint64_t{4} * 2048 * 22 * 2 * 4 * 64 * 2;
  EXPECT_GE(plain->peak_allocated - paged->peak_allocated, past / 100 * 95);
  EXPECT_LE(plain->peak_allocated - paged->peak_allocated, past / 100 * 105);
  // A graph without a cache: either option is an error naming what is missing.
  auto train = HfGraph("tinyllama-1.1b-chat-v1.0.json", zoo::HfGraphOptions::kTrain, false);
  ASSERT_NE(train, nullptr);
  Options t = Bf16On("h100-80gb");
  t.batch = 1;
  t.dims = {{"seq", 8}};
  t.kv_cache_dtype = KvCacheDtype::kFp8;
  auto refused = Symbolic()->Run(*train, t);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no KV cache"), std::string::npos);
  // Training has no cache to store.
  t.mode = Mode::kTrain;
  EXPECT_FALSE(Validate(t).ok());
  // The learned backend does not model it: refused by name.
  o.paged_kv_cache = false;
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  auto learned = (*MakeEstimator("learned"))->Run(*m, o);
  ASSERT_FALSE(learned.ok());
  EXPECT_NE(learned.status().message().find("kv_cache_dtype"), std::string::npos);
}

// The start-up arithmetic of memest/serving.h, checked term by term on Llama-3-8B on an H100.
TEST(ServingTest, StartUpArithmeticFollowsVllm) {
  auto m = HfGraph("meta-llama-3-8b.json", zoo::HfGraphOptions::kPrefill);
  ASSERT_NE(m, nullptr);
  ServingOptions so;
  so.max_model_len = 16000;
  so.block_size = 128;
  auto s = EstimateServing(*Symbolic(), *m, Bf16On("h100-80gb"), so);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // vLLM's `vllm serve` defaults on an H100: 8192 batched tokens, 1024 sequences.
  EXPECT_EQ(s->max_num_batched_tokens, 8192);
  EXPECT_EQ(s->max_num_seqs, 1024);
  EXPECT_EQ(s->vocab, 128256);
  EXPECT_EQ(s->hidden, 4096);
  // Weights: 8,030,261,248 bf16 parameters (vLLM logs 14.96 GiB, issue #12330), and the graph's
  // few scalar constants.
  EXPECT_GE(s->weights, uint64_t{8030261248} * 2);
  EXPECT_LT(s->weights, uint64_t{8030261248} * 2 + 4096);
  EXPECT_NEAR(static_cast<double>(s->weights) / kGiB, 14.96, 0.005);
  const uint64_t r = 1024, n = 8192, v = 128256, h = 4096;
  const uint64_t workspace = FindGpuProfile("h100-80gb")->cublas_workspace.bytes;
  EXPECT_EQ(s->sampler_peak, 38 * r * v + 2 * n * h + 4 * r * h + workspace);
  EXPECT_EQ(s->activation_peak, std::max(s->sampler_peak, s->forward_peak));
  EXPECT_EQ(s->requested,
            static_cast<uint64_t>(std::floor(0.9 * static_cast<double>(s->total_memory))));
  EXPECT_EQ(s->kv_available,
            static_cast<int64_t>(s->requested - s->weights - s->activation_peak - s->non_torch));
  EXPECT_EQ(s->kv_bytes_per_token, uint64_t{32} * 2 * 8 * 128 * 2);
  EXPECT_EQ(s->block_bytes, 128 * s->kv_bytes_per_token);
  EXPECT_EQ(s->blocks,
            static_cast<int64_t>(static_cast<uint64_t>(s->kv_available) / s->block_bytes));
  EXPECT_EQ(s->tokens, s->blocks * 128);
  EXPECT_DOUBLE_EQ(s->max_concurrency, static_cast<double>(s->blocks) / 125.0);  // 16000 / 128
  EXPECT_TRUE(s->starts);
  // The paged forward does not hold the new keys and values: its peak over the weights stays
  // far below the 1 GiB of cache 8192 tokens would take.
  EXPECT_LT(s->forward_peak, 3 * kGiB / 2);
  // FlashInfer's sampler takes 14 bytes per element instead of 38: more cache.
  so.sampler = VllmSampler::kFlashInfer;
  auto fi = EstimateServing(*Symbolic(), *m, Bf16On("h100-80gb"), so);
  ASSERT_TRUE(fi.ok());
  EXPECT_GT(fi->kv_available, s->kv_available);
  // An fp8 cache holds twice the tokens in the same memory (up to a block).
  Options fp8 = Bf16On("h100-80gb");
  fp8.kv_cache_dtype = KvCacheDtype::kFp8;
  so.sampler = VllmSampler::kSort;
  auto f8 = EstimateServing(*Symbolic(), *m, fp8, so);
  ASSERT_TRUE(f8.ok());
  EXPECT_EQ(f8->kv_bytes_per_token * 2, s->kv_bytes_per_token);
  EXPECT_NEAR(static_cast<double>(f8->blocks), 2.0 * static_cast<double>(s->blocks), 2.0);
}

TEST(ServingTest, DefaultsFollowTheGpuAndTooLongRequestsDoNotStart) {
  auto m = HfGraph("meta-llama-3-8b.json", zoo::HfGraphOptions::kPrefill);
  ASSERT_NE(m, nullptr);
  ServingOptions so;
  so.max_model_len = 8192;
  // An A100 takes the smaller defaults even with 80 GB (vLLM PR #17885).
  auto a100 = EstimateServing(*Symbolic(), *m, Bf16On("a100-80gb"), so);
  ASSERT_TRUE(a100.ok()) << a100.status().ToString();
  EXPECT_EQ(a100->max_num_batched_tokens, 2048);
  EXPECT_EQ(a100->max_num_seqs, 256);
  // On an L4 (22 GiB) the 16 GB of weights leave a cache too small for a million tokens.
  so.max_model_len = 1 << 20;
  auto l4 = EstimateServing(*Symbolic(), *m, Bf16On("l4-24gb"), so);
  ASSERT_TRUE(l4.ok()) << l4.status().ToString();
  EXPECT_FALSE(l4->starts);
  // A GPU smaller than the weights: no cache at all.
  Options tiny = Bf16On("l4-24gb");
  tiny.custom_gpu =
      std::make_shared<const GpuProfile>(WithCapacity(*FindGpuProfile("l4-24gb"), 12 * kGiB));
  so.max_model_len = 16;
  auto none = EstimateServing(*Symbolic(), *m, tiny, so);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_LT(none->kv_available, 0);
  EXPECT_EQ(none->blocks, 0);
  EXPECT_FALSE(none->starts);
}

TEST(ServingTest, BadServingInputIsAnErrorNamingIt) {
  auto prefill = HfGraph("meta-llama-3-8b.json", zoo::HfGraphOptions::kPrefill);
  auto decode = HfGraph("meta-llama-3-8b.json", zoo::HfGraphOptions::kDecode);
  auto train = HfGraph("tinyllama-1.1b-chat-v1.0.json", zoo::HfGraphOptions::kTrain, false);
  ASSERT_TRUE(prefill && decode && train);
  ServingOptions so;
  so.max_model_len = 4096;
  auto s = EstimateServing(*Symbolic(), *decode, Bf16On("h100-80gb"), so);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("past_key_values"), std::string::npos);
  s = EstimateServing(*Symbolic(), *train, Bf16On("h100-80gb"), so);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no KV cache"), std::string::npos);
  using Change = void (*)(ServingOptions*);
  for (Change bad : {+[](ServingOptions* o) { o->gpu_memory_utilization = 0; },
                     +[](ServingOptions* o) { o->gpu_memory_utilization = 1.5; },
                     +[](ServingOptions* o) { o->max_model_len = 0; },
                     +[](ServingOptions* o) { o->block_size = 0; },
                     +[](ServingOptions* o) { o->max_num_seqs = -1; }}) {
    ServingOptions o = so;
    bad(&o);
    auto r = EstimateServing(*Symbolic(), *prefill, Bf16On("h100-80gb"), o);
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << r.status().ToString();
  }
}

// Published start-ups with `vllm serve` on an H100 80GB, block size 128, max_model_len 16000
// (llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md
// @4f4d44943c39b76b28e30dfa1fb0dfaf1ee894b5): weights, activation peak and available KV cache as
// logged (79.18 GiB x 0.9, non-torch 0.13-0.14 GiB). Llama-3-8B's graph has Llama-3.1-8B's shapes;
// vLLM's rotary table of 131,072 positions (32 MiB) is in its weights. docs/serving.md.
TEST(ServingTest, AgreesWithPublishedVllmStartUps) {
  struct Row {
    const char* config;
    double weights, activation, kv;
  };
  for (const Row& row :
       {Row{"meta-llama-3-8b.json", 14.99, 4.76, 51.38}, Row{"qwen3-0.6b.json", 1.12, 5.56, 64.45},
        Row{"qwen3-32b.json", 61.03, 5.64, 4.45}}) {
    auto m = HfGraph(row.config, zoo::HfGraphOptions::kPrefill);
    ASSERT_NE(m, nullptr);
    ServingOptions so;
    so.max_model_len = 16000;
    so.block_size = 128;
    auto s = EstimateServing(*Symbolic(), *m, Bf16On("h100-80gb"), so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const auto gib = [](auto bytes) { return static_cast<double>(bytes) / kGiB; };
    EXPECT_NEAR(gib(s->activation_peak), row.activation, 0.01) << row.config;
    EXPECT_NEAR(gib(s->weights), row.weights, 0.05) << row.config;
    EXPECT_NEAR(gib(s->kv_available), row.kv, 0.05 * row.kv) << row.config;
  }
}

}  // namespace
}  // namespace memest
