// Google Benchmark: the caching-allocator model alone (symbolic/allocator.h), over the requests of
// a real step. The symbolic estimate of a large graph runs each of its iterations through the
// model (walked or replayed, symbolic/timeline_loop.cc), and so do the max-batch and max-dim
// searches' replays (symbolic/batch_trace.h); here is what the model costs per request, apart
// from the walk that makes the requests.
//
// Each row traces its step once, untimed (TraceRequests: its first three iterations, as a
// replay makes them), then hands those requests to a fresh model per iteration, its block table
// reserved as a replay's is, with no capacity (no release and retry). Counters:
// requests (in the three iterations), per_request (time per request), reserved_GiB (the peak).
//
//   ./build/bench/memest_bench --benchmark_filter=AllocatorReplay --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_models.h"
#include "memest/memest.h"
#include "memory/context.h"
#include "symbolic/allocator.h"
#include "symbolic/timeline.h"

namespace {

using memest::symbolic::AllocatorRequest;
using memest::symbolic::CachingAllocatorModel;

// The step's requests (training at `batch`, and seq 2,048 where the model has that dim on an
// H100), or empty once the benchmark is skipped with the reason.
std::vector<AllocatorRequest> TracedRequests(benchmark::State& state, const std::string& name,
                                             int64_t batch) {
  auto model = memest::LoadModelFromBytes(memest::bench::ModelBytes(name), ".", name);
  if (!model.ok()) {
    state.SkipWithError(model.status().ToString().c_str());
    return {};
  }
  memest::Options o;
  o.gpu = "h100-80gb";
  o.batch = batch;
  if (name.rfind("hf:", 0) == 0) o.dims["seq"] = 2048;
  auto ctx = memest::memory::EstimationContext::Make(**model, o);
  if (!ctx.ok()) {
    state.SkipWithError(ctx.status().ToString().c_str());
    return {};
  }
  auto trace = memest::symbolic::TraceRequests(**ctx);
  if (!trace.ok()) {
    state.SkipWithError(trace.status().ToString().c_str());
    return {};
  }
  return std::move(trace->requests);
}

void BM_AllocatorReplay(benchmark::State& state, const std::string& name, int64_t batch) {
  const std::vector<AllocatorRequest> requests = TracedRequests(state, name, batch);
  if (requests.empty()) return;
  // The most tensors alive at once: a replay reserves the block table for twice as many
  // (symbolic/batch_trace.cc), so the model's table does not move while it runs.
  size_t mallocs = 0, alive = 0, most_alive = 0;
  for (const AllocatorRequest& r : requests) {
    alive = r.freed >= 0 ? alive - 1 : alive + 1;
    mallocs += r.freed < 0;
    most_alive = std::max(most_alive, alive);
  }
  std::vector<CachingAllocatorModel::Handle> handle(mallocs, -1);
  uint64_t reserved = 0;
  for (auto _ : state) {
    CachingAllocatorModel alloc;
    alloc.Reserve(2 * most_alive + 64);
    size_t m = 0;
    for (const AllocatorRequest& r : requests) {
      if (r.freed >= 0) {
        alloc.Free(handle[static_cast<size_t>(r.freed)]);
      } else {
        handle[m++] = alloc.Malloc(r.bytes);
      }
    }
    if (!alloc.misuse().ok() || alloc.oom()) {
      state.SkipWithError(alloc.oom() ? "out of memory" : alloc.misuse().ToString().c_str());
      break;
    }
    reserved = alloc.stats().peak_reserved;
    benchmark::DoNotOptimize(reserved);
  }
  state.counters["requests"] = static_cast<double>(requests.size());
  state.counters["per_request"] = benchmark::Counter(
      static_cast<double>(requests.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["reserved_GiB"] = static_cast<double>(reserved) / (1 << 30);
}

}  // namespace

// clang-format off
BENCHMARK_CAPTURE(BM_AllocatorReplay, resnet50_batch64, std::string("resnet50_train"), 64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocatorReplay, chain100k_batch64, std::string("chain100k"), 64)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllocatorReplay, qwen25_05b_seq2048, std::string("hf:qwen2.5-0.5b"), 4)->Unit(benchmark::kMillisecond);
// clang-format on
