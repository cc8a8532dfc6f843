// core/bind.cc -- see core/bind.h for the policy.
#include "core/bind.h"

#include <algorithm>
#include <memory>
#include <set>
#include <unordered_map>

#include "base/checked.h"
#include "base/dtype.h"
#include "core/onnx_fallback.h"
#include "core/symbolic_shapes.h"

namespace memest::core {

std::optional<uint64_t> BoundGraph::Numel(int id) const {
  const MaybeDims dims = shapes.Find(id);
  if (!dims) return std::nullopt;
  return base::CheckedNumel(*dims);
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
        return InvalidArgument("dim '" + d.param + "' bound to both " + std::to_string(it->second) +
                               " and " + std::to_string(*value));
      }
    }
    (*dims)[i] = *value;
  }
  return Status::Ok();
}

// " (its symbolic dims: a, b)" or " (it has no symbolic dims)".
std::string DescribeSymbols(const Graph& graph) {
  std::set<std::string> names;
  for (int id : graph.data_inputs) {
    for (const Dim& d : graph.value(id).dims) {
      if (d.symbolic()) names.insert(d.param);
    }
  }
  if (names.empty()) return " (it has no symbolic dims)";
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return " (its symbolic dims: " + out + ")";
}

// A batch the model cannot take is an error, never silently ignored: with every data input's
// leading dim fixed, only the model's own batch is accepted.
Status CheckBatchApplies(const Graph& graph, const Options& options, bool batch_used) {
  if (!options.batch || batch_used || graph.data_inputs.empty()) return Status::Ok();
  const int64_t wanted = *options.batch / options.micro_batches;
  for (int id : graph.data_inputs) {  // the first input with an axis 0 holds the model's batch
    const Value& v = graph.value(id);
    if (v.dims.empty()) continue;
    if (v.dims[0].value == wanted) return Status::Ok();
    return InvalidArgument(
        "the model was exported with a fixed batch: input '" + v.name + "' axis 0 is " +
        std::to_string(v.dims[0].value) + ", so batch " + std::to_string(wanted) +
        " cannot apply. Re-export with a dynamic batch axis (torch.onnx.export(..., "
        "dynamic_axes={'" +
        v.name + "': {0: 'batch'}})), or ask for the model's own batch");
  }
  return Status::Ok();
}

std::string DescribeUnbound(const std::vector<Unbound>& unbound) {
  std::string named, unnamed;
  std::set<std::string> seen;
  for (const auto& u : unbound) {
    if (!u.name.empty()) {
      if (seen.insert(u.name).second)
        named += (named.empty() ? "" : ", ") + u.name + " (" + u.where + ")";
    } else {
      unnamed += (unnamed.empty() ? "" : ", ") + u.where;
    }
  }
  std::string msg = "unbound dims: ";
  if (!named.empty()) msg += named;
  if (!unnamed.empty())
    msg += (named.empty() ? "" : "; ") + std::string("unnamed dims at ") + unnamed;
  msg += ". Bind them with --batch N (leading dim) or --dim name=value";
  return msg;
}

}  // namespace

