// bench/per_node.h -- the per_node counter the chain benchmarks show next to their time.
#ifndef MEMEST_BENCH_PER_NODE_H_
#define MEMEST_BENCH_PER_NODE_H_

#include <benchmark/benchmark.h>

#include <cstdint>

namespace memest::bench {

// Time per node of a graph of `nodes` nodes: shown next to each chain's time, so that a cost per
// node that stays flat from 10k to 1M nodes (no quadratic pass) is visible in one run.
inline benchmark::Counter PerNode(int64_t nodes) {
  return benchmark::Counter(
      static_cast<double>(nodes),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

}  // namespace memest::bench

#endif  // MEMEST_BENCH_PER_NODE_H_
