// Tests of the LibTorch measurement harness (measurement/): exact byte counts where they can be
// computed, linear growth with the batch, clean failures, the measured-row schema and the
// memest-measure sweep. Built only with LibTorch (MEMEST_HAVE_MEASUREMENT); the contract battery
// (contract_test.cc) covers the `measurement` backend like every other one.
#ifdef MEMEST_HAVE_MEASUREMENT

#include "measurement/measurement.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "measurement/executor.h"
#include "measurement/plan.h"
#include "measurement/row.h"
#include "memest/memest.h"
#include "testing/bundled.h"
#include "testing/onnx_builder.h"

namespace memest::measurement {
namespace {

namespace fs = std::filesystem;
using memest::testing::GraphBuilder;
using memest::testing::kFloat;
using memest::testing::kInt64;
using memest::testing::TempDir;
using Json = nlohmann::json;

std::shared_ptr<const Model> Load(const GraphBuilder& b, const std::string& name) {
  auto m = LoadModelFromBytes(b.Serialize(), "/tmp", name);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

using testing::BundledModel;

Result<Measurement> Measure(const Model& model, Options o, int iterations = 2, bool trace = false,
                            uint64_t host_limit = 0) {
  MEMEST_ASSIGN_OR_RETURN(Plan plan, BuildPlan(model, o));
  ExecuteOptions xo;
  xo.options = o;
  xo.iterations = iterations;
  xo.device = DeviceKind::kCpu;
  xo.keep_trace = trace;
  xo.host_limit_bytes = host_limit;
  return Execute(plan, xo);
}

// X[N,16] -> Gemm(W[8,16], B[8], transB=1) -> Y[N,8]: one nn.Linear(16, 8).
GraphBuilder Linear() {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 16});
  b.AddInitializer("W", {8, 16});
  b.AddInitializer("B", {8});
  auto& gemm = b.AddNode("Gemm", {"X", "W", "B"}, {"Y"}, "fc");
  memest::testing::SetIntAttr(gemm, "transB", 1);
  b.AddOutput("Y", kFloat, {"N", 8});
  return b;
}

// X[N,3,16,16] -> Conv(8,3x3,pad 1) -> BatchNormalization -> Relu -> MaxPool(2) -> Flatten
// -> Gemm(10).
GraphBuilder SmallConvNet() {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 3, 16, 16});
  b.AddInitializer("Wc", {8, 3, 3, 3});
  b.AddInitializer("Bc", {8});
  b.AddInitializer("gamma", {8});
  b.AddInitializer("beta", {8});
  b.AddInitializer("mean", {8});
  b.AddInitializer("var", {8});
  b.AddInitializer("Wf", {10, 512});
  b.AddInitializer("Bf", {10});
  auto& conv = b.AddNode("Conv", {"X", "Wc", "Bc"}, {"c"}, "conv");
  memest::testing::SetIntsAttr(conv, "pads", {1, 1, 1, 1});
  memest::testing::SetIntsAttr(conv, "kernel_shape", {3, 3});
  auto& bn = b.AddNode("BatchNormalization", {"c", "gamma", "beta", "mean", "var"},
                       {"bn", "mean_out", "var_out"}, "bn");
  memest::testing::SetIntAttr(bn, "training_mode", 1);
  b.AddNode("Relu", {"bn"}, {"r"}, "relu");
  auto& pool = b.AddNode("MaxPool", {"r"}, {"p"}, "pool");
  memest::testing::SetIntsAttr(pool, "kernel_shape", {2, 2});
  memest::testing::SetIntsAttr(pool, "strides", {2, 2});
  b.AddNode("Flatten", {"p"}, {"f"}, "flatten");
  auto& fc = b.AddNode("Gemm", {"f", "Wf", "Bf"}, {"Y"}, "fc");
  memest::testing::SetIntAttr(fc, "transB", 1);
  b.AddOutput("Y", kFloat, {"N", 10});
  return b;
}

// The sizes of allocations made in (iteration, phase) that are still alive when the run tears
// down, i.e. freed only in the teardown phase.
std::multiset<uint64_t> SurvivingAllocations(const std::vector<TraceEvent>& trace, int iteration,
                                             TracePhase phase) {
  std::map<uint64_t, TracePhase> free_phase;
  for (const TraceEvent& e : trace) {
    if (!e.alloc) free_phase[e.alloc_seq] = e.phase;
  }
  std::multiset<uint64_t> out;
  for (const TraceEvent& e : trace) {
    if (!e.alloc || e.iteration != iteration || e.phase != phase) continue;
    auto it = free_phase.find(e.seq);
    if (it == free_phase.end() || it->second == TracePhase::kTeardown) out.insert(e.bytes);
  }
  return out;
}

