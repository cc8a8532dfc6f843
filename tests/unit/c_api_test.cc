// memest/memest_c.h: the C API's contract -- results equal the C++ API's, every entry point
// refuses null, freed and foreign handles and bad input with a code and a message, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "memest/memest.h"
#include "memest/memest_c.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

std::string MlpBytes() { return testing::SmallMlp().Serialize(); }

TEST(CApiTest, EstimatesLikeTheCppApi) {
  const std::string bytes = MlpBytes();
  memest_model* model = nullptr;
  memest_estimator* estimator = nullptr;
  memest_result* result = nullptr;
  ASSERT_EQ(memest_model_load_bytes(bytes.data(), bytes.size(), "mlp", &model), MEMEST_C_OK)
      << memest_c_last_error();
  ASSERT_EQ(memest_estimator_new("analytical", &estimator), MEMEST_C_OK);
  ASSERT_EQ(memest_estimate(estimator, model, R"({"batch": 32, "precision": "amp-bf16"})", &result),
            MEMEST_C_OK)
      << memest_c_last_error();
  EXPECT_STREQ(memest_c_last_error(), "");
  uint64_t peak = 0;
  ASSERT_EQ(memest_result_peak_device(result, &peak), MEMEST_C_OK);

  auto m = LoadModelFromBytes(bytes, ".", "mlp");
  ASSERT_TRUE(m.ok());
  Options o;
  o.batch = 32;
  o.precision = Precision::kAmpBf16;
  auto e = (*MakeEstimator("analytical"))->Run(**m, o);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(peak, e->peak_device);

  char* json = nullptr;
  ASSERT_EQ(memest_result_json(result, &json), MEMEST_C_OK);
  EXPECT_EQ(std::string(json), EstimateToJson(*e));
  memest_c_string_free(json);

  int fits = -1;
  int64_t headroom = 0;
  ASSERT_EQ(memest_result_fits(result, "a100-40gb", &fits, &headroom), MEMEST_C_OK);
  EXPECT_EQ(fits, 1);
  EXPECT_GT(headroom, 0);
  int64_t batch = 0;
  int evaluations = 0;
  ASSERT_EQ(memest_max_batch(estimator, model, R"({"gpu": "l4-24gb"})", &batch, &evaluations),
            MEMEST_C_OK);
  auto cpp = FindMaxBatch(**MakeEstimator("analytical"), **m, [] {
    Options l4;
    l4.gpu = "l4-24gb";
    return l4;
  }());
  ASSERT_TRUE(cpp.ok());
  EXPECT_EQ(batch, cpp->batch);
  EXPECT_EQ(evaluations, cpp->evaluations);

  EXPECT_EQ(memest_result_free(result), MEMEST_C_OK);
  EXPECT_EQ(memest_estimator_free(estimator), MEMEST_C_OK);
  EXPECT_EQ(memest_model_free(model), MEMEST_C_OK);
}

