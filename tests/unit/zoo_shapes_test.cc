// Graphs of one shape each (datasets/zoo/shapes.h), which the benchmarks use to show that no pass
// grows faster than the graph: every kind passes ONNX's checker and strict shape inference
// (zoo::Validate), has the node count its comment gives, and loads and estimates a training step
// with both backends without an unknown shape; the bytes are the same on every call.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <string>

#include "datasets/zoo/shapes.h"
#include "datasets/zoo/zoo.h"
#include "memest/memest.h"

namespace memest::zoo {
namespace {

constexpr int kWidth = 12;

// Nodes of each kind at width w (shapes.h).
int64_t NodesOf(const std::string& kind, int64_t w) {
  const std::map<std::string, int64_t> nodes{{"fanout", 2 * w - 1},
                                             {"concat", w + 1},
                                             {"split", w + 3},
                                             {"skips", 3 * w - 1},
                                             {"outputs", w}};
  return nodes.at(kind);
}

TEST(ShapeModelTest, EveryKindValidatesAndEstimatesWithBothBackends) {
  for (const std::string& kind : ShapeKinds()) {
    SCOPED_TRACE(kind);
    const std::string bytes = ShapeModel(kind, kWidth);
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(bytes));
    const Status valid = Validate(proto, 4);
    EXPECT_TRUE(valid.ok()) << valid.ToString();
    EXPECT_EQ(bytes, ShapeModel(kind, kWidth)) << "not deterministic";

    auto model = LoadModelFromBytes(bytes, "/nonexistent", kind);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ((*model)->summary().node_count, NodesOf(kind, kWidth));
    Options o;
    o.batch = 4;
    for (const char* backend : {"analytical", "symbolic"}) {
      SCOPED_TRACE(backend);
      auto est = MakeEstimator(backend);
      ASSERT_TRUE(est.ok());
      auto e = (*est)->Run(**model, o);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      EXPECT_GT(e->peak_device, 0u);
      for (const Diagnostic& d : e->diagnostics) EXPECT_NE(d.code, "unknown_shapes") << d.message;
    }
  }
}

TEST(ShapeModelTest, AnUnknownKindIsEmpty) { EXPECT_EQ(ShapeModel("ring", kWidth), ""); }

}  // namespace
}  // namespace memest::zoo
