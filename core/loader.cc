// core/loader.cc -- ONNX file -> core::Graph, with validation.
//
// Policy (what the loader accepts and rejects; every rejection is an InvalidModel/NotFound/
// Overflow Status naming the file and the tensor or node at fault -- never a crash):
//  * The file is parsed with protobuf (onnx::ModelProto); never a hand-written parser. A file that
//    does not parse completely (truncated, HTML, random bytes) is rejected. Files over 2 GiB cannot
//    be one protobuf message: such models must keep weights in external data.
//  * A file over kArenaWeightBytes first goes through the payload filter (core/payload_filter.h),
//    which copies it with protobuf's own wire-format reader less the top-level initializers'
//    large raw_data, seeking past those bytes in a file; the copy is parsed as above, and each
//    left-out payload's length is validated as if it were there. Where the filter gives up, the
//    original bytes are parsed, so a malformed file gets the parse's error as before.
//  * The parsed proto is validated whole before anything reads it (core/validate.h: versions,
//    tensor payload lengths, attribute types, control-flow bodies, subgraph dataflow, bounds).
//  * A model needs a graph and at least one opset_import. Ops from domains missing from
//    opset_import are accepted with a diagnostic; non-default domains are reported.
//  * Element types must be known ONNX codes (1..16) on initializers and data inputs.
//  * Dims of initializers and data inputs must be >= 0; element and byte counts are computed with
//    checked 64-bit arithmetic. Negative dims in value_info are ignored (diagnostic).
//  * The file is parsed onto a protobuf arena (core/graph.h ParsedModel). Weights are never read:
//    initializer payloads above kKeepDataElements elements are stripped from the kept proto;
//    when they held more than kArenaWeightBytes, the stripped proto moves to the heap, so that
//    the arena does not keep the weights' bytes for the graph's lifetime. External data is never
//    opened. An external-data location must be a
//    relative path that stays inside the model's folder ("../x", "/abs", "a/../../x" rejected).
//  * Initializers also listed as graph inputs (old exporters) are initializers, not data inputs.
//  * Nodes are sorted topologically; a cycle is an error naming a node on it. Every node input
//    must be produced by a node, an initializer or a graph input (subgraph bodies may use names
//    from the enclosing scope; they are parsed and counted, not validated further).
//  * Shapes are not inferred here: the shape pass runs the op rules, a layer above
//    (ops/shape_pass.h); LoadModel (ops/load_model.cc) runs it right after this loader.
//  * Trainable parameters = float initializers with more than one element that feed some node
//    other than as BatchNormalization running statistics (inputs 3/4), which are buffers. A
//    1-element initializer is a parameter where it bears a module's state_dict name, as
//    torch.onnx.export names parameters ("stages.0.blocks.1.mlp.act.scale": a learnable scalar,
//    timm's StarReLU; torch/onnx/utils.py, _create_jit_graph, names the graph's parameter inputs
//    by the state_dict's keys, and writes its own constants as Constant nodes), or where a
//    module keeps one: the bias of a Linear/Conv with one output (Gemm/Conv/ConvTranspose input
//    2), a PReLU slope (PRelu input 1), a 1-channel norm's scale/bias (inputs 1/2), at rank >= 1.
//    Other 1-element initializers are constants (eps, scales) that other exporters write as
//    initializers ("half", "onnx::Mul_12", "model/dense/bias:0", TorchScript's "input.1": a name
//    whose last word is a number). A 1-element buffer bears a state_dict name too, and is counted
//    as a parameter, as larger buffers are.
#include "core/loader.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <span>
#include <string_view>
#include <utility>

#include "base/checked.h"
#include "base/dtype.h"
#include "core/bind_cache.h"
#include "core/graph.h"
#include "core/merged_nodes.h"
#include "core/payload_filter.h"
#include "core/validate.h"
#include "memest/model.h"

namespace memest {

Model::Model(std::unique_ptr<core::Graph> graph)
    : graph_(std::move(graph)), bind_cache_(std::make_unique<core::BindCache>()) {}
Model::~Model() = default;
const ModelSummary& Model::summary() const { return graph_->summary; }
const core::Graph& Model::graph() const { return *graph_; }
core::BindCache& Model::bind_cache() const { return *bind_cache_; }

namespace core {
namespace {

constexpr int64_t kKeepDataElements = 1024;  // small constants kept for shape computations
// Stripped payload bytes above which the kept proto leaves the arena they were parsed into.
constexpr uint64_t kArenaWeightBytes = uint64_t{16} << 20;
constexpr uint64_t kMaxFileBytes = uint64_t{2} << 30;  // protobuf's 2 GiB message limit
// A payload the filter leaves out belongs to a tensor whose data the loader would not keep.
// 16 bytes: a complex128, the widest element of raw_data; a typed field's entries are at most 10.
static_assert(kLeftOutPayloadBytes >= kKeepDataElements * 16, "more than kKeepDataElements");
// The reads of a file through the payload filter: a payload longer than this is skipped by a seek.
constexpr int kFilteredReadBlock = 64 << 10;
// ReadNodes prefetches the name-index slots of the node this many ahead (NameIndex::Prefetch).
constexpr int kPrefetchAhead = 8;

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string NormalizeDomain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

// True when `location` is a relative path that stays within the model's folder. Every external
// initializer names one (a large export: hundreds), so its parts are read in place.
bool LocationStaysInside(std::string_view location) {
  if (location.empty() || location.find('\0') != std::string_view::npos) return false;
  if (location[0] == '/' || location[0] == '\\') return false;
  if (location.size() > 1 && location[1] == ':') return false;  // "C:..."
  int depth = 0;
  while (!location.empty()) {
    // Backslashes are path separators on Windows exporters: treat them as such.
    const size_t end = std::min(location.find_first_of("/\\"), location.size());
    const std::string_view part = location.substr(0, end);
    location.remove_prefix(std::min(end + 1, location.size()));
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (--depth < 0) return false;
    } else {
      ++depth;
    }
  }
  return true;
}

Result<std::vector<Dim>> ReadShape(const onnx::TensorShapeProto& shape, const std::string& what,
                                   bool negative_is_error) {
  std::vector<Dim> dims;
  dims.reserve(static_cast<size_t>(shape.dim_size()));
  for (int i = 0; i < shape.dim_size(); ++i) {
    const auto& d = shape.dim(i);
    Dim dim;
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) {
        if (negative_is_error) {
          return InvalidModel(what + " has a negative dim " + std::to_string(d.dim_value()) +
                              " at axis " + std::to_string(i));
        }
      } else {
        dim.value = d.dim_value();
      }
    } else if (d.has_dim_param()) {
      dim.param = d.dim_param();
    }
    dims.push_back(std::move(dim));
  }
  return dims;
}

// Small integer payload of a tensor (int32/int64/bool/uint8... stored inline), or nullopt.
std::optional<std::vector<int64_t>> SmallIntData(const onnx::TensorProto& t, uint64_t numel) {
  if (numel > static_cast<uint64_t>(kKeepDataElements)) return std::nullopt;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
  std::vector<int64_t> out;
  switch (t.data_type()) {
    case base::kInt64:
      if (t.int64_data_size() > 0) {
        out.assign(t.int64_data().begin(), t.int64_data().end());
      } else if (t.raw_data().size() == numel * 8) {
        out.resize(numel);
        if (numel > 0) std::memcpy(out.data(), t.raw_data().data(), numel * 8);
      }
      break;
    case base::kInt32:
      if (t.int32_data_size() > 0) {
        out.assign(t.int32_data().begin(), t.int32_data().end());
      } else if (t.raw_data().size() == numel * 4) {
        std::vector<int32_t> tmp(numel);
        if (numel > 0) std::memcpy(tmp.data(), t.raw_data().data(), numel * 4);
        out.assign(tmp.begin(), tmp.end());
      }
      break;
    default:
      return std::nullopt;
  }
  if (out.size() != numel) return std::nullopt;
  return out;
}

// "<op_type>_<index>", the name an unnamed node goes by, built in place (one allocation at most;
// generated graphs leave every node unnamed).
void UnnamedNodeName(const std::string& op_type, int index, std::string* name) {
  char digits[16];
  const auto end = std::to_chars(digits, digits + sizeof(digits), index).ptr;
  name->reserve(op_type.size() + 1 + static_cast<size_t>(end - digits));
  name->assign(op_type).push_back('_');
  name->append(digits, end);
}

// Nodes inside `node`'s bodies, recursively (their depth was bounded by ValidateModelProto).
int64_t CountSubgraphNodes(const onnx::NodeProto& node) {
  int64_t n = 0;
  auto count_graph = [&](const onnx::GraphProto& g) {
    n += g.node_size();
    for (const auto& sub : g.node()) n += CountSubgraphNodes(sub);
  };
  for (const auto& attr : node.attribute()) {
    if (attr.has_g()) count_graph(attr.g());
    for (const auto& g : attr.graphs()) count_graph(g);
  }
  return n;
}

// What the summary says of the nodes, noted by ReadNodes while each node is at hand (a pass of its
// own over 100,000 nodes missed the cache on every one): the distinct op types and the nodes per
// foreign domain, the nodes inside subgraphs, and the signs of an eval-mode export.
class NodeTally {
 public:
  // Notes `n`; returns whether it is a standard Constant node (whose small values the loader
  // keeps).
  bool Note(const Node& n) {
    subgraph_nodes_ += n.subgraph_nodes;
    if (!n.domain.empty()) {
      custom_.emplace(n.domain, n.op_type);
      ++foreign_[n.domain];
      return false;
    }
    const Kind kind = NoteStandard(n.op_type);
    switch (kind) {
      case Kind::kConv:
        ++conv_;
        break;
      case Kind::kDropout:
        ++dropout_;
        break;
      case Kind::kBatchNorm: {
        ++bn_;
        int outputs = 0;
        for (int o : n.outputs) outputs += o >= 0;
        if (outputs <= 1) ++bn_inference_;
        break;
      }
      case Kind::kConstant:
      case Kind::kOther:
        break;
    }
    return kind == Kind::kConstant;
  }

  // The op types, sorted, each once; a foreign domain's as "domain::op".
  std::vector<std::string> OpTypes() const {
    std::set<std::string> ops(many_.begin(), many_.end());
    for (const auto& [op, kind] : few_) ops.insert(op);
    for (const auto& [domain, op] : custom_) ops.insert(domain + "::" + op);
    return {ops.begin(), ops.end()};
  }
  const std::map<std::string, int>& foreign() const { return foreign_; }
  int64_t subgraph_nodes() const { return subgraph_nodes_; }
  int conv() const { return conv_; }
  int dropout() const { return dropout_; }
  int bn() const { return bn_; }
  int bn_inference() const { return bn_inference_; }

 private:
  // The standard op types the summary and the loader single out.
  enum class Kind : uint8_t { kOther, kConv, kDropout, kBatchNorm, kConstant };
  static Kind KindOf(const std::string& op) {
    if (op == "Conv") return Kind::kConv;
    if (op == "Dropout") return Kind::kDropout;
    if (op == "BatchNormalization") return Kind::kBatchNorm;
    if (op == "Constant") return Kind::kConstant;
    return Kind::kOther;
  }