TEST(MeasurementTest, LinearAdamTraceHasExactParamGradAndStateBytes) {
  auto model = Load(Linear(), "linear");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.optimizer = Optimizer::kAdam;
  auto m = Measure(*model, o, /*iterations=*/2, /*trace=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->status, "ok");
  constexpr uint64_t kW = 8 * 16 * 4, kB = 8 * 4;
  EXPECT_EQ(m->parameter_bytes, kW + kB);
  EXPECT_EQ(m->gradient_bytes, kW + kB);
  EXPECT_EQ(m->optimizer_state_bytes, 2 * (kW + kB));
  EXPECT_EQ(m->input_bytes, 4u * 16 * 4 + 4 * 8);  // X and the int64 class targets
  // Setup creates exactly the two parameters and the input; nothing of it is freed before the
  // teardown.
  EXPECT_EQ(SurvivingAllocations(m->trace, 0, TracePhase::kSetup),
            (std::multiset<uint64_t>{kW, kB, 4 * 16 * 4}));
  // Iteration 1: backward leaves the two gradients (freed by zero_grad in iteration 2), the step
  // creates exp_avg and exp_avg_sq for each parameter, alive until the end.
  EXPECT_EQ(SurvivingAllocations(m->trace, 1, TracePhase::kStep),
            (std::multiset<uint64_t>{kW, kW, kB, kB}));
  // Iteration 2: the gradients of the last backward survive; the step adds no state.
  EXPECT_EQ(SurvivingAllocations(m->trace, 2, TracePhase::kBackward),
            (std::multiset<uint64_t>{kW, kB}));
  EXPECT_TRUE(SurvivingAllocations(m->trace, 2, TracePhase::kStep).empty());
  // The attribution sums to the peak and names the state and gradients it saw.
  const PeakAttribution& a = m->at_peak;
  EXPECT_EQ(a.weights + a.gradients + a.optimizer_state + a.saved_activations + a.transient +
                a.unaccounted,
            *m->peaks.tensor);
  EXPECT_EQ(a.weights, kW + kB);
  EXPECT_EQ(a.unaccounted, 0u);
  ASSERT_EQ(m->iterations.size(), 2u);
  EXPECT_TRUE(m->iterations[1].step.ran);
  // Iteration 2's forward starts with parameters, state and the input alive.
  EXPECT_GE(*m->iterations[1].forward.peaks.tensor, 3 * (kW + kB) + 4 * 16 * 4);
}

TEST(MeasurementTest, OptimizerStateMatchesTheOptimizer) {
  auto model = Load(Linear(), "linear");
  ASSERT_NE(model, nullptr);
  constexpr uint64_t kParams = 8 * 16 * 4 + 8 * 4;
  const std::pair<Optimizer, uint64_t> cases[] = {{Optimizer::kSgd, 0},
                                                  {Optimizer::kMomentum, kParams},
                                                  {Optimizer::kAdam, 2 * kParams},
                                                  {Optimizer::kAdamW, 2 * kParams}};
  for (const auto& [opt, state] : cases) {
    Options o;
    o.batch = 4;
    o.optimizer = opt;
    o.weight_decay = 0.01;
    auto m = Measure(*model, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->optimizer_state_bytes, state) << ToString(opt);
  }
}

TEST(MeasurementTest, InferenceKeepsNoGradientsOrState) {
  auto model = Load(Linear(), "linear");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.mode = Mode::kInfer;
  auto m = Measure(*model, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->gradient_bytes, 0u);
  EXPECT_EQ(m->optimizer_state_bytes, 0u);
  EXPECT_FALSE(m->iterations[0].backward.ran);
  EXPECT_EQ(m->peak_phase, Phase::kInference);
  // Parameters + input + output, nothing else.
  EXPECT_EQ(*m->peaks.tensor, 8u * 16 * 4 + 8 * 4 + 4 * 16 * 4 + 4 * 8 * 4);
}

TEST(MeasurementTest, Bf16HalvesParameterBytes) {
  auto model = Load(Linear(), "linear");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.precision = Precision::kBf16;
  auto m = Measure(*model, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->parameter_bytes, (8u * 16 + 8) * 2);
  EXPECT_EQ(m->optimizer_state_bytes, 2 * (8u * 16 + 8) * 2);
  o.precision = Precision::kAmpFp16;  // autocast needs CUDA
  auto amp = Measure(*model, o);
  ASSERT_FALSE(amp.ok());
  EXPECT_EQ(amp.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(amp.status().message().find("amp-fp16"), std::string::npos) << amp.status().message();
}

TEST(MeasurementTest, PeakGrowsLinearlyWithBatch) {
  auto model = Load(SmallConvNet(), "convnet");
  ASSERT_NE(model, nullptr);
  std::map<int64_t, uint64_t> peak;
  for (int64_t batch : {2, 4, 8}) {
    Options o;
    o.batch = batch;
    auto m = Measure(*model, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    peak[batch] = *m->peaks.tensor;
  }
  ASSERT_GT(peak[4], peak[2]);
  const int64_t per_sample_small = static_cast<int64_t>(peak[4] - peak[2]) / 2;
  const int64_t per_sample_large = static_cast<int64_t>(peak[8] - peak[4]) / 4;
  EXPECT_NEAR(per_sample_small, per_sample_large, 4096)
      << "peaks " << peak[2] << " " << peak[4] << " " << peak[8];
  // One sample keeps at least the conv output and the BN output (8x16x16 fp32 each).
  EXPECT_GE(per_sample_large, 2 * 8 * 16 * 16 * 4);
}

TEST(MeasurementTest, UnsupportedOpFailsCleanlyNamingOpAndNode) {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 4, 4});
  b.AddInitializer("W", {4, 4});
  b.AddNode("MatMul", {"X", "W"}, {"h"}, "mm");
  b.AddNode("Det", {"h"}, {"Y"}, "the_det");
  b.AddOutput("Y", kFloat, {"N"});
  auto model = Load(b, "det");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 2;
  auto m = Measure(*model, o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(m.status().message().find("Det"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("the_det"), std::string::npos) << m.status().message();
  auto estimator = MakeEstimator("measurement");
  ASSERT_TRUE(estimator.ok()) << estimator.status().ToString();
  auto e = (*estimator)->Run(*model, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kUnsupported);
}

TEST(MeasurementTest, ShapeSubgraphsReshapeWithZeroAndMinusOne) {
  // Y = Reshape(X, [0, -1]) after Shape/Gather/Concat, then Split + Concat + Transpose.
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 4, 6});
  b.AddInitializer("W", {4, 6});
  b.AddNode("Mul", {"X", "W"}, {"xw"}, "scale");
  auto& target = b.AddNode("Constant", {}, {"target"}, "target_const");
  memest::testing::SetTensorAttr(target, "value", memest::testing::Int64Tensor({0, -1}));
  b.AddNode("Reshape", {"xw", "target"}, {"flat"}, "reshape");
  b.AddInt64Initializer("sizes", {10, 14});
  auto& split = b.AddNode("Split", {"flat", "sizes"}, {"a", "c"}, "split");
  memest::testing::SetIntAttr(split, "axis", 1);
  auto& cat = b.AddNode("Concat", {"c", "a"}, {"joined"}, "concat");
  memest::testing::SetIntAttr(cat, "axis", 1);
  b.AddNode("Transpose", {"joined"}, {"t"}, "transpose");
  b.AddNode("Transpose", {"t"}, {"Y"}, "transpose_back");
  b.AddOutput("Y", kFloat, {"N", 24});
  auto model = Load(b, "shapes");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 3;
  auto m = Measure(*model, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->status, "ok");
}

TEST(MeasurementTest, HostLimitTurnsIntoOutOfMemory) {
  auto model = BundledModel("mlp_small_train");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 8;
  auto m = Measure(*model, o, 1, false, /*host_limit=*/1 << 20);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->status, "oom");
  EXPECT_NE(m->error.find("out of memory"), std::string::npos) << m->error;
}

