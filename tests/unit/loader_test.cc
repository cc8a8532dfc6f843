// Model loading on good and bad input (core/loader.cc), dim binding (core/bind.cc), and estimating
// one loaded model from many threads. Every bad input must give an error value with a clear code
// and message: never a crash, a hang or an exception.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/bind.h"
#include "core/graph.h"
#include "memest/estimator.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"
#include "testing/onnx_builder.h"

namespace memest {
namespace {

using ::memest::testing::GraphBuilder;
using ::memest::testing::kBool;
using ::memest::testing::kFloat;
using ::memest::testing::kInt64;
using ::memest::testing::TempDir;
using ::memest::testing::TestDim;
using ::testing::AnyOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int64_t k2Pow40 = int64_t{1} << 40;

// Loads `model` written as model.onnx into a fresh folder.
Result<std::shared_ptr<const Model>> LoadBuilt(const onnx::ModelProto& model) {
  TempDir dir;
  return LoadModel(dir.WriteModel("model.onnx", model));
}

// Describes a failed status for assertion messages.
std::string Describe(const Status& s) { return s.ToString(); }

// ---------------------------------------------------------------------------------------------
// Bad files.

TEST(LoaderTest, MissingFileIsNotFoundNamingThePath) {
  TempDir dir;
  const std::string path = dir.path() + "/does_not_exist.onnx";
  auto r = LoadModel(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr(path));
  EXPECT_EQ(r.status().subject(), Subject::kModel);
}

// Every load error names the model and is about it, whatever layer produced it: a caller maps
// it to "bad model" from the status alone (tools/exit_codes.h), never from its wording.
TEST(LoaderTest, EveryLoadErrorNamesTheModelAndIsAboutIt) {
  TempDir dir;
  const std::string under_a_file = dir.WriteFile("plain", "x") + "/model.onnx";
  const std::string garbage = dir.WriteFile("garbage.onnx", "<html>not a model</html>");
  for (const std::string& path : {under_a_file, garbage, dir.path()}) {
    auto r = LoadModel(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.status().subject(), Subject::kModel) << Describe(r.status());
    EXPECT_THAT(r.status().message(), HasSubstr(path));
  }
  auto under = LoadModel(under_a_file);
  EXPECT_THAT(under.status().message(), HasSubstr(": cannot be read: "));
  auto bytes = LoadModelFromBytes("junk", "", "inline model");
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().subject(), Subject::kModel);
  EXPECT_THAT(bytes.status().message(), HasSubstr("inline model"));
}

TEST(LoaderTest, DirectoryIsAnError) {
  TempDir dir;
  auto r = LoadModel(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), Not(IsEmpty()));
  // A folder named like a model is no better.
  std::filesystem::create_directories(dir.path() + "/model.onnx");
  auto r2 = LoadModel(dir.path() + "/model.onnx");
  ASSERT_FALSE(r2.ok());
  EXPECT_THAT(r2.status().message(), Not(IsEmpty()));
}

TEST(LoaderTest, FifoIsAnErrorNotAHang) {
  TempDir dir;
  const std::string path = dir.path() + "/pipe.onnx";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto loading = std::async(std::launch::async, [&path] { return LoadModel(path); });
  bool blocked = false;
  while (loading.wait_for(std::chrono::seconds(blocked ? 0 : 3)) != std::future_status::ready) {
    // The loader is stuck opening the pipe: give it a writer that closes at once (EOF).
    blocked = true;
    int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(blocked) << "LoadModel blocked opening a FIFO";
  auto r = loading.get();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path));
}

TEST(LoaderTest, DeviceFilesAreErrors) {
  for (const std::string path : {"/dev/null", "/dev/zero"}) {
    if (!std::filesystem::exists(path)) continue;
    auto r = LoadModel(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_THAT(r.status().message(), Not(IsEmpty()));
  }
}

TEST(LoaderTest, HtmlPageIsInvalidModel) {
  TempDir dir;
  const std::string path = dir.WriteFile(
      "resnet50.onnx",
      "<!DOCTYPE html>\n<html><head><title>resnet50.onnx - Hugging Face</title></head>\n"
      "<body><p>This file is stored with Git LFS. Click to download.</p></body></html>\n");
  auto r = LoadModel(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), Not(IsEmpty()));
}

TEST(LoaderTest, GitLfsPointerIsInvalidModel) {
  TempDir dir;
  const std::string path =
      dir.WriteFile("model.onnx",
                    "version https://git-lfs.github.com/spec/v1\n"
                    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
                    "size 102502400\n");
  auto r = LoadModel(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
}

TEST(LoaderTest, EmptyFileIsInvalidModel) {
  TempDir dir;
  auto r = LoadModel(dir.WriteFile("empty.onnx", ""));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), Not(IsEmpty()));

  auto rb = LoadModelFromBytes("", dir.path(), "empty bytes");
  ASSERT_FALSE(rb.ok());
  EXPECT_EQ(rb.status().code(), ErrorCode::kInvalidModel) << Describe(rb.status());
}

TEST(LoaderTest, TruncatedProtobufIsInvalidModelOrStillLoads) {
  const std::string bytes = testing::SmallMlp().Serialize();
  ASSERT_GT(bytes.size(), 100u);
  TempDir dir;
  // The intact model loads.
  {
    auto r = LoadModelFromBytes(bytes, dir.path(), "intact");
    ASSERT_TRUE(r.ok()) << Describe(r.status());
  }
  int rejected = 0;
  int loaded = 0;
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    auto r = LoadModelFromBytes(std::string_view(bytes).substr(0, cut), dir.path(),
                                "cut at " + std::to_string(cut));
    if (r.ok()) {
      ++loaded;  // the cut fell on a field boundary and still parsed: fine, it did not crash
      continue;
    }
    ++rejected;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel)
        << "cut at " << cut << ": " << Describe(r.status());
    EXPECT_THAT(r.status().message(), Not(IsEmpty()));
  }
  // opset_import is written last, so almost every cut loses it or breaks the encoding.
  EXPECT_GT(rejected, static_cast<int>(bytes.size()) * 9 / 10) << loaded << " cuts loaded";

  // The same through files, at a few points.
  for (size_t cut : {size_t{1}, size_t{7}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    auto r = LoadModel(dir.WriteFile("cut.onnx", bytes.substr(0, cut)));
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel)
          << "cut at " << cut << ": " << Describe(r.status());
    }
  }
}

TEST(LoaderTest, RandomBytesAreInvalidModel) {
  TempDir dir;
  std::mt19937 rng(20240601);
  for (int trial = 0; trial < 64; ++trial) {
    size_t n = 1 + rng() % (trial < 32 ? 64 : 8192);
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    auto r = LoadModelFromBytes(bytes, dir.path(), "random " + std::to_string(trial));
    ASSERT_FALSE(r.ok()) << "trial " << trial;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel)
        << "trial " << trial << ": " << Describe(r.status());
    EXPECT_THAT(r.status().message(), Not(IsEmpty()));
  }
  // One through a file too.
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  auto r = LoadModel(dir.WriteFile("noise.onnx", bytes));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
}

// ---------------------------------------------------------------------------------------------
// Malformed graphs.

GraphBuilder ControlFlowModel();
GraphBuilder ExporterStyleFlatten();

// Valid models with a few random bytes overwritten: most still parse, with odd values in odd
// places (dims, types, names, attributes). Loading, binding and estimating must give a value or an
// error with a message, whatever the damage.
TEST(LoaderTest, MutatedModelsNeverCrash) {
  auto est = MakeEstimator("analytical");
  ASSERT_TRUE(est.ok()) << Describe(est.status());
  const std::vector<std::string> seeds = {testing::SmallMlp().Serialize(),
                                          ControlFlowModel().Serialize(),
                                          ExporterStyleFlatten().Serialize()};
  TempDir dir;
  std::mt19937 rng(7);
  int loaded = 0;
  int estimated = 0;
  // MEMEST_FUZZ_TRIALS=N runs more mutants (e.g. under a sanitizer build).
  const char* env_trials = std::getenv("MEMEST_FUZZ_TRIALS");
  const int trials = env_trials != nullptr ? std::max(1, std::atoi(env_trials)) : 1500;
  for (int trial = 0; trial < trials; ++trial) {
    std::string bytes = seeds[static_cast<size_t>(trial) % seeds.size()];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng() & 0xff);
          break;
        case 1:
          bytes[at] = static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
          break;
        default:
          bytes[at] = static_cast<char>(0xff);
          break;  // huge varints
      }
    }
    auto r = LoadModelFromBytes(bytes, dir.path(), "mutant " + std::to_string(trial));
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), Not(IsEmpty())) << "trial " << trial;
      EXPECT_NE(r.status().code(), ErrorCode::kInternal)
          << "trial " << trial << ": " << Describe(r.status());
      continue;
    }
    ++loaded;
    for (Mode mode : {Mode::kTrain, Mode::kInfer}) {
      Options options;
      options.mode = mode;
      options.batch = 2;
      for (const std::string& d : (*r)->summary().symbolic_dims) options.dims[d] = 3;
      auto e = (*est)->Run(**r, options);
      if (e.ok()) {
        ++estimated;
        EXPECT_EQ(e->peak_device, e->breakdown.Total()) << "trial " << trial;
      } else {
        EXPECT_THAT(e.status().message(), Not(IsEmpty())) << "trial " << trial;
      }
    }
  }
  std::cout << "mutated models: " << loaded << " of " << trials << " loaded, " << estimated
            << " estimates\n";
  EXPECT_GT(loaded, 0);
}

TEST(LoaderTest, NoOpsetImportIsInvalidModel) {
  GraphBuilder b = testing::SmallMlp();
  b.model().clear_opset_import();
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("opset"));
}

TEST(LoaderTest, UnknownDtypeOnInputIsInvalidModelNamingIt) {
  GraphBuilder b(13);
  b.AddInput("weird_input", 99, {"N", 4});
  b.AddNode("Identity", {"weird_input"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("weird_input"));
}

TEST(LoaderTest, UnknownDtypeOnInitializerIsInvalidModelNamingIt) {
  GraphBuilder b = testing::SmallMlp();
  b.AddInitializer("weird_weight", {4, 4}, /*elem_type=*/99);
  b.AddNode("Identity", {"weird_weight"}, {"weird_copy"});
  b.AddOutput("weird_copy", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("weird_weight"));
}

TEST(LoaderTest, NegativeDimOnInitializerIsInvalidModelNamingIt) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddInitializer("bad_weight", {-3, 4});
  b.AddNode("MatMul", {"X", "bad_weight"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("bad_weight"));
}

TEST(LoaderTest, NegativeDimOnInputIsInvalidModelNamingIt) {
  GraphBuilder b(13);
  b.AddInput("bad_input", kFloat, {"N", -2});
  b.AddNode("Relu", {"bad_input"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("bad_input"));
}

TEST(LoaderTest, OverflowingInitializerDimsAreRejectedNamingIt) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 16});
  b.AddInitializer("absurd", {k2Pow40, k2Pow40, 16});
  b.AddNode("Add", {"X", "absurd"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().code(), AnyOf(ErrorCode::kOverflow, ErrorCode::kInvalidModel))
      << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("absurd"));
}

TEST(LoaderTest, OverflowingInputDimsAreRejectedAtLoadOrBind) {
  GraphBuilder b(13);
  b.AddInput("giant", kFloat, {"N", k2Pow40, k2Pow40});
  b.AddNode("Relu", {"giant"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  if (!r.ok()) {
    EXPECT_THAT(r.status().code(), AnyOf(ErrorCode::kOverflow, ErrorCode::kInvalidModel))
        << Describe(r.status());
    EXPECT_THAT(r.status().message(), HasSubstr("giant"));
    return;
  }
  Options options;
  options.batch = 1024;
  auto bound = core::Bind((*r)->graph(), options);
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), ErrorCode::kOverflow) << Describe(bound.status());
  EXPECT_THAT(bound.status().message(), HasSubstr("giant"));
}

TEST(LoaderTest, CycleIsInvalidModelNamingANode) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddNode("Add", {"X", "b_out"}, {"a_out"}, "node_a");
  b.AddNode("Relu", {"a_out"}, {"b_out"}, "node_b");
  b.AddOutput("b_out", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), AnyOf(HasSubstr("node_a"), HasSubstr("node_b")));
}

// A node without a name goes by "<op_type>_<index>" (its index in the file); a named one keeps
// its name.
TEST(LoaderTest, AnUnnamedNodeIsNamedByItsOpTypeAndIndex) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  std::string prev = "X";
  for (int i = 0; i < 12; ++i) {
    const std::string out = "r" + std::to_string(i);
    b.AddNode("Relu", {prev}, {out}).clear_name();
    prev = out;
  }
  b.AddNode("HardSigmoid", {prev}, {"h"}).clear_name();
  b.AddNode("Neg", {"h"}, {"y"}, "named_neg");
  b.AddOutput("y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const core::Graph& g = (*r)->graph();
  ASSERT_EQ(g.nodes.size(), 14u);
  EXPECT_EQ(g.nodes[0].name, "Relu_0");
  EXPECT_EQ(g.nodes[11].name, "Relu_11");
  EXPECT_EQ(g.nodes[12].name, "HardSigmoid_12");
  EXPECT_EQ(g.nodes[13].name, "named_neg");
}