  // The distinct standard op types are usually few (tens): the first kFewOpTypes are looked up
  // in a vector, the last one found first, each with its Kind worked out when first seen (a
  // tree's several string comparisons per node were 2 % of loading a chain, and the Kind's four
  // about as much); any more go to a tree, so that a file of many distinct op types stays
  // n log n, and have their Kind worked out at each node.
  Kind NoteStandard(const std::string& op) {
    if (last_ < few_.size() && few_[last_].first == op) return few_[last_].second;
    last_ = static_cast<size_t>(
        std::find_if(few_.begin(), few_.end(), [&](const auto& f) { return f.first == op; }) -
        few_.begin());
    if (last_ < few_.size()) return few_[last_].second;
    const Kind kind = KindOf(op);
    if (few_.size() < kFewOpTypes) {
      few_.emplace_back(op, kind);
    } else {
      many_.insert(op);
    }
    return kind;
  }

  static constexpr size_t kFewOpTypes = 64;
  std::vector<std::pair<std::string, Kind>> few_;
  size_t last_ = 0;
  std::set<std::string> many_;
  std::set<std::pair<std::string, std::string>> custom_;
  std::map<std::string, int> foreign_;
  int64_t subgraph_nodes_ = 0;
  int conv_ = 0, dropout_ = 0, bn_ = 0, bn_inference_ = 0;
};

class Loader {
 public:
  Loader(std::string base_dir, std::string display)
      : base_dir_(std::move(base_dir)), display_(std::move(display)) {}

  // `left_out`: the payloads the filter left out of `bytes` (core/payload_filter.h), by the
  // top-level graph's initializers; empty when nothing was.
  Result<std::unique_ptr<Graph>> Load(std::string_view bytes,
                                      std::span<const LeftOutPayload> left_out = {});

 private:
  Status Parse(std::string_view bytes);
  void ReserveValues();
  Status ReadInitializers();
  Status ReadInputs();
  Status ReadNodes();
  Status KeepConstantValues(const onnx::NodeProto& n, const Node& node);
  Status SortNodes();
  Status ReadValueInfo();
  // Marks the trainable initializers and counts them into the summary (CountParameter).
  void MarkTrainable();
  void CountParameter(uint64_t numel, int32_t dtype);
  // Strips large payloads; returns the bytes they held.
  uint64_t StripWeights();
  // Node::proto of every node, after sorting (the proto was reordered) or a move to the heap.
  void PointNodesAtProto();
  void Summarize();
  int AddValue(const std::string& name, ValueKind kind);

  std::string base_dir_;
  std::string display_;
  std::span<const LeftOutPayload> left_out_;
  std::unique_ptr<Graph> g_ = std::make_unique<Graph>();
  std::map<std::string, int64_t> opsets_;
  std::vector<Diagnostic> diags_;
  NodeTally tally_;             // ReadNodes notes every node; Summarize reads it
  bool in_file_order_ = false;  // ReadNodes: every node reads only values made before it
  int merged_copies_ = 0;       // SplitMergedActivations: the copies it made
  size_t initializers_ = 0;  // ReadInitializers: the initializers are the values [0, initializers_)
};

int Loader::AddValue(const std::string& name, ValueKind kind) {
  auto [id, inserted] = g_->value_index.Insert(name, static_cast<int>(g_->values.size()));
  if (inserted) {
    Value& v = g_->values.emplace_back();
    v.name = name;
    v.kind = kind;
  }
  return id;
}

Status Loader::Parse(std::string_view bytes) {
  if (bytes.empty()) return InvalidModel("file is empty, not an ONNX model");
  if (bytes.size() >= kMaxFileBytes) {
    return InvalidModel(
        "file is 2 GiB or larger: a protobuf message cannot be; store weights as "
        "external data");
  }
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetRecursionLimit(kMaxSubgraphDepth * 2);
  g_->proto = ParsedModel::OnArena();
  const bool parsed = g_->proto->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
  if (!parsed) {
    std::string head(bytes.substr(0, std::min<size_t>(bytes.size(), 256)));
    std::transform(head.begin(), head.end(), head.begin(), ::tolower);
    if (head.find("<html") != std::string::npos || head.find("<!doctype") != std::string::npos ||
        head[0] == '<') {
      return InvalidModel("not an ONNX model: the file looks like an HTML/XML page");
    }
    return InvalidModel("not an ONNX model: the protobuf does not parse (truncated or corrupt)");
  }
  const auto& m = *g_->proto;
  if (!m.has_graph()) {
    return InvalidModel(
        "not an ONNX model: no graph (the bytes parsed as protobuf, but hold no "
        "ONNX ModelProto)");
  }
  if (m.opset_import_size() == 0) return InvalidModel("model has no opset_import");
  for (const auto& op : m.opset_import()) opsets_[NormalizeDomain(op.domain())] = op.version();
  if (m.graph().node_size() == 0 && m.graph().output_size() == 0) {
    return InvalidModel("graph has no nodes and no outputs");
  }
  if (!left_out_.empty() && left_out_.size() != static_cast<size_t>(m.graph().initializer_size())) {
    return Internal("the payload filter counted " + std::to_string(left_out_.size()) +
                    " initializers where the parse has " +
                    std::to_string(m.graph().initializer_size()));
  }
  // Everything later stages (and ONNX's inference functions) trust: core/validate.h.
  return ValidateModelProto(m, left_out_);
}