namespace {

// Binds the data inputs' dims (options.batch, options.dims) into b->bindings, and gives each atom
// of the symbolic shapes that an input dim is its value (nullopt: not an input dim).
Result<std::vector<std::optional<int64_t>>> BindDataInputs(const Graph& graph,
                                                           const SymbolicShapes& sym,
                                                           const Options& options, BoundGraph* b) {
  std::vector<Unbound> unbound;
  bool batch_used = false;
  std::vector<std::vector<int64_t>> input_dims(graph.data_inputs.size());
  std::vector<std::optional<int64_t>> by_atom(sym.table.size());
  std::unordered_map<int, size_t> data_input_position;  // value id -> index in data_inputs
  data_input_position.reserve(graph.data_inputs.size());
  for (size_t k = 0; k < graph.data_inputs.size(); ++k) {
    data_input_position.emplace(graph.data_inputs[k], k);
  }
  for (const auto& in : graph.proto->graph().input()) {
    const int id = graph.FindValue(in.name());
    if (id < 0 || graph.value(id).kind != ValueKind::kDataInput) continue;
    const auto position = data_input_position.find(id);
    if (position == data_input_position.end()) continue;
    const size_t k = position->second;
    const Value& v = graph.value(id);
    if (!v.dims.empty() && !v.dims[0].known() && options.batch) batch_used = true;
    MEMEST_RETURN_IF_ERROR(BindInput(v, in, options, &input_dims[k], &b->bindings, &unbound));
    const std::vector<AtomId>& atoms =
        k < sym.input_atoms.size() ? sym.input_atoms[k] : std::vector<AtomId>();
    for (size_t i = 0; i < atoms.size() && i < input_dims[k].size(); ++i) {
      if (atoms[i] >= 0 && input_dims[k][i] >= 0) {
        by_atom[static_cast<size_t>(atoms[i])] = input_dims[k][i];
      }
    }
  }
  if (!unbound.empty()) return UnboundDim(DescribeUnbound(unbound));
  MEMEST_RETURN_IF_ERROR(CheckBatchApplies(graph, options, batch_used));
  for (const auto& [name, value] : options.dims) {
    if (!b->bindings.count(name)) {
      return InvalidArgument("dim '" + name + "' does not appear in the model's inputs" +
                             DescribeSymbols(graph) + ": --dim " + name + "=" +
                             std::to_string(value) + " would be ignored");
    }
  }
  return by_atom;
}

// Every non-initializer's dims from its symbolic shape at `atoms`, into b->shapes (dtypes too).
Status EvaluateShapes(const Graph& graph, const SymbolicShapes& sym, const AtomValues& atoms,
                      BoundGraph* b) {
  if (auto broken = sym.table.CheckAssumptions(atoms)) {
    const int64_t site = broken->assumption->site;
    const std::string where = site >= 0 && static_cast<size_t>(site) < graph.nodes.size()
                                  ? graph.node(static_cast<int>(site)).Describe()
                                  : std::string("a broadcast");
    return InvalidArgument(where + ": " + broken->Describe(sym.table) +
                           ": the model cannot take these dims");
  }
  // Each distinct shape (ShapeProgram) is evaluated at its first value, whose dims the others
  // then read: the same expressions at the same atoms, so the same dims, or the same error (the
  // first value met it already, and an error that ends the bind ended it there).
  std::vector<uint32_t> first(sym.program.shapes(), ShapeProgram::kNone);
  for (size_t id = 0; id < graph.values.size(); ++id) {
    const Value& v = graph.values[id];
    const SymTensor& t = sym.types[id];
    b->dtypes[id] = t.dtype;
    if (v.kind == ValueKind::kInitializer || !t.shape) continue;
    if (const uint32_t s = sym.program.shape_of(id); s != ShapeProgram::kNone) {
      if (first[s] != ShapeProgram::kNone) {
        if (b->shapes[first[s]]) b->shapes.Alias(id, first[s]);  // else: unknown, as it is
        continue;
      }
      first[s] = static_cast<uint32_t>(id);
    }
    const Status dims = EvaluateDimsInto(*t.shape, atoms, b->shapes.Emplace(id, t.shape->size()));
    if (dims.ok()) continue;
    b->shapes.Forget(id);
    if (dims.code() == ErrorCode::kOverflow) {
      return Overflow("tensor '" + v.name + "' has a dim that overflows 64 bits at these dims (" +
                      dims.message() + "): check the batch and dim values");
    } else if (dims.code() == ErrorCode::kInvalidModel) {  // broadcast, exact division
      const std::string site =
          v.producer >= 0 ? graph.node(v.producer).Describe() : "tensor '" + v.name + "'";
      return InvalidArgument(site + ": " + dims.message() +
                             " at these dims: the model cannot take them");
    }
  }
  if (sym.rule_failures > 0) {  // a node its shape rule rejects is malformed: never estimated
    std::string examples;
    for (const auto& e : sym.failure_examples) examples += (examples.empty() ? "" : "; ") + e;
    return InvalidModel(std::to_string(sym.rule_failures) +
                        " node(s) rejected by their shape rule: " + examples);
  }
  return Status::Ok();
}

// What the shape rules left unknown: ONNX's shape inference, only when it may help.
Status FallBackOnOnnx(const Graph& graph, const SymbolicShapes& sym, const AtomValues& atoms,
                      BoundGraph* b) {
  if (!sym.any_fallback) return Status::Ok();
  const size_t n = graph.values.size();
  std::vector<bool> wanted(n, false);
  int count = 0;
  for (size_t id = 0; id < n; ++id) {
    wanted[id] = sym.needs_fallback[id] && (!b->shapes[id] || b->dtypes[id] == 0);
    count += wanted[id] ? 1 : 0;
  }
  if (count == 0) return Status::Ok();
  MEMEST_RETURN_IF_ERROR(
      InferWithOnnx(graph, sym, atoms, wanted, {&b->dtypes, &b->shapes, &b->diagnostics}));
  std::string ops;
  for (const auto& op : sym.ops_without_rule) ops += (ops.empty() ? "" : ", ") + op;
  b->diagnostics.push_back(
      {Severity::kInfo, "shape_fallback",
       std::to_string(count) +
           " tensor(s) were sized by ONNX shape inference, not memest's "
           "shape rules" +
           (ops.empty() ? std::string() : " (ops without a shape rule: " + ops + ")"),
       "", ""});
  return Status::Ok();
}

// The file's declared shape of a value inference left without dims, with the bindings
// substituted (nullopt when a dim stays unknown).
std::optional<std::vector<int64_t>> DeclaredDims(const Value& v, const BoundGraph& b) {
  std::vector<int64_t> dims;
  for (const Dim& d : v.dims) {
    if (d.known()) {
      dims.push_back(d.value);
    } else if (auto it = b.bindings.find(d.param); d.symbolic() && it != b.bindings.end()) {
      dims.push_back(it->second);
    } else {
      return std::nullopt;
    }
  }
  return dims;
}

// Sizes every value whose shape and dtype are known (b->bytes); counts the intermediates left
// unknown, with the ops that make them.
Status SizeTensors(const Graph& graph, BoundGraph* b, std::set<std::string>* unknown_ops) {
  for (size_t id = 0; id < graph.values.size(); ++id) {
    const Value& v = graph.values[id];
    if (v.kind == ValueKind::kInitializer) {
      b->dtypes[id] = v.dtype;
      std::span<int64_t> dims = b->shapes.Emplace(id, v.dims.size());
      for (size_t i = 0; i < v.dims.size(); ++i) dims[i] = v.dims[i].value;
    } else if (!b->shapes[id] && v.has_shape) {
      if (const std::optional<std::vector<int64_t>> declared = DeclaredDims(v, *b)) {
        b->shapes.Set(id, *declared);
      }
    }
    if (!b->dtypes[id] && v.dtype) b->dtypes[id] = v.dtype;
    const MaybeDims shape = b->shapes[id];
    if (shape && base::DTypeSize(b->dtypes[id]) > 0) {
      auto numel = base::CheckedNumel(*shape);
      auto bytes = numel ? base::CheckedMul(*numel, base::DTypeSize(b->dtypes[id])) : std::nullopt;
      if (!bytes) {
        std::string dims;
        for (int64_t d : *shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
        return Overflow("tensor '" + v.name + "' with dims [" + dims +
                        "] has a byte size that overflows 64 bits");
      }
      b->bytes[id] = *bytes;
    } else if (v.kind == ValueKind::kIntermediate && (!v.consumers.empty() || v.graph_output)) {
      ++b->unknown_shapes;
      if (v.producer >= 0) {
        unknown_ops->insert(graph.node(v.producer).op_type);
      }
    }
  }
  // Sums of many tensors must stay far from 64 bits too. A training step holds a few times the
  // sum (gradients, optimizer state, gradients of activations, workspaces), so the bound is
  // 64 PiB -- a million times any GPU -- which keeps every backend's total below 2^60.
  uint64_t total = 0;
  for (const auto& bytes : b->bytes) {
    if (bytes && (!base::CheckedAdd(total, *bytes) || (total += *bytes) > kMaxTotalTensorBytes)) {
      return Overflow(
          "the model's tensors at these dims add up to more than 64 PiB: check the "
          "batch and dim values");
    }
  }
  return Status::Ok();
}

// Tensors without a size: refused (never a number that rests on guessed sizes) unless the
// options allow them, then counted conservatively with a warning.
Status CheckUnknownShapes(const std::set<std::string>& unknown_ops, const Options& options,
                          BoundGraph* b) {
  if (b->unknown_shapes == 0) return Status::Ok();
  std::string ops;
  for (const auto& op : unknown_ops) ops += (ops.empty() ? "" : ", ") + op;
  if (!options.allow_unknown_shapes) {
    return Unsupported(std::to_string(b->unknown_shapes) +
                       " tensor(s) have no inferred shape (produced by: " + ops +
                       "): their sizes depend on data or on ops memest cannot size; refusing "
                       "to guess (Options::allow_unknown_shapes / --allow-unknown-shapes "
                       "estimates them conservatively)");
  }
  b->diagnostics.push_back({Severity::kWarning, "unknown_shapes",
                            std::to_string(b->unknown_shapes) +
                                " tensor(s) have no inferred shape (produced by: " + ops +
                                "); they are counted conservatively",
                            "", ""});
  return Status::Ok();
}

}  // namespace

Result<BoundGraph> Bind(const Graph& graph, const Options& options) {
  MEMEST_RETURN_IF_ERROR(Validate(options));
  BoundGraph b;
  b.graph = &graph;
  const size_t n = graph.values.size();
  b.dtypes.assign(n, 0);
  b.shapes.Reset(n);
  b.shapes.Reserve(4 * n);  // most tensors have rank 4 or less
  b.bytes.assign(n, std::nullopt);
  const SymbolicShapes* sym = graph.symbolic.get();
  if (sym == nullptr || sym->types.size() != n) {
    return Internal("the graph has no inferred shapes: load models with LoadModel");
  }
  MEMEST_ASSIGN_OR_RETURN(std::vector<std::optional<int64_t>> by_atom,
                          BindDataInputs(graph, *sym, options, &b));
  const AtomValues atoms = sym->table.Evaluate(by_atom);  // the symbolic shapes at these dims
  MEMEST_RETURN_IF_ERROR(EvaluateShapes(graph, *sym, atoms, &b));
  MEMEST_RETURN_IF_ERROR(FallBackOnOnnx(graph, *sym, atoms, &b));
  std::set<std::string> unknown_ops;
  MEMEST_RETURN_IF_ERROR(SizeTensors(graph, &b, &unknown_ops));
  MEMEST_RETURN_IF_ERROR(CheckUnknownShapes(unknown_ops, options, &b));
  return b;
}

}  // namespace memest::core