TEST(LoaderTest, TheSummaryListsEveryDistinctOpTypeOnceInOrderHoweverMany) {
  // Past the first 64 distinct op types the summary keeps them in a tree (core/loader.cc
  // Summarize); both kinds must come out as one sorted list, each type once.
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  std::string prev = "X";
  std::vector<std::string> want;
  for (int i = 0; i < 150; ++i) {
    const std::string op = "Op" + std::to_string(100 + (i * 37) % 90);  // 90 types, shuffled
    const std::string out = "t" + std::to_string(i);
    b.AddNode(op, {prev}, {out});
    if (std::find(want.begin(), want.end(), op) == want.end()) want.push_back(op);
    prev = out;
  }
  b.AddNode("Relu", {prev}, {"y"});
  want.push_back("Relu");
  b.AddOutput("y", kFloat);
  std::sort(want.begin(), want.end());
  ASSERT_EQ(want.size(), 91u);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  EXPECT_EQ((*r)->summary().op_types, want);
}

TEST(LoaderTest, NodesOutOfOrderAreSortedStablyWithTheirProtos) {
  // Written consumers first: the loader sorts them (Kahn's algorithm, lowest file index first
  // among ready nodes), renumbers producers and consumers, and reorders the kept protos.
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddNode("Relu", {"c_out"}, {"d_out"}, "node_d");
  b.AddNode("Neg", {"a_out"}, {"c_out"}, "node_c");
  b.AddNode("Abs", {"X"}, {"b_out"}, "node_b");
  b.AddNode("Sigmoid", {"X"}, {"a_out"}, "node_a");
  b.AddOutput("d_out", kFloat);
  b.AddOutput("b_out", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const core::Graph& g = (*r)->graph();
  std::vector<std::string> order;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    order.push_back(g.nodes[n].name);
    EXPECT_EQ(g.nodes[n].proto->name(), g.nodes[n].name);
    for (int in : g.nodes[n].inputs) EXPECT_LT(g.value(in).producer, static_cast<int>(n));
    for (int out : g.nodes[n].outputs) EXPECT_EQ(g.value(out).producer, static_cast<int>(n));
  }
  EXPECT_THAT(order, ElementsAre("node_b", "node_a", "node_c", "node_d"));
  EXPECT_THAT(g.value(g.FindValue("a_out")).consumers, ElementsAre(2));
}

TEST(LoaderTest, AValueReadBeforeAndAfterItsProducerListsItsConsumersInFileOrder) {
  // ReadNodes looks node_u's input up again after every output is known: "later"'s consumers are
  // still in file order (node_u, node_q, node_r), then renumbered with the sort (node_p first).
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddNode("Add", {"later", "X"}, {"u_out"}, "node_u");
  b.AddNode("Relu", {"X"}, {"later"}, "node_p");
  b.AddNode("Neg", {"later"}, {"q_out"}, "node_q");
  b.AddNode("Mul", {"u_out", "later"}, {"r_out"}, "node_r");
  b.AddOutput("q_out", kFloat);
  b.AddOutput("r_out", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const core::Graph& g = (*r)->graph();
  std::vector<std::string> order;
  for (const core::Node& n : g.nodes) order.push_back(n.name);
  EXPECT_THAT(order, ElementsAre("node_p", "node_u", "node_q", "node_r"));
  EXPECT_THAT(g.value(g.FindValue("later")).consumers, ElementsAre(1, 2, 3));
  EXPECT_THAT(g.nodes[1].inputs, ElementsAre(g.FindValue("later"), g.FindValue("X")));
}

TEST(LoaderTest, SelfLoopIsInvalidModel) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddNode("Add", {"X", "loop_out"}, {"loop_out"}, "self_loop");
  b.AddOutput("loop_out", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("self_loop"));
}

TEST(LoaderTest, InputNothingProducesIsInvalidModelNamingNodeAndTensor) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddNode("Relu", {"X"}, {"h"}, "fine_node");
  b.AddNode("Add", {"h", "ghost_tensor"}, {"Y"}, "orphan_consumer");
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("orphan_consumer"));
  EXPECT_THAT(r.status().message(), HasSubstr("ghost_tensor"));
}

TEST(LoaderTest, TensorProducedTwiceIsInvalidModel) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddNode("Relu", {"X"}, {"twice"}, "first_producer");
  b.AddNode("Neg", {"X"}, {"twice"}, "second_producer");
  b.AddOutput("twice", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("twice"));
}

TEST(LoaderTest, GraphOutputNothingProducesIsInvalidModel) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddNode("Relu", {"X"}, {"Y"});
  b.AddOutput("Y", kFloat);
  b.AddOutput("phantom_output", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("phantom_output"));
}

// `depth` If nodes nested in each other's then_branch (each else_branch is one Relu).
onnx::GraphProto LeafBranch(const std::string& out) {
  onnx::GraphProto leaf;
  leaf.set_name("leaf_" + out);
  onnx::NodeProto* relu = leaf.add_node();
  relu->set_op_type("Relu");
  relu->add_input("X");
  relu->add_output(out);
  onnx::ValueInfoProto* o = leaf.add_output();
  o->set_name(out);
  testing::SetTensorType(*o, kFloat, nullptr);
  return leaf;
}

onnx::ModelProto NestedIfModel(int depth) {
  onnx::GraphProto inner = LeafBranch("leaf_then");
  for (int level = 0; level < depth; ++level) {
    const std::string out = "y_" + std::to_string(level);
    onnx::GraphProto outer;
    outer.set_name("level_" + std::to_string(level));
    onnx::NodeProto* node = outer.add_node();
    node->set_op_type("If");
    node->set_name("if_" + std::to_string(level));
    node->add_input("C");
    node->add_output(out);
    onnx::AttributeProto* then_attr = node->add_attribute();
    then_attr->set_name("then_branch");
    then_attr->set_type(onnx::AttributeProto_AttributeType_GRAPH);
    then_attr->mutable_g()->Swap(&inner);
    testing::SetGraphAttr(*node, "else_branch", LeafBranch(out + "_else"));
    onnx::ValueInfoProto* o = outer.add_output();
    o->set_name(out);
    testing::SetTensorType(*o, kFloat, nullptr);
    inner.Swap(&outer);
  }
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddInput("C", kBool, {});
  b.graph().mutable_node()->Swap(inner.mutable_node());
  b.AddOutput(inner.output(0).name(), kFloat);
  return b.model();
}

TEST(LoaderTest, DeeplyNestedSubgraphsAreRejectedNotAStackOverflow) {
  auto r = LoadBuilt(NestedIfModel(2000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
}

TEST(LoaderTest, ModeratelyNestedSubgraphsLoad) {
  auto r = LoadBuilt(NestedIfModel(5));
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  // Below the top If: 4 nested Ifs, 5 else-branch Relus and the innermost then-branch Relu.
  EXPECT_EQ((*r)->summary().node_count, 1);
  EXPECT_EQ((*r)->summary().subgraph_node_count, 10);
}

// ---------------------------------------------------------------------------------------------
// External data: validated, never opened.

GraphBuilder ModelWithExternalWeight(const std::string& location) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 16});
  b.AddExternalInitializer("ext_weight", {16, 8}, location);
  b.AddNode("MatMul", {"X", "ext_weight"}, {"Y"}, "fc");
  b.AddOutput("Y", kFloat, {"N", 8});
  return b;
}

TEST(LoaderTest, ExternalDataEscapingTheModelFolderIsInvalidModel) {
  // Backslashes separate parts as slashes do (Windows exporters); absolute paths, drive letters
  // and UNC paths are refused outright.
  for (const std::string location :
       {"../secret.bin", "/etc/passwd", "a/../../x", "sub/../../secret.bin",
        "../../../../../../etc/shadow", "a\\..\\..\\x", "sub/..\\../x", "C:\\w.bin",
        "\\\\server\\share\\w.bin", "./../x"}) {
    SCOPED_TRACE(location);
    TempDir dir;
    GraphBuilder b = ModelWithExternalWeight(location);
    auto r = LoadModel(dir.WriteModel("model.onnx", b.model()));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidModel) << Describe(r.status());
    EXPECT_THAT(r.status().message(), HasSubstr("ext_weight"));
    EXPECT_THAT(r.status().message(), HasSubstr("leaves the model's folder"));

    auto rb = LoadModelFromBytes(b.Serialize(), dir.path(), "in-memory");
    ASSERT_FALSE(rb.ok());
    EXPECT_EQ(rb.status().code(), ErrorCode::kInvalidModel) << Describe(rb.status());
  }
}

TEST(LoaderTest, ExternalDataInsideTheFolderIsAcceptedWithoutOpeningIt) {
  for (const std::string location : {"weights.bin", "sub/w.bin", "./w.bin", "sub/../w.bin",
                                     "a/./b//c.bin", "sub\\w.bin", "a\\..\\w.bin"}) {
    SCOPED_TRACE(location);
    TempDir dir;  // the data file does not exist: the loader must not try to read it
    GraphBuilder b = ModelWithExternalWeight(location);
    auto r = LoadModel(dir.WriteModel("model.onnx", b.model()));
    ASSERT_TRUE(r.ok()) << Describe(r.status());
    EXPECT_EQ((*r)->summary().parameter_count, 16 * 8);
    EXPECT_EQ((*r)->summary().parameter_bytes, 16u * 8u * 4u);
    const core::Graph& g = (*r)->graph();
    int id = g.FindValue("ext_weight");
    ASSERT_GE(id, 0);
    EXPECT_TRUE(g.value(id).external);
    EXPECT_EQ(g.value(id).kind, core::ValueKind::kInitializer);
  }
}

TEST(LoaderTest, ThreeGigabytesOfExternalWeightsLoadWithoutReadingThem) {
  TempDir dir;
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 50000});
  // 50000 * 15000 floats = 3.0e9 bytes, declared in a file that does not exist.
  b.AddExternalInitializer("big_weight", {50000, 15000}, "big_weight.bin");
  b.AddExternalInitializer("big_bias", {15000}, "big_weight.bin");
  b.AddNode("MatMul", {"X", "big_weight"}, {"h"}, "big_fc");
  b.AddNode("Add", {"h", "big_bias"}, {"Y"}, "big_bias_add");
  b.AddOutput("Y", kFloat, {"N", 15000});
  const std::string path = dir.WriteModel("model.onnx", b.model());
  EXPECT_LT(testing::ReadFileBytes(path).size(), 4096u);
  auto r = LoadModel(path);
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  EXPECT_GE((*r)->summary().parameter_bytes, 3000000000u);
  EXPECT_EQ((*r)->summary().parameter_count, int64_t{50000} * 15000 + 15000);
}

// The kept proto stays on the arena it was parsed into unless stripping freed a lot there: then
// it moves to the heap (core/loader.cc kArenaWeightBytes), and every node still points into it.
// Large raw_data never reaches the arena (the payload filter leaves it out before the parse,
// core/payload_filter.h); weights in float_data do, and are stripped after it.
TEST(LoaderTest, KeptProtoLeavesTheArenaOnlyWhenLargeWeightsWereStripped) {
  struct Case {
    int64_t rows;
    int64_t tensors;  // of 1024 x rows each
    bool in_float_data;
    bool stays_on_arena;
  };
  // 64 KiB of raw_data; 32 MiB of raw_data and of float_data (left out unparsed by the payload
  // filter); 1,100 tensors of 16 KiB of raw_data (17.2 MiB: each at the filter's threshold, so
  // parsed, then stripped).
  for (const Case c : {Case{64, 1, false, true}, Case{8192, 1, false, true},
                       Case{8192, 1, true, true}, Case{4, 1100, false, false}}) {
    GraphBuilder b(13);
    b.AddInput("X", kFloat, {"N", 1024});
    for (int64_t k = 0; k < c.tensors; ++k) {
      onnx::TensorProto& w =
          b.AddInitializer(k == 0 ? "W" : "V" + std::to_string(k), {1024, c.rows});
      if (c.in_float_data) {
        w.mutable_float_data()->Resize(static_cast<int>(1024 * c.rows), 0.0f);
      } else {
        w.set_raw_data(std::string(static_cast<size_t>(1024 * c.rows * 4), '\0'));
      }
    }
    b.AddNode("MatMul", {"X", "W"}, {"h"}, "fc");
    b.AddNode("Relu", {"h"}, {"Y"}, "act").add_attribute()->set_name("unused");
    b.AddOutput("Y", kFloat, {"N", c.rows});
    auto r = LoadBuilt(b.model());
    ASSERT_TRUE(r.ok()) << Describe(r.status());
    const core::Graph& g = (*r)->graph();
    EXPECT_EQ(g.proto.on_arena(), c.stays_on_arena) << c.rows << " " << c.in_float_data;
    for (const onnx::TensorProto& t : g.proto->graph().initializer()) {
      EXPECT_EQ(t.raw_data().size(), 0u) << "weights are stripped";
      EXPECT_EQ(t.float_data_size(), 0) << "weights are stripped";
    }
    ASSERT_EQ(g.nodes.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(g.nodes[i].proto, &g.proto->graph().node(i)) << "node " << i << " points elsewhere";
      EXPECT_EQ(g.nodes[i].proto->name(), g.nodes[i].name);
    }
    EXPECT_EQ(g.nodes[1].proto->attribute(0).name(), "unused");
    EXPECT_EQ((*r)->summary().parameter_count, 1024 * c.rows);  // W: the others feed no node
  }
}

// ---------------------------------------------------------------------------------------------
// Good models.

