// ops/shape_pass.cc -- see ops/shape_pass.h for the policy.
#include "ops/shape_pass.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

#include "base/checked.h"
#include "base/dtype.h"
#include "core/graph.h"
#include "core/onnx_fallback.h"
#include "core/symbolic_shapes.h"
#include "ops/rules.h"
#include "ops/shape_rules.h"

namespace memest::ops {
namespace {

using base::IsKnownDType;
using core::AtomDef;
using core::AtomId;
using core::AtomKind;
using core::Dim;
using core::DimExpr;
using core::DimTable;
using core::Graph;
using core::kMaxRank;
using core::kMaxTrackedElements;
using core::Node;
using core::OnnxMayInfer;
using core::SymbolicShapes;
using core::SymTensor;
using core::Value;
using core::ValueKind;

constexpr size_t kMaxFailureExamples = 5;

// Whether ONNX has a shape inference function for the node (then the fallback can try it).
class OnnxSchemas {
 public:
  bool CanInfer(const Node& n) {
    const std::string key = n.domain + "\n" + n.op_type + "\n" + std::to_string(n.opset);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    const int version =
        n.opset > 0
            ? static_cast<int>(std::min<int64_t>(n.opset, std::numeric_limits<int32_t>::max()))
            : std::numeric_limits<int32_t>::max();
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(n.op_type, version, n.domain);
    const bool can = s != nullptr && s->has_type_and_shape_inference_function();
    cache_.emplace(key, can);
    return can;
  }

 private:
  std::unordered_map<std::string, bool> cache_;
};

// Drops what breaks the invariants of SymTensor (elements without a small constant shape,
// ranks past the cap) so every consumer may trust them.
void Sanitize(SymTensor* t) {
  if (t->shape && t->shape->size() > kMaxRank) {
    t->shape.reset();
  }
  if (!IsKnownDType(t->dtype)) t->dtype = 0;
  if (!t->values && !t->float_values) return;  // no elements to check against the shape
  std::optional<uint64_t> numel;
  if (t->shape) {
    uint64_t n = 1;
    bool constant = true;
    for (const DimExpr& d : *t->shape) {
      auto c = d.AsConstant();
      if (!c || *c < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(*c), &n)) {
        constant = false;
        break;
      }
    }
    if (constant) numel = n;
  }
  const bool small = numel && *numel <= kMaxTrackedElements;
  if (t->values && (!small || t->values->size() != *numel)) t->values.reset();
  if (t->float_values && (!small || t->float_values->size() != *numel)) t->float_values.reset();
}

// The file's declared type of `v` (value_info), dims named after input symbols when they match.
SymTensor Declared(const Value& v, DimTable* table) {
  SymTensor t;
  t.dtype = v.dtype;
  if (!v.has_shape || v.dims.size() > kMaxRank) return t;
  std::vector<DimExpr> dims;
  for (size_t i = 0; i < v.dims.size(); ++i) {
    const Dim& d = v.dims[i];
    if (d.known()) {
      dims.emplace_back(d.value);
    } else if (auto s = d.symbolic() ? table->FindSymbol(d.param) : std::nullopt) {
      dims.push_back(DimExpr::Atom(*s));
    } else {
      // Nothing in the graph can tell: treat it as data dependent (no fallback either).
      dims.push_back(table->FreshExpr(v.name + "[" + std::to_string(i) + "]", true));
    }
  }
  t.shape = std::move(dims);
  return t;
}

class Pass {
 public:
  explicit Pass(const Graph& g) : g_(g), out_(std::make_shared<SymbolicShapes>()) {}

  std::shared_ptr<const SymbolicShapes> Run() {
    const size_t n = g_.values.size();
    out_->types.resize(n);
    out_->needs_fallback.assign(n, false);
    SeedInputs();
    SeedInitializers();
    std::set<std::string> without_rule;
    for (const Node& node : g_.nodes) RunNode(node, &without_rule);
    out_->ops_without_rule.assign(without_rule.begin(), without_rule.end());
    out_->any_fallback = std::any_of(out_->needs_fallback.begin(), out_->needs_fallback.end(),
                                     [](bool b) { return b; });
    out_->program = core::ShapeProgram::Compile(out_->types);
    return out_;
  }

