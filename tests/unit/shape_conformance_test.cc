// Shape conformance of memest's OWN shape rules (ops/shape_rules*.cc) against ONNX's test models
// (Debian's libonnx-testdata): for every model whose ops all have a shape rule, bind the data
// inputs' dims to the reference inputs (test_data_set_0/input_K.pb) and compare the dtype and
// shape memest infers for each graph output (core::EvaluateShapes: no ONNX inference involved)
// with the reference output_K.pb. Data inputs that hold shape-like values (integer and bool
// tensors, small float vectors such as Resize scales) are turned into initializers holding the
// reference input first, as an exporter's constants would be, so rules that read values
// (Reshape, Slice, Tile, Resize, ...) are checked too. Models with sequence/optional outputs are
// skipped; outputs whose size depends on the data (NonZero, Unique, ...) are counted as unknown,
// not failures.
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/symbolic_shapes.h"
#include "memest/model.h"
#include "memest/status.h"
#include "ops/rules.h"

#ifndef MEMEST_ONNX_TESTDATA
#define MEMEST_ONNX_TESTDATA "/usr/share/libonnx-testdata/data"
#endif

namespace memest {
namespace {

namespace fs = std::filesystem;

std::optional<onnx::TensorProto> ReadTensorFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  onnx::TensorProto t;
  if (!t.ParseFromIstream(&in)) return std::nullopt;
  return t;
}

// Whether a reference input holds values an exporter would have made a constant.
bool ShapeLike(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || d > 1024 || (n *= d) > 1024) return false;
  }
  switch (t.data_type()) {
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL:
      return n <= 1024;
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::DOUBLE:
      return t.dims_size() <= 1 && n <= 8;
    default:
      return false;
  }
}

// Loads the model in `dir` with its shape-like data inputs turned into initializers. `kept`
// gets, per remaining data input, the index K of its input_K.pb.
Result<std::shared_ptr<const Model>> LoadWithConstantInputs(const fs::path& dir,
                                                            std::vector<int>* kept) {
  onnx::ModelProto m;
  {
    std::ifstream in(dir / "model.onnx", std::ios::binary);
    if (!in || !m.ParseFromIstream(&in)) return InvalidModel("does not parse");
  }
  std::set<std::string> initializers;
  for (const auto& t : m.graph().initializer()) initializers.insert(t.name());
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  int k = 0;
  for (const auto& in : m.graph().input()) {
    if (initializers.count(in.name())) {
      *inputs.Add() = in;
      continue;
    }
    auto t = ReadTensorFile(dir / "test_data_set_0" / ("input_" + std::to_string(k) + ".pb"));
    if (t && ShapeLike(*t)) {
      onnx::TensorProto* init = m.mutable_graph()->add_initializer();
      *init = *t;
      init->set_name(in.name());
    } else {
      *inputs.Add() = in;
      kept->push_back(k);
    }
    ++k;
  }
  m.mutable_graph()->mutable_input()->Swap(&inputs);
  return LoadModelFromBytes(m.SerializeAsString(), dir.string(), dir.string());
}

