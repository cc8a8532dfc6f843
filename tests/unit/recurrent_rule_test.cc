// The recurrent-layer rules against what one cuDNN nn.LSTM / nn.GRU layer held on an H200
// (datasets/h200-torch211/rnn-truth.jsonl, 576 rows; docs/memory-model.md §2.6):
//  * what the layer keeps for its backward (ops/rules.cc, SaveRecurrent: cuDNN's reserve,
//    ops::RecurrentReserveBytes, and a copy of the weights) against `held`;
//  * the transient workspace of its forward and backward calls (memory/device.h,
//    RecurrentWorkspaceRule under the measured stack) against the larger of the forward's peak
//    above its outputs and `held`, and the backward's peak above the gradients it returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/graph.h"
#include "datasets/zoo/families.h"
#include "datasets/zoo/graph_writer.h"
#include "memest/memest.h"
#include "memest/stack.h"
#include "memory/device.h"
#include "ops/rules.h"

namespace memest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kMiB = 1048576.0;

struct Row {
  std::string mode, dtype;
  bool flat = false;
  int64_t seq = 0, batch = 0, dirs = 0, hidden = 0, input = 0;
  double held = 0, workspace = 0, weights = 0;
  // Y, [seq, dirs, batch, hidden]: the rule's output bytes (the row's output_bytes adds hy, cy).
  uint64_t Y() const {
    return static_cast<uint64_t>(seq * dirs * batch * hidden) * (dtype == "float32" ? 4 : 2);
  }
  std::string Describe() const {
    return mode + " " + dtype + (flat ? " flat" : " separate") + " H" + std::to_string(hidden) +
           " I" + std::to_string(input) + " T" + std::to_string(seq) + " B" +
           std::to_string(batch) + " D" + std::to_string(dirs);
  }
};

std::vector<Row> MeasuredRows() {
  std::ifstream in(fs::path(MEMEST_SOURCE_DIR) / "datasets" / "h200-torch211" / "rnn-truth.jsonl");
  EXPECT_TRUE(in.good());
  std::vector<Row> out;
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.value("kind", "") != "rnn") continue;
    Row r;
    r.mode = j.at("mode");
    r.dtype = j.at("dtype");
    r.flat = j.at("flat");
    r.seq = j.at("seq");
    r.batch = j.at("batch");
    r.dirs = j.at("dirs");
    r.hidden = j.at("hidden");
    r.input = j.at("input");
    r.held = j.at("held");
    r.weights = j.at("weight_bytes");
    const double forward =
        j.at("forward_peak").get<double>() - j.at("output_bytes").get<double>() - r.held;
    const double backward = j.at("backward_peak").get<double>() - j.at("grad_bytes").get<double>();
    r.workspace = std::max(forward, backward);
    out.push_back(r);
  }
  EXPECT_EQ(out.size(), 576u);
  return out;
}

// The ONNX node of the row's layer: x [seq, batch, input], W [dirs, gates x hidden, input].
struct Layer {
  core::Node node;
  std::vector<int64_t> x, w;
  uint64_t elem = 0;
};
Layer LayerOf(const Row& r) {
  Layer l;
  l.node.op_type = r.mode == "lstm" ? "LSTM" : "GRU";
  const int64_t gates = r.mode == "lstm" ? 4 : 3;
  l.x = {r.seq, r.batch, r.input};
  l.w = {r.dirs, gates * r.hidden, r.input};
  l.elem = r.dtype == "float32" ? 4 : 2;
  return l;
}

double KeptByRule(const Row& r) {
  const Layer l = LayerOf(r);
  const auto reserve = ops::RecurrentReserveBytes(l.node, core::Dims(l.x), core::Dims(l.w), l.elem);
  EXPECT_TRUE(reserve.has_value());
  return static_cast<double>(reserve.value_or(0)) + r.weights;  // + the weight buffer
}