TEST(MeasurementTest, EveryBundledModelIsCovered) {
  for (const char* name :
       {"mlp_small_train", "resnet18_train", "gpt2_tiny_train", "resnet18_eval"}) {
    auto model = BundledModel(name);
    ASSERT_NE(model, nullptr);
    Options o;
    o.batch = 1;
    auto plan = BuildPlan(*model, o);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_TRUE(CheckSupported(*plan).ok()) << name << ": " << CheckSupported(*plan).ToString();
  }
  const std::vector<std::string> ops = MeasuredOpTypes();
  for (const char* op : {"Conv", "BatchNormalization", "Gemm", "MatMul", "LayerNormalization",
                         "Softmax", "Dropout", "Reshape", "LSTM", "GRU", "Einsum"}) {
    EXPECT_TRUE(std::find(ops.begin(), ops.end(), op) != ops.end()) << op;
  }
}

TEST(MeasurementTest, GptPlanDrawsTokenIdsBelowTheVocabulary) {
  auto model = BundledModel("gpt2_tiny_train");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 2;
  auto plan = BuildPlan(*model, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->data_inputs.size(), 1u);
  EXPECT_EQ(plan->value(plan->data_inputs[0]).index_bound, 8192);
  EXPECT_EQ(plan->parameter_bytes, model->summary().parameter_bytes);
}

TEST(MeasurementTest, RowsFollowTheSchema) {
  auto model = BundledModel("mlp_small_train");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 8;
  auto m = Measure(*model, o, 3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  RowRequest r;
  r.model_path = "datasets/models/mlp_small_train.onnx";
  auto sha = base::Sha256File(std::string(MEMEST_SOURCE_DIR) + "/" + r.model_path);
  ASSERT_TRUE(sha.ok());
  r.model_sha256 = *sha;
  r.model_name = "mlp_small_train";
  r.family = "mlp";
  r.options = o;
  r.iterations = 3;
  r.tool = "memest-measure test";
  const std::string line = MakeRow(r, &*m, "", m->device);
  ASSERT_TRUE(ValidateRow(line).ok()) << ValidateRow(line).ToString() << "\n" << line;
  Json j = Json::parse(line);
  EXPECT_EQ(j["schema"], "memest.measurement/1");
  EXPECT_EQ(j["status"], "ok");
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["model"]["family"], "mlp");
  EXPECT_EQ(j["config"]["batch"], 8);
  EXPECT_EQ(j["config"]["optimizer"], "adam");
  EXPECT_EQ(j["config"]["iterations"], 3);
  EXPECT_EQ(j["device"]["kind"], "cpu");
  EXPECT_TRUE(j["device"]["total_memory"].is_null());
  EXPECT_TRUE(j["peaks"]["allocated"].is_null());  // not measured on the CPU
  EXPECT_EQ(j["peaks"]["tensor"], *m->peaks.tensor);
  EXPECT_TRUE(j["context_bytes"].is_null());
  ASSERT_EQ(j["iterations"].size(), 2u);  // first and steady state
  EXPECT_EQ(j["iterations"][0]["iteration"], 1);
  EXPECT_EQ(j["iterations"][1]["iteration"], 3);
  for (const char* phase : {"forward", "backward", "step"}) {
    EXPECT_TRUE(j["phases"][phase]["tensor"].is_number_unsigned()) << phase;
  }
  EXPECT_TRUE(j["used_for"].is_array());
  EXPECT_EQ(j["id"], RowId(r));
  // The id is the resume key: it changes with the configuration, not with the run.
  RowRequest other = r;
  other.options.batch = 16;
  EXPECT_NE(RowId(other), RowId(r));
  other = r;
  other.seed = 7;
  EXPECT_EQ(RowId(other), RowId(r));
  // An error row validates too, with null peaks.
  const std::string error = MakeRow(r, nullptr, "unsupported: op Det", m->device);
  ASSERT_TRUE(ValidateRow(error).ok()) << ValidateRow(error).ToString();
  EXPECT_TRUE(Json::parse(error)["peaks"]["tensor"].is_null());
  // And a broken one does not.
  Json broken = j;
  broken.erase("peaks");
  EXPECT_FALSE(ValidateRow(broken.dump()).ok());
  broken = j;
  broken["status"] = "fine";
  EXPECT_FALSE(ValidateRow(broken.dump()).ok());
}

