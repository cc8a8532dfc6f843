// measurement/plan.cc -- ONNX side of the measurement harness (see plan.h for the policy).
// This is the only measurement source that reads protobuf messages; it never includes LibTorch.
#include "measurement/plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "base/dtype.h"
#include "core/bind.h"
#include "core/checkpoint.h"
#include "core/graph.h"

namespace memest::measurement {
namespace {

// Payloads larger than this are not copied into the plan (the executor fills zeros and says so).
constexpr int64_t kMaxPayloadElements = int64_t{1} << 22;

double HalfToDouble(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else if (exp == 31) {
    v = mant == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<double>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

double BFloat16ToDouble(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <typename T>
std::vector<T> RawAs(const std::string& raw, size_t n) {
  std::vector<T> out(n);
  std::memcpy(out.data(), raw.data(), n * sizeof(T));
  return out;
}

// One little-endian element of a narrow integer type (int32, int16, uint16, int8; uint8 and bool
// otherwise) at `p`, widened.
int64_t NarrowIntAt(const char* p, int32_t dtype) {
  switch (dtype) {
    case base::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case base::kInt16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case base::kUInt16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case base::kInt8:
      return static_cast<int8_t>(*p);
    default:
      return static_cast<uint8_t>(*p);
  }
}

// The `n` elements of a floating-point `t` (float, double, float16, bfloat16) into c->floats,
// from the typed field or raw_data, whichever holds exactly n; nothing when neither does.
void ReadFloatPayload(const onnx::TensorProto& t, size_t n, ConstTensor* c) {
  const std::string& raw = t.raw_data();
  const auto numel = static_cast<int64_t>(n);
  switch (c->dtype) {
    case base::kFloat:
      if (t.float_data_size() == numel) {
        c->floats.assign(t.float_data().begin(), t.float_data().end());
      } else if (raw.size() == n * 4) {
        auto v = RawAs<float>(raw, n);
        c->floats.assign(v.begin(), v.end());
      }
      return;
    case base::kDouble:
      if (t.double_data_size() == numel) {
        c->floats.assign(t.double_data().begin(), t.double_data().end());
      } else if (raw.size() == n * 8) {
        c->floats = RawAs<double>(raw, n);
      }
      return;
    default: {  // float16, bfloat16
      std::vector<uint16_t> bits;
      if (t.int32_data_size() == numel) {
        for (int32_t v : t.int32_data()) bits.push_back(static_cast<uint16_t>(v));
      } else if (raw.size() == n * 2) {
        bits = RawAs<uint16_t>(raw, n);
      }
      for (uint16_t b : bits) {
        c->floats.push_back(c->dtype == base::kFloat16 ? HalfToDouble(b) : BFloat16ToDouble(b));
      }
      return;
    }
  }
}

// The `n` elements of an integer or bool `t` into c->ints, the same way.
void ReadIntPayload(const onnx::TensorProto& t, size_t n, ConstTensor* c) {
  const std::string& raw = t.raw_data();
  const auto numel = static_cast<int64_t>(n);
  switch (c->dtype) {
    case base::kInt64:
      if (t.int64_data_size() == numel) {
        c->ints.assign(t.int64_data().begin(), t.int64_data().end());
      } else if (raw.size() == n * 8) {
        c->ints = RawAs<int64_t>(raw, n);
      }
      return;
    case base::kUInt32:
    case base::kUInt64:
      if (t.uint64_data_size() == numel) {
        for (uint64_t v : t.uint64_data()) c->ints.push_back(static_cast<int64_t>(v));
      }
      return;
    default: {  // int32, int16, int8, uint8, uint16, bool
      const size_t width = base::DTypeSize(c->dtype);
      if (t.int32_data_size() == numel) {
        c->ints.assign(t.int32_data().begin(), t.int32_data().end());
      } else if (raw.size() == n * width) {
        for (size_t i = 0; i < n; ++i)
          c->ints.push_back(NarrowIntAt(raw.data() + i * width, c->dtype));
      }
      return;
    }
  }
}

// Copies the payload of `t` when it is stored inline and small enough.
ConstTensor ToConstTensor(const onnx::TensorProto& t) {
  ConstTensor c;
  c.dtype = t.data_type();
  c.dims.assign(t.dims().begin(), t.dims().end());
  const int64_t numel = c.Numel();
  if (numel < 0 || numel > kMaxPayloadElements ||
      t.data_location() == onnx::TensorProto::EXTERNAL) {
    return c;
  }
  const size_t n = static_cast<size_t>(numel);
  switch (c.dtype) {
    case base::kFloat:
    case base::kDouble:
    case base::kFloat16:
    case base::kBFloat16:
      ReadFloatPayload(t, n, &c);
      break;
    case base::kInt64:
    case base::kInt32:
    case base::kInt16:
    case base::kInt8:
    case base::kUInt8:
    case base::kUInt16:
    case base::kBool:
    case base::kUInt32:
    case base::kUInt64:
      ReadIntPayload(t, n, &c);
      break;
    default:
      break;
  }
  c.has_data = static_cast<int64_t>(c.floats.size() + c.ints.size()) == numel;
  if (!c.has_data) {
    c.floats.clear();
    c.ints.clear();
  }
  return c;
}

void CopyAttributes(const onnx::NodeProto& proto, PlanNode* node) {
  for (const onnx::AttributeProto& a : proto.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto::INT:
        node->attributes.emplace(a.name(), static_cast<int64_t>(a.i()));
        break;
      case onnx::AttributeProto::FLOAT:
        node->attributes.emplace(a.name(), static_cast<double>(a.f()));
        break;
      case onnx::AttributeProto::STRING:
        node->attributes.emplace(a.name(), a.s());
        break;
      case onnx::AttributeProto::INTS:
        node->attributes.emplace(a.name(), std::vector<int64_t>(a.ints().begin(), a.ints().end()));
        break;
      case onnx::AttributeProto::FLOATS:
        node->attributes.emplace(a.name(),
                                 std::vector<double>(a.floats().begin(), a.floats().end()));
        break;
      case onnx::AttributeProto::STRINGS:
        node->attributes.emplace(a.name(),
                                 std::vector<std::string>(a.strings().begin(), a.strings().end()));
        break;
      case onnx::AttributeProto::TENSOR:
        node->attributes.emplace(a.name(), ToConstTensor(a.t()));
        break;
      case onnx::AttributeProto::GRAPH:
      case onnx::AttributeProto::GRAPHS:
        node->has_subgraph = true;
        break;
      default:
        break;  // sparse tensors, type protos: no supported op reads them
    }
  }
}

bool IsShapePreserving(const std::string& op) {
  static const std::set<std::string, std::less<>> kOps = {"Cast",    "Reshape", "Unsqueeze",
                                                          "Squeeze", "Flatten", "Identity"};
  return kOps.count(op) > 0;
}

// Upper bound for random ids of integer data input `id` (see plan.h); 2 when no table is found.
int64_t IndexBound(const core::Graph& g, const std::vector<PlanNode>& nodes,
                   const std::vector<PlanValue>& values, int id, int depth) {
  int64_t bound = -1;
  for (int c : g.value(id).consumers) {
    const PlanNode& n = nodes[static_cast<size_t>(c)];
    if (!n.domain.empty()) continue;
    int64_t b = -1;
    if (n.op_type == "Gather" && n.inputs.size() >= 2 && n.inputs[1] == id && n.inputs[0] >= 0) {
      const PlanValue& table = values[static_cast<size_t>(n.inputs[0])];
      if (table.role != ValueRole::kIntermediate && table.role != ValueRole::kDataInput &&
          table.dims && !table.dims->empty()) {
        int64_t axis = n.Int("axis").value_or(0);
        const int64_t rank = static_cast<int64_t>(table.dims->size());
        if (axis < 0) axis += rank;
        if (axis >= 0 && axis < rank) b = (*table.dims)[static_cast<size_t>(axis)];
      }
    } else if (depth < 4 && IsShapePreserving(n.op_type) && !n.inputs.empty() &&
               n.inputs[0] == id && !n.outputs.empty() && n.outputs[0] >= 0) {
      b = IndexBound(g, nodes, values, n.outputs[0], depth + 1);
      if (b == 2) b = -1;  // nothing found downstream
    }
    if (b > 0) bound = bound < 0 ? b : std::min(bound, b);
  }
  return bound > 0 ? bound : 2;
}

}  // namespace

int64_t ConstTensor::Numel() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxPayloadElements * 16 / d)) return -1;
    n *= d;
  }
  return n;
}