std::string Dims(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

TEST(ShapeConformanceTest, OwnShapeRulesMatchOnnxReferenceOutputs) {
  const fs::path root = MEMEST_ONNX_TESTDATA;
  if (!fs::is_directory(root)) GTEST_SKIP() << root << " is absent (install libonnx-testdata)";
  std::vector<fs::path> models;
  for (const char* suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    std::error_code ec;
    for (fs::directory_iterator it(root / suite, ec), end; !ec && it != end; it.increment(ec)) {
      if (fs::is_regular_file(it->path() / "model.onnx")) models.push_back(it->path());
    }
  }
  std::sort(models.begin(), models.end());
  ASSERT_GE(models.size(), 1000u);

  int not_loaded = 0, uncovered = 0, skipped = 0, covered = 0, passed = 0, unknown = 0;
  std::vector<std::string> failures, unknowns;
  std::map<std::string, int> missing_rule;  // op -> models it keeps out
  std::set<std::string> ops_checked;
  for (const fs::path& dir : models) {
    const std::string name = dir.parent_path().filename().string() + "/" + dir.filename().string();
    std::vector<int> kept;
    auto loaded = LoadWithConstantInputs(dir, &kept);
    if (!loaded.ok()) {
      ++not_loaded;
      continue;
    }
    const core::Graph& g = (*loaded)->graph();
    std::set<std::string> missing;
    for (const core::Node& n : g.nodes) {
      const ops::OpRule* r = ops::FindRule(n.domain, n.op_type);
      if (r == nullptr || r->infer == nullptr) missing.insert(n.op_type);
    }
    if (!missing.empty()) {
      ++uncovered;
      for (const auto& op : missing) ++missing_rule[op];
      continue;
    }
    const fs::path data = dir / "test_data_set_0";
    bool usable = fs::is_directory(data) && g.symbolic != nullptr;
    for (const auto& out : g.proto->graph().output())
      usable = usable && out.type().has_tensor_type();
    std::map<std::string, int64_t> symbols;
    usable = usable && kept.size() == g.data_inputs.size();
    for (size_t k = 0; usable && k < g.data_inputs.size(); ++k) {
      const core::Value& v = g.value(g.data_inputs[k]);
      auto t = ReadTensorFile(data / ("input_" + std::to_string(kept[k]) + ".pb"));
      const auto& atoms = g.symbolic->input_atoms[k];
      if (!t || !v.has_shape || t->dims_size() != static_cast<int>(atoms.size())) {
        usable = false;
        break;
      }
      for (size_t i = 0; i < atoms.size(); ++i) {
        if (atoms[i] < 0) continue;
        const std::string& sym = g.symbolic->table.atom(atoms[i]).name;
        auto [it, inserted] = symbols.emplace(sym, t->dims(static_cast<int>(i)));
        usable = usable && it->second == t->dims(static_cast<int>(i));
      }
    }
    if (!usable) {
      ++skipped;
      continue;
    }
    ++covered;
    for (const core::Node& n : g.nodes) ops_checked.insert(n.op_type);
    auto shapes = core::EvaluateShapes(g, *g.symbolic, symbols);
    if (!shapes.ok()) {
      failures.push_back(name + ": " + shapes.status().ToString());
      continue;
    }
    bool ok = true, all_known = true;
    const auto& outputs = g.proto->graph().output();
    for (int k = 0; k < outputs.size(); ++k) {
      auto ref = ReadTensorFile(data / ("output_" + std::to_string(k) + ".pb"));
      if (!ref) continue;
      const int id = g.FindValue(outputs[k].name());
      if (id < 0) continue;
      const auto& got = shapes->shapes[static_cast<size_t>(id)];
      const int32_t dtype = shapes->dtypes[static_cast<size_t>(id)];
      const std::vector<int64_t> want(ref->dims().begin(), ref->dims().end());
      // The reference files store bfloat16 tensors as uint16 (numpy has no bfloat16).
      const bool same_dtype =
          dtype == ref->data_type() ||
          (dtype == onnx::TensorProto::BFLOAT16 && ref->data_type() == onnx::TensorProto::UINT16);
      if (!same_dtype || (got && *got != want)) {
        ok = false;
        failures.push_back(name + " output '" + outputs[k].name() + "': inferred " +
                           (got ? Dims(*got) : "?") + " dtype " + std::to_string(dtype) +
                           ", reference " + Dims(want) + " dtype " +
                           std::to_string(ref->data_type()));
      } else if (!got) {
        all_known = false;
        unknowns.push_back(name + " output '" + outputs[k].name() + "'");
      }
    }
    if (ok && all_known) ++passed;
    if (ok && !all_known) ++unknown;
  }

  std::cout << "memest shape conformance (own rules, no ONNX inference): " << models.size()
            << " models; " << covered << " covered (every op has a shape rule), " << passed
            << " passed, " << failures.size() << " failed outputs, " << unknown
            << " with data-dependent outputs; " << uncovered << " use an op without a rule, "
            << skipped << " skipped (sequence/optional outputs, no reference data), " << not_loaded
            << " do not load\n";
  std::cout << "  ops exercised: " << ops_checked.size() << "\n";
  for (const std::string& f : failures) std::cout << "  FAILED " << f << "\n";
  for (const std::string& u : unknowns) std::cout << "  unknown " << u << "\n";
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [op, n] : missing_rule) by_count.emplace_back(n, op);
  std::sort(by_count.rbegin(), by_count.rend());
  std::cout << "  ops without a shape rule (models kept out):";
  for (const auto& [n, op] : by_count) std::cout << " " << op << "(" << n << ")";
  std::cout << "\n";
  RecordProperty("shape_models", static_cast<int>(models.size()));
  RecordProperty("shape_covered", covered);
  RecordProperty("shape_passed", passed);
  RecordProperty("shape_failed_outputs", static_cast<int>(failures.size()));
  RecordProperty("shape_data_dependent", unknown);
  RecordProperty("shape_uncovered", uncovered);
  RecordProperty("shape_ops_exercised", static_cast<int>(ops_checked.size()));
  EXPECT_GE(covered, 600);
  EXPECT_TRUE(failures.empty()) << failures.size() << " outputs inferred wrongly";
}

}  // namespace
}  // namespace memest

