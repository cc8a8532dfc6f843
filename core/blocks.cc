// core/blocks.cc -- see core/blocks.h (policy there).
#include "core/blocks.h"

#include <algorithm>
#include <map>
#include <utility>

namespace memest::core {
namespace {

// Splits a PyTorch module path or an exporter's node name into its tokens ("/h.3/attn/MatMul"
// -> h, 3, attn, MatMul).
std::vector<std::string_view> Tokens(std::string_view name) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == '.' || name[i] == '/') {
      if (i > start) out.push_back(name.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

bool AllDigits(std::string_view t) {
  return !t.empty() && t.size() <= 9 &&
         std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A block reference in one name: "<word>.<index>" or a token "<word><index>".
struct BlockRef {
  std::string word;
  int index = -1;
  bool dotted = false;
};

std::vector<BlockRef> BlockRefs(std::string_view name) {
  std::vector<BlockRef> out;
  const std::vector<std::string_view> t = Tokens(name);
  for (size_t i = 0; i < t.size(); ++i) {
    if (i + 1 < t.size() && !AllDigits(t[i]) && AllDigits(t[i + 1])) {
      out.push_back({std::string(t[i]), std::stoi(std::string(t[i + 1])), true});
      continue;
    }
    size_t digits = t[i].size();
    while (digits > 0 && t[i][digits - 1] >= '0' && t[i][digits - 1] <= '9') --digits;
    const std::string_view word = t[i].substr(0, digits), index = t[i].substr(digits);
    const bool alpha = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    });
    if (alpha && AllDigits(index))
      out.push_back({std::string(word), std::stoi(std::string(index)), false});
  }
  return out;
}

// The block word whose references carry the most distinct indices (>= 2) over the names of nodes
// and initializers, the dotted form first; empty when none does.
std::pair<std::string, bool> BlockWord(const Graph& g) {
  std::map<std::pair<bool, std::string>, std::vector<int>> seen;
  auto scan = [&](const std::string& name) {
    for (const BlockRef& r : BlockRefs(name)) seen[{r.dotted, r.word}].push_back(r.index);
  };
  for (const Node& n : g.nodes) scan(n.name);
  for (const Value& v : g.values) {
    if (v.kind == ValueKind::kInitializer) scan(v.name);
  }
  for (bool dotted : {true, false}) {
    std::string best;
    size_t best_count = 1;
    for (auto& [key, idx] : seen) {
      if (key.first != dotted) continue;
      std::sort(idx.begin(), idx.end());
      const size_t distinct =
          static_cast<size_t>(std::unique(idx.begin(), idx.end()) - idx.begin());
      if (distinct > best_count) {
        best_count = distinct;
        best = key.second;
      }
    }
    if (!best.empty()) return {best, dotted};
  }
  return {"", true};
}

}  // namespace

int Blocks::IndexIn(std::string_view name) const {
  if (word.empty()) return -1;
  for (const BlockRef& r : BlockRefs(name)) {
    if (r.word == word && r.dotted == dotted) return r.index;
  }
  return -1;
}

Blocks FindBlocks(const Graph& g) {
  Blocks b;
  std::tie(b.word, b.dotted) = BlockWord(g);
  b.of_node.assign(g.nodes.size(), -1);
  if (b.word.empty()) return b;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    int l = b.IndexIn(n.name);
    for (size_t i = 0; l < 0 && i < n.inputs.size(); ++i) {
      const int in = n.inputs[i];
      if (in >= 0 && g.value(in).kind == ValueKind::kInitializer) l = b.IndexIn(g.value(in).name);
    }
    b.of_node[k] = l;
    if (l >= 0) b.indices.push_back(l);
  }
  std::sort(b.indices.begin(), b.indices.end());
  b.indices.erase(std::unique(b.indices.begin(), b.indices.end()), b.indices.end());
  return b;
}

}  // namespace memest::core