 private:
  void SeedInputs() {
    // The batch symbol must not collide with a dim_param of the model.
    std::set<std::string> names;
    for (int id : g_.data_inputs) {
      for (const Dim& d : g_.value(id).dims) {
        if (d.symbolic()) names.insert(d.param);
      }
    }
    std::string batch = "batch";
    while (names.count(batch)) batch += "_";
    out_->batch_symbol = batch;
    for (int id : g_.data_inputs) {
      const Value& v = g_.value(id);
      std::vector<AtomId> atoms;
      SymTensor t;
      t.dtype = v.dtype;
      if (v.has_shape && v.dims.size() <= kMaxRank) {
        std::vector<DimExpr> dims;
        for (size_t i = 0; i < v.dims.size(); ++i) {
          const Dim& d = v.dims[i];
          if (d.known()) {
            atoms.push_back(-1);
            dims.emplace_back(d.value);
            continue;
          }
          const std::string name = d.symbolic() ? d.param
                                   : i == 0     ? batch
                                                : "unk_" + v.name + "_" + std::to_string(i);
          const AtomId a = out_->table.Symbol(name);
          atoms.push_back(a);
          dims.push_back(DimExpr::Atom(a));
        }
        t.shape = std::move(dims);
      }
      out_->input_atoms.push_back(std::move(atoms));
      out_->types[static_cast<size_t>(id)] = std::move(t);
    }
  }

  void SeedInitializers() {
    const auto& inits = g_.proto->graph().initializer();
    for (int k = 0; k < inits.size(); ++k) {
      const auto& init = inits[k];
      // The loader numbers initializers first, in file order: skip the name lookup then.
      const int id = static_cast<size_t>(k) < g_.values.size() && g_.value(k).name == init.name()
                         ? k
                         : g_.FindValue(init.name());
      if (id < 0 || g_.value(id).kind != ValueKind::kInitializer) continue;
      SymTensor t = ops::ConstantType(init);
      Sanitize(&t);
      out_->types[static_cast<size_t>(id)] = std::move(t);
    }
    for (size_t i = 0; i < g_.values.size(); ++i) {
      const Value& v = g_.values[i];
      if (v.kind != ValueKind::kInitializer || out_->types[i].shape) continue;
      // Sparse initializers (no dense proto): dims and dtype only.
      SymTensor t;
      t.dtype = v.dtype;
      std::vector<DimExpr> dims;
      for (const Dim& d : v.dims) dims.emplace_back(d.value);
      t.shape = std::move(dims);
      Sanitize(&t);
      out_->types[i] = std::move(t);
    }
  }

  // A value still worth ONNX's inference: its type is incomplete because of a rule that is
  // missing or gave up, not because of data-dependent sizes.
  bool Incomplete(const SymTensor& t) {
    if (t.dtype == 0 || !t.shape) return true;
    for (const DimExpr& d : *t.shape) {
      for (const auto& term : d.terms()) {
        for (AtomId a : term.monomial) {
          if (GaveUp(a)) return true;
        }
      }
    }
    return false;
  }

  // Whether atom `a` is, or is built from, a size a rule could not work out.
  bool GaveUp(AtomId a) {
    const DimTable& table = out_->table;
    while (gave_up_.size() < table.size()) {
      const AtomDef& d = table.atom(static_cast<AtomId>(gave_up_.size()));
      bool g = d.kind == AtomKind::kUnknown && !d.data_dependent;
      for (const DimExpr* e : {&d.a, &d.b}) {
        for (const auto& term : e->terms()) {
          for (AtomId x : term.monomial) {
            const auto i = static_cast<size_t>(x);
            g = g || (i < gave_up_.size() && gave_up_[i]);
          }
        }
      }
      gave_up_.push_back(g);
    }
    return a >= 0 && static_cast<size_t>(a) < gave_up_.size() && gave_up_[static_cast<size_t>(a)];
  }