// Room for every value the file can name (initializers, inputs, node outputs), so that reading
// them never grows a table.
void Loader::ReserveValues() {
  const auto& graph = g_->proto->graph();
  size_t names = static_cast<size_t>(graph.initializer_size()) +
                 static_cast<size_t>(graph.sparse_initializer_size()) +
                 static_cast<size_t>(graph.input_size());
  for (const auto& n : graph.node()) names += static_cast<size_t>(n.output_size());
  g_->value_index.Reserve(names);
  g_->values.reserve(names);
}

Status Loader::ReadInitializers() {
  // `validated`: ValidateModelProto has checked the tensor already (dense initializers).
  auto read_one = [&](const onnx::TensorProto& t, const char* kind, bool validated) -> Status {
    if (t.name().empty()) return InvalidModel("an initializer has no name");
    auto what = [&] { return kind + (" " + Quote(t.name())); };
    if (!validated) MEMEST_RETURN_IF_ERROR(ValidateTensor(t, what()));  // dtype, dims, payload
    const size_t before = g_->values.size();
    const int id = AddValue(t.name(), ValueKind::kInitializer);
    if (g_->values.size() == before) return InvalidModel(what() + " is defined twice");
    const std::span<const int64_t> dims(t.dims().data(), t.dims().size());
    auto numel = base::CheckedNumel(dims);
    if (!base::CheckedMul(*numel, std::max<uint64_t>(base::DTypeSize(t.data_type()), 1))) {
      return Overflow(what() + ": byte size overflows 64 bits");
    }
    bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
    for (const auto& kv : t.external_data()) {
      if (kv.key() == "location") {
        external = true;
        if (!LocationStaysInside(kv.value())) {
          return InvalidModel(what() + ": external data location '" + kv.value() +
                              "' leaves the model's folder; refusing it");
        }
      }
    }
    if (t.data_location() == onnx::TensorProto::EXTERNAL &&
        std::none_of(t.external_data().begin(), t.external_data().end(),
                     [](const auto& kv) { return kv.key() == "location"; })) {
      return InvalidModel(what() + ": external data without a location");
    }
    Value& v = g_->value(id);
    v.dtype = t.data_type();
    v.has_shape = true;
    v.dims.reserve(dims.size());
    for (int64_t d : dims) v.dims.push_back(Dim{d, {}});
    v.external = external;
    v.int_data = SmallIntData(t, *numel);
    return Status::Ok();
  };
  const auto& initializers = g_->proto->graph().initializer();
  for (int i = 0; i < initializers.size(); ++i) {
    if (i + kPrefetchAhead < initializers.size()) {
      g_->value_index.Prefetch(initializers[i + kPrefetchAhead].name());
    }
    MEMEST_RETURN_IF_ERROR(read_one(initializers[i], "initializer", /*validated=*/true));
  }
  for (const auto& s : g_->proto->graph().sparse_initializer()) {
    onnx::TensorProto dense_shape;  // dims and type of the dense tensor; payload not read
    dense_shape.set_name(s.values().name());
    dense_shape.set_data_type(s.values().data_type());
    for (int64_t d : s.dims()) dense_shape.add_dims(d);
    MEMEST_RETURN_IF_ERROR(read_one(dense_shape, "sparse initializer", /*validated=*/false));
  }
  initializers_ = g_->values.size();
  return Status::Ok();
}

Status Loader::ReadInputs() {
  for (const auto& in : g_->proto->graph().input()) {
    if (in.name().empty()) return InvalidModel("a graph input has no name");
    const std::string what = "input " + Quote(in.name());
    const int existing = g_->FindValue(in.name());
    if (existing >= 0 && g_->value(existing).kind == ValueKind::kInitializer) {
      continue;  // old exporters list initializers as inputs too
    }
    if (existing >= 0) return InvalidModel(what + " is listed twice");
    const int id = AddValue(in.name(), ValueKind::kDataInput);
    Value& v = g_->value(id);
    if (in.type().has_tensor_type()) {
      const auto& tt = in.type().tensor_type();
      if (!base::IsKnownDType(tt.elem_type())) {
        return InvalidModel(what + " has unknown element type " + std::to_string(tt.elem_type()));
      }
      v.dtype = tt.elem_type();
      if (tt.has_shape()) {
        MEMEST_ASSIGN_OR_RETURN(v.dims, ReadShape(tt.shape(), what, /*negative_is_error=*/true));
        v.has_shape = true;
        std::vector<int64_t> known;
        for (const Dim& d : v.dims) {
          if (d.known()) known.push_back(d.value);
        }
        if (!base::CheckedNumel(known)) return Overflow(what + ": element count overflows 64 bits");
      }
    }
    g_->data_inputs.push_back(id);
  }
  return Status::Ok();
}

