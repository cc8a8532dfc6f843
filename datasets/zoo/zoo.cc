// datasets/zoo/zoo.cc -- see zoo.h.
#include "datasets/zoo/zoo.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "base/sha256.h"
#include "datasets/zoo/families.h"
#include "datasets/zoo/graph_writer.h"

namespace memest::zoo {

const std::vector<Family>& AllFamilies() {
  static const auto* all =
      new std::vector<Family>{Family::kMlp, Family::kCnn, Family::kTransformer, Family::kRnn};
  return *all;
}

const char* FamilyName(Family f) {
  switch (f) {
    case Family::kMlp:
      return "mlp";
    case Family::kCnn:
      return "cnn";
    case Family::kTransformer:
      return "transformer";
    case Family::kRnn:
      return "rnn";
  }
  return "?";
}

Result<Family> ParseFamily(std::string_view name) {
  for (Family f : AllFamilies()) {
    if (name == FamilyName(f)) return f;
  }
  return InvalidArgument("unknown family '" + std::string(name) +
                         "' (expected mlp, cnn, transformer or rnn)");
}

const char* ScaleName(Scale s) { return s == Scale::kTiny ? "tiny" : "full"; }

Result<Scale> ParseScale(std::string_view name) {
  if (name == "full") return Scale::kFull;
  if (name == "tiny") return Scale::kTiny;
  return InvalidArgument("unknown scale '" + std::string(name) + "' (expected full or tiny)");
}

GeneratedModel Generate(Family family, int64_t index, uint64_t seed, Scale scale) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s%s_s%llu_%04lld", FamilyName(family),
                scale == Scale::kTiny ? "_tiny" : "", static_cast<unsigned long long>(seed),
                static_cast<long long>(index));
  GeneratedModel g;
  g.name = buf;
  g.family = family;
  g.scale = scale;
  // The scale is mixed in so tiny and full streams differ; family ids are 1..4.
  Rng rng(MixSeed(seed, (static_cast<uint64_t>(family) + 1) | (scale == Scale::kTiny ? 0x100 : 0),
                  static_cast<uint64_t>(index)));
  BuiltModel built;
  switch (family) {
    case Family::kMlp: {
      const MlpConfig c = SampleMlp(rng, scale);
      g.arch = c.arch;
      g.config = ToJson(c);
      built = BuildMlp(c, g.name);
      break;
    }
    case Family::kCnn: {
      const CnnConfig c = SampleCnn(rng, scale);
      g.arch = c.arch;
      g.config = ToJson(c);
      built = BuildCnn(c, g.name);
      break;
    }
    case Family::kTransformer: {
      const TransformerConfig c = SampleTransformer(rng, scale);
      g.arch = c.arch;
      g.config = ToJson(c);
      built = BuildTransformer(c, g.name);
      break;
    }
    case Family::kRnn: {
      const RnnConfig c = SampleRnn(rng, scale);
      g.arch = c.arch;
      g.config = ToJson(c);
      built = BuildRnn(c, g.name);
      break;
    }
  }
  g.parameters = built.parameters;
  g.input_dims = built.input_dims;
  g.input_dtype = built.input_dtype;
  g.model = std::move(built.model);
  g.bytes = SerializeModel(g.model);
  g.sha256 = base::Sha256Hex(g.bytes);
  return g;
}

nlohmann::json IndexEntry(const GeneratedModel& m) {
  nlohmann::json dims = nlohmann::json::array();
  for (int64_t d : m.input_dims) {
    if (d == kBatch) {
      dims.push_back("batch");
    } else {
      dims.push_back(d);
    }
  }
  return {{"file", m.name + ".onnx"},
          {"family", FamilyName(m.family)},
          {"arch", m.arch},
          {"scale", ScaleName(m.scale)},
          {"config", m.config},
          {"params", m.parameters},
          {"sha256", m.sha256},
          {"bytes", m.bytes.size()},
          {"input", {{"dtype", m.input_dtype}, {"dims", dims}}}};
}

namespace {

// Copy of `model` whose external initializers are typed graph inputs instead.
onnx::ModelProto WeightsAsInputs(const onnx::ModelProto& model) {
  onnx::ModelProto m = model;
  auto* g = m.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::TensorProto> keep;
  for (const auto& t : g->initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) {
      *keep.Add() = t;
      continue;
    }
    auto* in = g->add_input();
    in->set_name(t.name());
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(t.data_type());
    auto* shape = tt->mutable_shape();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
  }
  g->mutable_initializer()->Swap(&keep);
  return m;
}

Status InferStrict(onnx::ModelProto& m, const std::string& what) {
  try {
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, true));
  } catch (const std::exception& e) {
    return InvalidModel(what + ": strict shape inference failed: " + e.what());
  }
  return Status::Ok();
}

}  // namespace

Status ValidateStructure(const onnx::ModelProto& model) {
  const std::string name = model.graph().name();
  try {
    onnx::checker::check_model(WeightsAsInputs(model));
  } catch (const std::exception& e) {
    return InvalidModel(name + ": ONNX checker: " + e.what());
  }
  onnx::ModelProto m = model;
  return InferStrict(m, name);
}

Status Validate(const onnx::ModelProto& model, int64_t batch) {
  const std::string name = model.graph().name();
  MEMEST_RETURN_IF_ERROR(ValidateStructure(model));

  onnx::ModelProto bound = model;
  auto bind = [&](onnx::ValueInfoProto& vi) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return;
    for (auto& d : *vi.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (d.has_dim_param()) d.set_dim_value(batch);
    }
  };
  for (auto& in : *bound.mutable_graph()->mutable_input()) bind(in);
  for (auto& out : *bound.mutable_graph()->mutable_output()) bind(out);
  MEMEST_RETURN_IF_ERROR(InferStrict(bound, name + " (batch bound)"));
  std::set<std::string> full;
  auto take = [&](const onnx::ValueInfoProto& vi) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return;
    if (vi.type().tensor_type().elem_type() == 0) return;
    for (const auto& d : vi.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value()) return;
    }
    full.insert(vi.name());
  };
  for (const auto& vi : bound.graph().value_info()) take(vi);
  for (const auto& vi : bound.graph().output()) take(vi);
  for (const auto& n : bound.graph().node()) {
    for (const auto& out : n.output()) {
      if (!out.empty() && !full.count(out)) {
        return InvalidModel(
            name + ": node '" + n.name() + "' (" + n.op_type() + ") output '" + out +
            "' has no full static shape after binding batch=" + std::to_string(batch));
      }
    }
  }
  return Status::Ok();
}

Status WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return NotFound("cannot open '" + path + "' for writing");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Internal("cannot write '" + path + "'");
  return Status::Ok();
}

}  // namespace memest::zoo
