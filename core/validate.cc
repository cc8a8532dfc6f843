// core/validate.cc -- see core/validate.h for the policy.
#include "core/validate.h"

#include <algorithm>
#include <limits>
#include <map>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/checked.h"
#include "base/dtype.h"
#include "core/symbolic_shapes.h"

namespace memest::core {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// ValidateTensor, with `what()` the tensor's description in errors (defined below), and
// `left_out` what the payload filter left out of it (core/payload_filter.h).
template <typename What>
Status CheckTensor(const onnx::TensorProto& t, What what, const LeftOutPayload& left_out = {});

// How many entries of the typed field a tensor of `numel` elements of `dtype` needs, and
// that field's current size; {0, 0} for dtypes with no typed field.
struct TypedField {
  uint64_t expected = 0;
  uint64_t actual = 0;
  const char* name = "";
  int number = 0;  // the field's TensorProto number
};

TypedField TypedFieldOf(const onnx::TensorProto& t, uint64_t numel) {
  auto size = [](int n) { return static_cast<uint64_t>(n); };
  switch (t.data_type()) {
    case base::kFloat:
      return {numel, size(t.float_data_size()), "float_data",
              onnx::TensorProto::kFloatDataFieldNumber};
    case base::kComplex64:
      return {base::SatMul(numel, 2), size(t.float_data_size()), "float_data",
              onnx::TensorProto::kFloatDataFieldNumber};
    case base::kInt32:
    case base::kInt16:
    case base::kInt8:
    case base::kUInt16:
    case base::kUInt8:
    case base::kBool:
    case base::kFloat16:
    case base::kBFloat16:
      return {numel, size(t.int32_data_size()), "int32_data",
              onnx::TensorProto::kInt32DataFieldNumber};
    case base::kString:
      return {numel, size(t.string_data_size()), "string_data",
              onnx::TensorProto::kStringDataFieldNumber};
    case base::kInt64:
      return {numel, size(t.int64_data_size()), "int64_data",
              onnx::TensorProto::kInt64DataFieldNumber};
    case base::kDouble:
      return {numel, size(t.double_data_size()), "double_data",
              onnx::TensorProto::kDoubleDataFieldNumber};
    case base::kComplex128:
      return {base::SatMul(numel, 2), size(t.double_data_size()), "double_data",
              onnx::TensorProto::kDoubleDataFieldNumber};
    case base::kUInt32:
    case base::kUInt64:
      return {numel, size(t.uint64_data_size()), "uint64_data",
              onnx::TensorProto::kUint64DataFieldNumber};
    default:
      return {};
  }
}

bool IsExternal(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return true;
  return std::any_of(t.external_data().begin(), t.external_data().end(),
                     [](const auto& kv) { return kv.key() == "location"; });
}

// Names visible in one graph scope, chained to the enclosing scope.
struct Scope {
  const Scope* outer = nullptr;
  std::unordered_set<std::string_view> names;
  bool Has(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->outer) {
      if (s->names.count(name)) return true;
    }
    return false;
  }
};

class Validator {
 public:
  Validator(const onnx::ModelProto& model, std::span<const LeftOutPayload> left_out)
      : model_(model), left_out_(left_out) {}

  Status Run() {
    MEMEST_RETURN_IF_ERROR(CheckVersions());
    return CheckGraph(model_.graph(), /*outer=*/nullptr, /*depth=*/0, "graph");
  }

 private:
  Status CheckVersions() {
    if (model_.ir_version() < 1 || model_.ir_version() > kMaxIrVersion) {
      return InvalidModel("ir_version " + std::to_string(model_.ir_version()) +
                          " is outside the accepted range [1, " + std::to_string(kMaxIrVersion) +
                          "]");
    }
    for (const auto& op : model_.opset_import()) {
      if (op.version() < 1 || op.version() > kMaxOpsetVersion) {
        return InvalidModel("opset_import for domain '" + op.domain() + "' has version " +
                            std::to_string(op.version()) + ", outside [1, " +
                            std::to_string(kMaxOpsetVersion) + "]");
      }
    }
    return Status::Ok();
  }