// One pass over the nodes, in file order: each node's inputs are looked up, then its outputs
// added. An input made by a later node (a file not in topological order) is looked up again once
// every output is known. Errors come as two passes over the nodes would give them: first a node
// with no op_type or an output made twice, in any node; then, in node order, an input nothing
// provides. (A Constant whose tensor has invalid dims is rejected where it is read; validation
// rejects such a tensor first: core/validate.cc.)
Status Loader::ReadNodes() {
  const auto& graph = g_->proto->graph();
  g_->nodes.resize(static_cast<size_t>(graph.node_size()));
  struct Pending {  // an input not provided by the nodes before its reader
    int node;
    int slot;
  };
  std::vector<Pending> pending;
  std::set<std::string> undeclared_domains;
  for (int i = 0; i < graph.node_size(); ++i) {
    if (i + kPrefetchAhead < graph.node_size()) {
      const auto& ahead = graph.node(i + kPrefetchAhead);
      for (const auto& in : ahead.input()) g_->value_index.Prefetch(in);
      for (const auto& out : ahead.output()) g_->value_index.Prefetch(out);
    }
    const auto& n = graph.node(i);
    Node& node = g_->node(i);
    if (n.name().empty()) {
      UnnamedNodeName(n.op_type(), i, &node.name);
    } else {
      node.name = n.name();
    }
    if (n.op_type().empty()) return InvalidModel("node " + Quote(node.name) + " has no op_type");
    node.op_type = n.op_type();
    node.domain = NormalizeDomain(n.domain());
    auto op = opsets_.find(node.domain);
    if (op == opsets_.end()) {
      undeclared_domains.insert(node.domain.empty() ? "ai.onnx" : node.domain);
    } else {
      node.opset = op->second;
    }
    if (n.input_size() > static_cast<int>(kInlineIds)) {
      node.inputs.reserve(static_cast<size_t>(n.input_size()));
    }
    for (const auto& in : n.input()) {
      int id = -1;
      if (!in.empty()) {
        id = g_->FindValue(in);
        if (id < 0) {
          pending.push_back({i, static_cast<int>(node.inputs.size())});
        } else {
          g_->value(id).consumers.push_back(i);
        }
      }
      node.inputs.push_back(id);
    }
    if (n.output_size() > static_cast<int>(kInlineIds)) {
      node.outputs.reserve(static_cast<size_t>(n.output_size()));
    }
    for (const auto& out : n.output()) {
      if (out.empty()) {
        node.outputs.push_back(-1);
        continue;
      }
      const size_t before = g_->values.size();
      const int id = AddValue(out, ValueKind::kIntermediate);
      if (g_->values.size() == before) {
        const Value& v = g_->value(id);
        const std::string producer = v.producer >= 0 ? g_->node(v.producer).name : "";
        std::string by = v.producer >= 0 ? " (also produced by node " + Quote(producer) + ")"
                         : v.kind == ValueKind::kInitializer ? " (also an initializer)"
                                                             : " (also a graph input)";
        return InvalidModel("node " + Quote(node.name) + " (" + n.op_type() + ") produces tensor " +
                            Quote(out) + " that already exists" + by);
      }
      g_->value(id).producer = i;
      node.outputs.push_back(id);
    }
    node.subgraph_nodes = CountSubgraphNodes(n);
    const bool constant = tally_.Note(node);
    if (constant) MEMEST_RETURN_IF_ERROR(KeepConstantValues(n, node));
  }
  // The inputs made by later nodes, now that every output is known; the values they name get
  // their consumers in node order again, as every other value has them.
  std::vector<int> reordered;
  for (const Pending& p : pending) {
    const Node& node = g_->node(p.node);
    const std::string& in = graph.node(p.node).input(p.slot);
    const int id = g_->FindValue(in);
    if (id < 0) {
      return InvalidModel("node " + Quote(node.name) + " (" + node.op_type + ") reads tensor " +
                          Quote(in) + " that no node, initializer or graph input provides");
    }
    g_->node(p.node).inputs[static_cast<size_t>(p.slot)] = id;
    g_->value(id).consumers.push_back(p.node);
    reordered.push_back(id);
  }
  in_file_order_ = pending.empty();
  std::sort(reordered.begin(), reordered.end());
  reordered.erase(std::unique(reordered.begin(), reordered.end()), reordered.end());
  for (int id : reordered) {
    IdList& c = g_->value(id).consumers;
    std::sort(c.begin(), c.end());
  }
  for (const auto& d : undeclared_domains) {
    diags_.push_back({Severity::kWarning, "undeclared_domain",
                      "ops from domain '" + d + "' are used but not listed in opset_import", "",
                      ""});
  }
  for (const auto& out : graph.output()) {
    const int id = g_->FindValue(out.name());
    if (id < 0) {
      return InvalidModel("graph output " + Quote(out.name()) + " is not produced by any node");
    }
    g_->value(id).graph_output = true;
    g_->outputs.push_back(id);
  }
  return Status::Ok();
}

// Keeps the small integer values of a Constant node's output (shape computations need them).
Status Loader::KeepConstantValues(const onnx::NodeProto& n, const Node& node) {
  if (node.outputs.empty() || node.outputs[0] < 0) return Status::Ok();
  Value& v = g_->value(node.outputs[0]);
  for (const auto& attr : n.attribute()) {
    if (attr.name() == "value" && attr.has_t()) {
      std::vector<int64_t> dims(attr.t().dims().begin(), attr.t().dims().end());
      auto numel = base::CheckedNumel(dims);
      if (!numel) return InvalidModel("Constant node " + Quote(node.name) + " has invalid dims");
      v.int_data = SmallIntData(attr.t(), *numel);
    } else if (attr.name() == "value_int") {
      v.int_data = std::vector<int64_t>{attr.i()};
    } else if (attr.name() == "value_ints") {
      v.int_data = std::vector<int64_t>(attr.ints().begin(), attr.ints().end());
    }
  }
  return Status::Ok();
}