TEST(MeasurementTest, BackendIsAvailableAndReportsTheMeasuredPeak) {
  bool listed = false;
  for (const BackendInfo& b : ListBackends()) {
    if (b.name == "measurement") listed = b.available;
  }
  EXPECT_TRUE(listed);
  auto estimator = MakeEstimator("measurement");
  ASSERT_TRUE(estimator.ok()) << estimator.status().ToString();
  auto model = BundledModel("mlp_small_train");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 8;
  auto e = (*estimator)->Run(*model, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->backend, "measurement");
  EXPECT_EQ(e->breakdown.Total(), e->peak_device);
  EXPECT_EQ(e->breakdown.weights, 535818u * 4);
  EXPECT_EQ(e->breakdown.optimizer_state, 2 * 535818u * 4);  // Adam, peak in the step
  EXPECT_EQ(e->peak_phase, Phase::kOptimizerStep);
  bool cpu_note = false;
  for (const Diagnostic& d : e->diagnostics) cpu_note = cpu_note || d.code == "cpu_measurement";
  EXPECT_TRUE(cpu_note);
}

// The backend runs the optimizer implementation asked for and rejects, naming the option, what
// the harness cannot run (issue 12: it used to measure the CPU default and say nothing).
TEST(MeasurementTest, BackendHonoursOrRejectsEachOptimizerOption) {
  auto estimator = MakeEstimator("measurement");
  ASSERT_TRUE(estimator.ok()) << estimator.status().ToString();
  auto model = BundledModel("mlp_small_train");
  ASSERT_NE(model, nullptr);
  Options foreach_o, single_o;
  foreach_o.batch = single_o.batch = 8;
  foreach_o.optimizer_impl = memest::OptimizerImpl::kForeach;
  single_o.optimizer_impl = memest::OptimizerImpl::kSingleTensor;
  auto foreach_e = (*estimator)->Run(*model, foreach_o);
  auto single_e = (*estimator)->Run(*model, single_o);
  ASSERT_TRUE(foreach_e.ok() && single_e.ok())
      << foreach_e.status().ToString() << single_e.status().ToString();
  // Foreach Adam allocates the sqrt of every exp_avg_sq at once; single-tensor, per parameter,
  // its sqrt and quotient: different step temporaries, so different peaks.
  EXPECT_NE(foreach_e->peak_device, single_e->peak_device);

  Options fused = foreach_o;
  fused.optimizer_impl = memest::OptimizerImpl::kFused;
  auto f = (*estimator)->Run(*model, fused);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("optimizer_impl"), std::string::npos) << f.status().message();

  Options accumulate = foreach_o;
  accumulate.micro_batches = 2;
  auto a = (*estimator)->Run(*model, accumulate);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("micro_batches"), std::string::npos) << a.status().message();
}

// --- memest-measure (next to the memest CLI in the build tree; skipped when not built) ----------

std::string MeasureTool() {
  return (fs::path(MEMEST_CLI_PATH).parent_path() / "memest-measure").string();
}

// `env`: assignments put before the command ("NAME=value ...").
int RunTool(const std::string& args, const TempDir& dir, std::string* out,
            const std::string& env = "") {
  const std::string out_file = dir.path() + "/stdout.txt";
  const std::string cmd = (env.empty() ? "" : env + " ") + MeasureTool() + " " + args + " > " +
                          out_file + " 2> " + dir.path() + "/stderr.txt";
  const int status = std::system(cmd.c_str());
  *out = memest::testing::ReadFileBytes(out_file);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) lines.push_back(l);
  }
  return lines;
}

TEST(MeasureToolTest, SingleRunPrintsOneValidRow) {
  if (!fs::exists(MeasureTool())) GTEST_SKIP() << "memest-measure not built";
  TempDir dir;
  std::string out;
  const int rc = RunTool(std::string(MEMEST_SOURCE_DIR) +
                             "/datasets/models/mlp_small_train.onnx --batch 8 --device cpu",
                         dir, &out);
  EXPECT_EQ(rc, 0) << memest::testing::ReadFileBytes(dir.path() + "/stderr.txt");
  const auto lines = Lines(out);
  ASSERT_EQ(lines.size(), 1u) << out;
  EXPECT_TRUE(ValidateRow(lines[0]).ok()) << ValidateRow(lines[0]).ToString();
  EXPECT_EQ(Json::parse(lines[0])["model"]["path"], "datasets/models/mlp_small_train.onnx");
}

