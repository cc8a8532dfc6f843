// Google Benchmark: issue 20's large-graph ratios with the parse and the work it is compared with
// timed in the same round, so that a slow phase of the machine reaches both alike.
//
// Policy:
//  * The chains of estimate_bench.cc (10k, 100k and 1M nodes, datasets/zoo/chain.h), each with
//    each backend. One benchmark iteration is one round: the protobuf parse of the chain's bytes
//    onto the heap (the proto freed, as BM_ProtobufParse times it), then memest's load with shape
//    inference, then one training estimate at batch 64, a first one (the model's bound graphs
//    cleared before it, as BM_Estimate does), then the model freed (counted with the load, as
//    BM_Load frees each model it loads). Each part is timed on its own by the steady clock; one
//    round runs first, unreported (the memory each part touches is then the process's already:
//    estimate_bench.cc's kFreedMemoryStaysInTheProcess). One backend a benchmark: with both in
//    one round, the symbolic estimate's tables (about 3 GB at 1M nodes) were freed just before
//    the next round's parse and load, which then ran on the heap it left.
//  * Counters: each part's median time in ms, and the medians of the rounds' own ratios to their
//    parse -- the load, the estimate, and load + estimate. A ratio is taken within a round, so
//    a phase of the machine that lasts longer than one round (they do: docs/speed-log.md, the
//    same binary's 100k load read 120 and 170 ms in two runs one morning) moves the times but
//    not the ratios; separate benchmarks of the parse and the load, minutes apart, took those
//    phases into their ratios.
//
//   ./build/bench/memest_bench --benchmark_filter=ChainPaired --benchmark_min_time=5
#include <benchmark/benchmark.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_models.h"
#include "core/bind_cache.h"
#include "memest/memest.h"

namespace {

using Clock = std::chrono::steady_clock;

// Seconds f takes.
template <typename F>
double Seconds(const F& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

// One round's parts, in seconds; false (the benchmark skipped with the reason) on an error.
struct Round {
  double parse = 0, load = 0, estimate = 0;
};
bool RunRound(benchmark::State& state, const std::string& bytes, const memest::Estimator& est,
              Round* round) {
  round->parse = Seconds([&] {
    onnx::ModelProto m;
    benchmark::DoNotOptimize(m.ParseFromString(bytes));
  });
  std::shared_ptr<const memest::Model> model;
  std::string error;
  round->load = Seconds([&] {
    auto m = memest::LoadModelFromBytes(bytes, ".", "chain");
    if (m.ok()) {
      model = *std::move(m);
    } else {
      error = m.status().ToString();
    }
  });
  if (model == nullptr) {
    state.SkipWithError(error.c_str());
    return false;
  }
  memest::Options o;
  o.batch = 64;
  model->bind_cache().Clear();  // a first estimate, as BM_Estimate's
  bool ok = true;
  round->estimate = Seconds([&] {
    auto e = est.Run(*model, o);
    ok = e.ok();
    if (!ok) error = e.status().ToString();
    benchmark::DoNotOptimize(e);
  });
  if (!ok) {
    state.SkipWithError(error.c_str());
    return false;
  }
  round->load += Seconds([&] { model.reset(); });
  return true;
}

void BM_ChainPaired(benchmark::State& state, const std::string& name, const std::string& backend) {
  const std::string& bytes = memest::bench::ModelBytes(name);
  auto est = memest::MakeEstimator(backend);
  if (bytes.empty() || !est.ok()) {
    state.SkipWithError("no chain bytes or no estimator");
    return;
  }
  Round round;
  if (!RunRound(state, bytes, **est, &round)) return;  // unreported
  std::vector<Round> rounds;
  for (auto _ : state) {
    if (!RunRound(state, bytes, **est, &round)) return;
    rounds.push_back(round);
  }
  auto median = [&rounds](auto part) {
    std::vector<double> v;
    v.reserve(rounds.size());
    for (const Round& r : rounds) v.push_back(part(r));
    return Median(std::move(v));
  };
  state.counters["parse_ms"] = 1e3 * median([](const Round& r) { return r.parse; });
  state.counters["load_ms"] = 1e3 * median([](const Round& r) { return r.load; });
  state.counters["estimate_ms"] = 1e3 * median([](const Round& r) { return r.estimate; });
  state.counters["load_x"] = median([](const Round& r) { return r.load / r.parse; });
  state.counters["estimate_x"] = median([](const Round& r) { return r.estimate / r.parse; });
  state.counters["load_estimate_x"] =
      median([](const Round& r) { return (r.load + r.estimate) / r.parse; });
  state.counters["rounds"] = static_cast<double>(rounds.size());
}

}  // namespace

// clang-format off
BENCHMARK_CAPTURE(BM_ChainPaired, chain10k_analytical, std::string("chain10k"), std::string("analytical"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ChainPaired, chain10k_symbolic, std::string("chain10k"), std::string("symbolic"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ChainPaired, chain100k_analytical, std::string("chain100k"), std::string("analytical"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ChainPaired, chain100k_symbolic, std::string("chain100k"), std::string("symbolic"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ChainPaired, chain1m_analytical, std::string("chain1m"), std::string("analytical"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ChainPaired, chain1m_symbolic, std::string("chain1m"), std::string("symbolic"))->Unit(benchmark::kMillisecond);
// clang-format on
