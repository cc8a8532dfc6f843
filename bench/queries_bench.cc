// Google Benchmark: what a scheduler pays -- many estimates of one loaded model, estimates on
// several threads, and the memest CLI as a process started cold.
//
//  * BM_Queries: 1,000 estimates of the bundled ResNet-50 (training) over 25 batches x 5 GPUs x
//    8 option sets (precision, optimizer, weight decay), each one Estimator::Run on the loaded
//    model; the counter `per_query_us` is the cost of one, to compare with BM_Estimate (a cold
//    estimate) in the same run. "grouped" asks the 40 queries of a batch one after another (a
//    scheduler trying GPUs and options for a job), so the model's bound-graph cache
//    (core/bind_cache.h) binds each batch once; "shuffled" asks them in a fixed random order, so
//    the cache rarely holds the batch asked for (its worst case). Each round starts with the
//    model's caches emptied, as if it had just been loaded.
//  * BM_EstimateThreads: estimates at batch 64 on 1, 2 and 4 threads sharing one model and one
//    estimator (Estimator::Run is const and thread-safe), all reading the one bound graph and
//    value facts the model keeps for batch 64. Each estimate asks for another weight decay (1,000
//    values in turn, per thread), so that the simulations the bound graph keeps
//    (symbolic/simulation_key.h) never answer it: every estimate simulates. `items_per_second`
//    is the estimates per second of all threads together (2 cores here: 4 threads show the
//    oversubscription, not more cores).
//  * BM_CliProcess: `memest datasets/models/resnet50_train.onnx --batch 64` as a new process
//    each time (posix_spawn, stdout to /dev/null, wall time until it exits), next to the same
//    binary printing its version: the cost of starting the process and loading its libraries
//    alone. And the generated chains of 10,000, 100,000 and 1,000,000 nodes (written once to the
//    temporary folder) estimated by each backend in a new process, with their time per node: a
//    fresh process pays a page fault for every page it touches, at every size alike, which the
//    steady-state loops of estimate_bench.cc, keeping their memory between rounds, do not (the
//    CLI's allocator, tools/jemalloc_conf.cc). And a language model from its Hugging Face
//    config (Qwen2.5-0.5B, `--hf-config`, training at batch 4 and seq 2,048 on h100-80gb,
//    analytical): the process builds the graph from the config before it loads it.
//  * BM_ParseProcessChain: the protobuf parse of each chain's file in a process of its own
//    (memest_parse_process, bench/parse_process.cc, on the CLI's allocator), what the CLI's chain
//    rows are read against: both pay a fresh process's page faults.
//
//   ninja -C build memest_bench
//   ./build/bench/memest_bench --benchmark_filter='Queries|Threads|Process'
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench/bench_models.h"
#include "bench/per_node.h"
#include "core/bind_cache.h"
#include "memest/memest.h"

extern char** environ;

