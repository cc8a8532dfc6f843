// datasets/zoo/shapes.cc -- see shapes.h.
#include "datasets/zoo/shapes.h"

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/zoo/graph_writer.h"

namespace memest::zoo {
namespace {

constexpr int64_t kWidth = 64;  // X's columns, and each branch's

// `count` MatMuls of `x`, each by a weight of its own.
std::vector<std::string> Branches(GraphWriter& w, const std::string& x, int count) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    w.SetScope("branch" + std::to_string(i));
    out.push_back(w.Op("MatMul", {x, w.Weight("weight", {kWidth, kWidth})}));
  }
  w.SetScope("");
  return out;
}

std::string SumChain(GraphWriter& w, const std::vector<std::string>& values) {
  std::string sum = values.front();
  for (size_t i = 1; i < values.size(); ++i) sum = w.Op("Add", {sum, values[i]});
  return sum;
}

}  // namespace

const std::vector<std::string>& ShapeKinds() {
  static const std::vector<std::string> kinds{"fanout", "concat", "split", "skips", "outputs"};
  return kinds;
}

std::string ShapeModel(const std::string& kind, int width) {
  GraphWriter w("shape_" + kind);
  const std::string x = w.Input("X", kFloat, {kBatch, kWidth});
  if (kind == "fanout") {
    w.Output(SumChain(w, Branches(w, x, width)), kFloat, {kBatch, kWidth});
  } else if (kind == "concat") {
    w.Output(w.Op("Concat", Branches(w, x, width), {Attr("axis", int64_t{1})}), kFloat,
             {kBatch, kWidth * width});
  } else if (kind == "split") {
    const std::string wide = w.Op("MatMul", {x, w.Weight("weight", {kWidth, 8 * int64_t{width}})});
    const std::vector<std::string> parts =
        w.Node("Split", {wide}, width, {Attr("axis", int64_t{1})});  // equal parts
    std::vector<std::string> relus;
    relus.reserve(parts.size());
    for (const std::string& p : parts) relus.push_back(w.Op("Relu", {p}));
    w.Output(w.Op("Concat", relus, {Attr("axis", int64_t{1})}), kFloat,
             {kBatch, 8 * int64_t{width}});
  } else if (kind == "skips") {
    std::vector<std::string> layers;
    std::string h = x;
    for (int i = 0; i < width; ++i) {
      w.SetScope("layer" + std::to_string(i));
      h = w.Op("Relu", {w.Op("MatMul", {h, w.Weight("weight", {kWidth, kWidth})})});
      layers.push_back(h);
    }
    w.SetScope("");
    w.Output(SumChain(w, layers), kFloat, {kBatch, kWidth});
  } else if (kind == "outputs") {
    for (const std::string& b : Branches(w, x, width)) w.Output(b, kFloat, {kBatch, kWidth});
  } else {
    return "";
  }
  return SerializeModel(std::move(w).Finish());
}

}  // namespace memest::zoo