Status Loader::SortNodes() {
  // When every node reads only values made by earlier nodes (ReadNodes looked none up twice), the
  // file's order is the topological order Kahn's algorithm below would produce (it always takes
  // the lowest ready index), and there is no cycle. Exporters write sorted files.
  if (in_file_order_) return Status::Ok();
  const size_t n = g_->nodes.size();
  // Each node's distinct producers, as edges producer -> user in one flat array (by producer).
  std::vector<std::pair<int, int>> edges;
  std::vector<int> producers;
  for (size_t i = 0; i < n; ++i) {
    producers.clear();
    for (int in : g_->nodes[i].inputs) {
      if (in >= 0 && g_->value(in).producer >= 0) producers.push_back(g_->value(in).producer);
    }
    std::sort(producers.begin(), producers.end());
    producers.erase(std::unique(producers.begin(), producers.end()), producers.end());
    for (int p : producers) edges.emplace_back(p, static_cast<int>(i));
  }
  std::vector<int> pending(n, 0);
  std::vector<size_t> first_user(n + 1, 0);
  for (const auto& [p, u] : edges) {
    ++pending[static_cast<size_t>(u)];
    ++first_user[static_cast<size_t>(p) + 1];
  }
  for (size_t i = 0; i < n; ++i) first_user[i + 1] += first_user[i];
  std::vector<int> users(edges.size());
  {
    std::vector<size_t> next(first_user.begin(), first_user.end() - 1);
    for (const auto& [p, u] : edges) users[next[static_cast<size_t>(p)]++] = u;
  }
  // Kahn's algorithm; a min-heap keeps the file's order among ready nodes (stable output).
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(static_cast<int>(i));
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t k = first_user[static_cast<size_t>(i)]; k < first_user[static_cast<size_t>(i) + 1];
         ++k) {
      const int u = users[k];
      if (--pending[static_cast<size_t>(u)] == 0) ready.push(u);
    }
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i) {
      if (pending[i] > 0) {
        return InvalidModel("graph has a cycle through node " + Quote(g_->nodes[i].name) + " (" +
                            g_->nodes[i].op_type + ")");
      }
    }
  }
  bool sorted = true;
  for (size_t i = 0; i < n; ++i) sorted = sorted && order[i] == static_cast<int>(i);
  if (sorted) return Status::Ok();
  // Renumber nodes, value producers/consumers, and reorder the kept proto to match.
  std::vector<int> new_index(n);
  for (size_t k = 0; k < n; ++k) new_index[static_cast<size_t>(order[k])] = static_cast<int>(k);
  std::vector<Node> nodes(n);
  google::protobuf::RepeatedPtrField<onnx::NodeProto> protos;
  auto* mutable_nodes = g_->proto->mutable_graph()->mutable_node();
  for (size_t k = 0; k < n; ++k) {
    nodes[k] = std::move(g_->node(order[k]));
    protos.Add()->Swap(mutable_nodes->Mutable(order[k]));
  }
  mutable_nodes->Swap(&protos);
  g_->nodes = std::move(nodes);
  for (Value& v : g_->values) {
    if (v.producer >= 0) v.producer = new_index[static_cast<size_t>(v.producer)];
    for (int& c : v.consumers) c = new_index[static_cast<size_t>(c)];
  }
  return Status::Ok();
}

Status Loader::ReadValueInfo() {
  auto read = [&](const onnx::ValueInfoProto& vi) -> Status {
    const int id = g_->FindValue(vi.name());
    if (id < 0) return Status::Ok();  // info about a tensor the graph does not use
    Value& v = g_->value(id);
    if (v.kind != ValueKind::kIntermediate || !vi.type().has_tensor_type()) return Status::Ok();
    const auto& tt = vi.type().tensor_type();
    if (base::IsKnownDType(tt.elem_type())) v.dtype = tt.elem_type();
    if (tt.has_shape()) {
      auto dims = ReadShape(tt.shape(), "value_info " + Quote(vi.name()), false);
      if (dims.ok()) {
        v.dims = std::move(dims).value();
        v.has_shape = true;
      }
    }
    return Status::Ok();
  };
  for (const auto& vi : g_->proto->graph().value_info()) MEMEST_RETURN_IF_ERROR(read(vi));
  for (const auto& vi : g_->proto->graph().output()) MEMEST_RETURN_IF_ERROR(read(vi));
  return Status::Ok();
}

namespace {

// Is input slot `slot` of `node` one where a PyTorch module keeps a learnable tensor even when it
// has one element (see the policy at the top)?
bool IsOneElementParameterSlot(const Node& node, size_t slot) {
  if (!node.domain.empty() && node.domain != "ai.onnx") return false;
  const std::string& op = node.op_type;
  if (op == "Gemm" || op == "Conv" || op == "ConvTranspose") return slot == 1 || slot == 2;
  if (op == "PRelu") return slot == 1;
  if (op == "BatchNormalization" || op == "InstanceNormalization" || op == "LayerNormalization" ||
      op == "GroupNormalization") {
    return slot == 1 || slot == 2;
  }
  return false;
}

// Is `name` a module's state_dict key, as torch.onnx.export names the initializers of parameters
// and buffers ("stages.0.blocks.1.mlp.act.scale", "layers.0.weight"): dot-separated words of
// letters, digits and underscores, two or more? The exporter writes the constants it makes as
// Constant nodes, or names them "onnx::Mul_12" when it folds them (see the policy at the top).
bool IsStateDictName(std::string_view name) {
  bool dotted = false;
  size_t word = 0;
  for (const char ch : name) {
    if (ch == '.') {
      if (word == 0) return false;
      dotted = true;
      word = 0;
    } else if (std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_') {
      ++word;
    } else {
      return false;
    }
  }
  // A state_dict key ends in an attribute's name; TorchScript's unique names of values end in a
  // number ("input.1", "x.3"), and older exporters named folded constants so.
  if (!dotted || word == 0) return false;
  const char first = name[name.size() - word];  // of the last word
  return std::isalpha(static_cast<unsigned char>(first)) != 0 || first == '_';
}

}  // namespace

