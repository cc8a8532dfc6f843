// The recurrent_layers warning (memory/context.cc): a training estimate of a graph with LSTM/GRU
// layers says where their rules were measured and how far they missed there
// (datasets/measured/gpu-h200.jsonl), and whether the stack in use has the measured workspace; an
// inference estimate and a graph without recurrent layers say nothing of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "datasets/zoo/families.h"
#include "datasets/zoo/graph_writer.h"
#include "memest/memest.h"

namespace memest {
namespace {

std::shared_ptr<const Model> Built(const zoo::BuiltModel& built) {
  auto m = LoadModelFromBytes(zoo::SerializeModel(built.model), ".", "rnn");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Warnings coded recurrent_layers; with `nodes`, only those that count that many layers.
int RecurrentWarnings(const Model& m, Mode mode, const std::string& nodes = "",
                      const std::string& stack = "") {
  Options o;
  o.mode = mode;
  o.stack = stack;
  o.dims["batch"] = 8;
  auto est = MakeEstimator("symbolic");
  EXPECT_TRUE(est.ok());
  auto e = (*est)->Run(m, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return -1;
  return static_cast<int>(
      std::count_if(e->diagnostics.begin(), e->diagnostics.end(), [&nodes](const Diagnostic& d) {
        return d.code == "recurrent_layers" && d.severity == Severity::kWarning &&
               d.message.find(nodes) != std::string::npos;
      }));
}

TEST(RecurrentDiagnosticTest, OnlyATrainingStepWithRecurrentLayersWarns) {
  zoo::RnnConfig c;
  c.arch = "lstm";
  c.layers = 2;
  c.hidden = 32;
  c.input = 16;
  c.seq = 8;
  auto rnn = Built(zoo::BuildRnn(c, "rnn"));
  ASSERT_NE(rnn, nullptr);
  EXPECT_EQ(RecurrentWarnings(*rnn, Mode::kTrain, "2 LSTM/GRU/RNN node(s)"), 1);
  EXPECT_EQ(RecurrentWarnings(*rnn, Mode::kInfer), 0);
  // The default stack has no measured recurrent workspace: the warning says it is left out.
  EXPECT_EQ(RecurrentWarnings(*rnn, Mode::kTrain, "no measured recurrent-layer workspace"), 1);
  EXPECT_EQ(RecurrentWarnings(*rnn, Mode::kTrain, "no measured recurrent-layer workspace",
                              "h200-pytorch2.11-lazy"),
            0);
  EXPECT_EQ(RecurrentWarnings(*rnn, Mode::kTrain, "2 LSTM/GRU/RNN", "h200-pytorch2.11-lazy"), 1);
  auto mlp = LoadModel(std::string(MEMEST_SOURCE_DIR) + "/datasets/models/mlp_small_train.onnx");
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  EXPECT_EQ(RecurrentWarnings(**mlp, Mode::kTrain), 0);
}

}  // namespace
}  // namespace memest
