// core/merged_nodes.cc -- SplitMergedActivations (policy in core/merged_nodes.h).
#include "core/merged_nodes.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace memest::core {

namespace {

// The ops a module applies to its input as a whole, which the exporter's CSE can merge.
bool IsCopiedOp(const Node& n) {
  static constexpr std::array<std::string_view, 13> kOps = {
      "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish",  "Elu",
      "Selu", "Softplus",  "Gelu",    "Clip", "MaxPool",     "AveragePool"};
  return n.domain.empty() && std::find(kOps.begin(), kOps.end(), n.op_type) != kOps.end();
}

// The module path of an exported node's name: "/a/b/Relu" -> "/a/b"; "" for other names.
std::string_view ModuleOf(std::string_view name) {
  if (name.empty() || name.front() != '/') return {};
  return name.substr(0, name.rfind('/'));
}

// Is module `m` `e` or within it?
bool Within(std::string_view m, std::string_view e) {
  return m.size() >= e.size() && m.compare(0, e.size(), e) == 0 &&
         (m.size() == e.size() || m[e.size()] == '/');
}

// One copy to make: of node `node`, for module path `module`, read by `readers` (node ids, in
// order, repeated where a node reads it twice).
struct Copy {
  int node = -1;
  std::string module;
  std::vector<int> readers;
};

// Every module path that holds a node (each node's module and its ancestors).
std::unordered_set<std::string_view> ModulesOf(const Graph& g) {
  std::unordered_set<std::string_view> modules;
  for (const Node& n : g.nodes) {
    for (std::string_view m = ModuleOf(n.name); !m.empty(); m = m.substr(0, m.rfind('/'))) {
      if (!modules.insert(m).second) break;  // its ancestors are in already
    }
  }
  return modules;
}

// The copies node `id` needs (policy in the header). `modules` is filled on first need; `planned`
// holds the modules a copy is planned for (one each).
void FindCopies(const Graph& g, int id, std::unordered_set<std::string_view>* modules,
                std::unordered_set<std::string>* planned, std::vector<Copy>* copies) {
  // (The cheapest tests first: this runs for every node of every graph loaded.)
  const Node& n = g.node(id);
  if (n.outputs.size() != 1 || n.outputs[0] < 0 || n.name.empty() || n.name.front() != '/') return;
  const Value& v = g.value(n.outputs[0]);
  if (v.consumers.size() < 2 || v.graph_output || !IsCopiedOp(n)) return;
  // The node's module, P/leaf: "/cell_4/comb_iter_0_left" and "/act_1".
  const std::string_view own = ModuleOf(n.name);
  const size_t cut = own.rfind('/');
  if (cut == std::string_view::npos || cut == 0) return;
  const std::string_view parent = own.substr(0, cut), leaf = own.substr(cut);
  // Where within P its readers sit ("/separable_1/depthwise_conv2d"), each place once.
  std::unordered_set<std::string_view> within;
  for (const int c : v.consumers) {
    const std::string_view m = ModuleOf(g.node(c).name);
    if (Within(m, parent) && m.size() > parent.size()) within.insert(m.substr(parent.size()));
  }
  if (within.empty()) return;
  // The readers outside P at one of those places in another module F, by F (in reading order):
  // each reader's module is cut at each of its slashes, the longest place first.
  std::vector<std::pair<std::string_view, std::vector<int>>> groups;
  std::unordered_map<std::string_view, size_t> group_of;
  for (const int c : v.consumers) {
    const std::string_view m = ModuleOf(g.node(c).name);
    if (Within(m, parent)) continue;
    for (size_t at = m.find('/', 1); at != std::string_view::npos; at = m.find('/', at + 1)) {
      if (within.count(m.substr(at)) == 0) continue;
      const std::string_view f = m.substr(0, at);
      const auto [it, added] = group_of.try_emplace(f, groups.size());
      if (added) groups.push_back({f, {}});
      groups[it->second].second.push_back(c);
      break;
    }
  }
  for (const auto& [f, readers] : groups) {
    // Readers of its shape only (the padding a "same" convolution computes) need no copy.
    if (std::all_of(readers.begin(), readers.end(),
                    [&](int r) { return g.node(r).op_type == "Shape"; })) {
      continue;
    }
    if (modules->empty()) *modules = ModulesOf(g);
    std::string module = std::string(f) + std::string(leaf);
    // F has a node of its own there, or another merged node's copy is planned there.
    if (modules->count(module) > 0 || !planned->insert(module).second) continue;
    copies->push_back({id, std::move(module), readers});
  }
}

// Makes the copies: a value and a node each, the node before its first reader (nodes renumbered,
// the proto's nodes reordered alike), the readers reading the copy.
void MakeCopies(Graph* g, std::vector<Copy> copies) {
  auto* protos = g->proto->mutable_graph()->mutable_node();
  const size_t n = g->nodes.size();
  std::vector<std::vector<int>> before(n);  // copies to place before each old node
  std::vector<Node> made;
  std::vector<onnx::NodeProto> made_protos;
  for (Copy& c : copies) {
    const Node& from = g->node(c.node);
    const int old_value = from.outputs[0];
    const std::string op_name = from.name.substr(from.name.rfind('/'));  // "/Relu"
    std::string value_name = c.module + op_name + "_output_0";
    const int id = static_cast<int>(g->values.size());
    while (!g->value_index.Insert(value_name, id).second) value_name += "_copy";
    Value v = g->value(old_value);
    v.name = value_name;
    v.consumers.assign(c.readers.begin(), c.readers.end());
    v.producer = -1;  // set below, once renumbered
    g->values.push_back(std::move(v));
    IdList& old_readers = g->value(old_value).consumers;
    old_readers.erase(std::remove_if(old_readers.begin(), old_readers.end(),
                                     [&](int r) {
                                       return std::find(c.readers.begin(), c.readers.end(), r) !=
                                              c.readers.end();
                                     }),
                      old_readers.end());
    for (const int r : c.readers) {
      Node& reader = g->node(r);
      for (size_t k = 0; k < reader.inputs.size(); ++k) {
        if (reader.inputs[k] != old_value) continue;
        reader.inputs[k] = id;
        protos->Mutable(r)->set_input(static_cast<int>(k), value_name);
      }
    }
    Node copy = from;
    copy.name = c.module + op_name;
    copy.outputs = {id};
    onnx::NodeProto proto = protos->Get(c.node);
    proto.set_name(copy.name);
    proto.set_output(0, value_name);
    before[static_cast<size_t>(*std::min_element(c.readers.begin(), c.readers.end()))].push_back(
        static_cast<int>(made.size()));
    made.push_back(std::move(copy));
    made_protos.push_back(std::move(proto));
  }
  // The new order: each old node, after the copies placed before it.
  std::vector<int> new_index(n), made_index(made.size());
  std::vector<Node> nodes;
  nodes.reserve(n + made.size());
  google::protobuf::RepeatedPtrField<onnx::NodeProto> ordered;
  for (size_t i = 0; i < n; ++i) {
    for (const int k : before[i]) {
      made_index[static_cast<size_t>(k)] = static_cast<int>(nodes.size());
      nodes.push_back(std::move(made[static_cast<size_t>(k)]));
      ordered.Add()->Swap(&made_protos[static_cast<size_t>(k)]);
    }
    new_index[i] = static_cast<int>(nodes.size());
    nodes.push_back(std::move(g->nodes[i]));
    ordered.Add()->Swap(protos->Mutable(static_cast<int>(i)));
  }
  protos->Swap(&ordered);
  g->nodes = std::move(nodes);
  for (Value& v : g->values) {
    if (v.producer >= 0) v.producer = new_index[static_cast<size_t>(v.producer)];
    for (int& c : v.consumers) c = new_index[static_cast<size_t>(c)];
  }
  for (size_t k = 0; k < made_index.size(); ++k) {
    const int at = made_index[k];
    const Node& copy = g->node(at);
    g->value(copy.outputs[0]).producer = at;
    for (const int in : copy.inputs) {
      if (in < 0) continue;
      IdList& readers = g->value(in).consumers;
      readers.insert(std::upper_bound(readers.begin(), readers.end(), at), at);
    }
  }
}

}  // namespace

int SplitMergedActivations(Graph* g) {
  std::unordered_set<std::string_view> modules;
  std::unordered_set<std::string> planned;
  std::vector<Copy> copies;
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    FindCopies(*g, static_cast<int>(i), &modules, &planned, &copies);
  }
  const int made = static_cast<int>(copies.size());
  if (made > 0) MakeCopies(g, std::move(copies));
  return made;
}

}  // namespace memest::core