TEST(LoaderGoodTest, SmallMlpSummary) {
  GraphBuilder b = testing::SmallMlp();
  TempDir dir;
  const std::string path = dir.WriteModel("mlp.onnx", b.model());
  auto r = LoadModel(path);
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const ModelSummary& s = (*r)->summary();
  EXPECT_THAT(s.path, HasSubstr("mlp.onnx"));
  EXPECT_EQ(s.ir_version, 8);
  EXPECT_THAT(s.producer, HasSubstr("memest-tests"));
  EXPECT_EQ(s.node_count, 5);
  EXPECT_EQ(s.subgraph_node_count, 0);
  EXPECT_EQ(s.parameter_count, 16 * 32 + 32 + 32 * 4 + 4);
  EXPECT_EQ(s.parameter_bytes, 4u * (16 * 32 + 32 + 32 * 4 + 4));
  ASSERT_EQ(s.data_inputs.size(), 1u);
  EXPECT_EQ(s.data_inputs[0].name, "X");
  EXPECT_EQ(s.data_inputs[0].dtype, "float32");
  ASSERT_EQ(s.data_inputs[0].dims.size(), 2u);
  EXPECT_EQ(s.data_inputs[0].dims[0].param, "N");
  EXPECT_EQ(s.data_inputs[0].dims[1].value, 16);
  EXPECT_THAT(s.symbolic_dims, ElementsAre("N"));
  EXPECT_THAT(s.op_types, ElementsAre("Add", "MatMul", "Relu"));

  // The same model from bytes gives the same summary (but the display name as path).
  auto rb = LoadModelFromBytes(b.Serialize(), dir.path(), "mlp-in-memory");
  ASSERT_TRUE(rb.ok()) << Describe(rb.status());
  EXPECT_EQ((*rb)->summary().parameter_count, s.parameter_count);
  EXPECT_EQ((*rb)->summary().op_types, s.op_types);

  // Graph IR: topological order, kinds, producers and consumers.
  const core::Graph& g = (*r)->graph();
  ASSERT_EQ(g.nodes.size(), 5u);
  ASSERT_EQ(g.data_inputs.size(), 1u);
  EXPECT_EQ(g.value(g.data_inputs[0]).kind, core::ValueKind::kDataInput);
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_TRUE(g.value(g.outputs[0]).graph_output);
  int w1 = g.FindValue("W1");
  ASSERT_GE(w1, 0);
  EXPECT_EQ(g.value(w1).kind, core::ValueKind::kInitializer);
  EXPECT_TRUE(g.value(w1).trainable);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    for (int in : g.nodes[n].inputs) {
      if (in < 0) continue;
      EXPECT_LT(g.value(in).producer, static_cast<int>(n)) << g.nodes[n].name;
    }
  }
}

TEST(LoaderGoodTest, InitializersListedAsInputsAreParametersNotDataInputs) {
  // Old exporters (IR version 3) list every initializer among graph.input as well.
  GraphBuilder b = testing::SmallMlp(/*opset=*/9);
  b.model().set_ir_version(3);
  b.AddInput("W1", kFloat, {16, 32});
  b.AddInput("B1", kFloat, {32});
  b.AddInput("W2", kFloat, {32, 4});
  b.AddInput("B2", kFloat, {4});
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const ModelSummary& s = (*r)->summary();
  EXPECT_EQ(s.ir_version, 3);
  ASSERT_EQ(s.data_inputs.size(), 1u);
  EXPECT_EQ(s.data_inputs[0].name, "X");
  EXPECT_EQ(s.parameter_count, 16 * 32 + 32 + 32 * 4 + 4);
  const core::Graph& g = (*r)->graph();
  EXPECT_EQ(g.data_inputs.size(), 1u);
  int w2 = g.FindValue("W2");
  ASSERT_GE(w2, 0);
  EXPECT_EQ(g.value(w2).kind, core::ValueKind::kInitializer);

  // And binding needs only the batch (the weights' dims are not data-input dims).
  Options options;
  options.batch = 3;
  auto bound = core::Bind(g, options);
  ASSERT_TRUE(bound.ok()) << Describe(bound.status());
  int y = g.FindValue("Y");
  ASSERT_TRUE(bound->shapes[static_cast<size_t>(y)].has_value());
  EXPECT_THAT(*bound->shapes[static_cast<size_t>(y)], ElementsAre(3, 4));
}

// X[N,3,4] -Reshape(Constant [-1, 12])-> Y[N,12]
GraphBuilder ConstantReshapeModel() {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 3, 4});
  onnx::NodeProto& c = b.AddNode("Constant", {}, {"target_shape"}, "shape_const");
  testing::SetTensorAttr(c, "value", testing::Int64Tensor({-1, 12}));
  b.AddNode("Reshape", {"X", "target_shape"}, {"Y"}, "flatten");
  b.AddOutput("Y", kFloat);
  return b;
}

TEST(LoaderGoodTest, ConstantNodesLoadAndKeepTheirIntegerValues) {
  auto r = LoadBuilt(ConstantReshapeModel().model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  EXPECT_THAT((*r)->summary().op_types, ElementsAre("Constant", "Reshape"));
  EXPECT_EQ((*r)->summary().parameter_count, 0);
  const core::Graph& g = (*r)->graph();
  int t = g.FindValue("target_shape");
  ASSERT_GE(t, 0);
  ASSERT_TRUE(g.value(t).int_data.has_value());
  EXPECT_THAT(*g.value(t).int_data, ElementsAre(-1, 12));

  Options options;
  options.batch = 6;
  auto bound = core::Bind(g, options);
  ASSERT_TRUE(bound.ok()) << Describe(bound.status());
  int y = g.FindValue("Y");
  ASSERT_TRUE(bound->shapes[static_cast<size_t>(y)].has_value());
  EXPECT_THAT(*bound->shapes[static_cast<size_t>(y)], ElementsAre(6, 12));
  EXPECT_EQ(bound->Bytes(y), 6u * 12u * 4u);
}

TEST(LoaderGoodTest, OpsetImportsAndNonDefaultDomainsAreReported) {
  GraphBuilder b(15);
  b.AddOpset("com.microsoft", 1);
  b.AddInput("X", kFloat, {"N", 8});
  b.AddNode("Relu", {"X"}, {"h"}, "relu");
  b.AddNode("Gelu", {"h"}, {"Y"}, "ms_gelu", "com.microsoft");
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const ModelSummary& s = (*r)->summary();
  EXPECT_EQ(s.opsets.size(), 2u);
  EXPECT_EQ(s.opsets.at(""), 15);
  EXPECT_EQ(s.opsets.at("com.microsoft"), 1);
  EXPECT_THAT(s.op_types, Contains("com.microsoft::Gelu"));
  EXPECT_THAT(s.op_types, Contains("Relu"));
  bool mentioned = false;
  for (const Diagnostic& d : s.diagnostics) {
    if (d.message.find("com.microsoft") != std::string::npos || d.node == "ms_gelu" ||
        d.op_type.find("Gelu") != std::string::npos) {
      mentioned = true;
    }
  }
  EXPECT_TRUE(mentioned) << "no diagnostic about the com.microsoft node";
  const core::Graph& g = (*r)->graph();
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].domain, "com.microsoft");
  EXPECT_EQ(g.nodes[1].opset, 1);
  EXPECT_EQ(g.nodes[0].opset, 15);
}

