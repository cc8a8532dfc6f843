// core/onnx_fallback.cc -- see core/onnx_fallback.h for the policy.
#include "core/onnx_fallback.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/dtype.h"

namespace memest::core {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// Op types memest has no rule for that ONNX's inference may size: the control-flow ops, whose
// bodies and attributes CheckForOnnx() checks first (Scan's counts, every body node against its
// schema). Every other op's inference function is kept away from untrusted nodes: the fuzzer
// found MaxUnpool's and STFT's reading inputs they never checked, and a list of functions nobody
// read is a list of crashes not found yet. domain "" is ai.onnx.
struct VettedOp {
  std::string_view domain;
  std::string_view op_type;
};
constexpr VettedOp kVettedOps[] = {{"", "If"}, {"", "Loop"}, {"", "Scan"}};

// ONNX 1.12's inference functions (Reshape, Expand, Tile, ConstantOfShape, ...) read only constant
// inputs (getInputData), never the values data propagation computed (getSymbolicInput): a Reshape
// whose target comes from Shape -> Gather -> Concat stays unknown. This context hands them those
// values as constants when every element is known.
class PropagatedDataContext final : public onnx::InferenceContext {
 public:
  explicit PropagatedDataContext(onnx::InferenceContext& ctx)
      : ctx_(ctx), data_(ctx.getNumInputs()) {
    for (size_t i = 0; i < data_.size(); ++i) {
      if (ctx.getInputData(i) == nullptr) data_[i] = ConstantFromPropagated(ctx, i);
    }
  }
  const onnx::AttributeProto* getAttribute(const std::string& name) const override {
    return ctx_.getAttribute(name);
  }
  size_t getNumInputs() const override { return ctx_.getNumInputs(); }
  const onnx::TypeProto* getInputType(size_t i) const override { return ctx_.getInputType(i); }
  const onnx::TensorProto* getInputData(size_t i) const override {
    if (i < data_.size() && data_[i]) return &*data_[i];
    return ctx_.getInputData(i);
  }
  size_t getNumOutputs() const override { return ctx_.getNumOutputs(); }
  onnx::TypeProto* getOutputType(size_t i) override { return ctx_.getOutputType(i); }
  onnx::GraphInferencer* getGraphAttributeInferencer(const std::string& name) override {
    return ctx_.getGraphAttributeInferencer(name);
  }
  const onnx::SparseTensorProto* getInputSparseData(size_t i) const override {
    return ctx_.getInputSparseData(i);
  }
  const onnx::TensorShapeProto* getSymbolicInput(size_t i) const override {
    return ctx_.getSymbolicInput(i);
  }

 private:
  static std::optional<onnx::TensorProto> ConstantFromPropagated(onnx::InferenceContext& ctx,
                                                                 size_t i) {
    const onnx::TypeProto* type = ctx.getInputType(i);
    const onnx::TensorShapeProto* values = ctx.getSymbolicInput(i);
    if (type == nullptr || values == nullptr || !type->has_tensor_type()) return std::nullopt;
    const int32_t elem = type->tensor_type().elem_type();
    if (elem != base::kInt64 && elem != base::kInt32) return std::nullopt;
    const bool scalar =
        type->tensor_type().has_shape() && type->tensor_type().shape().dim_size() == 0;
    if (scalar && values->dim_size() != 1) return std::nullopt;
    onnx::TensorProto t;
    t.set_data_type(elem);
    if (!scalar) t.add_dims(values->dim_size());
    for (const auto& d : values->dim()) {
      if (!d.has_dim_value()) return std::nullopt;
      if (elem == base::kInt64) {
        t.add_int64_data(d.dim_value());
      } else {
        t.add_int32_data(static_cast<int32_t>(d.dim_value()));
      }
    }
    return t;
  }

  onnx::InferenceContext& ctx_;
  std::vector<std::optional<onnx::TensorProto>> data_;
};

// ONNX's schema registry, with every inference function run through PropagatedDataContext.
// Process-wide and thread-safe (schemas are wrapped once, on first use).
class PropagatingSchemaRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, const int max_inclusive_version,
                                  const std::string& domain) const override {
    const onnx::OpSchema* base =
        onnx::OpSchemaRegistry::Instance()->GetSchema(key, max_inclusive_version, domain);
    if (base == nullptr || !base->has_type_and_shape_inference_function()) return base;
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<onnx::OpSchema>& wrapped = wrapped_[base];
    if (!wrapped) {
      wrapped = std::make_unique<onnx::OpSchema>(*base);
      wrapped->TypeAndShapeInferenceFunction(
          [infer = base->GetTypeAndShapeInferenceFunction()](onnx::InferenceContext& ctx) {
            PropagatedDataContext with_data(ctx);
            infer(with_data);
          });
    }
    return wrapped.get();
  }

 private:
  mutable std::mutex mu_;
  mutable std::unordered_map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> wrapped_;
};

const onnx::ISchemaRegistry* SchemaRegistry() {
  static const auto* registry = new PropagatingSchemaRegistry();  // never destroyed
  return registry;
}