TEST(MeasureToolTest, SweepWritesOneRowPerConfigurationAndResumes) {
  if (!fs::exists(MeasureTool())) GTEST_SKIP() << "memest-measure not built";
  TempDir dir;
  GraphBuilder det(17);
  det.AddInput("X", kFloat, {"N", 4, 4});
  det.AddNode("Det", {"X"}, {"Y"}, "det");
  det.AddOutput("Y", kFloat, {"N"});
  dir.WriteModel("models/det.onnx", det.model());
  const std::string mlp = std::string(MEMEST_SOURCE_DIR) + "/datasets/models/mlp_small_train.onnx";
  dir.WriteFile("manifest.jsonl",
                "{\"model\": \"" + mlp +
                    "\", \"family\": \"mlp\", \"batch\": 2, \"iterations\": 1}\n"
                    "{\"model\": \"" +
                    mlp +
                    "\", \"family\": \"mlp\", \"batch\": 4, \"mode\": \"infer\"}\n"
                    "\n"
                    "{\"model\": \"models/det.onnx\", \"batch\": 2, \"optimizer\": \"sgd\"}\n");
  const std::string args =
      "--sweep " + dir.path() + "/manifest.jsonl --out " + dir.path() + "/rows.jsonl --device cpu";
  std::string out;
  ASSERT_EQ(RunTool(args, dir, &out), 0)
      << memest::testing::ReadFileBytes(dir.path() + "/stderr.txt");
  auto rows = Lines(memest::testing::ReadFileBytes(dir.path() + "/rows.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  std::vector<std::string> statuses;
  for (const std::string& row : rows) {
    EXPECT_TRUE(ValidateRow(row).ok()) << ValidateRow(row).ToString() << "\n" << row;
    statuses.push_back(Json::parse(row)["status"]);
  }
  EXPECT_EQ(statuses, (std::vector<std::string>{"ok", "ok", "error"}));
  EXPECT_NE(Json::parse(rows[2])["error"].get<std::string>().find("Det"), std::string::npos);
  EXPECT_NE(memest::testing::ReadFileBytes(dir.path() + "/stderr.txt").find("[3/3]"),
            std::string::npos);
  // Resuming runs nothing new; --retry-errors runs the failed row again.
  ASSERT_EQ(RunTool(args, dir, &out), 0);
  EXPECT_EQ(Lines(memest::testing::ReadFileBytes(dir.path() + "/rows.jsonl")).size(), 3u);
  ASSERT_EQ(RunTool(args + " --retry-errors", dir, &out), 0);
  EXPECT_EQ(Lines(memest::testing::ReadFileBytes(dir.path() + "/rows.jsonl")).size(), 4u);
}

// A child that dies by a signal writes no row; the error row keeps the last lines of its stderr
// (an uncaught exception's what()), the only account of why. The shim (tests/shims/) makes the
// child abort the way the GPU runs' children did.
TEST(MeasureToolTest, AChildKilledBySignalLeavesItsStderrInTheRow) {
#if !defined(MEMEST_ABORT_CHILD_SHIM) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "no shim (or ASan, which must come first among preloaded libraries)";
#else
  if (!fs::exists(MeasureTool())) GTEST_SKIP() << "memest-measure not built";
  TempDir dir;
  const std::string mlp = std::string(MEMEST_SOURCE_DIR) + "/datasets/models/mlp_small_train.onnx";
  dir.WriteFile("manifest.jsonl",
                "{\"model\": \"" + mlp + "\", \"batch\": 2, \"iterations\": 1}\n");
  std::string out;
  ASSERT_EQ(RunTool("--sweep " + dir.path() + "/manifest.jsonl --out " + dir.path() +
                        "/rows.jsonl --device cpu",
                    dir, &out,
                    std::string("MEMEST_TEST_ABORT_CHILD=1 LD_PRELOAD=") + MEMEST_ABORT_CHILD_SHIM),
            0)
      << memest::testing::ReadFileBytes(dir.path() + "/stderr.txt");
  const auto rows = Lines(memest::testing::ReadFileBytes(dir.path() + "/rows.jsonl"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(ValidateRow(rows[0]).ok()) << ValidateRow(rows[0]).ToString();
  const Json row = Json::parse(rows[0]);
  EXPECT_EQ(row["status"], "error");
  EXPECT_EQ(row["error"].get<std::string>(),
            "the run was killed by signal 6 (Aborted); its stderr ended: terminate called after "
            "throwing an instance of 'c10::Error' |   what():  shim abort");
#endif
}

// --shard I/N splits a manifest by row id, the same way on every run, into N disjoint parts that
// cover it; --merge joins the shards' files (each id once, manifest order, what is missing
// listed); a partial last line is cut off before a sweep appends; a locked output is refused.
TEST(MeasureToolTest, ShardsSplitTheManifestAndMergeJoinsThem) {
  if (!fs::exists(MeasureTool())) GTEST_SKIP() << "memest-measure not built";
  TempDir dir;
  const std::string mlp = std::string(MEMEST_SOURCE_DIR) + "/datasets/models/mlp_small_train.onnx";
  std::string manifest;
  for (int b = 1; b <= 5; ++b) {
    manifest +=
        "{\"model\": \"" + mlp + "\", \"batch\": " + std::to_string(b) + ", \"iterations\": 1}\n";
  }
  dir.WriteFile("manifest.jsonl", manifest);
  const std::string sweep = "--sweep " + dir.path() + "/manifest.jsonl --device cpu --no-isolate";
  auto shard_file = [&](int i) { return dir.path() + "/shard-" + std::to_string(i) + ".jsonl"; };
  auto ids_of = [](const std::vector<std::string>& lines) {
    std::vector<std::string> ids;
    for (const std::string& l : lines) ids.push_back(Json::parse(l)["id"]);
    return ids;
  };
  std::string out;
  // The split: disjoint, complete, and the same twice.
  std::set<std::string> all;
  size_t listed = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string args =
        sweep + " --shard " + std::to_string(i) + "/3 --out " + shard_file(i) + " --dry-run";
    ASSERT_EQ(RunTool(args, dir, &out), 0)
        << memest::testing::ReadFileBytes(dir.path() + "/stderr.txt");
    const auto ids = ids_of(Lines(out));
    std::string again;
    ASSERT_EQ(RunTool(args, dir, &again), 0);
    EXPECT_EQ(out, again);
    for (const std::string& l : Lines(out)) {
      EXPECT_TRUE(Json::parse(l)["row"].is_null()) << l;
      EXPECT_EQ(Json::parse(l)["shard"], std::to_string(i) + "/3");
    }
    listed += ids.size();
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(listed, 5u);
  EXPECT_EQ(all.size(), 5u);
  EXPECT_FALSE(fs::exists(shard_file(0)));  // a dry run writes nothing
  // Run shards 0 and 1; a merge with the manifest lists what shard 2 has not done, exit 1.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(
        RunTool(sweep + " --shard " + std::to_string(i) + "/3 --out " + shard_file(i), dir, &out),
        0)
        << memest::testing::ReadFileBytes(dir.path() + "/stderr.txt");
    for (const std::string& row : Lines(memest::testing::ReadFileBytes(shard_file(i)))) {
      EXPECT_EQ(Json::parse(row)["provenance"]["shard"], std::to_string(i) + "/3");
    }
  }
  const std::string merged = dir.path() + "/rows.jsonl";
  const std::string merge = "--merge " + shard_file(0) + " " + shard_file(1) + " --out " + merged +
                            " --sweep " + dir.path() + "/manifest.jsonl";
  const size_t done = Lines(memest::testing::ReadFileBytes(shard_file(0))).size() +
                      Lines(memest::testing::ReadFileBytes(shard_file(1))).size();
  EXPECT_EQ(RunTool(merge, dir, &out), done == 5 ? 0 : 1);
  EXPECT_EQ(Lines(memest::testing::ReadFileBytes(merged)).size(), done);
  if (done < 5) {
    EXPECT_NE(memest::testing::ReadFileBytes(dir.path() + "/stderr.txt").find("have no row"),
              std::string::npos);
  }
  // Shard 2 runs; shard 1's file gets a copy of a shard-0 row (a duplicate) and a partial line.
  ASSERT_EQ(RunTool(sweep + " --shard 2/3 --out " + shard_file(2), dir, &out), 0);
  const auto rows0 = Lines(memest::testing::ReadFileBytes(shard_file(0)));
  ASSERT_FALSE(rows0.empty());
  {
    std::ofstream f(shard_file(1), std::ios::app);
    f << rows0[0] << '\n' << rows0[0].substr(0, 40);
  }
  ASSERT_EQ(RunTool("--merge " + shard_file(0) + " " + shard_file(1) + " " + shard_file(2) +
                        " --out " + merged + " --sweep " + dir.path() + "/manifest.jsonl",
                    dir, &out),
            0)
      << memest::testing::ReadFileBytes(dir.path() + "/stderr.txt");
  const auto rows = Lines(memest::testing::ReadFileBytes(merged));
  ASSERT_EQ(rows.size(), 5u);
  std::vector<int64_t> batches;
  for (const std::string& row : rows) batches.push_back(Json::parse(row)["config"]["batch"]);
  EXPECT_EQ(batches, (std::vector<int64_t>{1, 2, 3, 4, 5}));  // manifest order
  const std::string merge_err = memest::testing::ReadFileBytes(dir.path() + "/stderr.txt");
  EXPECT_NE(merge_err.find("1 duplicate ids dropped"), std::string::npos) << merge_err;
  EXPECT_NE(merge_err.find("1 lines skipped"), std::string::npos) << merge_err;
  // Resuming shard 1 cuts the partial line off and runs nothing.
  ASSERT_EQ(RunTool(sweep + " --shard 1/3 --out " + shard_file(1), dir, &out), 0);
  const std::string text = memest::testing::ReadFileBytes(shard_file(1));
  EXPECT_EQ(text.back(), '\n');
  for (const std::string& row : Lines(text)) EXPECT_TRUE(ValidateRow(row).ok()) << row;
  EXPECT_NE(memest::testing::ReadFileBytes(dir.path() + "/stderr.txt")
                .find("cut off a partial last line (40 bytes)"),
            std::string::npos);
  // A second sweep on a file another one holds stops.
  EXPECT_EQ(RunTool("--help > /dev/null; flock " + shard_file(1) + " " + MeasureTool() + " " +
                        sweep + " --shard 1/3 --out " + shard_file(1),
                    dir, &out),
            4);
  EXPECT_NE(memest::testing::ReadFileBytes(dir.path() + "/stderr.txt")
                .find("another memest-measure is writing"),
            std::string::npos);
  // Usage errors.
  EXPECT_EQ(RunTool(sweep + " --shard 3/3 --out " + shard_file(0), dir, &out), 2);
  EXPECT_EQ(RunTool(sweep + " --shard x --out " + shard_file(0), dir, &out), 2);
  EXPECT_EQ(RunTool("--shard 0/2 --out " + shard_file(0), dir, &out), 2);
  EXPECT_EQ(RunTool("--merge " + shard_file(0), dir, &out), 2);
}

// Activation checkpointing in the harness (a reentrant checkpoint as a LibTorch custom function):
// every parameter still gets its gradient, the measured peak drops, and the symbolic backend's
// simulation of the same cuts (core/checkpoint.h) matches the measured tensor peak.
TEST(MeasurementTest, CheckpointingKeepsGradientsAndLowersThePeak) {
  auto model = BundledModel("gpt2_tiny_train");
  ASSERT_NE(model, nullptr);
  Options o;
  o.batch = 4;
  o.optimizer_impl = memest::OptimizerImpl::kSingleTensor;  // what the harness runs on the CPU
  o.library_workspaces = false;
  o.fused_kernels = false;  // the harness runs the chains op by op (ops/fusion.h)
  o.inplace_relu = false;   // and each ReLU out of place
  auto off = Measure(*model, o);
  o.checkpoint_segments = 4;
  auto on = Measure(*model, o);
  ASSERT_TRUE(off.ok() && on.ok()) << off.status().ToString() << on.status().ToString();
  EXPECT_EQ(on->gradient_bytes, on->parameter_bytes);
  EXPECT_EQ(on->gradient_bytes, off->gradient_bytes);
  EXPECT_LT(*on->peaks.tensor, *off->peaks.tensor);
  auto symbolic = MakeEstimator("symbolic");
  ASSERT_TRUE(symbolic.ok());
  auto e = (*symbolic)->Run(*model, o);
  ASSERT_TRUE(e.ok());
  const double error =
      (static_cast<double>(e->peak_allocated) - static_cast<double>(*on->peaks.tensor)) /
      static_cast<double>(*on->peaks.tensor);
  EXPECT_LE(std::abs(error), 0.02)
      << "symbolic " << e->peak_allocated << " measured " << *on->peaks.tensor;
}

}  // namespace
}  // namespace memest::measurement

#endif  // MEMEST_HAVE_MEASUREMENT