// If(cond) { Relu(X) } else { Neg(X) } and Loop(M, cond, X) { v + X }: subgraphs that read the
// outer scope's X.
GraphBuilder ControlFlowModel() {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 4});
  b.AddInput("C", kBool, {});
  b.AddInput("M", kInt64, {});

  onnx::GraphProto then_g;
  then_g.set_name("then_body");
  {
    onnx::NodeProto* n = then_g.add_node();
    n->set_op_type("Relu");
    n->set_name("then_relu");
    n->add_input("X");
    n->add_output("then_y");
    onnx::ValueInfoProto* o = then_g.add_output();
    o->set_name("then_y");
    testing::SetTensorType(*o, kFloat, nullptr);
  }
  onnx::GraphProto else_g;
  else_g.set_name("else_body");
  {
    onnx::NodeProto* n = else_g.add_node();
    n->set_op_type("Neg");
    n->set_name("else_neg");
    n->add_input("X");
    n->add_output("else_y");
    onnx::ValueInfoProto* o = else_g.add_output();
    o->set_name("else_y");
    testing::SetTensorType(*o, kFloat, nullptr);
  }
  onnx::NodeProto& if_node = b.AddNode("If", {"C"}, {"if_out"}, "branch");
  testing::SetGraphAttr(if_node, "then_branch", then_g);
  testing::SetGraphAttr(if_node, "else_branch", else_g);

  onnx::GraphProto body;
  body.set_name("loop_body");
  {
    const std::vector<TestDim> scalar;
    const std::vector<TestDim> row = {"N", 4};
    onnx::ValueInfoProto* i = body.add_input();
    i->set_name("iter");
    testing::SetTensorType(*i, kInt64, &scalar);
    onnx::ValueInfoProto* c = body.add_input();
    c->set_name("cond_in");
    testing::SetTensorType(*c, kBool, &scalar);
    onnx::ValueInfoProto* v = body.add_input();
    v->set_name("v_in");
    testing::SetTensorType(*v, kFloat, &row);
    onnx::NodeProto* add = body.add_node();
    add->set_op_type("Add");
    add->set_name("loop_add");
    add->add_input("v_in");
    add->add_input("X");
    add->add_output("v_out");
    onnx::NodeProto* id = body.add_node();
    id->set_op_type("Identity");
    id->set_name("loop_cond");
    id->add_input("cond_in");
    id->add_output("cond_out");
    onnx::ValueInfoProto* co = body.add_output();
    co->set_name("cond_out");
    testing::SetTensorType(*co, kBool, &scalar);
    onnx::ValueInfoProto* vo = body.add_output();
    vo->set_name("v_out");
    testing::SetTensorType(*vo, kFloat, &row);
  }
  onnx::NodeProto& loop = b.AddNode("Loop", {"M", "C", "if_out"}, {"Y"}, "repeat");
  testing::SetGraphAttr(loop, "body", body);
  b.AddOutput("Y", kFloat);
  return b;
}

TEST(LoaderGoodTest, IfAndLoopSubgraphsAreParsed) {
  auto r = LoadBuilt(ControlFlowModel().model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const ModelSummary& s = (*r)->summary();
  EXPECT_EQ(s.node_count, 2);
  EXPECT_GT(s.subgraph_node_count, 0);
  EXPECT_EQ(s.subgraph_node_count, 4);
  EXPECT_THAT(s.op_types, Contains("If"));
  EXPECT_THAT(s.op_types, Contains("Loop"));
  const core::Graph& g = (*r)->graph();
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].subgraph_nodes + g.nodes[1].subgraph_nodes, 4);

  // Estimating it gives a number or a clear error, never a crash.
  auto est = MakeEstimator("analytical");
  ASSERT_TRUE(est.ok()) << Describe(est.status());
  for (Mode mode : {Mode::kInfer, Mode::kTrain}) {
    Options options;
    options.mode = mode;
    options.batch = 2;
    auto e = (*est)->Run(**r, options);
    if (!e.ok()) {
      EXPECT_THAT(e.status().message(), Not(IsEmpty()));
    }
  }
}

TEST(LoaderGoodTest, SymbolicDimsAreListedSortedAndUnique) {
  GraphBuilder b(13);
  b.AddInput("tokens", kInt64, {"batch", "seq"});
  b.AddInput("mask", kFloat, {"batch", 1, "seq", "kv_len"});
  b.AddInitializer("emb", {100, 8});
  b.AddNode("Gather", {"emb", "tokens"}, {"h"}, "embed");
  b.AddNode("Add", {"h", "mask"}, {"Y"}, "masked");
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  EXPECT_THAT((*r)->summary().symbolic_dims, ElementsAre("batch", "kv_len", "seq"));
  ASSERT_EQ((*r)->summary().data_inputs.size(), 2u);
  EXPECT_EQ((*r)->summary().data_inputs[0].dtype, "int64");
}

