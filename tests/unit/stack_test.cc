// Stack profiles (memest/stack.h), device level (memory/device.h), the fit verdict (CheckFit) and
// the calibration (memest/calibrate.h).
#include "memest/stack.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memest/memest.h"
#include "testing/bundled.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

namespace fs = std::filesystem;

using testing::BundledModel;

Options At(int64_t batch, const StackProfile& stack) {
  Options o;
  o.batch = batch;
  o.gpu = "a100-40gb";
  o.custom_stack = std::make_shared<const StackProfile>(stack);
  return o;
}

Estimate EstimateWith(const char* backend, const Model& m, const Options& o) {
  auto est = MakeEstimator(backend);
  auto e = (*est)->Run(m, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : Estimate{};
}

TEST(StackTest, TheDefaultIsTheFirstCitedStackForAnyGpu) {
  ASSERT_GE(StackProfiles().size(), 2u);
  auto d = ResolveStack("");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, StackProfiles().front().name);
  EXPECT_EQ(d->name, "pytorch2-lazy");
  EXPECT_TRUE(d->gpu.empty());
  EXPECT_TRUE(d->lazy_loading);
  EXPECT_TRUE(d->bands.empty());  // nothing measured it: no interval
  for (const StackProfile& s : StackProfiles()) {
    EXPECT_FALSE(s.cuda_context.source.empty()) << s.name;
    EXPECT_FALSE(s.library_memory.source.empty()) << s.name;
    EXPECT_FALSE(s.conv_workspace.source.empty()) << s.name;
    EXPECT_FALSE(s.conv_workspace_pointwise.source.empty()) << s.name;
    for (const auto& [backend, b] : s.bands) EXPECT_GT(b.coverage, 0.8) << s.name << " " << backend;
  }
  EXPECT_EQ(FindStackProfile("PYTORCH2-LAZY")->name, "pytorch2-lazy");
  auto missing = FindStackProfile("nope");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("pytorch2-lazy"), std::string::npos);
}

