// The learned backend (learned/): features on small graphs (exact values), the MLP trainer
// (convergence, monotonicity, determinism), the shipped weights (recorded predictions reproduce
// bit for bit) and the estimate policy (docs/learned.md). The contract battery
// (contract_test.cc) covers the learned backend like every other available backend.
#include "learned/learned.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "datasets/gpumemnet/gpumemnet.h"
#include "learned/features.h"
#include "learned/mlp.h"
#include "memest/memest.h"
#include "testing/bundled.h"
#include "testing/onnx_builder.h"

namespace memest::learned {
namespace {

using ::memest::testing::GraphBuilder;
using ::memest::testing::kFloat;

size_t Index(const std::string& name) {
  const std::vector<std::string> names = FeatureNames();
  const auto it = std::find(names.begin(), names.end(), name);
  EXPECT_NE(it, names.end()) << name;
  return static_cast<size_t>(it - names.begin());
}

std::shared_ptr<const Model> Load(const GraphBuilder& b) {
  auto m = LoadModelFromBytes(b.Serialize(), "/", "test.onnx");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

Options Batch(int64_t batch) {
  Options o;
  o.batch = batch;
  return o;
}

using testing::BundledModel;

TEST(LearnedFeaturesTest, SpecsAreUniqueAndOrdered) {
  const std::vector<std::string> names = FeatureNames();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(names[0], "log_symbolic_device");
  EXPECT_TRUE(FeatureSpecs()[Index("log_batch")].monotone);
  EXPECT_FALSE(FeatureSpecs()[Index("log_parameters")].monotone);
  EXPECT_FALSE(FeatureSpecs()[Index("op_other")].monotone);
}

// SmallMlp: X[N,16] -MatMul W1[16,32] -Add B1 -Relu -MatMul W2[32,4] -Add B2-> Y[N,4], batch 2.
// Non-initializer values (fp32): X 2x16, h0 h1 h2 2x32, h3 Y 2x4 -> 4 * (32 + 3*64 + 2*8) = 960 B.
// Saved for backward: the input X (128 B) + Relu's output h2 (256 B); MatMul saves X and h2
// (already counted) and the weights (counted as weights). Parameters 16*32 + 32 + 32*4 + 4 = 676.
// Expected feature values go through Log1p (the library's transform, evaluated at run time): a
// compiler folds std::log1p(2.0) with correctly rounded arithmetic, which may differ from libm's
// result in the last bit.
TEST(LearnedFeaturesTest, SmallMlpExactValues) {
  auto model = Load(testing::SmallMlp());
  ASSERT_NE(model, nullptr);
  auto f = ComputeFeatures(*model, Batch(2));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GraphFacts& facts = f->facts;
  EXPECT_EQ(facts.nodes, 5);
  EXPECT_EQ(facts.parameters, 676);
  EXPECT_EQ(facts.parameter_bytes, 2704u);
  EXPECT_EQ(facts.activation_bytes, 960u);
  EXPECT_EQ(facts.activation_bytes_per_sample, 480u);
  EXPECT_EQ(facts.saved_bytes, 384u);
  EXPECT_EQ(facts.batch, 2);
  EXPECT_EQ(facts.op_counts.at("MatMul"), 2);
  EXPECT_EQ(facts.op_counts.at("Add"), 2);
  EXPECT_EQ(facts.op_counts.at("Relu"), 1);
  EXPECT_EQ(facts.op_counts.at("Gemm"), 0);
  EXPECT_EQ(facts.op_counts.at("other"), 0);
  EXPECT_EQ(facts.activation, "relu");
  EXPECT_EQ(facts.op_types, (std::vector<std::string>{"Add", "MatMul", "Relu"}));

  const std::vector<double>& v = f->values;
  ASSERT_EQ(v.size(), FeatureSpecs().size());
  EXPECT_EQ(v[Index("log_activation_bytes")], Log1p(960.0));
  EXPECT_EQ(v[Index("log_activation_x_batch")], Log1p(960.0));
  EXPECT_EQ(v[Index("log_activation_bytes_per_sample")], Log1p(480.0));
  EXPECT_EQ(v[Index("log_saved_bytes")], Log1p(384.0));
  EXPECT_EQ(v[Index("log_batch")], Log1p(2.0));
  EXPECT_EQ(v[Index("log_nodes")], Log1p(5.0));
  EXPECT_EQ(v[Index("log_parameters")], Log1p(676.0));
  EXPECT_EQ(v[Index("log_parameter_bytes")], Log1p(2704.0));
  EXPECT_EQ(v[Index("op_MatMul")], Log1p(2.0));
  EXPECT_EQ(v[Index("op_Relu")], Log1p(1.0));
  EXPECT_EQ(v[Index("op_Conv")], 0.0);
  EXPECT_EQ(v[Index("act_relu")], 1.0);
  EXPECT_EQ(v[Index("act_none")], 0.0);
  EXPECT_EQ(v[Index("mode_train")], 1.0);
  EXPECT_EQ(v[Index("opt_momentum_buffer")], 1.0);
  EXPECT_EQ(v[Index("opt_second_moment")], 1.0);
  EXPECT_EQ(v[Index("precision_fp32")], 1.0);
  EXPECT_EQ(v[Index("precision_bf16")], 0.0);
  auto gpu = FindGpuProfile("h100-80gb");
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(v[Index("log_gpu_context")],
            Log1p(static_cast<double>(ResolveStack("")->cuda_context.bytes)));
  EXPECT_EQ(v[Index("log_gpu_workspace")], Log1p(static_cast<double>(gpu->cublas_workspace.bytes)));

  // The two backends' estimates are features, as their own Run() gives them.
  auto sym = MakeEstimator("symbolic");
  auto ana = MakeEstimator("analytical");
  ASSERT_TRUE(sym.ok() && ana.ok());
  const Estimate s = *(*sym)->Run(*model, Batch(2));
  const Estimate a = *(*ana)->Run(*model, Batch(2));
  EXPECT_EQ(v[Index("log_symbolic_device")], Log1p(static_cast<double>(s.peak_device)));
  EXPECT_EQ(v[Index("log_symbolic_allocated")], Log1p(static_cast<double>(s.peak_allocated)));
  EXPECT_EQ(v[Index("log_analytical_device")], Log1p(static_cast<double>(a.peak_device)));
  EXPECT_EQ(f->symbolic.peak_device, s.peak_device);
}

TEST(LearnedFeaturesTest, OptionsFeatures) {
  auto model = Load(testing::SmallMlp());
  ASSERT_NE(model, nullptr);
  Options infer = Batch(2);
  infer.mode = Mode::kInfer;
  auto fi = ComputeFeatures(*model, infer);
  ASSERT_TRUE(fi.ok());
  EXPECT_EQ(fi->facts.saved_bytes, 128u);  // only the input batch: nothing saved for backward
  EXPECT_EQ(fi->values[Index("mode_train")], 0.0);
  EXPECT_EQ(fi->values[Index("opt_momentum_buffer")], 0.0);

  Options sgd = Batch(2), momentum = Batch(2), adam = Batch(2), adamw = Batch(2);
  sgd.optimizer = Optimizer::kSgd;
  momentum.optimizer = Optimizer::kMomentum;
  adamw.optimizer = Optimizer::kAdamW;
  auto fs = ComputeFeatures(*model, sgd), fm = ComputeFeatures(*model, momentum),
       fa = ComputeFeatures(*model, adam), faw = ComputeFeatures(*model, adamw);
  ASSERT_TRUE(fs.ok() && fm.ok() && fa.ok() && faw.ok());
  EXPECT_EQ(fs->values[Index("opt_momentum_buffer")], 0.0);
  EXPECT_EQ(fs->values[Index("opt_second_moment")], 0.0);
  EXPECT_EQ(fm->values[Index("opt_momentum_buffer")], 1.0);
  EXPECT_EQ(fm->values[Index("opt_second_moment")], 0.0);
  EXPECT_EQ(fa->values, faw->values);  // same optimizer state

  Options bf16 = Batch(2);
  bf16.precision = Precision::kBf16;
  auto fb = ComputeFeatures(*model, bf16);
  ASSERT_TRUE(fb.ok());
  EXPECT_EQ(fb->facts.activation_bytes, 480u);  // every fp32 value runs in bf16
  EXPECT_EQ(fb->values[Index("precision_bf16")], 1.0);

  // Deterministic.
  auto again = ComputeFeatures(*model, Batch(2));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->values, ComputeFeatures(*model, Batch(2))->values);
}

TEST(LearnedFeaturesTest, ErrorsAreValues) {
  auto model = Load(testing::SmallMlp());
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(ComputeFeatures(*model, Options{}).status().code(), ErrorCode::kUnboundDim);
  Options bad = Batch(1);
  bad.gpu = "no-such-gpu";
  EXPECT_EQ(ComputeFeatures(*model, bad).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ComputeFeatures(*model, Batch(0)).status().code(), ErrorCode::kInvalidArgument);
}

// X[N,8] -> act -> Y, with the activation written the way torch.onnx exports it.
std::string ActivationOfGraph(const std::string& which) {
  GraphBuilder b(17);
  b.AddInput("X", kFloat, {"N", 8});
  if (which == "silu") {
    b.AddNode("Sigmoid", {"X"}, {"s"});
    b.AddNode("Mul", {"X", "s"}, {"Y"});
  } else if (which == "mish") {
    b.AddNode("Softplus", {"X"}, {"sp"});
    b.AddNode("Tanh", {"sp"}, {"t"});
    b.AddNode("Mul", {"X", "t"}, {"Y"});
  } else if (which == "gelu") {
    b.AddInitializer("two", {1});
    b.AddNode("Div", {"X", "two"}, {"d"});
    b.AddNode("Erf", {"d"}, {"e"});
    b.AddNode("Add", {"e", "two"}, {"a"});
    b.AddNode("Mul", {"X", "a"}, {"Y"});
  } else if (which == "sigmoid") {
    b.AddNode("Sigmoid", {"X"}, {"Y"});
  } else if (which == "two_tanh_one_relu") {
    b.AddNode("Tanh", {"X"}, {"t1"});
    b.AddNode("Relu", {"t1"}, {"r"});
    b.AddNode("Tanh", {"r"}, {"Y"});
  } else {
    b.AddNode("Identity", {"X"}, {"Y"});
  }
  b.AddOutput("Y", kFloat, {"N", 8});
  auto model = Load(b);
  if (!model) return "load failed";
  auto f = ComputeFeatures(*model, Batch(4));
  return f.ok() ? f->facts.activation : f.status().ToString();
}

TEST(LearnedFeaturesTest, ActivationKinds) {
  EXPECT_EQ(ActivationOfGraph("silu"), "silu");
  EXPECT_EQ(ActivationOfGraph("mish"), "mish");
  EXPECT_EQ(ActivationOfGraph("gelu"), "gelu");
  EXPECT_EQ(ActivationOfGraph("sigmoid"), "sigmoid");
  EXPECT_EQ(ActivationOfGraph("two_tanh_one_relu"), "tanh");
  EXPECT_EQ(ActivationOfGraph("identity"), "none");
}

TEST(LearnedMlpTest, RngIsDeterministicAndBounded) {
  Rng a(7), b(7), c(8);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    EXPECT_NE(x, c.Next());
  }
  Rng r(1);
  for (int i = 0; i < 1000; ++i) {
    const double u = r.Uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    EXPECT_LT(r.Below(7), 7u);
  }
  // SplitMix64's published first output for seed 0.
  EXPECT_EQ(Rng(0).Next(), 0xe220a8397b1dcdafULL);
}

// y = 2x + 1 on a grid of x in [0, 3], with one monotone feature: the loss falls below 1e-3.
Dataset Line(int n) {
  Dataset d;
  d.x.resize(n, 1);
  d.y.resize(n);
  for (int i = 0; i < n; ++i) {
    d.x(i, 0) = 3.0 * i / (n - 1);
    d.y(i) = 2.0 * d.x(i, 0) + 1.0;
  }
  return d;
}

TEST(LearnedMlpTest, ConvergesOnALine) {
  const Dataset d = Line(200);
  MemberSplit split;
  for (int i = 0; i < 200; ++i) (i % 5 == 0 ? split.validation : split.train).push_back(i);
  TrainConfig config;
  config.hidden = 8;
  config.max_epochs = 200;
  auto net = Train(d, {split}, split.train, {"x"}, {true}, config);
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  EXPECT_LT(MeanSquaredError(*net, 0, d, split.validation), 1e-3);
  EXPECT_NEAR(net->PredictMember(0, std::vector<double>{1.5}), 4.0, 0.05);
  // Deterministic for a seed; another seed gives other weights.
  auto again = Train(d, {split}, split.train, {"x"}, {true}, config);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->members[0].w, net->members[0].w);
  EXPECT_EQ(again->members[0].c, net->members[0].c);
  config.seed = 2;
  auto other = Train(d, {split}, split.train, {"x"}, {true}, config);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->members[0].w, net->members[0].w);
}

