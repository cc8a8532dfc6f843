// core/bind.cc -- see core/bind.h for the policy.
#include "core/bind.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "core/checked.h"
#include "core/dtype.h"
#include "core/symbolic_shapes.h"

namespace memest::core {

std::optional<uint64_t> BoundGraph::Numel(int id) const {
  if (id < 0 || !shapes[static_cast<size_t>(id)]) return std::nullopt;
  return CheckedNumel(*shapes[static_cast<size_t>(id)]);
}

namespace {

struct Unbound {
  std::string name;   // dim name, or "" when unnamed
  std::string where;  // "input 'x' axis 0"
};

// Binds the dims of data input `v` (same policy as ever: see core/bind.h). `dims` receives the
// bound dims; unbound ones are listed in `unbound` and left -1.
Status BindInput(const Value& v, const onnx::ValueInfoProto& input, const Options& options,
                 std::vector<int64_t>* dims, std::map<std::string, int64_t>* bindings,
                 std::vector<Unbound>* unbound) {
  if (!input.type().has_tensor_type()) {
    return Unsupported("input '" + v.name +
                       "' is not a tensor (sequence, map or optional): memest estimates graphs "
                       "with tensor inputs only");
  }
  if (!v.has_shape) {
    return InvalidModel("input '" + v.name +
                        "' has no shape: re-export the model with input shapes (a dynamic batch "
                        "axis is fine)");
  }
  dims->assign(v.dims.size(), -1);
  for (size_t i = 0; i < v.dims.size(); ++i) {
    const Dim& d = v.dims[i];
    if (d.known()) {
      (*dims)[i] = d.value;
      continue;
    }
    std::optional<int64_t> value;
    if (d.symbolic()) {
      if (auto it = options.dims.find(d.param); it != options.dims.end()) value = it->second;
    }
    // With gradient accumulation the graph runs on micro-batches (Options::micro_batches).
    if (!value && i == 0 && options.batch) value = *options.batch / options.micro_batches;
    const std::string where = "input '" + v.name + "' axis " + std::to_string(i);
    if (!value) {
      unbound->push_back({d.param, where});
      continue;
    }
    if (d.symbolic()) {
      auto [it, inserted] = bindings->emplace(d.param, *value);
      if (!inserted && it->second != *value) {
        return InvalidArgument("dim '" + d.param + "' bound to both " +
                               std::to_string(it->second) + " and " + std::to_string(*value));
      }
    }
    (*dims)[i] = *value;
  }
  return Status::Ok();
}

std::string DescribeUnbound(const std::vector<Unbound>& unbound) {
  std::string named, unnamed;
  std::set<std::string> seen;
  for (const auto& u : unbound) {
    if (!u.name.empty()) {
      if (seen.insert(u.name).second) named += (named.empty() ? "" : ", ") + u.name + " (" + u.where + ")";
    } else {
      unnamed += (unnamed.empty() ? "" : ", ") + u.where;
    }
  }
  std::string msg = "unbound dims: ";
  if (!named.empty()) msg += named;
  if (!unnamed.empty()) msg += (named.empty() ? "" : "; ") + std::string("unnamed dims at ") + unnamed;
  msg += ". Bind them with --batch N (leading dim) or --dim name=value";
  return msg;
}

// ONNX 1.12's inference functions (Reshape, Expand, Tile, ConstantOfShape, ...) read only constant
// inputs (getInputData), never the values data propagation computed (getSymbolicInput): a Reshape
// whose target comes from Shape -> Gather -> Concat stays unknown. This context hands them those
// values as constants when every element is known.
class PropagatedDataContext final : public onnx::InferenceContext {
 public:
  explicit PropagatedDataContext(onnx::InferenceContext& ctx)
      : ctx_(ctx), data_(ctx.getNumInputs()) {
    for (size_t i = 0; i < data_.size(); ++i) {
      if (ctx.getInputData(i) != nullptr) continue;
      const onnx::TypeProto* type = ctx.getInputType(i);
      const onnx::TensorShapeProto* values = ctx.getSymbolicInput(i);
      if (type == nullptr || values == nullptr || !type->has_tensor_type()) continue;
      const int32_t elem = type->tensor_type().elem_type();
      if (elem != onnx::TensorProto::INT64 && elem != onnx::TensorProto::INT32) continue;
      const bool scalar =
          type->tensor_type().has_shape() && type->tensor_type().shape().dim_size() == 0;
      if (scalar && values->dim_size() != 1) continue;
      onnx::TensorProto t;
      t.set_data_type(elem);
      if (!scalar) t.add_dims(values->dim_size());
      bool complete = true;
      for (const auto& d : values->dim()) {
        if (!d.has_dim_value()) {
          complete = false;
          break;
        }
        if (elem == onnx::TensorProto::INT64) {
          t.add_int64_data(d.dim_value());
        } else {
          t.add_int32_data(static_cast<int32_t>(d.dim_value()));
        }
      }
      if (complete) data_[i] = std::move(t);
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

// ONNX's shape inference with data propagation on a copy of the model whose data inputs carry
// the bound dims; fills dtypes and shapes of the values flagged in `wanted` only.
void OnnxFallback(const Graph& graph, const std::vector<std::vector<int64_t>>& input_dims,
                  const std::vector<bool>& wanted, BoundGraph* b) {
  onnx::ModelProto m = graph.proto;  // weights were stripped at load: this copy is small
  auto* g = m.mutable_graph();
  g->clear_value_info();
  for (auto& out : *g->mutable_output()) {
    if (out.type().has_tensor_type()) out.mutable_type()->mutable_tensor_type()->clear_shape();
  }
  for (auto& in : *g->mutable_input()) {
    const int id = graph.FindValue(in.name());
    if (id < 0 || graph.value(id).kind != ValueKind::kDataInput) continue;
    const auto k = static_cast<size_t>(
        std::find(graph.data_inputs.begin(), graph.data_inputs.end(), id) -
        graph.data_inputs.begin());
    if (k >= input_dims.size() || !in.type().has_tensor_type()) continue;
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int i = 0; i < shape->dim_size() && static_cast<size_t>(i) < input_dims[k].size(); ++i) {
      shape->mutable_dim(i)->clear_dim_param();
      shape->mutable_dim(i)->set_dim_value(input_dims[k][static_cast<size_t>(i)]);
    }
  }
  try {
    onnx::shape_inference::InferShapes(
        m, SchemaRegistry(),
        onnx::ShapeInferenceOptions(/*check_type=*/false, /*error_mode=*/0,
                                    /*enable_data_propagation=*/true));
  } catch (const std::exception& e) {
    b->diagnostics.push_back({Severity::kWarning, "shape_inference",
                              std::string("ONNX shape inference stopped early: ") + e.what(), "",
                              ""});
  }
  auto take = [&](const onnx::ValueInfoProto& vi) {
    const int id = graph.FindValue(vi.name());
    if (id < 0 || !wanted[static_cast<size_t>(id)] || !vi.type().has_tensor_type()) return;
    const auto& tt = vi.type().tensor_type();
    if (IsKnownDType(tt.elem_type()) && b->dtypes[static_cast<size_t>(id)] == 0) {
      b->dtypes[static_cast<size_t>(id)] = tt.elem_type();
    }
    if (!tt.has_shape() || b->shapes[static_cast<size_t>(id)]) return;
    std::vector<int64_t> dims;
    for (const auto& d : tt.shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0) return;
      dims.push_back(d.dim_value());
    }
    b->shapes[static_cast<size_t>(id)] = std::move(dims);
  };
  for (const auto& vi : g->value_info()) take(vi);
  for (const auto& vi : g->output()) take(vi);
}

}  // namespace

Result<BoundGraph> Bind(const Graph& graph, const Options& options) {
  MEMEST_RETURN_IF_ERROR(Validate(options));
  BoundGraph b;
  b.graph = &graph;
  const size_t n = graph.values.size();
  b.dtypes.assign(n, 0);
  b.shapes.assign(n, std::nullopt);
  b.bytes.assign(n, std::nullopt);

  std::shared_ptr<const SymbolicShapes> computed;
  const SymbolicShapes* sym = graph.symbolic.get();
  if (sym == nullptr || sym->types.size() != n) {  // a graph not built by the loader
    computed = InferSymbolicShapes(graph);
    sym = computed.get();
  }

  // Data inputs: their dims, and the symbols they bind.
  std::vector<Unbound> unbound;
  bool batch_used = false;
  std::vector<std::vector<int64_t>> input_dims(graph.data_inputs.size());
  std::vector<std::optional<int64_t>> by_atom(sym->table.size());
  for (const auto& in : graph.proto.graph().input()) {
    const int id = graph.FindValue(in.name());
    if (id < 0 || graph.value(id).kind != ValueKind::kDataInput) continue;
    const auto k = static_cast<size_t>(
        std::find(graph.data_inputs.begin(), graph.data_inputs.end(), id) -
        graph.data_inputs.begin());
    if (k >= input_dims.size()) continue;
    const Value& v = graph.value(id);
    if (!v.dims.empty() && !v.dims[0].known() && options.batch) batch_used = true;
    MEMEST_RETURN_IF_ERROR(
        BindInput(v, in, options, &input_dims[k], &b.bindings, &unbound));
    const std::vector<AtomId>& atoms =
        k < sym->input_atoms.size() ? sym->input_atoms[k] : std::vector<AtomId>();
    for (size_t i = 0; i < atoms.size() && i < input_dims[k].size(); ++i) {
      if (atoms[i] >= 0 && input_dims[k][i] >= 0) {
        by_atom[static_cast<size_t>(atoms[i])] = input_dims[k][i];
      }
    }
  }
  if (!unbound.empty()) return UnboundDim(DescribeUnbound(unbound));
  if (options.batch && !batch_used && !graph.data_inputs.empty()) {
    b.diagnostics.push_back({Severity::kWarning, "batch_ignored",
                             "the model's data inputs have a fixed leading dim: --batch " +
                                 std::to_string(*options.batch) + " was ignored",
                             "", ""});
  }
  for (const auto& [name, value] : options.dims) {
    if (!b.bindings.count(name)) {
      b.diagnostics.push_back({Severity::kWarning, "unused_dim",
                               "dim '" + name + "' does not appear in the model's inputs", "", ""});
    }
  }

  // Evaluate the symbolic shapes at these dims.
  const AtomValues atoms = sym->table.Evaluate(by_atom);
  for (size_t id = 0; id < n; ++id) {
    const Value& v = graph.values[id];
    const SymTensor& t = sym->types[id];
    b.dtypes[id] = t.dtype;
    if (v.kind == ValueKind::kInitializer || !t.shape) continue;
    auto dims = EvaluateDims(*t.shape, atoms);
    if (dims.ok()) {
      b.shapes[id] = std::move(dims).value();
    } else if (dims.status().code() == ErrorCode::kOverflow) {
      return Overflow("tensor '" + v.name + "' has a dim that overflows 64 bits at these dims (" +
                      dims.status().message() + "): check the batch and dim values");
    }
  }

  // What the shape rules left unknown: ONNX's shape inference, only when it may help.
  if (sym->any_fallback) {
    std::vector<bool> wanted(n, false);
    int count = 0;
    for (size_t id = 0; id < n; ++id) {
      wanted[id] = sym->needs_fallback[id] && (!b.shapes[id] || b.dtypes[id] == 0);
      count += wanted[id] ? 1 : 0;
    }
    if (count > 0) {
      OnnxFallback(graph, input_dims, wanted, &b);
      std::string ops;
      for (const auto& op : sym->ops_without_rule) ops += (ops.empty() ? "" : ", ") + op;
      b.diagnostics.push_back(
          {Severity::kInfo, "shape_fallback",
           std::to_string(count) + " tensor(s) were sized by ONNX shape inference, not memest's "
                                   "shape rules" +
               (ops.empty() ? std::string() : " (ops without a shape rule: " + ops + ")"),
           "", ""});
    }
  }
  if (sym->rule_failures > 0) {
    std::string examples;
    for (const auto& e : sym->failure_examples) examples += (examples.empty() ? "" : "; ") + e;
    b.diagnostics.push_back({Severity::kWarning, "shape_rule_failed",
                             std::to_string(sym->rule_failures) +
                                 " node(s) whose shape rule rejected them (malformed?): " +
                                 examples,
                             "", ""});
  }

  std::set<std::string> unknown_ops;
  for (size_t id = 0; id < n; ++id) {
    const Value& v = graph.values[id];
    if (v.kind == ValueKind::kInitializer) {
      b.dtypes[id] = v.dtype;
      std::vector<int64_t> dims;
      for (const Dim& d : v.dims) dims.push_back(d.value);
      b.shapes[id] = std::move(dims);
    } else if (!b.shapes[id] && v.has_shape) {
      // Fall back on the file's declared shape, with bindings substituted.
      std::vector<int64_t> dims;
      bool ok = true;
      for (const Dim& d : v.dims) {
        if (d.known()) {
          dims.push_back(d.value);
        } else if (auto it = b.bindings.find(d.param); d.symbolic() && it != b.bindings.end()) {
          dims.push_back(it->second);
        } else {
          ok = false;
          break;
        }
      }
      if (ok) b.shapes[id] = std::move(dims);
    }
    if (!b.dtypes[id] && v.dtype) b.dtypes[id] = v.dtype;
    if (b.shapes[id] && DTypeSize(b.dtypes[id]) > 0) {
      auto numel = CheckedNumel(*b.shapes[id]);
      auto bytes = numel ? CheckedMul(*numel, DTypeSize(b.dtypes[id])) : std::nullopt;
      if (!bytes) {
        std::string dims;
        for (int64_t d : *b.shapes[id]) dims += (dims.empty() ? "" : ",") + std::to_string(d);
        return Overflow("tensor '" + v.name + "' with dims [" + dims +
                        "] has a byte size that overflows 64 bits");
      }
      b.bytes[id] = *bytes;
    } else if (v.kind == ValueKind::kIntermediate && (!v.consumers.empty() || v.graph_output)) {
      ++b.unknown_shapes;
      if (v.producer >= 0) unknown_ops.insert(graph.nodes[static_cast<size_t>(v.producer)].op_type);
    }
  }
  // Sums of many tensors must stay far from 64 bits too: no device holds 4 EiB.
  uint64_t total = 0;
  for (const auto& bytes : b.bytes) {
    if (bytes && (!CheckedAdd(total, *bytes) || (total += *bytes) > (uint64_t{1} << 62))) {
      return Overflow("the model's tensors at these dims add up to more than 4 EiB: check the "
                      "batch and dim values");
    }
  }
  if (b.unknown_shapes > 0) {
    std::string ops;
    for (const auto& op : unknown_ops) ops += (ops.empty() ? "" : ", ") + op;
    b.diagnostics.push_back({Severity::kWarning, "unknown_shapes",
                             std::to_string(b.unknown_shapes) +
                                 " tensor(s) have no inferred shape (produced by: " + ops +
                                 "); they are counted conservatively",
                             "", ""});
  }
  return b;
}

}  // namespace memest::core