  Status CheckShape(const onnx::ValueInfoProto& vi, const std::string& where) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return Status::Ok();
    const int rank = vi.type().tensor_type().shape().dim_size();
    if (static_cast<size_t>(rank) > kMaxRank) {
      return InvalidModel(where + " " + Quote(vi.name()) + " has rank " + std::to_string(rank) +
                          ", above the supported " + std::to_string(kMaxRank));
    }
    return Status::Ok();
  }

  Status CheckGraph(const onnx::GraphProto& g, const Scope* outer, int depth,
                    const std::string& where) {
    if (depth > kMaxSubgraphDepth) {
      return InvalidModel(where + " nests subgraphs deeper than " +
                          std::to_string(kMaxSubgraphDepth) + " levels");
    }
    total_nodes_ += g.node_size();
    if (total_nodes_ > kMaxTotalNodes) {
      return InvalidModel("the model has more than " + std::to_string(kMaxTotalNodes) +
                          " nodes (all graphs and subgraphs together): above memest's bound");
    }
    for (int i = 0; i < g.initializer_size(); ++i) {
      const onnx::TensorProto& t = g.initializer(i);
      // Only the top-level graph's payloads are ever left out, listed by its initializers.
      const LeftOutPayload left_out = depth == 0 && static_cast<size_t>(i) < left_out_.size()
                                          ? left_out_[static_cast<size_t>(i)]
                                          : LeftOutPayload{};
      MEMEST_RETURN_IF_ERROR(CheckTensor(
          t, [&t] { return "initializer '" + t.name() + "'"; }, left_out));
    }
    for (const auto& s : g.sparse_initializer()) {
      MEMEST_RETURN_IF_ERROR(
          ValidateTensor(s.values(), "sparse initializer " + Quote(s.values().name())));
      MEMEST_RETURN_IF_ERROR(
          ValidateTensor(s.indices(), "indices of sparse initializer " + Quote(s.values().name())));
    }
    for (const auto& vi : g.input()) MEMEST_RETURN_IF_ERROR(CheckShape(vi, "input"));
    for (const auto& vi : g.output()) MEMEST_RETURN_IF_ERROR(CheckShape(vi, "output"));
    for (const auto& vi : g.value_info()) MEMEST_RETURN_IF_ERROR(CheckShape(vi, "value_info"));
    // The enclosing scope of this graph's bodies: every name this graph defines. Only built when
    // the graph has bodies (most models have none; this would index every name at load).
    Scope scope;
    scope.outer = outer;
    if (HasBodies(g)) {
      for (const auto& vi : g.input()) scope.names.insert(vi.name());
      for (const auto& t : g.initializer()) scope.names.insert(t.name());
      for (const auto& s : g.sparse_initializer()) scope.names.insert(s.values().name());
      for (const auto& n : g.node()) {
        for (const auto& o : n.output()) scope.names.insert(o);
      }
    }
    if (depth > 0) MEMEST_RETURN_IF_ERROR(CheckBodyDataflow(g, outer, where));
    for (int i = 0; i < g.node_size(); ++i) {
      MEMEST_RETURN_IF_ERROR(CheckNode(g.node(i), i, scope, depth, where));
    }
    return Status::Ok();
  }

  static bool HasBodies(const onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      for (const auto& a : n.attribute()) {
        if (a.has_g() || a.graphs_size() > 0) return true;
      }
    }
    return false;
  }

  // A body's node inputs resolve and its nodes are acyclic (the top-level graph's are checked by
  // the loader, with better messages for its own purposes).
  Status CheckBodyDataflow(const onnx::GraphProto& g, const Scope* outer,
                           const std::string& where) {
    std::unordered_set<std::string_view> defined;
    for (const auto& vi : g.input()) defined.insert(vi.name());
    for (const auto& t : g.initializer()) defined.insert(t.name());
    for (const auto& s : g.sparse_initializer()) defined.insert(s.values().name());
    std::unordered_map<std::string_view, int> producer;
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& o : g.node(i).output()) {
        if (o.empty()) continue;
        if (defined.count(o) || !producer.emplace(o, i).second) {
          return InvalidModel(where + ": node " + NodeName(g.node(i), i) + " produces tensor " +
                              Quote(o) + " that already exists");
        }
      }
    }
    const size_t n = static_cast<size_t>(g.node_size());
    std::vector<int> pending(n, 0);
    std::vector<std::vector<int>> users(n);
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& in : g.node(i).input()) {
        if (in.empty() || defined.count(in)) continue;
        auto it = producer.find(in);
        if (it == producer.end()) {
          if (outer != nullptr && outer->Has(in)) continue;
          return InvalidModel(where + ": node " + NodeName(g.node(i), i) + " reads tensor " +
                              Quote(in) + " that nothing in scope provides");
        }
        users[static_cast<size_t>(it->second)].push_back(i);
        ++pending[static_cast<size_t>(i)];
      }
    }
    std::queue<int> ready;
    for (size_t i = 0; i < n; ++i) {
      if (pending[i] == 0) ready.push(static_cast<int>(i));
    }
    size_t done = 0;
    while (!ready.empty()) {
      const int i = ready.front();
      ready.pop();
      ++done;
      for (int u : users[static_cast<size_t>(i)]) {
        if (--pending[static_cast<size_t>(u)] == 0) ready.push(u);
      }
    }
    if (done == n) return Status::Ok();
    for (size_t i = 0; i < n; ++i) {
      if (pending[i] > 0) {
        return InvalidModel(where + " has a cycle through node " +
                            NodeName(g.node(static_cast<int>(i)), static_cast<int>(i)));
      }
    }
    return Status::Ok();
  }

  static std::string NodeName(const onnx::NodeProto& n, int index) {
    return Quote(n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name()) + " (" +
           n.op_type() + ")";
  }

  // The bodies a control-flow node cannot be run without.
  static std::vector<const char*> RequiredBodies(const onnx::NodeProto& n) {
    if (!n.domain().empty() && n.domain() != "ai.onnx") return {};
    if (n.op_type() == "If") return {"then_branch", "else_branch"};
    if (n.op_type() == "Loop" || n.op_type() == "Scan") return {"body"};
    return {};
  }

  // A node's attributes: each named once, each well formed, a control-flow node's bodies there.
  // The node's description (its name, and where a body lies) is built only for an error or for
  // what needs it: most attributes are a few numbers, and validation, descriptions and all, was
  // about a seventh of loading gpt2_tiny (callgrind), a twenty-fifth without them.
  Status CheckNode(const onnx::NodeProto& n, int index, const Scope& scope, int depth,
                   const std::string& where) {
    // Most nodes of large graphs (MatMul, Add, activations) carry no attribute: nothing to check.
    if (n.attribute_size() == 0 && RequiredBodies(n).empty()) return Status::Ok();
    const auto node = [&] {
      return "node " + NodeName(n, index) + (depth > 0 ? " in " + where : "");
    };
    const auto& attrs = n.attribute();
    // Names seen: by comparing with the earlier ones while a node has few attributes (the usual
    // case, no allocation), in a hash set past that (a crafted node may have very many).
    constexpr int kFewAttributes = 16;
    std::unordered_set<std::string_view> seen;
    for (int i = 0; i < attrs.size(); ++i) {
      const auto& attr = attrs[i];
      if (attr.name().empty()) return InvalidModel(node() + " has an attribute without a name");
      bool twice = false;
      if (attrs.size() <= kFewAttributes) {
        for (int j = 0; j < i && !twice; ++j) twice = attrs[j].name() == attr.name();
      } else {
        twice = !seen.insert(attr.name()).second;
      }
      if (twice) return InvalidModel(node() + " has attribute " + Quote(attr.name()) + " twice");
      MEMEST_RETURN_IF_ERROR(CheckAttribute(attr, node, scope, depth));
    }
    for (const char* body : RequiredBodies(n)) {
      if (std::none_of(attrs.begin(), attrs.end(),
                       [&](const auto& a) { return a.name() == body; })) {
        return InvalidModel(node() + " lacks its required attribute " + Quote(body));
      }
    }
    return Status::Ok();
  }

  // `node()` describes the attribute's node.
  template <typename DescribeNode>
  Status CheckAttribute(const onnx::AttributeProto& attr, const DescribeNode& node,
                        const Scope& scope, int depth) {
    using A = onnx::AttributeProto;
    const auto describe = [&] { return node() + " attribute " + Quote(attr.name()); };
    const bool missing_field = (attr.type() == A::GRAPH && !attr.has_g()) ||
                               (attr.type() == A::TENSOR && !attr.has_t()) ||
                               (attr.type() == A::SPARSE_TENSOR && !attr.has_sparse_tensor()) ||
                               (attr.type() == A::TYPE_PROTO && !attr.has_tp());
    if (missing_field) return InvalidModel(describe() + " declares a type but carries no value");
    if (auto kind = OneValueKind(attr); !kind.empty()) return InvalidModel(describe() + kind);
    const int64_t elements = int64_t{attr.ints_size()} + attr.floats_size() + attr.strings_size() +
                             attr.tensors_size() + attr.graphs_size();
    if (elements > kMaxAttributeElements) {
      return InvalidModel(describe() + " holds " + std::to_string(elements) +
                          " elements, above memest's bound of " +
                          std::to_string(kMaxAttributeElements));
    }
    if (attr.has_t()) MEMEST_RETURN_IF_ERROR(CheckTensor(attr.t(), describe));
    for (const auto& t : attr.tensors()) MEMEST_RETURN_IF_ERROR(CheckTensor(t, describe));
    if (attr.has_sparse_tensor()) {
      MEMEST_RETURN_IF_ERROR(CheckTensor(attr.sparse_tensor().values(), describe));
      MEMEST_RETURN_IF_ERROR(CheckTensor(attr.sparse_tensor().indices(), describe));
    }
    if (!attr.has_g() && attr.graphs_size() == 0) return Status::Ok();
    // A body's errors name where it lies.
    const std::string where = describe();
    if (attr.has_g()) MEMEST_RETURN_IF_ERROR(CheckGraph(attr.g(), &scope, depth + 1, where));
    for (const auto& g : attr.graphs()) {
      MEMEST_RETURN_IF_ERROR(CheckGraph(g, &scope, depth + 1, where));
    }
    return Status::Ok();
  }

  // An attribute carries the value its type names and nothing else (libonnx reads the fields
  // it finds, whatever the type says: an INTS attribute carrying a graph reached an inference
  // function as a body). An untyped attribute (old IR) carries one kind of value at most. Empty
  // when it does; else what is wrong, to follow the attribute's description.
  static std::string OneValueKind(const onnx::AttributeProto& a) {
    using A = onnx::AttributeProto;
    const std::pair<A::AttributeType, bool> kinds[] = {
        {A::FLOAT, a.has_f()},
        {A::INT, a.has_i()},
        {A::STRING, a.has_s()},
        {A::TENSOR, a.has_t()},
        {A::GRAPH, a.has_g()},
        {A::SPARSE_TENSOR, a.has_sparse_tensor()},
        {A::TYPE_PROTO, a.has_tp()},
        {A::FLOATS, a.floats_size() > 0},
        {A::INTS, a.ints_size() > 0},
        {A::STRINGS, a.strings_size() > 0},
        {A::TENSORS, a.tensors_size() > 0},
        {A::GRAPHS, a.graphs_size() > 0},
        {A::SPARSE_TENSORS, a.sparse_tensors_size() > 0},
        {A::TYPE_PROTOS, a.type_protos_size() > 0},
    };
    int present = 0;
    for (const auto& [type, has] : kinds) {
      if (!has) continue;
      ++present;
      if (a.type() != A::UNDEFINED && type != a.type()) {
        return " has type " + A::AttributeType_Name(a.type()) + " but also carries a " +
               A::AttributeType_Name(type) + " value";
      }
    }
    if (present > 1) return " carries values of several types";
    return {};
  }

  const onnx::ModelProto& model_;
  std::span<const LeftOutPayload> left_out_;
  int64_t total_nodes_ = 0;
};

}  // namespace