// Separate weight tensors, as an ONNX graph holds them and memest-measure passes them: the
// reserve plus one copy of the weights reproduces every row, every dtype, to max(2 %, 2 MiB).
TEST(RecurrentRuleTest, ReserveAndWeightBufferReproduceSeparateWeights) {
  int rows = 0;
  for (const Row& r : MeasuredRows()) {
    if (r.flat) continue;
    ++rows;
    const double rule = KeptByRule(r);
    EXPECT_LE(std::abs(rule - r.held), std::max(0.02 * r.held, 2 * kMiB))
        << r.Describe() << ": rule " << rule / kMiB << " MiB, held " << r.held / kMiB << " MiB";
  }
  EXPECT_EQ(rows, 288);
}

// A module's flattened weights: in bfloat16 the same; in float32/float16 cuDNN keeps no copy of
// the weights, so the rule is over by at most their bytes, and never under by more than 2 MiB.
TEST(RecurrentRuleTest, FlattenedWeightsAreOverStatedByAtMostTheWeights) {
  int over_by_weights = 0;
  for (const Row& r : MeasuredRows()) {
    if (!r.flat) continue;
    const double rule = KeptByRule(r);
    const std::string what = r.Describe() + ": rule " + std::to_string(rule / kMiB) +
                             " MiB, held " + std::to_string(r.held / kMiB) + " MiB";
    EXPECT_GE(rule, r.held - 2 * kMiB) << what;
    EXPECT_LE(rule, r.held + r.weights + 2 * kMiB) << what;
    if (rule - r.held > std::max(0.02 * r.held, 2 * kMiB)) {
      ++over_by_weights;
      EXPECT_NE(r.dtype, "bfloat16") << what;
    }
  }
  EXPECT_EQ(over_by_weights, 57);  // large hidden sizes in float32/float16
}

// The stack's workspace coefficient never under-states a call whose output (hidden sizes below
// 256 counted as 256) is 64 MiB or more, over-states those by at most 5x (median 1.4x), and
// under-states the smaller calls by at most 118 MiB.
TEST(RecurrentRuleTest, TheMeasuredWorkspaceCoversEveryLargeCall) {
  auto stack = FindStackProfile("h200-pytorch2.11-lazy");
  ASSERT_TRUE(stack.ok()) << stack.status().ToString();
  int large = 0, under_small = 0;
  double worst_under = 0, worst_over = 0;
  std::vector<double> ratios;
  for (const Row& r : MeasuredRows()) {
    const double rule = static_cast<double>(
        memory::RecurrentWorkspaceRule(*stack, {r.Y(), static_cast<uint64_t>(r.hidden)}));
    const double counted = static_cast<double>(r.Y()) *
                           static_cast<double>(std::max<int64_t>(r.hidden, 256)) /
                           static_cast<double>(r.hidden);
    const std::string what = r.Describe() + ": rule " + std::to_string(rule / kMiB) +
                             " MiB, measured " + std::to_string(r.workspace / kMiB) + " MiB";
    if (counted >= 64 * kMiB) {
      ++large;
      EXPECT_GE(rule, r.workspace) << what;
      worst_over = std::max(worst_over, rule / r.workspace);
      ratios.push_back(rule / r.workspace);
    } else if (rule < r.workspace) {
      ++under_small;
      worst_under = std::max(worst_under, r.workspace - rule);
    }
  }
  EXPECT_EQ(large, 240);
  EXPECT_LE(worst_over, 5.0);
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  EXPECT_LT(ratios[ratios.size() / 2], 1.5);
  EXPECT_LE(worst_under, 118 * kMiB);
  EXPECT_GT(under_small, 0);
}