TEST(LoaderGoodTest, DimWithNeitherValueNorParamLoads) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {TestDim::Unknown(), 4});
  b.AddNode("Relu", {"X"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const ModelSummary& s = (*r)->summary();
  ASSERT_EQ(s.data_inputs.size(), 1u);
  ASSERT_EQ(s.data_inputs[0].dims.size(), 2u);
  EXPECT_LT(s.data_inputs[0].dims[0].value, 0);
  EXPECT_TRUE(s.data_inputs[0].dims[0].param.empty());
  EXPECT_EQ(s.data_inputs[0].dims[1].value, 4);
  EXPECT_THAT(s.symbolic_dims, IsEmpty());
}

TEST(LoaderGoodTest, UnrankedInputLoads) {
  GraphBuilder b(13);
  b.AddUnrankedInput("X", kFloat);
  b.AddNode("Relu", {"X"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto r = LoadBuilt(b.model());
  ASSERT_TRUE(r.ok()) << Describe(r.status());
  const core::Graph& g = (*r)->graph();
  EXPECT_FALSE(g.value(g.FindValue("X")).has_shape);
}

// ---------------------------------------------------------------------------------------------
// Binding.

std::shared_ptr<const Model> MustLoad(const GraphBuilder& b) {
  auto r = LoadBuilt(b.model());
  EXPECT_TRUE(r.ok()) << Describe(r.status());
  return r.ok() ? *r : nullptr;
}

std::vector<int64_t> ShapeOf(const core::BoundGraph& bound, const std::string& name) {
  int id = bound.graph->FindValue(name);
  if (id < 0 || !bound.shapes[static_cast<size_t>(id)].has_value()) return {-999};
  const core::Dims dims = *bound.shapes[static_cast<size_t>(id)];
  return {dims.begin(), dims.end()};
}

TEST(BindTest, BatchBindsTheLeadingSymbolicDim) {
  auto model = MustLoad(testing::SmallMlp());
  ASSERT_NE(model, nullptr);
  Options options;
  options.batch = 4;
  auto bound = core::Bind(model->graph(), options);
  ASSERT_TRUE(bound.ok()) << Describe(bound.status());
  EXPECT_EQ(bound->graph, &model->graph());
  EXPECT_EQ(bound->bindings.at("N"), 4);
  EXPECT_THAT(ShapeOf(*bound, "X"), ElementsAre(4, 16));
  EXPECT_THAT(ShapeOf(*bound, "h2"), ElementsAre(4, 32));
  EXPECT_THAT(ShapeOf(*bound, "Y"), ElementsAre(4, 4));
  int y = model->graph().FindValue("Y");
  EXPECT_EQ(bound->Bytes(y), 4u * 4u * 4u);
  EXPECT_EQ(bound->Numel(y).value_or(0), 16u);
  EXPECT_EQ(bound->unknown_shapes, 0);
}

TEST(BindTest, MicroBatchesBindTheLeadingDimToTheMicroBatch) {
  auto model = MustLoad(testing::SmallMlp());
  ASSERT_NE(model, nullptr);
  Options options;
  options.batch = 64;
  options.micro_batches = 4;  // gradient accumulation: the graph runs on batch 16
  auto bound = core::Bind(model->graph(), options);
  ASSERT_TRUE(bound.ok()) << Describe(bound.status());
  EXPECT_EQ(bound->bindings.at("N"), 16);
  EXPECT_THAT(ShapeOf(*bound, "X"), ElementsAre(16, 16));
  EXPECT_THAT(ShapeOf(*bound, "Y"), ElementsAre(16, 4));
}

TEST(BindTest, BatchBindsALeadingDimWithNeitherValueNorName) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {TestDim::Unknown(), 5});
  b.AddNode("Relu", {"X"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto model = MustLoad(b);
  ASSERT_NE(model, nullptr);
  Options options;
  options.batch = 7;
  auto bound = core::Bind(model->graph(), options);
  ASSERT_TRUE(bound.ok()) << Describe(bound.status());
  EXPECT_THAT(ShapeOf(*bound, "Y"), ElementsAre(7, 5));
}

TEST(BindTest, NamedDimsBindAnyDimAndWinOverBatch) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", "seq", 8});
  b.AddNode("Relu", {"X"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto model = MustLoad(b);
  ASSERT_NE(model, nullptr);

  Options options;
  options.batch = 2;
  options.dims = {{"seq", 7}};
  auto bound = core::Bind(model->graph(), options);
  ASSERT_TRUE(bound.ok()) << Describe(bound.status());
  EXPECT_THAT(ShapeOf(*bound, "X"), ElementsAre(2, 7, 8));
  EXPECT_THAT(ShapeOf(*bound, "Y"), ElementsAre(2, 7, 8));
  EXPECT_EQ(bound->bindings.at("N"), 2);
  EXPECT_EQ(bound->bindings.at("seq"), 7);

  options.dims = {{"seq", 7}, {"N", 3}};
  auto bound2 = core::Bind(model->graph(), options);
  ASSERT_TRUE(bound2.ok()) << Describe(bound2.status());
  EXPECT_THAT(ShapeOf(*bound2, "Y"), ElementsAre(3, 7, 8));
  EXPECT_EQ(bound2->bindings.at("N"), 3);

  // Without batch, dims alone bind everything.
  Options only_dims;
  only_dims.dims = {{"seq", 5}, {"N", 1}};
  auto bound3 = core::Bind(model->graph(), only_dims);
  ASSERT_TRUE(bound3.ok()) << Describe(bound3.status());
  EXPECT_THAT(ShapeOf(*bound3, "Y"), ElementsAre(1, 5, 8));
}

TEST(BindTest, UnboundDimIsAnErrorNamingIt) {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"batch_sz", "seq_len", 8});
  b.AddNode("Relu", {"X"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto model = MustLoad(b);
  ASSERT_NE(model, nullptr);

  Options options;
  options.batch = 2;
  auto bound = core::Bind(model->graph(), options);
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), ErrorCode::kUnboundDim) << Describe(bound.status());
  EXPECT_THAT(bound.status().message(), HasSubstr("seq_len"));

  Options no_batch;
  no_batch.dims = {{"seq_len", 4}};
  auto bound2 = core::Bind(model->graph(), no_batch);
  ASSERT_FALSE(bound2.ok());
  EXPECT_EQ(bound2.status().code(), ErrorCode::kUnboundDim) << Describe(bound2.status());
  EXPECT_THAT(bound2.status().message(), HasSubstr("batch_sz"));

  // The estimator passes the error through.
  auto est = MakeEstimator("analytical");
  ASSERT_TRUE(est.ok()) << Describe(est.status());
  auto e = (*est)->Run(*model, options);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kUnboundDim) << Describe(e.status());
  EXPECT_THAT(e.status().message(), HasSubstr("seq_len"));
}

TEST(BindTest, UnnamedInnerDimIsAnErrorNamingTheInput) {
  GraphBuilder b(13);
  b.AddInput("images", kFloat, {"N", 3, TestDim::Unknown(), 32});
  b.AddNode("Relu", {"images"}, {"Y"});
  b.AddOutput("Y", kFloat);
  auto model = MustLoad(b);
  ASSERT_NE(model, nullptr);
  Options options;
  options.batch = 2;
  auto bound = core::Bind(model->graph(), options);
  ASSERT_FALSE(bound.ok());
  EXPECT_EQ(bound.status().code(), ErrorCode::kUnboundDim) << Describe(bound.status());
  EXPECT_THAT(bound.status().message(), HasSubstr("images"));
}

// X[N,3,4] -> Shape -> Gather(indices [0]) -> Concat(.., [-1]) -> Reshape target: exporter style.
GraphBuilder ExporterStyleFlatten() {
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 3, 4});
  b.AddInt64Initializer("idx0", {0});
  b.AddInt64Initializer("minus_one", {-1});
  b.AddNode("Shape", {"X"}, {"x_shape"}, "shape");
  onnx::NodeProto& gather = b.AddNode("Gather", {"x_shape", "idx0"}, {"n"}, "gather_batch");
  testing::SetIntAttr(gather, "axis", 0);
  onnx::NodeProto& concat = b.AddNode("Concat", {"n", "minus_one"}, {"target"}, "concat");
  testing::SetIntAttr(concat, "axis", 0);
  b.AddNode("Reshape", {"X", "target"}, {"flat"}, "flatten");
  b.AddInitializer("W", {12, 8});
  b.AddNode("MatMul", {"flat", "W"}, {"Y"}, "fc");
  b.AddOutput("Y", kFloat);
  return b;
}