namespace {

// ValidateTensor, with `what()` the tensor's name in errors: made only for an error (a large
// graph's initializers each built a name they almost never need; so did a Constant node's value).
template <typename What>
Status CheckTensor(const onnx::TensorProto& t, What what, const LeftOutPayload& left_out) {
  if (!base::IsKnownDType(t.data_type())) {
    return InvalidModel(what() + " has unknown element type " + std::to_string(t.data_type()));
  }
  if (static_cast<size_t>(t.dims_size()) > kMaxRank) {
    return InvalidModel(what() + " has rank " + std::to_string(t.dims_size()) +
                        ", above the supported " + std::to_string(kMaxRank));
  }
  for (int i = 0; i < t.dims_size(); ++i) {
    if (t.dims(i) < 0) {
      return InvalidModel(what() + " has a negative dim " + std::to_string(t.dims(i)) +
                          " at axis " + std::to_string(i));
    }
  }
  const auto numel = base::CheckedNumel(std::span<const int64_t>(t.dims().data(), t.dims().size()));
  if (!numel) return Overflow(what() + ": element count overflows 64 bits");
  if (IsExternal(t)) return Status::Ok();
  const uint64_t raw_bytes = t.raw_data().size() + left_out.raw_bytes;  // one of them is 0
  if (raw_bytes != 0) {
    const uint64_t elem = base::DTypeSize(t.data_type());
    const auto expected = base::CheckedMul(*numel, elem);
    if (elem == 0 || !expected || *expected != raw_bytes) {
      return InvalidModel(what() + " holds " + std::to_string(raw_bytes) +
                          " bytes of raw_data where its dims and " +
                          base::DTypeName(t.data_type()) + " need " +
                          (expected ? std::to_string(*expected) : "more"));
    }
  }
  TypedField field = TypedFieldOf(t, *numel);
  if (left_out.field == field.number) field.actual += left_out.entries;
  if (field.actual != 0 && field.actual != field.expected) {
    return InvalidModel(what() + " holds " + std::to_string(field.actual) + " " + field.name +
                        " entries where its dims and " + base::DTypeName(t.data_type()) + " need " +
                        std::to_string(field.expected));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateTensor(const onnx::TensorProto& t, const std::string& what) {
  return CheckTensor(t, [&what] { return what; });
}

Status ValidateNamedTensor(const onnx::TensorProto& t, std::string_view kind) {
  return CheckTensor(t, [&t, kind] { return std::string(kind) + " '" + t.name() + "'"; });
}

Status ValidateModelProto(const onnx::ModelProto& model, std::span<const LeftOutPayload> left_out) {
  try {
    return Validator(model, left_out).Run();
  } catch (const std::exception& e) {
    return InvalidModel(std::string("model failed validation: ") + e.what());
  }
}

}  // namespace memest::core
