// core::ShapeProgram: the values' distinct symbolic shapes, each evaluated once per bind
// (core/symbolic_shapes.h), and core::Bind with it against Bind evaluating every value's dims.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/bind.h"
#include "core/loader.h"
#include "core/symbolic_shapes.h"
#include "memest/options.h"
#include "ops/rules.h"
#include "ops/shape_pass.h"
#include "testing/bundled.h"

namespace memest {
namespace {

using core::DimExpr;
using core::ShapeProgram;
using core::SymTensor;

SymTensor Shaped(std::vector<DimExpr> dims) {
  SymTensor t;
  t.dtype = 1;
  t.shape = std::move(dims);
  return t;
}

TEST(ShapeProgramTest, ValuesOfTheSameExpressionsShareAShape) {
  const DimExpr batch = DimExpr::Atom(0);
  const DimExpr other_batch = DimExpr::Atom(0);  // the same polynomial, built apart
  std::vector<SymTensor> types = {
      Shaped({batch, 3}),        // 0
      Shaped({batch, 3}),        // 1: copies of the same expressions
      Shaped({batch, 4}),        // 2: another constant
      SymTensor{},               // 3: no rank
      Shaped({}),                // 4: a scalar
      Shaped({3, batch}),        // 5: the same dims in another order
      Shaped({batch, 3, 1}),     // 6: another rank
      Shaped({}),                // 7: a scalar again
      Shaped({other_batch, 3}),  // 8
  };
  const ShapeProgram p = ShapeProgram::Compile(types);
  EXPECT_EQ(p.shape_of(0), p.shape_of(1));
  EXPECT_NE(p.shape_of(0), p.shape_of(2));
  EXPECT_EQ(p.shape_of(3), ShapeProgram::kNone);
  EXPECT_NE(p.shape_of(4), ShapeProgram::kNone);
  EXPECT_NE(p.shape_of(5), p.shape_of(0));
  EXPECT_NE(p.shape_of(6), p.shape_of(0));
  EXPECT_EQ(p.shape_of(7), p.shape_of(4));
  // Equal polynomials built apart may be two shapes (one more evaluation, the same dims); the
  // numbers are the distinct shapes in order of their first value.
  EXPECT_LT(p.shape_of(8), p.shapes());
  EXPECT_EQ(p.shape_of(9), ShapeProgram::kNone);  // past the program
  EXPECT_EQ(ShapeProgram().shape_of(0), ShapeProgram::kNone);
}

TEST(ShapeProgramTest, ManyDistinctShapesKeepTheirNumbers) {
  // Enough shapes to grow the table several times, each met twice far apart.
  std::vector<SymTensor> types;
  for (int64_t i = 0; i < 1000; ++i) types.push_back(Shaped({i, DimExpr::Atom(0)}));
  for (int64_t i = 0; i < 1000; ++i) types.push_back(types[static_cast<size_t>(i)]);
  const ShapeProgram p = ShapeProgram::Compile(types);
  EXPECT_EQ(p.shapes(), 1000u);
  for (size_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(p.shape_of(i), i);
    EXPECT_EQ(p.shape_of(1000 + i), i);
  }
}

// A graph loaded as LoadModel loads it, kept mutable so that its shapes can be swapped; nullptr
// when it does not load.
std::unique_ptr<core::Graph> Prepared(Result<std::unique_ptr<core::Graph>> graph) {
  if (!graph.ok()) return nullptr;
  std::unique_ptr<core::Graph> g = std::move(graph).value();
  ops::ResolveRules(g.get());
  g->symbolic = ops::InferSymbolicShapes(*g);
  return g;
}

// Bind with the program and Bind with none (every value evaluated on its own, as before the
// program) give the same bound graph, or the same error.
void ExpectTheSameBind(core::Graph* g, const Options& o, const std::string& what) {
  SCOPED_TRACE(what);
  const Result<core::BoundGraph> with = core::Bind(*g, o);
  const std::shared_ptr<const core::SymbolicShapes> shapes = g->symbolic;
  auto plain = std::make_shared<core::SymbolicShapes>(*shapes);
  plain->program = ShapeProgram();
  g->symbolic = plain;
  const Result<core::BoundGraph> without = core::Bind(*g, o);
  g->symbolic = shapes;
  ASSERT_EQ(with.ok(), without.ok());
  if (!with.ok()) {
    EXPECT_EQ(with.status().ToString(), without.status().ToString());
    return;
  }
  ASSERT_EQ(with->shapes.size(), without->shapes.size());
  for (size_t id = 0; id < with->shapes.size(); ++id) {
    const core::MaybeDims a = with->shapes[id], b = without->shapes[id];
    ASSERT_EQ(a.has_value(), b.has_value()) << g->values[id].name;
    if (a) {
      EXPECT_EQ(std::vector<int64_t>(a->begin(), a->end()),
                std::vector<int64_t>(b->begin(), b->end()))
          << g->values[id].name;
    }
  }
  EXPECT_EQ(with->dtypes, without->dtypes);
  EXPECT_EQ(with->bytes, without->bytes);
  EXPECT_EQ(with->bindings, without->bindings);
  EXPECT_EQ(with->unknown_shapes, without->unknown_shapes);
  ASSERT_EQ(with->diagnostics.size(), without->diagnostics.size());
  for (size_t i = 0; i < with->diagnostics.size(); ++i) {
    EXPECT_EQ(with->diagnostics[i].message, without->diagnostics[i].message);
  }
}

TEST(ShapeProgramTest, BindingTheBundledModelsIsBindingEveryValue) {
  int graphs = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(MEMEST_SOURCE_DIR) + "/datasets/models")) {
    if (entry.path().extension() != ".onnx") continue;
    std::unique_ptr<core::Graph> g = Prepared(core::LoadGraph(entry.path().string()));
    ASSERT_NE(g, nullptr) << entry.path();
    ++graphs;
    // Batches that fit, and one whose tensors pass 64 PiB (an error, the same either way).
    for (int64_t batch : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1} << 50}) {
      Options o;
      o.batch = batch;
      o.allow_unknown_shapes = true;
      ExpectTheSameBind(g.get(), o,
                        entry.path().stem().string() + " batch " + std::to_string(batch));
    }
  }
  EXPECT_GE(graphs, 4);
}

