// core/blocks.h -- the graph's repeated blocks (a transformer's layers, a ResNet's stages),
// found from names, for everything that works block by block: pipeline stages and FSDP units
// (memory/parallel.h), checkpointing every block (core/checkpoint.h).
//
// Policy: the path component "<word>.<index>" (PyTorch module paths such as "h.3", "layers.12",
// "blocks.0") whose <word> carries the most distinct indices (at least 2) over the names of the
// nodes and initializers; when no word does, a token "<word><index>" ("layer3", as some exporters
// write scopes) the same way. A node belongs to the block named in its own name or, failing
// that, in one of its initializer inputs' names; other nodes name no block.
#ifndef MEMEST_CORE_BLOCKS_H_
#define MEMEST_CORE_BLOCKS_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/graph.h"

namespace memest::core {

struct Blocks {
  std::string word;    // "" when the graph has no repeated blocks
  bool dotted = true;  // "<word>.<index>" (else "<word><index>")
  // Per node, the block index its name (or an initializer input's name) carries, or -1.
  std::vector<int> of_node;
  std::vector<int> indices;  // the distinct block indices nodes name, ascending

  int count() const { return static_cast<int>(indices.size()); }

  // "<word>.<index>" or "<word><index>", "" when none was found.
  std::string pattern() const {
    return word.empty() ? "" : word + (dotted ? ".<index>" : "<index>");
  }
  // The block index `name` carries for this word, or -1.
  int IndexIn(std::string_view name) const;
};

[[nodiscard]] Blocks FindBlocks(const Graph& graph);

}  // namespace memest::core

#endif  // MEMEST_CORE_BLOCKS_H_