std::optional<int64_t> PlanNode::Int(std::string_view name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return std::nullopt;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return std::nullopt;
}

std::optional<double> PlanNode::Float(std::string_view name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return std::nullopt;
  if (const auto* v = std::get_if<double>(&it->second)) return *v;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return std::nullopt;
}

std::optional<std::string> PlanNode::String(std::string_view name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return std::nullopt;
  if (const auto* v = std::get_if<std::string>(&it->second)) return *v;
  return std::nullopt;
}

std::optional<std::vector<int64_t>> PlanNode::Ints(std::string_view name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return std::nullopt;
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return std::nullopt;
}

std::optional<std::vector<double>> PlanNode::Floats(std::string_view name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return std::nullopt;
  if (const auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  return std::nullopt;
}

std::optional<std::vector<std::string>> PlanNode::Strings(std::string_view name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return std::nullopt;
  if (const auto* v = std::get_if<std::vector<std::string>>(&it->second)) return *v;
  return std::nullopt;
}

const ConstTensor* PlanNode::Tensor(std::string_view name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return nullptr;
  return std::get_if<ConstTensor>(&it->second);
}

const char* ToString(ValueRole role) {
  switch (role) {
    case ValueRole::kIntermediate:
      return "intermediate";
    case ValueRole::kDataInput:
      return "data_input";
    case ValueRole::kParameter:
      return "parameter";
    case ValueRole::kBuffer:
      return "buffer";
    case ValueRole::kConstant:
      return "constant";
  }
  return "unknown";
}

namespace {

// An initializer's role: a parameter when trainable, a buffer when every consumer is a
// BatchNormalization (its running statistics), a constant otherwise.
ValueRole InitializerRole(const core::Graph& g, const core::Value& v) {
  if (v.trainable) return ValueRole::kParameter;
  const bool only_batch_norm = base::IsFloatDType(v.dtype) && !v.consumers.empty() &&
                               std::all_of(v.consumers.begin(), v.consumers.end(), [&](int c) {
                                 const core::Node& n = g.node(c);
                                 return n.op_type == "BatchNormalization" && n.domain.empty();
                               });
  return only_batch_norm ? ValueRole::kBuffer : ValueRole::kConstant;
}

// Every value with its bound dtype and shape, producer, last consumer and role; initializers keep
// their declared shape and, when the loader kept it (at most 1024 elements), their payload.
// InvalidModel for a data input without a concrete shape after binding.
Result<std::vector<PlanValue>> PlanValues(const core::Graph& g, const core::BoundGraph& bound) {
  std::map<std::string, const onnx::TensorProto*, std::less<>> init_protos;
  for (const onnx::TensorProto& t : g.proto->graph().initializer()) init_protos[t.name()] = &t;
  std::vector<PlanValue> values(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    PlanValue& p = values[i];
    p.name = v.name;
    p.dtype = bound.dtypes[i] != 0 ? bound.dtypes[i] : v.dtype;
    if (const core::MaybeDims dims = bound.shapes[i]) p.dims.emplace(dims->begin(), dims->end());
    p.graph_output = v.graph_output;
    p.producer = v.producer;
    for (int c : v.consumers) p.last_consumer = std::max(p.last_consumer, c);
    switch (v.kind) {
      case core::ValueKind::kDataInput:
        p.role = ValueRole::kDataInput;
        if (!p.dims) {
          return InvalidModel("input '" + v.name + "' has no concrete shape after binding");
        }
        break;
      case core::ValueKind::kInitializer: {
        p.dtype = v.dtype;
        std::vector<int64_t> dims;
        for (const core::Dim& d : v.dims) dims.push_back(d.value);
        p.dims = dims;
        p.role = InitializerRole(g, v);
        if (auto it = init_protos.find(v.name); it != init_protos.end()) {
          ConstTensor c = ToConstTensor(*it->second);
          if (c.has_data) p.data = std::move(c);
        }
        break;
      }
      default:
        p.role = ValueRole::kIntermediate;
        break;
    }
  }
  return values;
}

std::vector<PlanNode> PlanNodes(const core::Graph& g) {
  std::vector<PlanNode> nodes;
  nodes.reserve(g.nodes.size());
  for (const core::Node& n : g.nodes) {
    PlanNode p;
    p.name = n.name;
    p.op_type = n.op_type;
    p.domain = n.domain == "ai.onnx" ? "" : n.domain;
    p.opset = n.opset;
    p.inputs.assign(n.inputs.begin(), n.inputs.end());
    p.outputs.assign(n.outputs.begin(), n.outputs.end());
    if (n.proto != nullptr) CopyAttributes(*n.proto, &p);
    p.has_subgraph = p.has_subgraph || n.subgraph_nodes > 0;
    nodes.push_back(std::move(p));
  }
  return nodes;
}

// The parameters (and their bytes), buffers and constants, in value order.
void ListByRole(Plan* plan) {
  for (size_t i = 0; i < plan->values.size(); ++i) {
    const PlanValue& p = plan->values[i];
    const int id = static_cast<int>(i);
    switch (p.role) {
      case ValueRole::kParameter: {
        plan->parameters.push_back(id);
        uint64_t numel = 1;
        for (int64_t d : *p.dims) numel *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
        plan->parameter_bytes += numel * base::DTypeSize(p.dtype);
        break;
      }
      case ValueRole::kBuffer:
        plan->buffers.push_back(id);
        break;
      case ValueRole::kConstant:
        plan->constants.push_back(id);
        break;
      default:
        break;
    }
  }
}

}  // namespace

Result<Plan> BuildPlan(const Model& model, const Options& options) {
  const core::Graph& g = model.graph();
  MEMEST_ASSIGN_OR_RETURN(core::BoundGraph bound, core::Bind(g, options));

  Plan plan;
  plan.model_path = g.summary.path;
  plan.bindings = bound.bindings;
  plan.diagnostics = bound.diagnostics;
  MEMEST_ASSIGN_OR_RETURN(std::vector<core::CheckpointSegment> segments,
                          core::CheckpointSegmentsFor(g, options));
  for (const core::CheckpointSegment& c : segments) {
    plan.checkpoint.push_back({c.begin, c.end, c.inputs, c.outputs, c.parameters});
  }
  MEMEST_ASSIGN_OR_RETURN(plan.values, PlanValues(g, bound));
  plan.nodes = PlanNodes(g);
  ListByRole(&plan);
  plan.data_inputs = g.data_inputs;
  plan.outputs = g.outputs;
  for (int id : plan.data_inputs) {
    PlanValue& p = plan.value(id);
    if (!base::IsFloatDType(p.dtype)) p.index_bound = IndexBound(g, plan.nodes, plan.values, id, 0);
  }
  if (plan.outputs.empty()) return InvalidModel("the graph has no outputs");
  return plan;
}

}  // namespace memest::measurement