void Loader::MarkTrainable() {
  for (size_t i = 0; i < initializers_; ++i) {
    Value& v = g_->values[i];
    if (v.kind != ValueKind::kInitializer || !base::IsFloatDType(v.dtype) || v.consumers.empty()) {
      continue;
    }
    uint64_t numel = 1;
    for (const Dim& d : v.dims) numel = base::SatMul(numel, static_cast<uint64_t>(d.value));
    const int id = static_cast<int>(i);
    if (numel == 0) continue;
    if (numel == 1 && !IsStateDictName(v.name)) {  // a constant unless a module holds it (above)
      bool slot = false;
      for (int c : v.consumers) {
        const Node& node = g_->node(c);
        for (size_t k = 0; k < node.inputs.size(); ++k) {
          slot = slot || (node.inputs[k] == id && IsOneElementParameterSlot(node, k));
        }
      }
      if (v.dims.empty() || !slot) continue;
    }
    bool only_bn_stats = true;
    for (int c : v.consumers) {
      const Node& node = g_->node(c);
      bool is_stat = false;
      if (node.op_type == "BatchNormalization" && node.domain.empty()) {
        for (size_t k = 3; k < node.inputs.size() && k <= 4; ++k) {
          is_stat = is_stat || node.inputs[k] == id;
        }
      }
      only_bn_stats = only_bn_stats && is_stat;
    }
    v.trainable = !only_bn_stats;
    if (v.trainable) CountParameter(numel, v.dtype);
  }
}

void Loader::CountParameter(uint64_t numel, int32_t dtype) {
  ModelSummary& s = g_->summary;
  s.parameter_count = static_cast<int64_t>(
      std::min<uint64_t>(base::SatAdd(static_cast<uint64_t>(s.parameter_count), numel),
                         std::numeric_limits<int64_t>::max()));
  s.parameter_bytes = base::SatAdd(s.parameter_bytes, base::SatMul(numel, base::DTypeSize(dtype)));
}

uint64_t Loader::StripWeights() {
  uint64_t stripped = 0;
  auto strip = [&stripped](onnx::TensorProto* t) {
    uint64_t numel = 1;
    for (int64_t d : t->dims())
      numel = base::SatMul(numel, static_cast<uint64_t>(std::max<int64_t>(d, 0)));
    if (numel <= static_cast<uint64_t>(kKeepDataElements)) return;
    const auto count = [](int n) { return static_cast<uint64_t>(n); };
    uint64_t bytes = t->raw_data().size() +
                     4 * (count(t->float_data_size()) + count(t->int32_data_size())) +
                     8 * (count(t->double_data_size()) + count(t->int64_data_size()) +
                          count(t->uint64_data_size()));
    for (const std::string& str : t->string_data()) bytes += str.size();
    stripped = base::SatAdd(stripped, bytes);
    t->clear_raw_data();
    t->clear_float_data();
    t->clear_double_data();
    t->clear_int32_data();
    t->clear_int64_data();
    t->clear_uint64_data();
    t->clear_string_data();
  };
  for (auto& t : *g_->proto->mutable_graph()->mutable_initializer()) strip(&t);
  return stripped;
}

void Loader::PointNodesAtProto() {
  for (size_t i = 0; i < g_->nodes.size(); ++i) {
    g_->nodes[i].proto = &g_->proto->graph().node(static_cast<int>(i));
  }
}

void Loader::Summarize() {
  ModelSummary& s = g_->summary;
  const auto& m = *g_->proto;
  s.path = display_;
  s.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  s.ir_version = m.ir_version();
  s.opsets = opsets_;
  s.node_count = static_cast<int64_t>(g_->nodes.size());
  s.subgraph_node_count = tally_.subgraph_nodes();
  s.op_types = tally_.OpTypes();
  // parameter_count and parameter_bytes: MarkTrainable (CountParameter).
  std::set<std::string> syms;
  for (int id : g_->data_inputs) {
    const Value& v = g_->value(id);
    InputInfo in;
    in.name = v.name;
    in.dtype = v.dtype ? base::DTypeName(v.dtype) : "non-tensor";
    for (const Dim& d : v.dims) {
      in.dims.push_back(DimInfo{d.value, d.param});
      if (d.symbolic()) syms.insert(d.param);
    }
    s.data_inputs.push_back(std::move(in));
  }
  s.symbolic_dims.assign(syms.begin(), syms.end());
  for (const auto& [domain, count] : tally_.foreign()) {
    diags_.push_back({Severity::kInfo, "non_default_domain",
                      std::to_string(count) + " node(s) from domain '" + domain + "'", "", ""});
  }
  if (merged_copies_ > 0) {
    diags_.push_back({Severity::kInfo, "merged_activations_split",
                      std::to_string(merged_copies_) +
                          " activation(s) that torch.onnx.export merged across modules are run "
                          "once per module, as eager PyTorch runs them (core/merged_nodes.h)",
                      "", ""});
  }
  // Eval-mode export signs (README: "Exporting a model for training").
  if (tally_.bn_inference() > 0) {
    diags_.push_back({Severity::kWarning, "eval_mode_export",
                      std::to_string(tally_.bn_inference()) +
                          " BatchNormalization node(s) are in inference form (one output): this "
                          "looks like an eval-mode export; training memory of the real model is "
                          "higher. Export with TrainingMode.TRAINING (see README)",
                      "", ""});
  } else if (tally_.conv() >= 4 && tally_.bn() == 0 && tally_.dropout() == 0) {
    diags_.push_back({Severity::kWarning, "eval_mode_export",
                      "convolutions but no BatchNormalization or Dropout nodes: if the model has "
                      "BatchNorm/Dropout layers, this is an eval-mode export (BatchNorm folded "
                      "into Conv) and under-states training memory. Export with "
                      "TrainingMode.TRAINING, do_constant_folding=False (see README)",
                      "", ""});
  }
  s.diagnostics = diags_;
}

