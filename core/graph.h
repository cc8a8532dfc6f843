// core/graph.h -- memest's internal view of a loaded ONNX model (shared by every backend).
//
// Built once by core/loader.cc and immutable afterwards. Values (tensors) and nodes are indexed by
// dense ids; nodes are in topological order (the loader rejects cycles). The ModelProto is kept
// (weights stripped, small constants kept) so attributes can be read, and ONNX shape inference can
// run on a copy when dims are bound for what the shape rules left unknown (core/bind.h).
//
// The loader parses into a protobuf arena (ParsedModel::OnArena): strings and repeated fields are
// carved from a few large blocks instead of one heap allocation each, which halves the parse of a
// large graph and frees the whole message at once. The blocks grow to 1 MiB (kArenaMaxBlock in
// core/graph.cc), not protobuf's default 8 KiB. An arena cannot give back part of itself, so a
// model whose stripped weights would stay behind in it is moved to the heap (core/loader.cc).
#ifndef MEMEST_CORE_GRAPH_H_
#define MEMEST_CORE_GRAPH_H_

#include <google/protobuf/arena.h>
#include <onnx/onnx_pb.h>

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/derived_cache.h"
#include "core/name_index.h"
#include "memest/model.h"

namespace memest::core {

// A node's inputs or outputs, a value's consumers: ids, and most such lists are short. The first
// kInlineIds are kept in the node or value itself, with no heap block of their own (a std::vector
// each was three heap blocks per node of a large graph, a third of what loading it allocated, and
// a pointer to chase wherever the graph is walked). Otherwise it is a vector.
inline constexpr size_t kInlineIds = 3;
using IdList = boost::container::small_vector<int, kInlineIds>;
// An id list as a span (std::span cannot tell that a small_vector is contiguous).
inline std::span<const int> Span(const IdList& ids) { return {ids.data(), ids.size()}; }

struct Dim {
  int64_t value = -1;  // >= 0 when known
  std::string param;   // dim_param when symbolic
  bool known() const { return value >= 0; }
  bool symbolic() const { return value < 0 && !param.empty(); }
};

enum class ValueKind {
  kIntermediate,  // produced by a node
  kDataInput,     // graph input that is not an initializer
  kInitializer,   // graph initializer (weight, buffer or constant)
  kMissing,       // consumed but never produced (the loader reports these as errors)
};

struct Value {
  std::string name;
  int32_t dtype = 0;       // TensorProto.DataType, 0 = unknown
  bool has_shape = false;  // rank known
  std::vector<Dim> dims;   // as declared in the file (inputs, initializers, value_info)
  ValueKind kind = ValueKind::kIntermediate;
  int producer = -1;  // node id
  IdList consumers;   // node ids (a node consuming twice appears twice)
  bool graph_output = false;
  bool trainable = false;  // float initializer that is a parameter (not a BN running stat)
  bool external = false;   // initializer stored in external data
  // Values of small integer initializers / Constant outputs (shape computations need them).
  std::optional<std::vector<int64_t>> int_data;
};

struct Node {
  std::string name;  // as in the file, or "<op_type>_<index>" when unnamed
  std::string op_type;
  std::string domain;                      // "" for ai.onnx
  IdList inputs;                           // value ids; -1 for an omitted optional input
  IdList outputs;                          // value ids; -1 for an omitted optional output
  const onnx::NodeProto* proto = nullptr;  // into Graph::proto
  int64_t opset = 0;                       // opset version of the node's domain
  int64_t subgraph_nodes = 0;              // nodes inside If/Loop/Scan bodies (recursive)
  // The node's per-op rule, resolved once by LoadModel (ops/rules.h RuleOf): an index into the
  // rule table, kNoRule when memest has none, kRuleUnresolved before LoadModel resolved it.
  static constexpr int32_t kRuleUnresolved = -2;
  static constexpr int32_t kNoRule = -1;
  int32_t rule = kRuleUnresolved;
  // "node '<name>' (<op_type>)", as errors name a node.
  std::string Describe() const { return "node '" + name + "' (" + op_type + ")"; }
};

struct SymbolicShapes;  // core/symbolic_shapes.h

// Owns a graph's ModelProto, on the heap (default: an empty message, as hand-built graphs use) or
// on an arena of its own. Move-only (a moved-from one may only be assigned or destroyed); the
// message keeps its address until MoveToHeap.
class ParsedModel {
 public:
  ParsedModel() : heap_(std::make_unique<onnx::ModelProto>()), proto_(heap_.get()) {}
  // An empty message on a new arena.
  [[nodiscard]] static ParsedModel OnArena();
  // Copies the message to the heap and frees the arena with all it held (what the message no
  // longer uses included). Pointers into the old message are invalid afterwards.
  void MoveToHeap();
  [[nodiscard]] bool on_arena() const { return arena_ != nullptr; }

  onnx::ModelProto* operator->() { return proto_; }
  const onnx::ModelProto* operator->() const { return proto_; }
  onnx::ModelProto& operator*() { return *proto_; }
  const onnx::ModelProto& operator*() const { return *proto_; }

 private:
  std::unique_ptr<google::protobuf::Arena> arena_;  // owns *proto_ when set
  std::unique_ptr<onnx::ModelProto> heap_;          // owns *proto_ when set
  onnx::ModelProto* proto_;
};

struct Graph {
  ParsedModel proto;  // nodes in topological order, large weights stripped
  std::vector<Node> nodes;
  std::vector<Value> values;
  NameIndex value_index;  // name -> value id
  // Every node's Node::rule again, back to back (ops::ResolveRules): a walk that asks each
  // node's rule reads 4 bytes a node here instead of a cache line of Node. Empty until resolved.
  std::vector<int32_t> rules;
  std::vector<int> data_inputs;  // value ids, in graph-input order
  std::vector<int> outputs;      // value ids, in graph-output order
  ModelSummary summary;
  // Every value's shape and dtype over symbolic dims, inferred once at load time by the shape
  // pass (ops/shape_pass.h). Null until LoadModel has run it; Bind() refuses such a graph.
  std::shared_ptr<const SymbolicShapes> symbolic;
  // What the layers above derive from the graph at any dims (ops::ValueFacts' requires-grad
  // flags), kept for each of its bound graphs that asks with the same inputs
  // (core/derived_cache.h). Not part of the graph's value: a copy starts empty.
  DerivedCache derived;

  // The node or value with id `id` (0 <= id < size; ids are ints, -1 meaning none).
  const Node& node(int id) const { return nodes[static_cast<size_t>(id)]; }
  const Value& value(int id) const { return values[static_cast<size_t>(id)]; }
  Node& node(int id) { return nodes[static_cast<size_t>(id)]; }
  Value& value(int id) { return values[static_cast<size_t>(id)]; }
  // The id of the value named `name`, or -1.
  int FindValue(std::string_view name) const { return value_index.Find(name); }
};

}  // namespace memest::core

#endif  // MEMEST_CORE_GRAPH_H_