// A stack found by name (and the default) is parsed on its own (each is also compiled in alone):
// it is the table's, field for field, as the stack file format writes every field.
TEST(StackTest, ALookupByNameGivesTheTablesStack) {
  for (const StackProfile& want : StackProfiles()) {
    auto got = FindStackProfile(want.name);
    ASSERT_TRUE(got.ok()) << want.name << ": " << got.status().ToString();
    EXPECT_EQ(StackProfileToJson(*got), StackProfileToJson(want)) << want.name;
    EXPECT_EQ(got->calibration_json, want.calibration_json) << want.name;
  }
  auto d = ResolveStack("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(StackProfileToJson(*d), StackProfileToJson(StackProfiles().front()));
}

// `text` (a stack file) without its object `key` and the comma after it; false when it has none.
bool EraseObject(std::string* text, const std::string& key) {
  const size_t at = text->find("\"" + key + "\"");
  if (at == std::string::npos) return false;
  text->erase(at, text->find('}', at) + 2 - at);
  return true;
}

TEST(StackTest, AFileRoundTrips) {
  StackProfile s = *ResolveStack("");
  s.name = "mine";
  s.gpu = "a100-40gb";
  s.library_memory = {123456789, "fitted: test rows", true};
  s.conv_workspace = {1.5, "fitted: test rows", true};
  s.conv_workspace_pointwise = {0.25, "measured: test rows", true};
  s.rnn_workspace = {9.1, "measured: test rows", true};
  s.conv_weight_gradient_extra = {8093696, "measured: test rows", true};
  s.bands["symbolic"] = {-0.1, 0.2, 0.93, 40, "held out: test"};
  s.calibration_json = R"({"jobs":40})";
  auto back = ParseStackProfile(StackProfileToJson(s), "mine.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "mine");
  EXPECT_EQ(back->gpu, "a100-40gb");
  EXPECT_EQ(back->library_memory.bytes, 123456789u);
  EXPECT_TRUE(back->library_memory.calibrated);
  EXPECT_DOUBLE_EQ(back->conv_workspace.value, 1.5);
  EXPECT_DOUBLE_EQ(back->conv_workspace_pointwise.value, 0.25);
  EXPECT_DOUBLE_EQ(back->rnn_workspace.value, 9.1);
  EXPECT_TRUE(back->rnn_workspace.calibrated);
  EXPECT_EQ(back->conv_weight_gradient_extra.bytes, 8093696u);
  EXPECT_EQ(back->conv_weight_gradient_extra.source, "measured: test rows");
  ASSERT_NE(back->band("symbolic"), nullptr);
  EXPECT_DOUBLE_EQ(back->band("symbolic")->high, 0.2);
  EXPECT_EQ(back->band("symbolic")->rows, 40);
  EXPECT_EQ(back->band("analytical"), nullptr);
  EXPECT_EQ(back->calibration_json, R"({"jobs":40})");
  EXPECT_EQ(StackProfileToJson(*back), StackProfileToJson(s));
}

TEST(StackTest, ABadFileNamesTheFieldAndNeverCrashes) {
  const std::string good = StackProfileToJson(*ResolveStack(""));
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"\"memest-stack/2\"", "\"memest-stack/9\"", "format"},
      {"\"bytes\": 446693376", "\"bytes\": -1", "cuda_context"},
      {"\"lazy_loading\": true", "\"lazy_loading\": 1", "lazy_loading"},
      {"\"bands\": {}", "\"bands\": {\"learned\": {}}", "bands"},
      {"\"value\": 0.0", "\"value\": 100.0", "conv_workspace"},
      {"\"gpu\": \"\"", "\"gpu\": \"no-such-gpu\"", "gpu"},
      {"\"name\": \"pytorch2-lazy\"", "\"name\": \"pytorch2-lazy\", \"extra\": 1", "extra"},
      {"\"calibrated\": false", "\"calibrated\": true", "calibrated"},
  };
  for (const Case& c : cases) {
    std::string text = good;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    auto r = ParseStackProfile(text, "bad.json");
    ASSERT_FALSE(r.ok()) << c.to;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << c.to;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(ParseStackProfile("{", "x").ok());
  EXPECT_FALSE(ParseStackProfile("[]", "x").ok());
  EXPECT_EQ(LoadStackProfile("/nonexistent/stack.json").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(LoadStackProfile("/").status().code(), ErrorCode::kInvalidArgument);
}

// A stack measured again on another GPU with the same results holds there without a warning;
// everywhere else an estimate says the stack was made for another GPU.
TEST(StackTest, AStackMeasuredOnAnotherGpuHoldsThereToo) {
  auto measured = FindStackProfile("h200-pytorch2.11-lazy");
  ASSERT_TRUE(measured.ok()) << measured.status().ToString();
  ASSERT_EQ(measured->also_measured_on.size(), 1u);
  EXPECT_EQ(measured->also_measured_on[0].gpu, "h100-80gb");
  EXPECT_NE(measured->also_measured_on[0].source.find("measured:"), std::string::npos);
  EXPECT_TRUE(measured->HoldsOn("h200-141gb"));
  EXPECT_TRUE(measured->HoldsOn("h100-80gb"));
  EXPECT_FALSE(measured->HoldsOn("a100-40gb"));
  EXPECT_TRUE(ResolveStack("")->HoldsOn("a100-40gb"));  // made for any GPU

  auto back = ParseStackProfile(StackProfileToJson(*measured), "again.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(StackProfileToJson(*back), StackProfileToJson(*measured));

  auto model = BundledModel("resnet18_train");
  ASSERT_NE(model, nullptr);
  auto mismatch = [&](const std::string& gpu) {
    Options o = At(8, *measured);
    o.gpu = gpu;
    for (const Diagnostic& d : EstimateWith("analytical", *model, o).diagnostics) {
      if (d.code == "stack_gpu_mismatch") return true;
    }
    return false;
  };
  EXPECT_FALSE(mismatch("h200-141gb"));
  EXPECT_FALSE(mismatch("h100-80gb"));
  EXPECT_TRUE(mismatch("a100-40gb"));

  const std::string good = StackProfileToJson(*measured);
  const std::string from = "\"gpu\": \"h100-80gb\"";
  for (const auto& [to, expect] : std::vector<std::pair<std::string, std::string>>{
           {"\"gpu\": \"no-such-gpu\"", "also_measured_on[0].gpu"},
           {"\"gpu\": \"h200-141gb\"", "the stack's own gpu"},
           {"\"gpu\": 7", "also_measured_on[0]"}}) {
    std::string text = good;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, from.size(), to);
    auto r = ParseStackProfile(text, "bad.json");
    ASSERT_FALSE(r.ok()) << to;
    EXPECT_NE(r.status().message().find(expect), std::string::npos) << r.status().message();
  }
  StackProfile any = *ResolveStack("");
  any.also_measured_on.push_back({"h100-80gb", "measured: test"});
  auto refused = ParseStackProfile(StackProfileToJson(any), "any.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("names no gpu"), std::string::npos);
  StackProfile twice = *measured;
  twice.also_measured_on.push_back(twice.also_measured_on[0]);
  auto duplicate = ParseStackProfile(StackProfileToJson(twice), "twice.json");
  ASSERT_FALSE(duplicate.ok());
  EXPECT_NE(duplicate.status().message().find("named twice"), std::string::npos);
}

TEST(StackTest, LibraryMemoryAddsToTheDevicePeakOnly) {
  auto m = BundledModel("mlp_small_train");
  ASSERT_NE(m, nullptr);
  StackProfile base = *ResolveStack("");
  StackProfile more = base;
  more.library_memory.bytes = uint64_t{1} << 30;
  for (const char* backend : {"analytical", "symbolic"}) {
    const Estimate a = EstimateWith(backend, *m, At(32, base)),
                   b = EstimateWith(backend, *m, At(32, more));
    EXPECT_EQ(b.peak_reserved, a.peak_reserved) << backend;
    EXPECT_EQ(b.peak_device, a.peak_device + (uint64_t{1} << 30)) << backend;
    EXPECT_EQ(b.breakdown.library_memory, uint64_t{1} << 30) << backend;
    EXPECT_EQ(b.breakdown.Total(), b.peak_device) << backend;
  }
}

// rnn_workspace came after memest-stack/2's first files: absent, it is 0 (no workspace).
TEST(StackTest, AFileWithoutTheRecurrentWorkspaceReadsAsNone) {
  std::string text = StackProfileToJson(*FindStackProfile("h200-pytorch2.11-lazy"));
  ASSERT_TRUE(EraseObject(&text, "rnn_workspace"));
  auto back = ParseStackProfile(text, "older.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rnn_workspace.value, 0.0);
  EXPECT_FALSE(back->rnn_workspace.calibrated);
  EXPECT_DOUBLE_EQ(back->conv_workspace.value, 1.0);
}

// conv_weight_gradient_extra came later still: absent, a weight-gradient call takes what the rule
// gives, nothing more.
TEST(StackTest, AFileWithoutTheWeightGradientExtraReadsAsNone) {
  std::string text = StackProfileToJson(*FindStackProfile("h200-pytorch2.11-lazy"));
  ASSERT_TRUE(EraseObject(&text, "conv_weight_gradient_extra"));
  auto back = ParseStackProfile(text, "older.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->conv_weight_gradient_extra.bytes, 0u);
  EXPECT_FALSE(back->conv_weight_gradient_extra.calibrated);
  EXPECT_EQ(FindStackProfile("h200-pytorch2.11-lazy")->conv_weight_gradient_extra.bytes, 8093696u);
}

// A memest-stack/1 file had one coefficient x max(input, output) for every convolution: read when
// it is 0 (the same meaning), refused otherwise (memest/stack.h).
TEST(StackTest, AnOldFileIsReadOnlyWhereItMeansTheSame) {
  std::string v1 = StackProfileToJson(*ResolveStack(""));
  auto replace = [](std::string* text, const std::string& from, const std::string& to) {
    const size_t at = text->find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text->replace(at, from.size(), to);
  };
  replace(&v1, "\"memest-stack/2\"", "\"memest-stack/1\"");
  for (const char* key :
       {"conv_workspace_pointwise", "conv_weight_gradient_extra", "rnn_workspace"}) {  // not in v1
    ASSERT_TRUE(EraseObject(&v1, key)) << key;
  }
  auto zero = ParseStackProfile(v1, "old.json");
  ASSERT_TRUE(zero.ok()) << zero.status().ToString() << "\n" << v1;
  EXPECT_EQ(zero->conv_workspace.value, 0.0);
  EXPECT_EQ(zero->conv_workspace_pointwise.value, 0.0);
  EXPECT_NE(zero->conv_workspace_pointwise.source.find("memest-stack/1"), std::string::npos);
  std::string nonzero = v1;
  replace(&nonzero, "\"value\": 0.0", "\"value\": 4.0");
  auto refused = ParseStackProfile(nonzero, "old.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("memest calibrate"), std::string::npos)
      << refused.status().message();
  // A current file must name both coefficients.
  std::string missing = v1;
  replace(&missing, "\"memest-stack/1\"", "\"memest-stack/2\"");
  EXPECT_FALSE(ParseStackProfile(missing, "new.json").ok());
}

TEST(StackTest, ConvolutionWorkspacesRaiseOnlyConvolutionModels) {
  StackProfile base = *ResolveStack("");
  StackProfile ws = base;
  ws.conv_workspace.value = 8.0;  // 8 x (input + output + weight): larger than any moment's slack
  auto cnn = BundledModel("resnet18_train");
  auto mlp = BundledModel("mlp_small_train");
  ASSERT_TRUE(cnn && mlp);
  for (const char* backend : {"analytical", "symbolic"}) {
    EXPECT_GT(EstimateWith(backend, *cnn, At(16, ws)).peak_reserved,
              EstimateWith(backend, *cnn, At(16, base)).peak_reserved)
        << backend;
    EXPECT_EQ(EstimateWith(backend, *mlp, At(16, ws)).peak_allocated,
              EstimateWith(backend, *mlp, At(16, base)).peak_allocated)
        << backend;
  }
  // Off with the library workspaces (the CPU harness runs none).
  Options cpu = At(16, ws);
  cpu.library_workspaces = false;
  Options cpu_base = At(16, base);
  cpu_base.library_workspaces = false;
  EXPECT_EQ(EstimateWith("symbolic", *cnn, cpu).peak_allocated,
            EstimateWith("symbolic", *cnn, cpu_base).peak_allocated);
}

TEST(StackTest, TheBandBecomesTheIntervalAndTheUpperBoundDecidesFit) {
  auto m = BundledModel("resnet18_train");
  ASSERT_NE(m, nullptr);
  StackProfile s = *ResolveStack("");
  const Estimate none = EstimateWith("symbolic", *m, At(16, s));
  EXPECT_FALSE(none.device_high.has_value());
  s.bands["symbolic"] = {-0.1, 0.25, 0.95, 100, "held out: test"};
  const Estimate e = EstimateWith("symbolic", *m, At(16, s));
  // A band is the measured backend's only: the analytical estimate gets none from it.
  EXPECT_FALSE(EstimateWith("analytical", *m, At(16, s)).device_high.has_value());
  ASSERT_TRUE(e.device_low && e.device_high);
  EXPECT_EQ(e.peak_device, none.peak_device);
  EXPECT_NEAR(static_cast<double>(*e.device_high), 1.25 * static_cast<double>(e.peak_device), 1.0);
  EXPECT_NEAR(static_cast<double>(*e.device_low), 0.9 * static_cast<double>(e.peak_device), 1.0);

  // A GPU between the point estimate and the upper bound: fits on the point only.
  GpuProfile gpu = *FindGpuProfile("a100-40gb");
  gpu.usable_memory.bytes = (e.peak_device + *e.device_high) / 2;
  FitPolicy upper, point;
  point.on = FitOn::kPoint;
  EXPECT_FALSE(CheckFit(e, gpu, upper).fits);
  EXPECT_TRUE(CheckFit(e, gpu, upper).on_upper);
  EXPECT_EQ(CheckFit(e, gpu, upper).judged, *e.device_high);
  EXPECT_TRUE(CheckFit(e, gpu, point).fits);
  // A margin of the whole headroom tips the point verdict too.
  point.margin_bytes = gpu.usable_memory.bytes - e.peak_device + 1;
  EXPECT_FALSE(CheckFit(e, gpu, point).fits);
  EXPECT_EQ(CheckFit(e, gpu, point).headroom, -1);
}

TEST(StackTest, MaxBatchHonoursTheUpperBound) {
  auto m = BundledModel("resnet18_train");
  ASSERT_NE(m, nullptr);
  StackProfile s = *ResolveStack("");
  s.bands["symbolic"] = {-0.05, 0.5, 0.95, 100, "held out: test"};
  auto est = MakeEstimator("symbolic");
  Options upper = At(1, s), point = At(1, s);
  point.fit.on = FitOn::kPoint;
  auto a = FindMaxBatch(**est, *m, upper, 4096);
  auto b = FindMaxBatch(**est, *m, point, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(a->batch, b->batch);
}

// Jobs whose "measurements" are memest's own estimates under a known stack: the calibration must
// find that stack's library memory and workspace coefficient again, with no held-out error.
TEST(CalibrateTest, RecoversAKnownStack) {
  StackProfile truth = *ResolveStack("");
  truth.library_memory.bytes = 700u << 20;
  truth.conv_workspace.value = 6.0;  // large enough to move the peak of the CNN jobs
  std::vector<MeasuredJob> jobs;
  for (const char* name :
       {"mlp_small_train", "resnet18_train", "resnet50_train", "gpt2_tiny_train"}) {
    auto m = BundledModel(name);
    ASSERT_NE(m, nullptr);
    for (int64_t batch : {2, 8}) {
      MeasuredJob j;
      j.id = std::string(name) + ":" + std::to_string(batch);
      j.model_name = name;
      j.model = m;
      j.options.batch = batch;
      j.measured_bytes = EstimateWith("symbolic", *m, At(batch, truth)).peak_device;
      jobs.push_back(j);
    }
  }
  CalibrationSettings s;
  s.name = "test";
  s.gpu = "a100-40gb";
  s.base = *ResolveStack("");
  s.data_source = "synthetic";
  auto r = Calibrate(jobs, s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stack.library_memory.bytes, 700u << 20);
  EXPECT_DOUBLE_EQ(r->stack.conv_workspace.value, 6.0);
  EXPECT_TRUE(r->stack.library_memory.calibrated);
  EXPECT_EQ(r->groups, 4);
  EXPECT_LT(r->fitted.median_abs, 1e-6);
  EXPECT_LT(r->fitted.p90_abs, 1e-6);
  // Held out, a CNN group's coefficient comes from the one other CNN model alone, where several
  // grid values can fit equally: close, not exact.
  EXPECT_LT(r->held_out.median_abs, 0.05);
  EXPECT_GT(r->base.median_abs, 0.05);  // the unfitted stack was off
  ASSERT_NE(r->stack.band("symbolic"), nullptr);
  ASSERT_NE(r->stack.band("analytical"), nullptr);
  EXPECT_EQ(r->stack.band("symbolic")->rows, 8);
  EXPECT_EQ(r->stack.gpu, "a100-40gb");
  // The result is a valid stack file.
  auto parsed = ParseStackProfile(StackProfileToJson(r->stack), "out.json");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
}

TEST(CalibrateTest, RefusesTooFewOrInconsistentJobs) {
  auto m = BundledModel("mlp_small_train");
  ASSERT_NE(m, nullptr);
  CalibrationSettings s;
  s.name = "test";
  s.gpu = "a100-40gb";
  s.base = *ResolveStack("");
  std::vector<MeasuredJob> jobs;
  for (int i = 0; i < 8; ++i) {
    MeasuredJob j;
    j.id = "m:" + std::to_string(i);
    j.model_name = "m" + std::to_string(i % 4);
    j.model = m;
    j.options.batch = 4;
    j.measured_bytes = 1u << 30;
    jobs.push_back(j);
  }
  std::vector<MeasuredJob> few(jobs.begin(), jobs.begin() + 5);
  auto r = Calibrate(few, s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("at least 6"), std::string::npos);
  jobs[4].measured_bytes = 2u << 30;  // m0 at batch 4 again, measured twice as much
  r = Calibrate(jobs, s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("inconsistent"), std::string::npos) << r.status().message();
  // The same model and batch under another knob is another job: timm's fused and eager attention
  // runs of one ViT differ by more than 10 % and are both kept (datasets/h200-torch211/).
  jobs[4].options.attention = Attention::kAuto;
  r = Calibrate(jobs, s);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

TEST(CalibrateTest, TheCsvReaderKeepsTheAttentionInTheJobId) {
  testing::TempDir dir;
  const std::string model =
      (fs::path(MEMEST_SOURCE_DIR) / "datasets/models/mlp_small_train.onnx").string();
  const std::string csv = dir.WriteFile("att.csv", "model,batch,measured_mib,attention\n" + model +
                                                       ",4,900,eager\n" + model + ",4,700,auto\n");
  auto jobs = ReadMeasuredJobsCsv(csv, nullptr);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_NE((*jobs)[0].id, (*jobs)[1].id);
  EXPECT_EQ((*jobs)[1].options.attention, Attention::kAuto);
}

TEST(CalibrateTest, TheCsvReaderNamesTheLineAndSkipsCensoredRows) {
  testing::TempDir dir;
  const std::string model =
      (fs::path(MEMEST_SOURCE_DIR) / "datasets/models/mlp_small_train.onnx").string();
  const std::string ok =
      dir.WriteFile("ok.csv", "model,batch,measured_mib,family,censored,optimizer\n" + model +
                                  ",4,900,mlp,0,sgd\n" + model + ",8,39500,mlp,1,\n");
  int excluded = 0;
  auto jobs = ReadMeasuredJobsCsv(ok, &excluded);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(excluded, 1);
  EXPECT_EQ((*jobs)[0].measured_bytes, 900u << 20);
  EXPECT_EQ((*jobs)[0].options.optimizer, Optimizer::kSgd);
  EXPECT_EQ((*jobs)[0].group, "mlp");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"model,measured_mib\nx,1\n", "batch"},
      {"model,batch,measured_mib\n" + model + ",0,10\n", ":2: batch"},
      {"model,batch,measured_mib\n" + model + ",4,abc\n", ":2: measured_mib"},
      {"model,batch,measured_mib\n" + model + ",4\n", ":2: 2 fields"},
      {"model,batch,measured_mib,truth\n" + model + ",4,10,tensor\n", "device"},
      {"model,batch,measured_mib,optimizer\n" + model + ",4,10,rmsprop\n", "optimizer"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string path = dir.WriteFile("bad" + std::to_string(i) + ".csv", bad[i].first);
    auto r = ReadMeasuredJobsCsv(path, nullptr);
    ASSERT_FALSE(r.ok()) << bad[i].first;
    EXPECT_NE(r.status().message().find(bad[i].second), std::string::npos) << r.status().message();
  }
  const std::string missing_model =
      dir.WriteFile("missing.csv", "model,batch,measured_mib\nno_such_model.onnx,4,10\n");
  EXPECT_EQ(ReadMeasuredJobsCsv(missing_model, nullptr).status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace memest