namespace {

struct Loaded {
  std::shared_ptr<const memest::Model> model;
  std::unique_ptr<memest::Estimator> estimator;
};

Loaded LoadResnet50(const std::string& backend) {
  Loaded l;
  auto m = memest::LoadModel(memest::bench::ModelPath("resnet50_train"));
  auto e = memest::MakeEstimator(backend);
  if (m.ok()) l.model = *m;
  if (e.ok()) l.estimator = std::move(e).value();
  return l;
}

// The 1,000 queries: 25 batches x 5 GPUs x 8 option sets.
std::vector<memest::Options> Queries() {
  std::vector<memest::Options> out;
  const std::array<const char*, 5> gpus = {"h100-80gb", "a100-40gb", "a100-80gb", "l4-24gb",
                                           "v100-32gb"};
  for (int64_t batch = 8; batch <= 200; batch += 8) {
    for (const char* gpu : gpus) {
      for (int variant = 0; variant < 8; ++variant) {
        memest::Options o;
        o.batch = batch;
        o.gpu = gpu;
        o.precision = variant % 2 == 0 ? memest::Precision::kFp32 : memest::Precision::kAmpBf16;
        o.optimizer =
            variant / 2 % 2 == 0 ? memest::Optimizer::kAdam : memest::Optimizer::kMomentum;
        o.weight_decay = variant / 4 == 0 ? 0.0 : 0.01;
        out.push_back(o);
      }
    }
  }
  return out;
}

void BM_Queries(benchmark::State& state, const std::string& backend, bool shuffled) {
  Loaded l = LoadResnet50(backend);
  if (l.model == nullptr || l.estimator == nullptr) {
    state.SkipWithError("setup failed");
    return;
  }
  std::vector<memest::Options> queries = Queries();
  if (shuffled) std::shuffle(queries.begin(), queries.end(), std::mt19937(20261126));
  for (auto _ : state) {
    state.PauseTiming();
    l.model->bind_cache().Clear();  // each round of 1,000 starts from a freshly loaded model
    state.ResumeTiming();
    for (const memest::Options& o : queries) {
      auto e = l.estimator->Run(*l.model, o);
      if (!e.ok()) {
        state.SkipWithError(e.status().ToString().c_str());
        return;
      }
      benchmark::DoNotOptimize(e);
    }
  }
  state.counters["queries"] = static_cast<double>(queries.size());
  state.counters["per_query_us"] = benchmark::Counter(
      static_cast<double>(queries.size()) * 1e-6,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_EstimateThreads(benchmark::State& state, const std::string& backend) {
  static Loaded* shared = new Loaded(LoadResnet50(backend));
  if (shared->model == nullptr || shared->estimator == nullptr) {
    state.SkipWithError("setup failed");
    return;
  }
  memest::Options o;
  o.batch = 64;
  int step = state.thread_index() * 250;
  for (auto _ : state) {
    o.weight_decay = 1e-4 * static_cast<double>(step++ % 1000);
    auto e = shared->estimator->Run(*shared->model, o);
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}

// Starts `args` as a new process with its output thrown away; its exit status.
int RunProcess(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int status = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) == 0) {
    waitpid(pid, &status, 0);
  }
  posix_spawn_file_actions_destroy(&actions);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void BM_CliProcess(benchmark::State& state, const std::vector<std::string>& args) {
  for (auto _ : state) {
    const int rc = RunProcess(args);
    if (rc != 0) {
      state.SkipWithError((args[0] + " exited with " + std::to_string(rc)).c_str());
      return;
    }
  }
}

// The generated chain's file in the temporary folder, written once per process; empty (the
// benchmark skipped) when it cannot be written.
std::string ChainFile(benchmark::State& state, const std::string& chain, int64_t nodes) {
  state.counters["per_node"] = memest::bench::PerNode(nodes);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("memest_bench_" + chain + ".onnx")).string();
  static std::set<std::string> written;
  if (written.insert(path).second) {
    const std::string& bytes = memest::bench::ModelBytes(chain);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (bytes.empty() || !out) {
      state.SkipWithError(("cannot write " + path).c_str());
      return "";
    }
  }
  return path;
}

// `memest <the generated chain> --batch 64 --backend <backend>`.
void BM_CliProcessChain(benchmark::State& state, const std::string& chain, int64_t nodes,
                        const std::string& backend) {
  const std::string path = ChainFile(state, chain, nodes);
  if (path.empty()) return;
  BM_CliProcess(state, {MEMEST_CLI, path, "--batch", "64", "--backend", backend});
}

// `memest_parse_process <the generated chain>` (bench/parse_process.cc): the protobuf parse of the
// same file in a process of its own, what BM_CliProcessChain is read against.
void BM_ParseProcessChain(benchmark::State& state, const std::string& chain, int64_t nodes) {
  const std::string path = ChainFile(state, chain, nodes);
  if (path.empty()) return;
  BM_CliProcess(state, {MEMEST_PARSE_PROCESS, path});
}

const std::vector<std::string> kCliEstimate = {
    MEMEST_CLI, memest::bench::ModelPath("resnet50_train"), "--batch", "64"};
const std::vector<std::string> kCliVersion = {MEMEST_CLI, "--version"};
const std::string kQwenConfig = std::string(MEMEST_SOURCE_DIR) + "/tests/data/hf/qwen2.5-0.5b.json";
const std::vector<std::string> kCliHfConfig = {MEMEST_CLI, "--hf-config", kQwenConfig,
                                               "--batch",  "4",           "--dim",
                                               "seq=2048", "--gpu",       "h100-80gb"};

}  // namespace

// clang-format off
BENCHMARK_CAPTURE(BM_Queries, resnet50_analytical_grouped, std::string("analytical"), false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Queries, resnet50_analytical_shuffled, std::string("analytical"), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Queries, resnet50_symbolic_grouped, std::string("symbolic"), false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Queries, resnet50_symbolic_shuffled, std::string("symbolic"), true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateThreads, resnet50_symbolic, std::string("symbolic"))->Threads(1)->Threads(2)->Threads(4)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CliProcess, cold_start_resnet50_batch64, kCliEstimate)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcess, cold_start_version_only, kCliVersion)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcess, cold_start_hf_qwen25_05b_seq2048, kCliHfConfig)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseProcessChain, cold_chain10k_parse, std::string("chain10k"), 10'000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseProcessChain, cold_chain100k_parse, std::string("chain100k"), 100'000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseProcessChain, cold_chain1m_parse, std::string("chain1m"), 1'000'000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcessChain, cold_chain10k_analytical, std::string("chain10k"), 10'000, std::string("analytical"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcessChain, cold_chain100k_analytical, std::string("chain100k"), 100'000, std::string("analytical"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcessChain, cold_chain1m_analytical, std::string("chain1m"), 1'000'000, std::string("analytical"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcessChain, cold_chain10k_symbolic, std::string("chain10k"), 10'000, std::string("symbolic"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcessChain, cold_chain100k_symbolic, std::string("chain100k"), 100'000, std::string("symbolic"))->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CliProcessChain, cold_chain1m_symbolic, std::string("chain1m"), 1'000'000, std::string("symbolic"))->UseRealTime()->Unit(benchmark::kMillisecond);
// clang-format on