TEST(CApiTest, BadHandlesAndBadInputAreCodesWithMessages) {
  const std::string bytes = MlpBytes();
  memest_model* model = nullptr;
  memest_estimator* estimator = nullptr;
  memest_result* result = nullptr;
  // Non-ONNX bytes, a missing file, an unknown backend.
  const char junk[] = "this is not an onnx model";
  EXPECT_EQ(memest_model_load_bytes(junk, sizeof(junk), "junk", &model), MEMEST_C_INVALID_MODEL);
  EXPECT_EQ(model, nullptr);
  EXPECT_NE(std::strlen(memest_c_last_error()), 0u);
  EXPECT_EQ(memest_model_load_file("/nonexistent/x.onnx", &model), MEMEST_C_NOT_FOUND);
  EXPECT_EQ(memest_model_load_file(nullptr, &model), MEMEST_C_INVALID_ARGUMENT);
  EXPECT_EQ(memest_model_load_bytes(nullptr, 10, "x", &model), MEMEST_C_INVALID_ARGUMENT);
  EXPECT_EQ(memest_model_load_bytes(bytes.data(), bytes.size(), "mlp", nullptr),
            MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_estimator_new("no-such-backend", &estimator), MEMEST_C_NOT_FOUND);

  ASSERT_EQ(memest_model_load_bytes(bytes.data(), bytes.size(), "mlp", &model), MEMEST_C_OK);
  ASSERT_EQ(memest_estimator_new("analytical", &estimator), MEMEST_C_OK);
  // Null handles, and handles of the wrong kind.
  EXPECT_EQ(memest_estimate(nullptr, model, nullptr, &result), MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_estimate(estimator, nullptr, nullptr, &result), MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_estimate(reinterpret_cast<memest_estimator*>(model), model, nullptr, &result),
            MEMEST_C_BAD_HANDLE);
  EXPECT_NE(std::string(memest_c_last_error()).find("bad_handle"), std::string::npos);
  // Bad options: not JSON, an unknown key, a wrong type, an unbound batch, an unknown GPU.
  EXPECT_EQ(memest_estimate(estimator, model, "{", &result), MEMEST_C_INVALID_ARGUMENT);
  EXPECT_EQ(memest_estimate(estimator, model, R"({"batchsize": 4})", &result),
            MEMEST_C_INVALID_ARGUMENT);
  EXPECT_NE(std::string(memest_c_last_error()).find("batchsize"), std::string::npos);
  EXPECT_EQ(memest_estimate(estimator, model, R"({"batch": "4"})", &result),
            MEMEST_C_INVALID_ARGUMENT);
  EXPECT_EQ(memest_estimate(estimator, model, "", &result), MEMEST_C_UNBOUND_DIM);
  EXPECT_EQ(memest_estimate(estimator, model, R"({"batch": 4, "gpu": "no-such-gpu"})", &result),
            MEMEST_C_NOT_FOUND);
  EXPECT_EQ(result, nullptr);
  ASSERT_EQ(memest_estimate(estimator, model, R"({"batch": 4})", &result), MEMEST_C_OK);
  int fits = 0;
  EXPECT_EQ(memest_result_fits(result, "no-such-gpu", &fits, nullptr), MEMEST_C_NOT_FOUND);
  EXPECT_EQ(memest_result_fits(result, nullptr, nullptr, nullptr), MEMEST_C_BAD_HANDLE);
  // Freed handles.
  EXPECT_EQ(memest_result_free(result), MEMEST_C_OK);
  uint64_t peak = 0;
  EXPECT_EQ(memest_result_peak_device(result, &peak), MEMEST_C_BAD_HANDLE);
  char* json = nullptr;
  EXPECT_EQ(memest_result_json(result, &json), MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(json, nullptr);
  EXPECT_EQ(memest_result_free(result), MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_model_free(model), MEMEST_C_OK);
  EXPECT_EQ(memest_estimate(estimator, model, R"({"batch": 4})", &result), MEMEST_C_BAD_HANDLE);
  int64_t batch = 0;
  EXPECT_EQ(memest_max_batch(estimator, model, nullptr, &batch, nullptr), MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_model_free(model), MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_estimator_free(estimator), MEMEST_C_OK);
  EXPECT_EQ(memest_estimator_free(nullptr), MEMEST_C_OK);  // freeing NULL is a no-op
}

TEST(CApiTest, PackAnswersColocationAndPlacementAsJson) {
  const std::string bytes = MlpBytes();
  memest_model* model = nullptr;
  memest_estimator* estimator = nullptr;
  ASSERT_EQ(memest_model_load_bytes(bytes.data(), bytes.size(), "mlp", &model), MEMEST_C_OK);
  ASSERT_EQ(memest_estimator_new("analytical", &estimator), MEMEST_C_OK);
  const memest_model* models[] = {model, model};
  const char* options[] = {R"({"batch": 32})", R"({"batch": 64})"};
  char* json = nullptr;
  ASSERT_EQ(memest_pack(estimator, models, options, 2, "l4-24gb", 0, 0, &json), MEMEST_C_OK)
      << memest_c_last_error();
  auto m = LoadModelFromBytes(bytes, ".", "mlp");
  std::vector<PackJob> jobs(2);
  for (int i = 0; i < 2; ++i) {
    jobs[i] = {"job " + std::to_string(i), *m, *OptionsFromJson(options[i])};
  }
  const GpuProfile l4 = *FindGpuProfile("l4-24gb");
  auto c = CheckColocation(**MakeEstimator("analytical"), jobs, l4, GpuSharing::kProcesses);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(std::string(json), ColocationToJson(*c, l4, GpuSharing::kProcesses));
  memest_c_string_free(json);
  ASSERT_EQ(memest_pack(estimator, models, options, 2, "l4-24gb", 2, 1, &json), MEMEST_C_OK);
  EXPECT_NE(std::string(json).find("\"heuristic\""), std::string::npos);
  memest_c_string_free(json);
  const char* bad[] = {R"({"batch": 32})", R"({"bacth": 64})"};
  EXPECT_EQ(memest_pack(estimator, models, bad, 2, "l4-24gb", 0, 0, &json),
            MEMEST_C_INVALID_ARGUMENT);
  EXPECT_NE(std::string(memest_c_last_error()).find("job 1"), std::string::npos);
  EXPECT_EQ(memest_pack(estimator, models, options, 2, "no-such-gpu", 0, 0, &json),
            MEMEST_C_NOT_FOUND);
  EXPECT_EQ(memest_pack(estimator, nullptr, options, 2, "l4-24gb", 0, 0, &json),
            MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_pack(estimator, models, options, 2, "l4-24gb", -1, 0, &json),
            MEMEST_C_INVALID_ARGUMENT);
  EXPECT_EQ(memest_model_free(model), MEMEST_C_OK);
  EXPECT_EQ(memest_pack(estimator, models, options, 2, "l4-24gb", 0, 0, &json),
            MEMEST_C_BAD_HANDLE);
  EXPECT_EQ(memest_estimator_free(estimator), MEMEST_C_OK);
}

TEST(CApiTest, OneModelAndEstimatorServeManyThreads) {
  const std::string bytes = MlpBytes();
  memest_model* model = nullptr;
  memest_estimator* estimator = nullptr;
  ASSERT_EQ(memest_model_load_bytes(bytes.data(), bytes.size(), "mlp", &model), MEMEST_C_OK);
  ASSERT_EQ(memest_estimator_new("symbolic", &estimator), MEMEST_C_OK);
  std::vector<uint64_t> peaks(8, 0);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < peaks.size(); ++i) {
    threads.emplace_back([&, i] {
      memest_result* r = nullptr;
      const std::string options = R"({"batch": )" + std::to_string(i % 2 ? 65536 : 8) + "}";
      if (memest_estimate(estimator, model, options.c_str(), &r) == MEMEST_C_OK) {
        (void)memest_result_peak_device(r, &peaks[i]);
        (void)memest_result_free(r);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < peaks.size(); ++i) {
    EXPECT_GT(peaks[i], 0u);
    EXPECT_EQ(peaks[i], peaks[i % 2]);
  }
  EXPECT_LT(peaks[0], peaks[1]);
  EXPECT_EQ(memest_estimator_free(estimator), MEMEST_C_OK);
  EXPECT_EQ(memest_model_free(model), MEMEST_C_OK);
}

TEST(JsonTest, OptionsRoundTripAndStrictReading) {
  Options o;
  o.batch = 16;
  o.dims["seq"] = 128;
  o.precision = Precision::kAmpBf16;
  o.optimizer = Optimizer::kAdamW;
  o.attention = Attention::kAuto;
  o.freeze = "^embed";
  o.fit.margin_fraction = 0.05;
  o.allocator.max_split_size = uint64_t{64} << 20;
  o.parallel.world_size = 16;
  o.parallel.tp = 2;
  o.parallel.pp = 2;
  o.micro_batches = 4;
  o.parallel.sharding = Sharding::kZero2;
  const std::string text = OptionsToJson(o);
  auto back = OptionsFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(OptionsToJson(*back), text);
  EXPECT_EQ(back->parallel.DataParallel(), 4);
  EXPECT_EQ(*back->allocator.max_split_size, uint64_t{64} << 20);

  EXPECT_TRUE(OptionsFromJson("").ok());
  EXPECT_TRUE(OptionsFromJson(" {} ").ok());
  for (const char* bad :
       {"[]", "{\"mode\": \"training\"}", "{\"parallel\": {\"tpp\": 2}}",
        "{\"dims\": {\"seq\": \"x\"}}",
        "{\"allocator\": {\"roundup_power2_divisions\": 99999999999}}", "{\"batch\": 0}",
        "{\"fused_kernels\": 1}", "{\"batch\": 18446744073709551615}"}) {
    auto r = OptionsFromJson(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
  // A GPU given at run time: a capacity, or a whole profile (validated as the built-in table).
  auto capped = OptionsFromJson(R"({"gpu": "a100-40gb", "capacity": 5000000000})");
  ASSERT_TRUE(capped.ok()) << capped.status().ToString();
  EXPECT_EQ(ResolveGpuProfile(*capped)->usable_memory.bytes, 5000000000u);
  EXPECT_EQ(ResolveGpuProfile(*capped)->name, "a100-40gb");
  auto given = OptionsFromJson(R"({"gpu_profile": {"name": "a30-24gb", "display_name": "NVIDIA A30",
    "sm_major": 8, "sm_minor": 0, "sm_source": "cited: test",
    "total_memory": {"bytes": 25000000000, "source": "cited: test", "calibrated": false},
    "usable_memory": {"bytes": 25000000000, "source": "definition: test", "calibrated": false},
    "cublas_workspace": {"bytes": 8519680, "source": "cited: test", "calibrated": false},
    "allocator": "native"}, "capacity": 20000000000})");
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(ResolveGpuProfile(*given)->name, "a30-24gb");
  EXPECT_EQ(ResolveGpuProfile(*given)->usable_memory.bytes, 20000000000u);
  EXPECT_FALSE(OptionsFromJson(R"({"gpu_profile": {"name": "x"}})").ok());
  EXPECT_FALSE(OptionsFromJson(R"({"capacity": -1})").ok());
  EXPECT_FALSE(OptionsFromJson(R"({"gpu": "no-such-gpu", "capacity": 100})").ok());
  auto nested = OptionsFromJson(R"({"parallel": {"tpp": 2}})");
  EXPECT_NE(nested.status().message().find("parallel.tpp"), std::string::npos);
}

}  // namespace
}  // namespace memest