TEST(ShapeProgramTest, BindingLanguageModelsIsBindingEveryValue) {
  for (const std::string name : {"qwen2.5-0.5b", "gpt2", "llama-2-7b-hf", "bert-base-uncased"}) {
    const bool decoder = name != "bert-base-uncased";
    for (const auto phase : {zoo::HfGraphOptions::kTrain, zoo::HfGraphOptions::kPrefill,
                             zoo::HfGraphOptions::kDecode}) {
      if (!decoder && phase != zoo::HfGraphOptions::kTrain) continue;
      zoo::HfGraphOptions graph_options;
      graph_options.phase = phase;
      const testing::HfGraph hf = testing::HfGraphBytes(name + ".json", graph_options);
      ASSERT_FALSE(hf.bytes.empty()) << name;
      std::unique_ptr<core::Graph> g =
          Prepared(core::LoadGraphFromBytes(hf.bytes, ".", hf.architecture));
      ASSERT_NE(g, nullptr) << name;
      for (int64_t seq : {int64_t{1}, int64_t{100}, int64_t{2048}, int64_t{1} << 40}) {
        Options o;
        o.batch = 3;
        o.dims["seq"] = phase == zoo::HfGraphOptions::kDecode ? 1 : seq;
        if (phase == zoo::HfGraphOptions::kDecode) o.dims["past"] = seq;
        ExpectTheSameBind(g.get(), o,
                          name + " " + zoo::PhaseName(phase) + " " + std::to_string(seq));
      }
    }
  }
}

}  // namespace
}  // namespace memest