// Names a subgraph body reads from enclosing scopes (read but not defined inside), recursively.
void CollectFreeNames(const onnx::GraphProto& g, std::set<std::string>* out) {
  std::unordered_set<std::string> defined;
  for (const auto& vi : g.input()) defined.insert(vi.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) defined.insert(o);
  }
  std::set<std::string> inner;
  for (const auto& n : g.node()) {
    for (const auto& in : n.input()) {
      if (!in.empty() && !defined.count(in)) out->insert(in);
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g()) CollectFreeNames(a.g(), &inner);
      for (const auto& sub : a.graphs()) CollectFreeNames(sub, &inner);
    }
  }
  for (const auto& name : inner) {
    if (!defined.count(name)) out->insert(name);
  }
}

// Builds the reduced model of core/onnx_fallback.h.
class ReducedModel {
 public:
  ReducedModel(const Graph& graph, const SymbolicShapes& sym, const AtomValues& atoms,
               const FallbackState& state)
      : graph_(graph), sym_(sym), atoms_(atoms), state_(state) {}

  onnx::ModelProto Build(const std::vector<bool>& wanted) {
    model_.set_ir_version(graph_.proto->ir_version());
    *model_.mutable_opset_import() = graph_.proto->opset_import();
    const size_t n = graph_.nodes.size();
    std::vector<bool> in_s(n, false);
    for (size_t i = 0; i < n; ++i) {
      for (int o : graph_.nodes[i].outputs) in_s[i] = in_s[i] || (o >= 0 && wanted[Id(o)]);
      if (in_s[i]) {
        for (int o : graph_.nodes[i].outputs) {
          if (o >= 0) produced_.insert(o);
        }
      }
    }
    auto* g = model_.mutable_graph();
    for (size_t i = 0; i < n; ++i) {
      if (!in_s[i]) continue;
      const Node& node = graph_.nodes[i];
      for (int in : node.inputs) AddBoundary(in);
      std::set<std::string> free;
      for (const auto& a : node.proto->attribute()) {
        if (a.has_g()) CollectFreeNames(a.g(), &free);
        for (const auto& sub : a.graphs()) CollectFreeNames(sub, &free);
      }
      for (const auto& name : free) AddBoundary(graph_.FindValue(name));
      *g->add_node() = *node.proto;  // its outputs land in value_info (no graph outputs)
    }
    return std::move(model_);
  }

  // Concrete rank of a value read by the reduced model, when memest knows it.
  std::optional<size_t> RankOf(const std::string& name) const {
    const int id = graph_.FindValue(name);
    if (id < 0 || !(*state_.shapes)[Id(id)]) return std::nullopt;
    return (*state_.shapes)[Id(id)]->size();
  }

 private:
  static size_t Id(int id) { return static_cast<size_t>(id); }

  // A value the reduced nodes read but do not produce: an initializer when memest knows its
  // (small integer or float) elements, else a typed graph input.
  void AddBoundary(int id) {
    if (id < 0 || produced_.count(id) || !added_.insert(id).second) return;
    const std::string& name = graph_.value(id).name;
    const int32_t dtype = (*state_.dtypes)[Id(id)];
    const auto& shape = (*state_.shapes)[Id(id)];
    if (auto t = KnownElements(id, dtype, shape)) {
      t->set_name(name);
      *model_.mutable_graph()->add_initializer() = std::move(*t);
      return;
    }
    auto* in = model_.mutable_graph()->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(dtype);
    if (!shape) return;
    auto* s = tt->mutable_shape();
    for (int64_t d : *shape) s->add_dim()->set_dim_value(d);
  }

  std::optional<onnx::TensorProto> KnownElements(int id, int32_t dtype,
                                                 const MaybeDims& shape) const {
    const SymTensor& t = sym_.types[Id(id)];
    if (!shape) return std::nullopt;
    onnx::TensorProto out;
    out.set_data_type(dtype);
    for (int64_t d : *shape) out.add_dims(d);
    if (t.values && (dtype == base::kInt64 || dtype == base::kInt32)) {
      for (const DimExpr& e : *t.values) {
        auto v = e.Evaluate(atoms_);
        if (!v.ok()) return std::nullopt;
        if (dtype == base::kInt64) {
          out.add_int64_data(*v);
        } else {
          out.add_int32_data(static_cast<int32_t>(*v));
        }
      }
      return out;
    }
    if (t.float_values && dtype == base::kFloat) {
      for (double v : *t.float_values) out.add_float_data(static_cast<float>(v));
      return out;
    }
    return std::nullopt;
  }

  const Graph& graph_;
  const SymbolicShapes& sym_;
  const AtomValues& atoms_;
  const FallbackState& state_;
  onnx::ModelProto model_;
  std::unordered_set<int> produced_;
  std::unordered_set<int> added_;
};