// The network stays non-decreasing in a monotone feature even when the data say otherwise,
// whatever the free feature is.
TEST(LearnedMlpTest, MonotoneFeatureStaysMonotone) {
  Dataset d;
  const int n = 300;
  d.x.resize(n, 2);
  d.y.resize(n);
  Rng rng(3);
  for (int i = 0; i < n; ++i) {
    d.x(i, 0) = rng.Uniform(-2.0, 2.0);  // monotone
    d.x(i, 1) = rng.Uniform(-2.0, 2.0);  // free
    d.y(i) = -d.x(i, 0) * d.x(i, 0) + std::sin(2.0 * d.x(i, 1));
  }
  MemberSplit split;
  for (int i = 0; i < n; ++i) (i % 4 == 0 ? split.validation : split.train).push_back(i);
  TrainConfig config;
  config.max_epochs = 100;
  auto net = Train(d, {split, split}, split.train, {"m", "f"}, {true, false}, config);
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  for (size_t m = 0; m < 2; ++m) {
    for (double f = -2.0; f <= 2.0; f += 0.5) {
      double previous = -INFINITY;
      for (double x = -3.0; x <= 3.0; x += 0.1) {
        const double y = net->PredictMember(m, std::vector<double>{x, f});
        EXPECT_GE(y, previous) << "member " << m << " x " << x << " f " << f;
        previous = y;
      }
    }
  }
}

