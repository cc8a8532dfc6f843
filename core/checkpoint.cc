#include "core/checkpoint.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "core/blocks.h"

namespace memest::core {

namespace {

// crossing[c]: number of activations alive across the cut between node c-1 and node c, i.e.
// made before c (or graph inputs) and read at or after c (graph outputs count to the end).
std::vector<int64_t> Crossings(const Graph& g) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int64_t> diff(static_cast<size_t>(n) + 2, 0);
  for (const Value& v : g.values) {
    if (v.kind != ValueKind::kIntermediate && v.kind != ValueKind::kDataInput) continue;
    int last = -1;
    for (int c : v.consumers) last = std::max(last, c);
    if (v.graph_output) last = n;
    const int first = v.kind == ValueKind::kDataInput ? 0 : v.producer + 1;
    if (last < first) continue;
    ++diff[static_cast<size_t>(first)];
    --diff[static_cast<size_t>(last) + 1];
  }
  std::vector<int64_t> crossing(static_cast<size_t>(n) + 1, 0);
  int64_t running = 0;
  for (int c = 0; c <= n; ++c) {
    running += diff[static_cast<size_t>(c)];
    crossing[static_cast<size_t>(c)] = running;
  }
  return crossing;
}

// The segment [begin, end) of the node order with what it reads from before it and what later
// nodes read from it.
CheckpointSegment Segment(const Graph& g, int begin, int end) {
  CheckpointSegment s;
  s.begin = begin;
  s.end = end;
  std::set<int> inputs, outputs, params;
  for (int k = s.begin; k < s.end; ++k) {
    const Node& node = g.node(k);
    for (int in : node.inputs) {
      if (in < 0) continue;
      const Value& v = g.value(in);
      if (v.kind == ValueKind::kInitializer) {
        if (v.trainable) params.insert(in);
      } else if (v.kind == ValueKind::kDataInput || v.producer < s.begin) {
        inputs.insert(in);
      }
    }
    for (int o : node.outputs) {
      if (o < 0) continue;
      const Value& v = g.value(o);
      bool later = v.graph_output;
      for (int c : v.consumers) later = later || c >= s.end;
      if (later) outputs.insert(o);
    }
  }
  s.inputs.assign(inputs.begin(), inputs.end());
  s.outputs.assign(outputs.begin(), outputs.end());
  s.parameters.assign(params.begin(), params.end());
  return s;
}

}  // namespace

std::vector<CheckpointSegment> CheckpointSegments(const Graph& g, int64_t segments) {
  const int64_t n = static_cast<int64_t>(g.nodes.size());
  if (segments <= 1 || n < segments) return {};
  const std::vector<int64_t> crossing = Crossings(g);
  std::vector<int> cuts;  // S-1 cut positions, strictly increasing, in [1, n-1]
  const int64_t window = std::max<int64_t>(0, n / (4 * segments));
  for (int64_t k = 1; k < segments; ++k) {
    const int64_t ideal = (k * n + segments / 2) / segments;
    const int64_t lo = std::max<int64_t>(cuts.empty() ? 1 : cuts.back() + 1, ideal - window);
    const int64_t hi = std::min<int64_t>(n - (segments - k), ideal + window);
    int64_t best = std::clamp<int64_t>(ideal, lo, std::max(lo, hi));
    for (int64_t c = lo; c <= hi; ++c) {
      const int64_t a = crossing[static_cast<size_t>(c)], b = crossing[static_cast<size_t>(best)];
      if (a < b || (a == b && std::llabs(c - ideal) < std::llabs(best - ideal))) best = c;
    }
    cuts.push_back(static_cast<int>(best));
  }
  std::vector<CheckpointSegment> out;
  int begin = 0;
  for (int cut : cuts) {  // the last segment [cuts.back(), n) is not checkpointed
    out.push_back(Segment(g, begin, cut));
    begin = cut;
  }
  return out;
}

Result<std::vector<CheckpointSegment>> CheckpointSegmentsFor(const Graph& g,
                                                             const Options& options) {
  if (options.mode != Mode::kTrain) return std::vector<CheckpointSegment>{};
  if (!options.checkpoint_blocks) return CheckpointSegments(g, options.checkpoint_segments);
  const Blocks blocks = FindBlocks(g);
  std::map<int, std::pair<int, int>> span;  // block index -> [first node, last node]
  for (size_t k = 0; k < blocks.of_node.size(); ++k) {
    const int l = blocks.of_node[k];
    if (l < 0) continue;
    auto [it, fresh] = span.try_emplace(l, static_cast<int>(k), static_cast<int>(k));
    if (!fresh) it->second.second = static_cast<int>(k);
  }
  if (span.empty()) {
    return InvalidArgument(
        "checkpoint_blocks: the graph has no repeated blocks (no '<name>.<index>' path such as "
        "'layers.3' in its node or parameter names) to checkpoint");
  }
  std::vector<std::pair<int, int>> runs;
  for (const auto& [l, r] : span) runs.push_back(r);
  std::sort(runs.begin(), runs.end());
  std::vector<CheckpointSegment> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (i > 0 && runs[i].first <= runs[i - 1].second) {
      return InvalidArgument("checkpoint_blocks: the blocks '" + blocks.pattern() +
                             "' interleave in the node order (node '" + g.node(runs[i].first).name +
                             "'), so no block is a segment to checkpoint on its own");
    }
    out.push_back(Segment(g, runs[i].first, runs[i].second + 1));
  }
  return out;
}

std::vector<int> SegmentOfNode(const Graph& g, const std::vector<CheckpointSegment>& segments) {
  std::vector<int> of(g.nodes.size(), -1);
  for (size_t s = 0; s < segments.size(); ++s) {
    for (int k = segments[s].begin; k < segments[s].end; ++k)
      of[static_cast<size_t>(k)] = static_cast<int>(s);
  }
  return of;
}

}  // namespace memest::core
