// Model-family generator (datasets/zoo): every family, a few seeds each, at both scales, must
// pass ONNX's checker, strict shape inference and the full-shape check (zoo::Validate), load in
// memest and estimate at batch 4 without an unknown_shapes diagnostic; generation must be
// deterministic (same seed -> identical bytes) and follow the weightless / dynamic-batch rules.
#include "datasets/zoo/zoo.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "datasets/zoo/families.h"
#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/layers.h"
#include "memest/memest.h"

namespace memest::zoo {
namespace {

constexpr int kModelsPerFamily = 4;  // indices 0..3
const uint64_t kSeeds[] = {1, 7, 2026};

std::string Describe(const GeneratedModel& g) { return g.name + " " + g.config.dump(); }

void CheckOne(const GeneratedModel& g, const Estimator& analytical) {
  SCOPED_TRACE(Describe(g));
  Status valid = Validate(g.model, 4);
  EXPECT_TRUE(valid.ok()) << valid.ToString();

  auto model = LoadModelFromBytes(g.bytes, "/nonexistent", g.name);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const ModelSummary& s = (*model)->summary();
  EXPECT_EQ(s.producer, "memest-zoo 0.1.0");
  EXPECT_EQ(s.ir_version, 8);
  EXPECT_EQ(s.opsets.at(""), 17);
  ASSERT_EQ(s.data_inputs.size(), 1u);
  ASSERT_FALSE(s.data_inputs[0].dims.empty());
  EXPECT_EQ(s.data_inputs[0].dims[0].param, "batch");
  for (size_t i = 1; i < s.data_inputs[0].dims.size(); ++i) {
    EXPECT_GE(s.data_inputs[0].dims[i].value, 1) << "dim " << i << " must be concrete";
  }
  EXPECT_EQ(s.symbolic_dims, std::vector<std::string>{"batch"});
  // memest counts what PyTorch trains (PReLU slopes included): the generator's count.
  EXPECT_EQ(s.parameter_count, g.parameters);

  Options o;
  o.batch = 4;
  auto est = analytical.Run(**model, o);
  ASSERT_TRUE(est.ok()) << est.status().ToString();
  EXPECT_GT(est->peak_device, 0u);
  for (const auto& d : est->diagnostics) {
    EXPECT_NE(d.code, "unknown_shapes") << d.message;
    EXPECT_NE(d.code, "eval_mode_export") << d.message;
    EXPECT_NE(d.code, "shape_inference") << d.message;
  }
}

TEST(ZooTest, EveryFamilyChecksInfersAndEstimates) {
  auto analytical = MakeEstimator("analytical");
  ASSERT_TRUE(analytical.ok()) << analytical.status().ToString();
  std::set<std::string> archs;
  int models = 0;
  for (Scale scale : {Scale::kFull, Scale::kTiny}) {
    for (Family f : AllFamilies()) {
      for (uint64_t seed : kSeeds) {
        for (int i = 0; i < kModelsPerFamily; ++i) {
          GeneratedModel g = Generate(f, i, seed, scale);
          archs.insert(std::string(FamilyName(f)) + "/" + g.arch);
          CheckOne(g, **analytical);
          ++models;
        }
      }
    }
  }
  EXPECT_EQ(models, 2 * 4 * 3 * kModelsPerFamily);
  std::cout << "[ zoo ] " << models << " models checked; variants seen:";
  for (const auto& a : archs) std::cout << " " << a;
  std::cout << "\n";
}

// Every architecture variant of every family, built from a fixed configuration (the sampled
// test above may miss one by chance).
TEST(ZooTest, EveryVariantValidates) {
  auto analytical = MakeEstimator("analytical");
  ASSERT_TRUE(analytical.ok());
  auto check = [&](BuiltModel b, const std::string& what) {
    GeneratedModel g;
    g.name = what;
    g.model = std::move(b.model);
    g.parameters = b.parameters;
    g.bytes = SerializeModel(g.model);
    g.config = what;
    CheckOne(g, **analytical);
  };
  for (const std::string arch : {"pyramid", "uniform", "bottleneck", "gradual", "diamond"}) {
    for (const std::string& act : ActivationNames()) {
      MlpConfig c;
      c.arch = arch;
      c.input = 37;
      c.output = 5;
      c.hidden = {64, 32, 16};
      c.activation = act;
      c.batchnorm = act.size() % 2 == 0;
      c.dropout_percent = act.size() % 3 == 0 ? 0 : 25;
      check(BuildMlp(c, "mlp_" + arch + "_" + act), "mlp " + arch + " " + act);
    }
  }
  Rng rng(3);
  for (const std::string arch : {"vgg", "resnet", "mobilenet", "efficientnet"}) {
    // Draw until the variant comes up, at tiny scale (fast).
    for (int tries = 0; tries < 200; ++tries) {
      CnnConfig c = SampleCnn(rng, Scale::kTiny);
      if (c.arch != arch) continue;
      check(BuildCnn(c, "cnn_" + arch), "cnn " + arch);
      break;
    }
  }
  for (const std::string arch : {"encoder", "decoder"}) {
    for (const std::string norm : {"pre", "post"}) {
      TransformerConfig c;
      c.arch = arch;
      c.norm = norm;
      c.layers = 2;
      c.d_model = 32;
      c.heads = 4;
      c.ffn = 64;
      c.seq = 16;
      c.vocab = 50;
      c.gelu = norm == "pre" ? "gelu" : "gelu_tanh";
      c.tied = norm == "pre";
      check(BuildTransformer(c, "tf_" + arch + "_" + norm), "transformer " + arch + " " + norm);
    }
  }
  for (const std::string arch : {"lstm", "gru"}) {
    for (bool bidi : {false, true}) {
      RnnConfig c;
      c.arch = arch;
      c.layers = 2;
      c.hidden = 24;
      c.bidirectional = bidi;
      c.seq = 8;
      c.vocab = bidi ? 0 : 100;
      c.input = 16;
      c.dropout_percent = 20;
      check(BuildRnn(c, "rnn_" + arch), "rnn " + arch + (bidi ? " bidirectional" : ""));
    }
  }
}

TEST(ZooTest, SameSeedGivesIdenticalBytes) {
  for (Scale scale : {Scale::kFull, Scale::kTiny}) {
    for (Family f : AllFamilies()) {
      for (int i = 0; i < 3; ++i) {
        const GeneratedModel a = Generate(f, i, 42, scale);
        const GeneratedModel b = Generate(f, i, 42, scale);
        EXPECT_EQ(a.bytes, b.bytes) << a.name;
        EXPECT_EQ(a.sha256, b.sha256);
        EXPECT_EQ(a.sha256, base::Sha256Hex(a.bytes));
        EXPECT_EQ(a.config, b.config);
      }
    }
  }
  // Different seeds and indices give different models.
  EXPECT_NE(Generate(Family::kCnn, 0, 1).sha256, Generate(Family::kCnn, 0, 2).sha256);
  EXPECT_NE(Generate(Family::kCnn, 0, 1).sha256, Generate(Family::kCnn, 1, 1).sha256);
}

// Pins the sampled configuration of a few models: a change here means every published seed
// now names different models (bump kZooVersion and regenerate the manifests).
TEST(ZooTest, SamplingIsPinned) {
  EXPECT_EQ(Generate(Family::kMlp, 0, 1).config.dump(),
            R"({"activation":"sigmoid","arch":"diamond","batchnorm":true,"dropout_percent":35,)"
            R"("hidden":[3886,7772,3886],"input":25,"output":3886})");
  EXPECT_EQ(Generate(Family::kMlp, 0, 1).sha256,
            "b6741778bdb2f79016f50782fcd5df1072e6da39c60da3a4d8f05b415e9e9f45");
}

TEST(ZooTest, WeightsAreExternalAndNeverInline) {
  const GeneratedModel g = Generate(Family::kTransformer, 0, 1);
  int external = 0;
  for (const auto& t : g.model.graph().initializer()) {
    if (t.data_type() == kFloat && t.dims_size() > 0) {
      EXPECT_EQ(t.data_location(), onnx::TensorProto::EXTERNAL) << t.name();
      EXPECT_TRUE(t.raw_data().empty());
      ASSERT_EQ(t.external_data_size(), 3);
      EXPECT_EQ(t.external_data(0).key(), "location");
      EXPECT_EQ(t.external_data(0).value(), g.name + ".weights");
      EXPECT_EQ(t.external_data(1).key(), "offset");
      EXPECT_EQ(t.external_data(2).key(), "length");
      ++external;
    }
  }
  EXPECT_GT(external, 0);
  // Weights are never written: the model is a few KB even with ~100M parameters.
  EXPECT_LT(g.bytes.size(), 200u * 1024u);
}

TEST(ZooTest, IndexEntryHasTheFields) {
  const GeneratedModel g = Generate(Family::kRnn, 2, 5);
  const auto j = IndexEntry(g);
  for (const char* key :
       {"file", "family", "arch", "scale", "config", "params", "sha256", "bytes", "input"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["file"], "rnn_s5_0002.onnx");
  EXPECT_EQ(j["input"]["dims"][0], "batch");
}

TEST(ZooTest, RngMappingsArePlatformIndependent) {
  // std::mt19937_64's output is fixed by the standard; the mappings are integer-only.
  Rng rng(5489);
  EXPECT_EQ(rng.Next(), 14514284786278117030ull);
  Rng a(9), b(9);
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = a.LogInt(16, 16384);
    EXPECT_EQ(v, b.LogInt(16, 16384));
    EXPECT_GE(v, 16);
    EXPECT_LE(v, 16384);
    const int64_t u = a.Int(-3, 3);
    b.Int(-3, 3);
    EXPECT_GE(u, -3);
    EXPECT_LE(u, 3);
  }
}

}  // namespace
}  // namespace memest::zoo