TEST(LearnedMlpTest, JsonRoundTripIsExact) {
  const Dataset d = Line(50);
  MemberSplit split;
  for (int i = 0; i < 50; ++i) (i % 5 == 0 ? split.validation : split.train).push_back(i);
  TrainConfig config;
  config.max_epochs = 20;
  auto net = Train(d, {split, split}, split.train, {"x"}, {true}, config);
  ASSERT_TRUE(net.ok());
  net->margin_below = 0.125;
  net->margin_above = 0.25;
  net->known_ops = {"Gemm"};
  auto back = NetworkFromJson(nlohmann::json::parse(ToJson(*net).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (double x : {0.0, 0.7, 1.9, 3.0}) {
    EXPECT_EQ(back->Predict(std::vector<double>{x}), net->Predict(std::vector<double>{x}));
  }
  EXPECT_EQ(back->margin_below, 0.125);
  EXPECT_EQ(back->known_ops, net->known_ops);
  EXPECT_FALSE(NetworkFromJson(nlohmann::json::parse("{}")).ok());
  EXPECT_FALSE(Train(d, {}, split.train, {"x"}, {true}, config).ok());
}

TEST(LearnedWeightsTest, ParseRejectsBadWeights) {
  EXPECT_EQ(ParseWeights("").status().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(ParseWeights("{not json").status().code(), ErrorCode::kInvalidArgument);
  // Another build's feature list.
  nlohmann::json j = nlohmann::json::parse(ShippedWeightsJson());
  j["features"][0]["name"] = "renamed";
  EXPECT_EQ(ParseWeights(j.dump()).status().code(), ErrorCode::kInvalidArgument);
}

// The shipped weights reproduce the predictions memest-train recorded in the file, bit for bit,
// on GPUMemNet rows rebuilt by the importer.
TEST(LearnedWeightsTest, ShippedChecksReproduceBitForBit) {
  auto net = ParseWeights(ShippedWeightsJson());
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  const nlohmann::json j = nlohmann::json::parse(ShippedWeightsJson());
  ASSERT_EQ(j["checks"].size(), 3u);
  auto dir = gpumemnet::FindDataDir({std::string(MEMEST_SOURCE_DIR) + "/datasets/gpumemnet"});
  if (!dir.ok()) GTEST_SKIP() << "GPUMemNet CSVs not found";
  auto rows = gpumemnet::ReadAll(*dir);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  for (const nlohmann::json& check : j["checks"]) {
    const std::string path = check["model"].get<std::string>();
    const int index = std::stoi(path.substr(std::string("gpumemnet:").size()));
    auto rebuilt = gpumemnet::Rebuild((*rows)[static_cast<size_t>(index)]);
    ASSERT_TRUE(rebuilt.ok());
    auto model = LoadModelFromBytes(rebuilt->bytes, "/", path);
    ASSERT_TRUE(model.ok());
    Options o = Batch(check["batch"].get<int64_t>());
    o.gpu = check["gpu"].get<std::string>();
    auto f = ComputeFeatures(**model, o);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(net->Predict(f->values), check["member_logs"].get<std::vector<double>>()) << path;
    const Estimate e = EstimateFromFeatures(*net, *f);
    EXPECT_EQ(e.peak_device, check["peak_device"].get<uint64_t>()) << path;
    EXPECT_EQ(*e.device_low, check["device_low"].get<uint64_t>()) << path;
    EXPECT_EQ(*e.device_high, check["device_high"].get<uint64_t>()) << path;
  }
}

// Three predictions of the shipped weights, recorded here (update them when the weights are
// retrained: docs/learned.md, Reproducing). Bundled models, a100-40gb, train, Adam, fp32.
struct Recorded {
  const char* model;
  int64_t batch;
  uint64_t peak_device, device_low, device_high;
};
constexpr Recorded kRecorded[] = {
    {"mlp_small_train", 32, 1538147633, 1519558110, 1555106740},
    // The symbolic feature hands a node's input gradients on after all of them are made (the
    // autograd engine's order; symbolic/timeline.cc): resnet18's simulated reserve 723 -> 665 MB.
    // A ReLU after a batch norm runs in place (Options::inplace_relu): 756 bytes less.
    {"resnet18_train", 16, 2335760064, 2129145953, 2792152078},
    // GELU chains fused (ops/fusion.h); the analytical feature counts the loss backward as
    // memory/loss.h states it (the log-probs' gradient beside the logits'); the symbolic feature
    // carries gradients through fused chains to their inputs (the first MLP weight's gradient);
    // the analytical feature holds the logits through backward (Options::outputs_held).
    {"gpt2_tiny_train", 4, 1855028976, 1519648037, 2129879316},
};

TEST(LearnedBackendTest, ReproducesRecordedPredictions) {
  auto est = MakeEstimator("learned");
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  for (const Recorded& r : kRecorded) {
    auto model = BundledModel(r.model);
    ASSERT_NE(model, nullptr);
    Options o = Batch(r.batch);
    o.gpu = "a100-40gb";
    auto e = (*est)->Run(*model, o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->peak_device, r.peak_device) << r.model;
    EXPECT_EQ(*e->device_low, r.device_low) << r.model;
    EXPECT_EQ(*e->device_high, r.device_high) << r.model;
  }
}

TEST(LearnedBackendTest, EstimatePolicy) {
  auto est = MakeEstimator("learned");
  auto sym = MakeEstimator("symbolic");
  ASSERT_TRUE(est.ok() && sym.ok());
  EXPECT_EQ((*est)->name(), "learned");
  for (const char* name : {"mlp_small_train", "resnet18_train", "gpt2_tiny_train"}) {
    auto model = BundledModel(name);
    ASSERT_NE(model, nullptr);
    const Estimate e = *(*est)->Run(*model, Batch(8));
    const Estimate s = *(*sym)->Run(*model, Batch(8));
    EXPECT_EQ(e.backend, "learned");
    EXPECT_EQ(e.breakdown.Total(), e.peak_device) << name;
    EXPECT_GE(e.peak_device, s.peak_device) << name;
    EXPECT_EQ(e.peak_allocated, s.peak_allocated) << name;
    EXPECT_EQ(e.peak_reserved, s.peak_reserved) << name;
    EXPECT_EQ(e.breakdown.unaccounted, e.peak_device - s.peak_device) << name;
    ASSERT_TRUE(e.device_low && e.device_high);
    EXPECT_LE(*e.device_low, e.peak_device) << name;
    EXPECT_GE(*e.device_high, e.peak_device) << name;
    bool extrapolating = false;
    for (const Diagnostic& d : e.diagnostics) {
      if (d.code == "extrapolating") {
        extrapolating = true;
        EXPECT_EQ(d.severity, Severity::kWarning);
        EXPECT_NE(d.message.find("trained on MLPs only"), std::string::npos) << d.message;
      }
    }
    // The default profile (h100-80gb) is not the training GPU: always outside the domain.
    EXPECT_TRUE(extrapolating) << name;
  }
}

TEST(LearnedBackendTest, GpumemnetRowIsInDomainAndMonotoneInBatch) {
  auto dir = gpumemnet::FindDataDir({std::string(MEMEST_SOURCE_DIR) + "/datasets/gpumemnet"});
  if (!dir.ok()) GTEST_SKIP() << "GPUMemNet CSVs not found";
  auto rows = gpumemnet::ReadCsv(*dir + "/mlp_data_step2.csv", 2);
  ASSERT_TRUE(rows.ok());
  auto rebuilt = gpumemnet::Rebuild((*rows)[0]);
  ASSERT_TRUE(rebuilt.ok());
  auto model = LoadModelFromBytes(rebuilt->bytes, "/", "gpumemnet:3000");
  ASSERT_TRUE(model.ok());
  auto est = MakeEstimator("learned");
  ASSERT_TRUE(est.ok());
  uint64_t previous = 0;
  for (int64_t batch = 1; batch <= 4096; batch *= 2) {
    Options o = Batch(batch);
    o.gpu = "a100-40gb";
    auto e = (*est)->Run(**model, o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_GE(e->peak_device, previous) << "batch " << batch;
    previous = e->peak_device;
    if (batch == 512) {  // GPUMemNet's batches are 4..1023
      for (const Diagnostic& d : e->diagnostics) {
        EXPECT_NE(d.code, "extrapolating") << "batch " << batch << ": " << d.message;
      }
    }
  }
}

}  // namespace
}  // namespace memest::learned