TEST(BindTest, ShapesFlowThroughAShapeGatherConcatReshape) {
  auto model = MustLoad(ExporterStyleFlatten());
  ASSERT_NE(model, nullptr);
  for (int64_t batch : {1, 5, 64}) {
    Options options;
    options.batch = batch;
    auto bound = core::Bind(model->graph(), options);
    ASSERT_TRUE(bound.ok()) << Describe(bound.status());
    EXPECT_THAT(ShapeOf(*bound, "target"), ElementsAre(2));
    EXPECT_THAT(ShapeOf(*bound, "flat"), ElementsAre(batch, 12));
    EXPECT_THAT(ShapeOf(*bound, "Y"), ElementsAre(batch, 8));
    EXPECT_EQ(bound->Bytes(model->graph().FindValue("flat")), static_cast<uint64_t>(batch) * 48);
  }
}

TEST(BindTest, ShapesFlowThroughScalarGatherAndUnsqueeze) {
  // The other common exporter pattern: scalar index, Unsqueeze, Concat with a constant.
  GraphBuilder b(13);
  b.AddInput("X", kFloat, {"N", 3, 4});
  b.AddInt64Initializer("zero", {0}, std::vector<int64_t>{});
  b.AddInt64Initializer("axes0", {0});
  b.AddInt64Initializer("twelve", {12});
  b.AddNode("Shape", {"X"}, {"x_shape"}, "shape");
  onnx::NodeProto& gather = b.AddNode("Gather", {"x_shape", "zero"}, {"n_scalar"}, "gather");
  testing::SetIntAttr(gather, "axis", 0);
  b.AddNode("Unsqueeze", {"n_scalar", "axes0"}, {"n"}, "unsqueeze");
  onnx::NodeProto& concat = b.AddNode("Concat", {"n", "twelve"}, {"target"}, "concat");
  testing::SetIntAttr(concat, "axis", 0);
  b.AddNode("Reshape", {"X", "target"}, {"Y"}, "flatten");
  b.AddOutput("Y", kFloat);
  auto model = MustLoad(b);
  ASSERT_NE(model, nullptr);
  Options options;
  options.batch = 9;
  auto bound = core::Bind(model->graph(), options);
  ASSERT_TRUE(bound.ok()) << Describe(bound.status());
  EXPECT_THAT(ShapeOf(*bound, "Y"), ElementsAre(9, 12));
}

TEST(BindTest, BindingDoesNotChangeTheModel) {
  auto model = MustLoad(testing::SmallMlp());
  ASSERT_NE(model, nullptr);
  Options a;
  a.batch = 2;
  Options b;
  b.batch = 1000;
  auto ba = core::Bind(model->graph(), a);
  auto bb = core::Bind(model->graph(), b);
  auto ba2 = core::Bind(model->graph(), a);
  ASSERT_TRUE(ba.ok() && bb.ok() && ba2.ok());
  EXPECT_EQ(ba->bytes, ba2->bytes);
  EXPECT_THAT(ShapeOf(*bb, "Y"), ElementsAre(1000, 4));
  EXPECT_THAT(model->summary().symbolic_dims, ElementsAre("N"));
  EXPECT_EQ(model->graph().value(model->graph().FindValue("X")).dims[0].param, "N");
}

// ---------------------------------------------------------------------------------------------
// Thread safety.

bool SameEstimate(const Estimate& a, const Estimate& b) {
  return a.backend == b.backend && a.peak_allocated == b.peak_allocated &&
         a.peak_reserved == b.peak_reserved && a.peak_device == b.peak_device &&
         a.breakdown.weights == b.breakdown.weights &&
         a.breakdown.gradients == b.breakdown.gradients &&
         a.breakdown.optimizer_state == b.breakdown.optimizer_state &&
         a.breakdown.saved_activations == b.breakdown.saved_activations &&
         a.breakdown.transient == b.breakdown.transient &&
         a.breakdown.allocator_overhead == b.breakdown.allocator_overhead &&
         a.breakdown.cached_free == b.breakdown.cached_free &&
         a.breakdown.cuda_context == b.breakdown.cuda_context && a.peak_phase == b.peak_phase &&
         a.peak_node == b.peak_node && a.diagnostics.size() == b.diagnostics.size();
}

TEST(LoaderConcurrencyTest, OneModelEstimatedFromEightThreadsGivesIdenticalResults) {
  auto model = MustLoad(ExporterStyleFlatten());
  ASSERT_NE(model, nullptr);
  auto est = MakeEstimator("analytical");
  ASSERT_TRUE(est.ok()) << Describe(est.status());
  const Estimator& estimator = **est;

  std::vector<Options> cases;
  for (Mode mode : {Mode::kTrain, Mode::kInfer}) {
    for (int64_t batch : {1, 32}) {
      Options o;
      o.mode = mode;
      o.batch = batch;
      cases.push_back(o);
    }
  }
  std::vector<Estimate> expected;
  for (const Options& o : cases) {
    auto e = estimator.Run(*model, o);
    ASSERT_TRUE(e.ok()) << Describe(e.status());
    expected.push_back(*e);
  }
  EXPECT_GT(expected[1].peak_allocated, expected[0].peak_allocated);  // batch 32 > batch 1

  constexpr int kThreads = 8;
  constexpr int kRounds = 25;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<int> errors(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        size_t i = static_cast<size_t>(t + round) % cases.size();
        auto e = estimator.Run(*model, cases[i]);
        if (!e.ok()) {
          ++errors[static_cast<size_t>(t)];
        } else if (!SameEstimate(*e, expected[i])) {
          ++mismatches[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[static_cast<size_t>(t)], 0) << "thread " << t;
    EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
  }
}

TEST(LoaderConcurrencyTest, LoadingFromEightThreadsAtOnce) {
  TempDir dir;
  const std::string path = dir.WriteModel("mlp.onnx", testing::SmallMlp().model());
  std::vector<int64_t> counts(8, -1);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < counts.size(); ++t) {
    threads.emplace_back([&, t] {
      auto r = LoadModel(path);
      counts[t] = r.ok() ? (*r)->summary().parameter_count : -2;
    });
  }
  for (std::thread& th : threads) th.join();
  for (int64_t c : counts) EXPECT_EQ(c, 16 * 32 + 32 + 32 * 4 + 4);
}

}  // namespace
}  // namespace memest