// Attribute ranges ONNX's inference functions index with, unchecked (see the policy).
Status CheckRanges(const onnx::NodeProto& n, std::optional<size_t> rank, const std::string& what) {
  const int64_t inputs_and_outputs = int64_t{n.input_size()} + n.output_size();
  for (const auto& a : n.attribute()) {
    if (rank && (a.name() == "axis" || a.name() == "axes")) {
      const int64_t r = static_cast<int64_t>(*rank) + a.ints_size();
      auto in_range = [&](int64_t v) { return v >= -r && v <= r; };
      const bool ok = a.name() == "axis" ? in_range(a.i())
                                         : std::all_of(a.ints().begin(), a.ints().end(), in_range);
      if (!ok) {
        return InvalidModel(what + ": attribute " + Quote(a.name()) +
                            " is out of range for an input of rank " + std::to_string(*rank));
      }
    }
    if (n.op_type() == "Scan" && a.name() == "num_scan_inputs" &&
        (a.i() < 1 || a.i() > n.input_size())) {
      return InvalidModel(what + ": num_scan_inputs " + std::to_string(a.i()) + " is outside [1, " +
                          std::to_string(n.input_size()) + "] (the node's input count)");
    }
    if (n.op_type() == "Scan" && a.ints_size() > inputs_and_outputs) {
      return InvalidModel(what + ": attribute " + Quote(a.name()) + " lists " +
                          std::to_string(a.ints_size()) + " entries for a node with " +
                          std::to_string(inputs_and_outputs) + " inputs and outputs");
    }
  }
  return Status::Ok();
}

// Schema and range checks of one node handed to ONNX, and of every node in its bodies.
Status CheckForOnnx(const onnx::NodeProto& n, const std::map<std::string, int>& opsets,
                    std::optional<size_t> rank, const std::string& where) {
  const std::string what =
      "node " + Quote(n.name().empty() ? n.op_type() : n.name()) + " (" + n.op_type() + ")" + where;
  const std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
  if (auto it = opsets.find(domain); it != opsets.end()) {
    if (const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(n.op_type(), it->second, domain)) {
      try {
        s->Verify(n);
      } catch (const std::exception& e) {
        return InvalidModel(what + " does not match its ONNX schema: " + e.what());
      }
    }
  }
  MEMEST_RETURN_IF_ERROR(CheckRanges(n, rank, what));
  for (const auto& a : n.attribute()) {
    std::vector<const onnx::GraphProto*> bodies;
    if (a.has_g()) bodies.push_back(&a.g());
    for (const auto& g : a.graphs()) bodies.push_back(&g);
    for (const onnx::GraphProto* body : bodies) {
      for (const auto& inner : body->node()) {
        MEMEST_RETURN_IF_ERROR(
            CheckForOnnx(inner, opsets, std::nullopt, " in the body of " + what));
      }
    }
  }
  return Status::Ok();
}

// Takes ONNX's result for `vi` where it was asked for and is complete.
void Take(const Graph& graph, const onnx::ValueInfoProto& vi, const std::vector<bool>& wanted,
          FallbackState& state) {
  const int id = graph.FindValue(vi.name());
  if (id < 0 || !wanted[static_cast<size_t>(id)] || !vi.type().has_tensor_type()) return;
  const auto i = static_cast<size_t>(id);
  const auto& tt = vi.type().tensor_type();
  if (base::IsKnownDType(tt.elem_type()) && (*state.dtypes)[i] == 0)
    (*state.dtypes)[i] = tt.elem_type();
  if (!tt.has_shape() || (*state.shapes)[i]) return;
  std::vector<int64_t> dims;
  for (const auto& d : tt.shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return;
    dims.push_back(d.dim_value());
  }
  state.shapes->Set(i, dims);
}

}  // namespace

bool OnnxMayInfer(std::string_view domain, std::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  return std::any_of(std::begin(kVettedOps), std::end(kVettedOps),
                     [&](const VettedOp& v) { return v.domain == domain && v.op_type == op_type; });
}

Status InferWithOnnx(const Graph& graph, const SymbolicShapes& sym, const AtomValues& atoms,
                     const std::vector<bool>& wanted, FallbackState state) {
  ReducedModel reduced(graph, sym, atoms, state);
  onnx::ModelProto m = reduced.Build(wanted);
  std::map<std::string, int> opsets;
  for (const auto& op : m.opset_import()) {
    opsets[op.domain() == "ai.onnx" ? "" : op.domain()] = static_cast<int>(op.version());
  }
  for (const auto& n : m.graph().node()) {
    const std::optional<size_t> rank =
        n.input_size() > 0 ? reduced.RankOf(n.input(0)) : std::nullopt;
    MEMEST_RETURN_IF_ERROR(CheckForOnnx(n, opsets, rank, ""));
  }
  try {
    onnx::shape_inference::InferShapes(
        m, SchemaRegistry(),
        onnx::ShapeInferenceOptions(/*check_type=*/false, /*error_mode=*/0,
                                    /*enable_data_propagation=*/true));
  } catch (const std::exception& e) {
    state.diagnostics->push_back({Severity::kWarning, "shape_inference",
                                  std::string("ONNX shape inference stopped early: ") + e.what(),
                                  "", ""});
  }
  for (const auto& vi : m.graph().value_info()) Take(graph, vi, wanted, state);
  return Status::Ok();
}

}  // namespace memest::core