TEST(RecurrentRuleTest, DimsFollowTheLayoutAndUnknownDimsGiveNothing) {
  core::Node lstm;
  lstm.op_type = "LSTM";
  const std::vector<int64_t> x = {7, 3, 5}, w = {2, 4 * 6, 5}, unknown = {-1, 3, 5};
  const auto d = ops::RecurrentDimsOf(lstm, core::Dims(x), core::Dims(w));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->steps, 7u);
  EXPECT_EQ(d->batch, 3u);
  EXPECT_EQ(d->directions, 2u);
  EXPECT_EQ(d->hidden, 6u);
  // (5 x 7 + 2) x 3 x 2 x 6 float32 elements.
  EXPECT_EQ(ops::RecurrentReserveBytes(lstm, core::Dims(x), core::Dims(w), 4),
            uint64_t{(5 * 7 + 2) * 3 * 2 * 6 * 4});
  EXPECT_FALSE(ops::RecurrentDimsOf(lstm, core::Dims(unknown), core::Dims(w)).has_value());
  EXPECT_FALSE(ops::RecurrentDimsOf(lstm, core::Dims(x), std::nullopt).has_value());
  core::Node gru;
  gru.op_type = "GRU";
  const std::vector<int64_t> w_gru = {1, 24, 5};  // 24 rows: 3 gates of hidden 8
  EXPECT_EQ(ops::RecurrentDimsOf(gru, core::Dims(x), core::Dims(w_gru))->hidden, 8u);
  const std::vector<int64_t> w_odd = {1, 25, 5};  // 25 rows: not a multiple of 3 gates
  EXPECT_FALSE(ops::RecurrentDimsOf(gru, core::Dims(x), core::Dims(w_odd)).has_value());
}

TEST(RecurrentRuleTest, AStackWithoutTheCoefficientAllocatesNoWorkspace) {
  StackProfile none;
  EXPECT_EQ(memory::RecurrentWorkspaceRule(none, {1 << 20, 128}), 0u);
  StackProfile s;
  s.rnn_workspace.value = 2.0;
  EXPECT_EQ(memory::RecurrentWorkspaceRule(s, {1 << 20, 512}), uint64_t{2} << 20);
  // Hidden 128 counts as 256: twice the output's bytes, times the coefficient.
  EXPECT_EQ(memory::RecurrentWorkspaceRule(s, {1 << 20, 128}), uint64_t{4} << 20);
}

// Both backends allocate the stack's workspace around an LSTM's calls: a stack with the measured
// coefficient gives a larger reserved peak than the same stack without it, and none when the
// library workspaces are off (the CPU harness).
TEST(RecurrentRuleTest, TheStackWorkspaceRaisesBothBackendsReservedPeak) {
  zoo::RnnConfig c;
  c.arch = "lstm";
  c.layers = 2;
  c.hidden = 64;
  c.input = 32;
  c.seq = 64;
  auto model = LoadModelFromBytes(zoo::SerializeModel(zoo::BuildRnn(c, "rnn").model), ".", "rnn");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto measured = FindStackProfile("h200-pytorch2.11-lazy");
  ASSERT_TRUE(measured.ok());
  auto without = std::make_shared<StackProfile>(*measured);
  without->rnn_workspace.value = 0;
  for (const char* backend : {"analytical", "symbolic"}) {
    auto est = MakeEstimator(backend);
    ASSERT_TRUE(est.ok());
    auto run = [&](std::shared_ptr<const StackProfile> stack, bool workspaces) {
      Options o;
      o.mode = Mode::kTrain;
      o.dims["batch"] = 256;
      o.custom_stack = std::move(stack);
      o.library_workspaces = workspaces;
      auto e = (*est)->Run(**model, o);
      EXPECT_TRUE(e.ok()) << e.status().ToString();
      return e.ok() ? e->peak_reserved : 0;
    };
    const auto with = std::make_shared<StackProfile>(*measured);
    EXPECT_GT(run(with, true), run(without, true)) << backend;
    EXPECT_EQ(run(with, false), run(without, false)) << backend;
  }
}

}  // namespace
}  // namespace memest