  void RunNode(const Node& node, std::set<std::string>* without_rule) {
    std::vector<const SymTensor*>& inputs = inputs_;
    inputs.assign(node.inputs.size(), nullptr);
    bool inputs_hopeless = false;  // an input unknown that no fallback can know either
    bool inputs_pending = false;   // an input the fallback may still know
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int id = node.inputs[i];
      if (id < 0 || static_cast<size_t>(id) >= out_->types.size()) continue;
      inputs[i] = &out_->types[static_cast<size_t>(id)];
      const bool pending = out_->needs_fallback[static_cast<size_t>(id)];
      inputs_pending = inputs_pending || pending;
      if (!inputs[i]->shape && !pending) inputs_hopeless = true;
    }
    std::vector<SymTensor>& outputs = outputs_;
    outputs.clear();
    outputs.resize(node.outputs.size());
    const ops::OpRule* rule = ops::RuleOf(node);
    const bool has_infer = rule != nullptr && rule->infer != nullptr;
    // A node memest has a rule for goes to ONNX only when an input of it waits for ONNX: never
    // when its rule rejected it or gave up on known inputs (core/onnx_fallback.h).
    bool rejected = false;
    if (has_infer) {
      out_->table.set_site(&node - g_.nodes.data());
      ops::InferContext ctx(node, inputs, outputs, &out_->table);
      Status s = rule->infer(ctx);
      if (s.ok() && !ctx.mistyped_attribute().empty()) {
        s = InvalidModel(node.op_type + ": " + ctx.mistyped_attribute());
      }
      if (!s.ok()) {
        ++out_->rule_failures;
        if (out_->failure_examples.size() < kMaxFailureExamples) {
          out_->failure_examples.push_back(node.Describe() + ": " + s.message());
        }
        std::fill(outputs.begin(), outputs.end(), SymTensor());
        rejected = true;
      }
    } else {
      without_rule->insert(node.domain.empty() ? node.op_type : node.domain + "::" + node.op_type);
    }
    std::optional<bool> onnx_can;  // asked only when an output is incomplete
    auto can = [&] {
      if (!onnx_can) {
        // Without a memest rule, only a vetted op is a source ONNX may size (core/onnx_fallback.h);
        // with one, the rule accepted the node and ONNX only carries its inputs' shapes through.
        const bool vetted = has_infer || OnnxMayInfer(node.domain, node.op_type);
        onnx_can = !rejected && vetted && (!has_infer || inputs_pending) && onnx_.CanInfer(node);
      }
      return *onnx_can;
    };
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const int id = node.outputs[k];
      if (id < 0 || static_cast<size_t>(id) >= out_->types.size()) continue;
      SymTensor& t = outputs[k];
      Sanitize(&t);
      const Value& v = g_.value(id);
      if (!t.shape && !can()) {
        // ONNX cannot infer it either: the file's declared type is the best there is.
        SymTensor declared = Declared(v, &out_->table);
        if (t.dtype != 0) declared.dtype = t.dtype;
        t = std::move(declared);
        Sanitize(&t);
      }
      if (t.dtype == 0) t.dtype = IsKnownDType(v.dtype) ? v.dtype : 0;
      out_->needs_fallback[static_cast<size_t>(id)] = Incomplete(t) && !inputs_hopeless && can();
      out_->types[static_cast<size_t>(id)] = std::move(t);
    }
  }

  const Graph& g_;
  std::shared_ptr<SymbolicShapes> out_;
  OnnxSchemas onnx_;
  std::vector<bool> gave_up_;
  std::vector<const SymTensor*> inputs_;  // per-node buffers, reused
  std::vector<SymTensor> outputs_;
};

}  // namespace

std::shared_ptr<const SymbolicShapes> InferSymbolicShapes(const Graph& graph) {
  return Pass(graph).Run();
}

}  // namespace memest::ops