Result<std::unique_ptr<Graph>> Loader::Load(std::string_view bytes,
                                            std::span<const LeftOutPayload> left_out) {
  left_out_ = left_out;
  MEMEST_RETURN_IF_ERROR(Parse(bytes));
  ReserveValues();
  MEMEST_RETURN_IF_ERROR(ReadInitializers());
  MEMEST_RETURN_IF_ERROR(ReadInputs());
  MEMEST_RETURN_IF_ERROR(ReadNodes());
  MEMEST_RETURN_IF_ERROR(SortNodes());
  MEMEST_RETURN_IF_ERROR(ReadValueInfo());
  merged_copies_ = SplitMergedActivations(g_.get());  // after value_info: copies take its types
  PointNodesAtProto();
  MarkTrainable();
  if (StripWeights() > kArenaWeightBytes) {
    g_->proto.MoveToHeap();
    PointNodesAtProto();
  }
  Summarize();
  return std::move(g_);
}

// Loads `bytes` (less the payloads listed in `left_out`, when the filter left any out).
Result<std::unique_ptr<Graph>> LoadChecked(std::string_view bytes,
                                           std::span<const LeftOutPayload> left_out,
                                           const std::string& base_dir,
                                           const std::string& display_name) {
  try {
    Loader loader(base_dir, display_name);
    auto graph = loader.Load(bytes, left_out);
    if (!graph.ok()) return graph.status().WithContext(display_name);
    return graph;
  } catch (const std::bad_alloc&) {
    return Internal(display_name + ": out of memory while loading the model");
  } catch (const std::exception& e) {
    return Internal(display_name + ": unexpected error while loading: " + e.what());
  }
}

}  // namespace

Result<std::unique_ptr<Graph>> LoadGraphFromBytes(std::string_view bytes,
                                                  const std::string& base_dir,
                                                  const std::string& display_name) {
  // A file too small to hold more weights than the arena may keep is parsed as it is; a larger
  // one is filtered only when it holds a payload to leave out (the walk that says so reads the
  // graph's fields' tags and lengths, stopping at the first).
  if (bytes.size() > kArenaWeightBytes && bytes.size() < kMaxFileBytes) {
    const auto from_start = [bytes] {
      return std::make_unique<google::protobuf::io::ArrayInputStream>(
          bytes.data(), static_cast<int>(bytes.size()));
    };
    if (auto filtered = LeaveOutPayloadsIfAny(from_start, bytes.size())) {
      return LoadChecked(filtered->bytes, filtered->left_out, base_dir, display_name);
    }
  }
  return LoadChecked(bytes, {}, base_dir, display_name);
}

namespace {

// A file over kArenaWeightBytes read through the payload filter, its payloads skipped unread;
// nullopt where it holds none to leave out (a first walk reads its fields' tags and lengths up to
// the first payload: the whole-file read is then cheaper than a copy grown field by field), where
// the filter gives up (the caller reads the file whole) or the file cannot be opened.
std::optional<FilteredModel> ReadFiltered(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const auto from_start = [fd]() -> std::unique_ptr<google::protobuf::io::ZeroCopyInputStream> {
    if (::lseek(fd, 0, SEEK_SET) != 0) return nullptr;
    return std::make_unique<google::protobuf::io::FileInputStream>(fd, kFilteredReadBlock);
  };
  auto filtered = LeaveOutPayloadsIfAny(from_start, size);
  ::close(fd);
  return filtered;
}

}  // namespace

Result<std::unique_ptr<Graph>> LoadGraph(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound("model file '" + path + "' not found");
    return NotFound(path + ": cannot be read: " + std::strerror(err));  // ENOTDIR, EACCES, ...
  }
  if (S_ISDIR(st.st_mode)) {
    return InvalidModel("'" + path + "' is a directory, not an ONNX file");
  }
  if (!S_ISREG(st.st_mode)) {  // a FIFO or device would block the open/read below, or never end
    return InvalidModel("'" + path + "' is not a regular file (pipe, device or socket)");
  }
  if (static_cast<uint64_t>(st.st_size) >= core::kMaxFileBytes) {
    return InvalidModel(path +
                        ": file is 2 GiB or larger: a protobuf message cannot be; store "
                        "weights as external data");
  }
  std::string dir = ".";
  if (auto slash = path.find_last_of('/'); slash != std::string::npos) {
    dir = slash == 0 ? "/" : path.substr(0, slash);
  }
  if (static_cast<uint64_t>(st.st_size) > kArenaWeightBytes) {
    if (auto filtered = ReadFiltered(path, static_cast<uint64_t>(st.st_size))) {
      return LoadChecked(filtered->bytes, filtered->left_out, dir, path);
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return NotFound(path + ": cannot be read: " +
                    (err != 0 ? std::strerror(err) : "the file cannot be opened"));
  }
  std::string bytes;
  try {
    bytes.resize(static_cast<size_t>(st.st_size));
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    bytes.resize(static_cast<size_t>(in.gcount()));
  } catch (const std::exception& e) {
    return Internal(path + ": cannot read: " + e.what());
  }
  return LoadChecked(bytes, {}, dir, path);
}

}  // namespace core
}  // namespace memest