namespace memest {
namespace {

// Differential check on the bundled training exports (datasets/models/): at batch 3, every value
// whose shape ONNX's own inference (with data propagation) knows must have the same dtype and
// shape in memest's symbolic pass, and memest must know at least as many.
TEST(ShapeConformanceTest, OwnShapesAgreeWithOnnxInferenceOnBundledModels) {
  const fs::path dir = fs::path(MEMEST_SOURCE_DIR) / "datasets" / "models";
  int models = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".onnx") continue;
    const std::string name = entry.path().filename().string();
    auto loaded = LoadModel(entry.path().string());
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status().ToString();
    const core::Graph& g = (*loaded)->graph();
    ASSERT_NE(g.symbolic, nullptr);
    EXPECT_FALSE(g.symbolic->any_fallback) << name << " needs the ONNX fallback";
    EXPECT_EQ(g.symbolic->rule_failures, 0) << name;
    ++models;
    std::map<std::string, int64_t> symbols;
    for (size_t k = 0; k < g.data_inputs.size(); ++k) {
      for (core::AtomId a : g.symbolic->input_atoms[k]) {
        if (a >= 0) symbols[g.symbolic->table.atom(a).name] = 3;
      }
    }
    auto ours = core::EvaluateShapes(g, *g.symbolic, symbols);
    ASSERT_TRUE(ours.ok()) << name << ": " << ours.status().ToString();

    onnx::ModelProto m = *g.proto;
    m.mutable_graph()->clear_value_info();
    for (auto& in : *m.mutable_graph()->mutable_input()) {
      auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
      for (auto& d : *shape->mutable_dim()) {
        if (!d.has_dim_value()) d.set_dim_value(3);
      }
    }
    try {
      onnx::shape_inference::InferShapes(
          m, onnx::OpSchemaRegistry::Instance(),
          onnx::ShapeInferenceOptions(false, 0, /*enable_data_propagation=*/true));
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": ONNX inference threw " << e.what();
      continue;
    }
    int onnx_known = 0, ours_known = 0, compared = 0;
    for (size_t i = 0; i < g.values.size(); ++i) {
      ours_known += ours->shapes[i].has_value();
      EXPECT_TRUE(ours->shapes[i].has_value() || g.values[i].kind == core::ValueKind::kInitializer)
          << name << ": no shape for '" << g.values[i].name << "'";
    }
    auto check = [&](const onnx::ValueInfoProto& vi) {
      const int id = g.FindValue(vi.name());
      if (id < 0 || !vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return;
      std::vector<int64_t> dims;
      for (const auto& d : vi.type().tensor_type().shape().dim()) {
        if (!d.has_dim_value()) return;
        dims.push_back(d.dim_value());
      }
      ++onnx_known;
      const auto& got = ours->shapes[static_cast<size_t>(id)];
      EXPECT_TRUE(got.has_value()) << name << " '" << vi.name() << "': ONNX knows " << Dims(dims);
      if (got) {
        ++compared;
        EXPECT_EQ(*got, dims) << name << " '" << vi.name() << "'";
      }
      EXPECT_EQ(ours->dtypes[static_cast<size_t>(id)], vi.type().tensor_type().elem_type())
          << name << " '" << vi.name() << "'";
    };
    for (const auto& vi : m.graph().value_info()) check(vi);
    for (const auto& vi : m.graph().output()) check(vi);
    std::cout << "  " << name << ": ONNX knows " << onnx_known << " intermediate shapes, memest "
              << ours_known << " values; " << compared << " compared\n";
  }
  EXPECT_GE(models, 4);
}

}  // namespace
}  // namespace memest
