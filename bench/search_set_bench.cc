// Google Benchmark: what a max-batch search costs over a whole set of graphs, as a ratio to one
// estimate at the batch it answers -- so that issue 20's "max batch in about one or two estimates"
// is read over every search of a set, not only on the few models estimate_bench.cc names.
//
// Policy:
//  * The set is `scripts/max_batch_evaluations.py --set main`'s: the bundled training graphs
//    (datasets/models/*_train.onnx) and the 81 timm graphs of datasets/timm-a100 (unpacked by
//    its unpack.sh, which this program does not run: without them the benchmark is skipped,
//    saying so), each searched on a100-80gb, h100-80gb and l4-24gb with the options' defaults.
//  * Each search is timed kRounds times, each a first one (the model's bound graphs cleared
//    before it), and so is one estimate at its answer; the least time of each is kept, and the
//    search's ratio is the one to the other. Both are timed in turn on the same model, so a slow
//    phase of the machine reaches both alike. A search whose answer is 0 has no estimate to be
//    compared with and is counted apart (`nothing_fits`).
//  * Counters: the ratios' median, 90th percentile and largest (the label names the largest's
//    graph and GPU), and the ratio of the sums (all searches against all estimates at their
//    answers); the sums themselves in ms. One benchmark iteration runs the whole set.
//
//   ./build/bench/memest_bench --benchmark_filter=MaxBatchSet
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/bind_cache.h"
#include "memest/memest.h"

namespace {

constexpr int kRounds = 3;

// The graphs of the set, in max_batch_evaluations.py's order; empty when the timm graphs are not
// unpacked.
std::vector<std::string> SearchSetGraphs() {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(MEMEST_SOURCE_DIR) / "datasets";
  std::vector<std::string> bundled, timm;
  for (const auto& e : fs::directory_iterator(root / "models")) {
    const std::string name = e.path().filename().string();
    if (name.size() > 11 && name.ends_with("_train.onnx")) bundled.push_back(e.path().string());
  }
  const fs::path timm_dir = root / "timm-a100" / "models";
  if (!fs::exists(timm_dir / ".unpacked")) return {};
  for (const auto& e : fs::directory_iterator(timm_dir)) {
    if (e.path().extension() == ".onnx") timm.push_back(e.path().string());
  }
  std::sort(bundled.begin(), bundled.end());
  std::sort(timm.begin(), timm.end());
  bundled.insert(bundled.end(), timm.begin(), timm.end());
  return bundled;
}

// The least wall time of kRounds calls of f, each after the model's bound graphs are cleared;
// false when a call fails.
template <typename F>
bool LeastTime(const memest::Model& model, const F& f, double* seconds) {
  *seconds = 1e300;
  for (int round = 0; round < kRounds; ++round) {
    model.bind_cache().Clear();
    const auto start = std::chrono::steady_clock::now();
    const bool ok = f();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (!ok) return false;
    *seconds = std::min(*seconds, took.count());
  }
  return true;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

void BM_MaxBatchSet(benchmark::State& state, const std::string& backend) {
  const std::vector<std::string> graphs = SearchSetGraphs();
  if (graphs.empty()) {
    state.SkipWithError("datasets/timm-a100/models is not unpacked (run its unpack.sh)");
    return;
  }
  auto est = memest::MakeEstimator(backend);
  if (!est.ok()) {
    state.SkipWithError(est.status().ToString().c_str());
    return;
  }
  std::vector<double> ratios;
  double search_sum = 0, estimate_sum = 0;
  int nothing_fits = 0;
  std::string largest;
  for (auto _ : state) {
    ratios.clear();
    search_sum = estimate_sum = 0;
    nothing_fits = 0;
    for (const std::string& path : graphs) {
      auto model = memest::LoadModel(path);
      if (!model.ok()) {
        state.SkipWithError((path + ": " + model.status().ToString()).c_str());
        return;
      }
      for (const char* gpu : {"a100-80gb", "h100-80gb", "l4-24gb"}) {
        memest::Options o;
        o.gpu = gpu;
        int64_t answer = 0;
        double search = 0, estimate = 0;
        const auto find = [&] {
          auto r = memest::FindMaxBatch(**est, **model, o);
          answer = r.ok() ? r->batch : 0;
          return r.ok();
        };
        if (!LeastTime(**model, find, &search)) {
          state.SkipWithError((path + " on " + gpu + ": the search failed").c_str());
          return;
        }
        if (answer == 0) {
          ++nothing_fits;
          continue;
        }
        o.batch = answer;
        const auto one = [&] { return (*est)->Run(**model, o).ok(); };
        if (!LeastTime(**model, one, &estimate)) {
          state.SkipWithError((path + " on " + gpu + ": the estimate failed").c_str());
          return;
        }
        search_sum += search;
        estimate_sum += estimate;
        ratios.push_back(search / estimate);
        if (ratios.back() >= *std::max_element(ratios.begin(), ratios.end())) {
          largest = std::filesystem::path(path).filename().string() + " " + gpu;
        }
      }
    }
  }
  if (ratios.empty()) return;
  state.counters["searches"] = static_cast<double>(ratios.size());
  state.counters["nothing_fits"] = nothing_fits;
  state.counters["median_ratio"] = Quantile(ratios, 0.5);
  state.counters["p90_ratio"] = Quantile(ratios, 0.9);
  state.counters["max_ratio"] = *std::max_element(ratios.begin(), ratios.end());
  state.counters["ratio_of_sums"] = search_sum / estimate_sum;
  state.counters["searches_ms"] = search_sum * 1e3;
  state.counters["estimates_ms"] = estimate_sum * 1e3;
  state.SetLabel("largest: " + largest);
}

BENCHMARK_CAPTURE(BM_MaxBatchSet, main_symbolic, std::string("symbolic"))
    ->Iterations(1)
    ->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(BM_MaxBatchSet, main_analytical, std::string("analytical"))
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace
