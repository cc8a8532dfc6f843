// Google Benchmark: loading and estimating models, each reported next to the protobuf parse time
// of the same bytes (the floor any ONNX tool pays), so ratios from one run can be quoted.
//
// Models: the bundled weightless exports (datasets/models/: ResNet-18, ResNet-50, GPT-2 tiny, all
// training mode; ResNet-50 also with its weights in the file, loaded from bytes and from a file,
// and the weightless one from a file) and generated chains of 10,000, 100,000 and 1,000,000 nodes
// (MatMul, Add, Relu, LayerNormalization blocks over a symbolic batch, datasets/zoo/chain.h) built
// in memory; each chain row has a per_node counter (time per node), which stays flat from 10k to 1M
// nodes when no pass is worse than linear; so do the rows of graphs of other shapes (many
// consumers, inputs, outputs, live activations or graph outputs: datasets/zoo/shapes.h) at two
// widths ten times apart. Hugging Face configs (datasets/zoo/hf.h, from
// tests/data/hf/): Llama-2-7B and a Llama-2-70B-shaped config (80 layers), generated, loaded and
// estimated at batch 1, seq 4096 (training, symbolic), each next to the protobuf parse of the
// same graph; and a Llama-3-8B prefill graph estimated at seq 2,048 and 32,768 (the time does not
// depend on the sequence length: binding evaluates the shapes inferred once); Qwen2.5-0.5B's
// decode step after the prefill of its past (symbolic, batch 16, a100-40gb), one estimate and its
// --max-dim past by replay and by the exact search, and the same step alone by the analytical
// backend (one estimate, its --max-dim past). Load includes the
// symbolic shape inference, which runs once per model; Estimate is one backend run at batch 64
// (binding dims only evaluates the inferred shapes); MaxBatch is FindMaxBatch on h100-80gb
// (analytical unless named). Every estimate here is a first one: a loaded model keeps the graphs
// bound at its last few dims (core/bind_cache.h), and each iteration clears them (timed, as an
// estimate without the cache freed its bound graph). What the cache saves is
// bench/queries_bench.cc's to show.
//
//   cmake -S . -B build -DMEMEST_BUILD_BENCH=ON && ninja -C build memest_bench
//   ./build/bench/memest_bench --benchmark_min_time=0.2
//   python3 scripts/bench_ratios.py   # the chains' table, each figure as a ratio to its parse
//
// Memory of memest itself: bench/peak_rss.cc (memest_peak_rss).
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "bench/bench_models.h"
#include "bench/per_node.h"
#include "core/bind_cache.h"
#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "datasets/zoo/shapes.h"
#include "memest/memest.h"
#include "memest/memest_c.h"

namespace {

using memest::bench::BuildHf;
using memest::bench::ModelBytes;
using memest::bench::PerNode;

// Every size in the same steady state. glibc hands a round's memory back to the OS when a block
// passes its mmap threshold (32 MiB at most) or the free heap top passes the trim threshold, so
// each round of a 1M-node chain faulted in about 200,000 fresh pages where a round of a 100k one
// found its memory again (perf stat: about 660 page faults per 100k-node load after the first,
// about 200,000 per 1M-node load; 4.3-5.1 us per node against 1.4 us). Here freed memory stays
// in the process for the next round at every size, and each parse, load and estimate row runs one
// round first, unreported: the rows compare the work per node, not the page faults of a first
// touch. What a fresh process pays, faults included, is BM_CliProcessChain's
// (bench/queries_bench.cc), at 10k, 100k and 1M nodes too.
const bool kFreedMemoryStaysInTheProcess = [] {
  mallopt(M_MMAP_MAX, 0);              // no block of its own mapping (unmapped when freed)
  mallopt(M_TRIM_THRESHOLD, INT_MAX);  // the free top of the heap kept up to 2 GiB
  return true;
}();

std::shared_ptr<const memest::Model> LoadForBench(const std::string& name) {
  auto m = memest::LoadModelFromBytes(ModelBytes(name), ".", name);
  return m.ok() ? *m : nullptr;
}

// Makes the next estimate of `model` a first one: no bound graph kept from the last.
void Forget(const memest::Model& model) { model.bind_cache().Clear(); }

void BM_ProtobufParse(benchmark::State& state, const std::string& name) {
  const std::string& bytes = ModelBytes(name);
  int64_t nodes = 0;
  onnx::ModelProto().ParseFromString(bytes);  // a round unreported (kFreedMemoryStaysInTheProcess)
  for (auto _ : state) {
    onnx::ModelProto m;
    benchmark::DoNotOptimize(m.ParseFromString(bytes));
    nodes = m.graph().node_size();
  }
  state.counters["bytes"] = static_cast<double>(bytes.size());
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["per_node"] = PerNode(nodes);
}

void BM_Load(benchmark::State& state, const std::string& name) {
  const std::string& bytes = ModelBytes(name);
  int64_t nodes = 0;
  (void)memest::LoadModelFromBytes(bytes, ".", name);  // a round unreported (as above)
  for (auto _ : state) {
    auto m = memest::LoadModelFromBytes(bytes, ".", name);
    if (!m.ok()) {
      state.SkipWithError(m.status().ToString().c_str());
      break;
    }
    nodes = (*m)->summary().node_count;
    benchmark::DoNotOptimize(m);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["per_node"] = PerNode(nodes);
}

// LoadModel of `name` written to a file once: the path the CLI takes, where a file over 16 MiB is
// read through the payload filter (core/payload_filter.h), its weights skipped by seeking.
void BM_LoadFile(benchmark::State& state, const std::string& name) {
  std::string file = name;
  std::replace_if(
      file.begin(), file.end(), [](char c) { return c == '/' || c == ':'; }, '_');
  const std::string path =
      (std::filesystem::temp_directory_path() / ("memest_bench_" + file + ".onnx")).string();
  std::ofstream(path, std::ios::binary) << ModelBytes(name);
  int64_t nodes = 0;
  (void)memest::LoadModel(path);  // a round unreported (as above)
  for (auto _ : state) {
    auto m = memest::LoadModel(path);
    if (!m.ok()) {
      state.SkipWithError(m.status().ToString().c_str());
      break;
    }
    nodes = (*m)->summary().node_count;
    benchmark::DoNotOptimize(m);
  }
  std::filesystem::remove(path);
  state.counters["bytes"] = static_cast<double>(ModelBytes(name).size());
  state.counters["nodes"] = static_cast<double>(nodes);
}

// One estimate per iteration, each at dims the model has not bound yet (Forget), after one
// unreported (kFreedMemoryStaysInTheProcess); the last device peak.
uint64_t EstimateEachIteration(benchmark::State& state, const memest::Model& model,
                               const memest::Estimator& est, const memest::Options& o) {
  uint64_t peak = 0;
  Forget(model);
  (void)est.Run(model, o);
  for (auto _ : state) {
    Forget(model);
    auto e = est.Run(model, o);
    if (!e.ok()) {
      state.SkipWithError(e.status().ToString().c_str());
      break;
    }
    peak = e->peak_device;
    benchmark::DoNotOptimize(e);
  }
  return peak;
}

// A loaded bench model and an estimator of `backend`, or nullopt once the benchmark is skipped
// with the reason.
struct Subject {
  std::shared_ptr<const memest::Model> model;
  std::unique_ptr<memest::Estimator> est;
};
std::optional<Subject> SetUp(benchmark::State& state, const std::string& name,
                             const std::string& backend) {
  auto model = LoadForBench(name);
  auto est = memest::MakeEstimator(backend);
  if (model == nullptr || !est.ok()) {
    state.SkipWithError(est.ok() ? "model did not load" : est.status().ToString().c_str());
    return std::nullopt;
  }
  return Subject{std::move(model), std::move(est).value()};
}

// One max-batch or max-dim search per iteration (`find`), each at dims the model has not bound
// yet; the last search's counts, and its answer as the counter `answer`.
template <typename Find>
void SearchEachIteration(benchmark::State& state, const memest::Model& model, const Find& find,
                         const char* answer) {
  int evaluations = 0, traces = 0, replays = 0;
  int64_t found = 0;
  for (auto _ : state) {
    Forget(model);
    auto r = find();
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      break;
    }
    evaluations = r->evaluations;
    traces = r->traces;
    replays = r->replays;
    found = r->batch;
    benchmark::DoNotOptimize(r);
  }
  state.counters["evaluations"] = evaluations;
  if (traces > 0) {
    state.counters["traces"] = traces;
    state.counters["replays"] = replays;
  }
  state.counters[answer] = static_cast<double>(found);
}

void BM_Estimate(benchmark::State& state, const std::string& name, memest::Mode mode,
                 const std::string& backend, int64_t checkpoint_segments = 0) {
  auto subject = SetUp(state, name, backend);
  if (!subject) return;
  memest::Options o;
  o.batch = 64;
  o.mode = mode;
  o.checkpoint_segments = checkpoint_segments;
  EstimateEachIteration(state, *subject->model, *subject->est, o);
  state.counters["nodes"] = static_cast<double>(subject->model->summary().node_count);
  state.counters["per_node"] = PerNode(subject->model->summary().node_count);
}

// With `zero2_over` > 1: ZeRO-2 over that many GPUs.
void BM_MaxBatch(benchmark::State& state, const std::string& name,
                 const std::string& backend = "analytical",
                 memest::MaxBatchSearch search = memest::MaxBatchSearch::kAuto,
                 memest::Mode mode = memest::Mode::kTrain, int64_t zero2_over = 1) {
  auto subject = SetUp(state, name, backend);
  if (!subject) return;
  memest::Options o;
  o.gpu = "h100-80gb";
  o.mode = mode;
  if (zero2_over > 1) {
    o.parallel.world_size = zero2_over;
    o.parallel.sharding = memest::Sharding::kZero2;
  }
  SearchEachIteration(
      state, *subject->model,
      [&] {
        return memest::FindMaxBatch(*subject->est, *subject->model, o, int64_t{1} << 24, search);
      },
      "max_batch");
}

// One symbolic estimate at the batch BM_MaxBatch's symbolic search answers (found once, untimed):
// the estimate a search is compared with when its cost is counted at the batch it finds. Near
// the GPU's capacity the allocator model's loop takes more iterations to repeat (ResNet-50 at
// its answer on h100-80gb: 12, against 4 at batch 64), so this estimate costs more than one at
// batch 64.
void BM_EstimateAtMaxBatch(benchmark::State& state, const std::string& name) {
  auto subject = SetUp(state, name, "symbolic");
  if (!subject) return;
  memest::Options o;
  o.gpu = "h100-80gb";
  auto found = memest::FindMaxBatch(*subject->est, *subject->model, o, int64_t{1} << 24);
  if (!found.ok() || found->batch < 1) {
    state.SkipWithError(found.ok() ? "nothing fits" : found.status().ToString().c_str());
    return;
  }
  o.batch = found->batch;
  EstimateEachIteration(state, *subject->model, *subject->est, o);
  state.counters["batch"] = static_cast<double>(found->batch);
}

// One training step of a rank of a 1,024-GPU job: dp 16 x tp 8 x pp 8, ZeRO-1, sequence
// parallel, bf16 autocast, 8 micro-batches of 1 sequence; the estimate holds the per-rank table
// (8 stages). Compared in one run with the same graph on one GPU at batch 1.
void BM_Parallel(benchmark::State& state, const std::string& name, int64_t world) {
  auto subject = SetUp(state, name, "analytical");
  if (!subject) return;
  const memest::Model& model = *subject->model;
  memest::Options o;
  o.precision = memest::Precision::kAmpBf16;
  o.batch = world > 1 ? 8 : 1;
  if (world > 1) {
    o.micro_batches = 8;
    o.parallel.world_size = world;
    o.parallel.tp = 8;
    o.parallel.pp = 8;
    o.parallel.sharding = memest::Sharding::kZero1;
    o.parallel.sequence_parallel = true;
  }
  size_t ranks = 0;
  uint64_t peak = 0;
  for (auto _ : state) {
    Forget(model);
    auto e = subject->est->Run(model, o);
    if (!e.ok()) {
      state.SkipWithError(e.status().ToString().c_str());
      break;
    }
    ranks = e->ranks.size();
    peak = e->peak_device;
    benchmark::DoNotOptimize(e);
  }
  state.counters["rank_groups"] = static_cast<double>(ranks);
  state.counters["peak_GiB"] = static_cast<double>(peak) / (1 << 30);
  state.counters["parameters"] = static_cast<double>(model.summary().parameter_count);
}

// The same estimate as BM_Estimate (training, batch 64..71) through the C API: options parsed from
// JSON, a result handle made and freed per call (docs/embedding.md).
void BM_CApiEstimate(benchmark::State& state, const std::string& name) {
  const std::string& bytes = ModelBytes(name);
  memest_model* model = nullptr;
  memest_estimator* est = nullptr;
  if (memest_model_load_bytes(bytes.data(), bytes.size(), name.c_str(), &model) != MEMEST_C_OK ||
      memest_estimator_new("analytical", &est) != MEMEST_C_OK) {
    state.SkipWithError(memest_c_last_error());
    return;
  }
  int64_t i = 0;
  for (auto _ : state) {
    // Batches 64..71 in turn, more than the model's bound-graph cache keeps (the C API has no
    // hook to clear it; an analytical estimate costs the same at any of them).
    const std::string options = "{\"batch\": " + std::to_string(64 + i++ % 8) + "}";
    memest_result* r = nullptr;
    if (memest_estimate(est, model, options.c_str(), &r) != MEMEST_C_OK) {
      state.SkipWithError(memest_c_last_error());
      break;
    }
    uint64_t peak = 0;
    (void)memest_result_peak_device(r, &peak);
    benchmark::DoNotOptimize(peak);
    (void)memest_result_free(r);
  }
  (void)memest_estimator_free(est);
  (void)memest_model_free(model);
}

// Generating the graph of a config (BuildHfModel and the serialization the loader reads).
void BM_HfGenerate(benchmark::State& state, const std::string& file) {
  size_t bytes = 0;
  for (auto _ : state) {
    auto m = BuildHf(file, memest::zoo::HfGraphOptions::kTrain);
    if (!m.ok()) {
      state.SkipWithError(m.status().ToString().c_str());
      break;
    }
    const std::string serialized = memest::zoo::SerializeModel(m->model);
    bytes = serialized.size();
    benchmark::DoNotOptimize(serialized);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}

// What `memest --hf-config` does: generate, load (parse, validate, infer shapes) and estimate one
// training step at batch 1, seq 4096.
void BM_HfGenerateAndEstimate(benchmark::State& state, const std::string& file,
                              const std::string& backend) {
  auto est = memest::MakeEstimator(backend);
  if (!est.ok()) {
    state.SkipWithError(est.status().ToString().c_str());
    return;
  }
  memest::Options o;
  o.batch = 1;
  o.dims["seq"] = 4096;
  uint64_t peak = 0;
  int64_t nodes = 0;
  for (auto _ : state) {
    auto m = BuildHf(file, memest::zoo::HfGraphOptions::kTrain);
    if (!m.ok()) {
      state.SkipWithError(m.status().ToString().c_str());
      break;
    }
    auto model = memest::LoadModelFromBytes(memest::zoo::SerializeModel(m->model), ".", file);
    if (!model.ok()) {
      state.SkipWithError(model.status().ToString().c_str());
      break;
    }
    auto e = (*est)->Run(**model, o);
    if (!e.ok()) {
      state.SkipWithError(e.status().ToString().c_str());
      break;
    }
    peak = e->peak_device;
    nodes = (*model)->summary().node_count;
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["peak_GiB"] = static_cast<double>(peak) / (1 << 30);
}

// One inference estimate of a loaded prefill graph at batch 1 and `seq` positions.
void BM_HfPrefillEstimate(benchmark::State& state, const std::string& name, int64_t seq) {
  auto subject = SetUp(state, name, "symbolic");
  if (!subject) return;
  memest::Options o;
  o.mode = memest::Mode::kInfer;
  o.batch = 1;
  o.dims["seq"] = seq;
  const uint64_t peak = EstimateEachIteration(state, *subject->model, *subject->est, o);
  state.counters["peak_GiB"] = static_cast<double>(peak) / (1 << 30);
}

// The longest sequence that fits a training step (or an inference step: a prefill) of a loaded
// language model at batch 4 on an H100 (FindMaxDim over "seq"), by the symbolic replay or the
// exact search, or by the analytical backend's search (the exact search, its candidates from the
// estimates' terms); BM_EstimateSeq is one estimate of the same model at batch 4 by the same
// backend, to compare with.
memest::Options SeqOptions(memest::Mode mode = memest::Mode::kTrain) {
  memest::Options o;
  o.gpu = "h100-80gb";
  o.batch = 4;
  o.mode = mode;
  return o;
}

void BM_MaxSeq(benchmark::State& state, const std::string& name, memest::MaxBatchSearch search,
               const char* backend = "symbolic", memest::Mode mode = memest::Mode::kTrain) {
  auto subject = SetUp(state, name, backend);
  if (!subject) return;
  const memest::Options o = SeqOptions(mode);
  SearchEachIteration(
      state, *subject->model,
      [&] {
        return memest::FindMaxDim(*subject->est, *subject->model, o, "seq", int64_t{1} << 24,
                                  search);
      },
      "max_seq");
}

void BM_EstimateSeq(benchmark::State& state, const std::string& name, int64_t seq,
                    const char* backend = "symbolic", memest::Mode mode = memest::Mode::kTrain) {
  auto subject = SetUp(state, name, backend);
  if (!subject) return;
  memest::Options o = SeqOptions(mode);
  o.dims["seq"] = seq;
  EstimateEachIteration(state, *subject->model, *subject->est, o);
}

// The same at the longest sequence BM_MaxSeq's replay answers (found once, untimed).
void BM_EstimateAtMaxSeq(benchmark::State& state, const std::string& name) {
  auto subject = SetUp(state, name, "symbolic");
  if (!subject) return;
  memest::Options o = SeqOptions();
  auto found = memest::FindMaxDim(*subject->est, *subject->model, o, "seq", int64_t{1} << 24);
  if (!found.ok() || found->batch < 1) {
    state.SkipWithError(found.ok() ? "nothing fits" : found.status().ToString().c_str());
    return;
  }
  o.dims["seq"] = found->batch;
  EstimateEachIteration(state, *subject->model, *subject->est, o);
  state.counters["seq"] = static_cast<double>(found->batch);
}

// A decode step of a config ("hf-decode:<config>") in inference at batch 16 on a100-40gb: with
// the symbolic backend after the prefill of its past ("hf-prefill:<config>", Options::prefill),
// with the analytical one alone (it simulates no prefill). The step and its options, or nullopt
// once the benchmark is skipped.
struct Decode {
  Subject step;
  std::shared_ptr<const memest::Model> prefill;  // null: none
  memest::Options options;

  // Forget for both graphs: the prefill's bound graph is kept by its own model.
  void ForgetBoth() const {
    Forget(*step.model);
    if (prefill != nullptr) Forget(*prefill);
  }
};
std::optional<Decode> SetUpDecode(benchmark::State& state, const std::string& config,
                                  const char* backend = "symbolic") {
  auto step = SetUp(state, "hf-decode:" + config, backend);
  if (!step) return std::nullopt;
  memest::Options o;
  o.gpu = "a100-40gb";
  o.mode = memest::Mode::kInfer;
  o.batch = 16;
  o.dims["seq"] = 1;
  std::shared_ptr<const memest::Model> prefill;
  if (std::string_view(backend) == "symbolic") {
    prefill = LoadForBench("hf-prefill:" + config);
    if (prefill == nullptr) {
      state.SkipWithError("the prefill graph did not load");
      return std::nullopt;
    }
    o.prefill = memest::DecodePrefill{prefill};
  }
  return Decode{std::move(*step), std::move(prefill), std::move(o)};
}

// The longest past that fits (FindMaxDim "past"), the prefill included.
void BM_MaxPast(benchmark::State& state, const std::string& config, memest::MaxBatchSearch search,
                const char* backend = "symbolic") {
  auto d = SetUpDecode(state, config, backend);
  if (!d) return;
  SearchEachIteration(
      state, *d->step.model,
      [&] {
        d->ForgetBoth();
        return memest::FindMaxDim(*d->step.est, *d->step.model, d->options, "past",
                                  int64_t{1} << 24, search);
      },
      "max_past");
}

// One estimate of the decode step (after its prefill, symbolic) at `past` (0: at BM_MaxPast's
// answer, found once, untimed), each a first one for both graphs.
void BM_EstimatePast(benchmark::State& state, const std::string& config, int64_t past,
                     const char* backend = "symbolic") {
  auto d = SetUpDecode(state, config, backend);
  if (!d) return;
  if (past == 0) {
    auto found =
        memest::FindMaxDim(*d->step.est, *d->step.model, d->options, "past", int64_t{1} << 24);
    if (!found.ok() || found->batch < 1) {
      state.SkipWithError(found.ok() ? "nothing fits" : found.status().ToString().c_str());
      return;
    }
    past = found->batch;
  }
  d->options.dims["past"] = past;
  d->ForgetBoth();
  (void)d->step.est->Run(*d->step.model, d->options);  // a round unreported
  for (auto _ : state) {
    d->ForgetBoth();
    auto e = d->step.est->Run(*d->step.model, d->options);
    if (!e.ok()) {
      state.SkipWithError(e.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(e);
  }
  state.counters["past"] = static_cast<double>(past);
}

using memest::Mode;
const std::string kAnalytical = "analytical";
const std::string kSymbolic = "symbolic";

}  // namespace

// clang-format off
BENCHMARK_CAPTURE(BM_ProtobufParse, resnet18, std::string("resnet18_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Load, resnet18, std::string("resnet18_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Estimate, resnet18_train, std::string("resnet18_train"), Mode::kTrain, kAnalytical)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Estimate, resnet18_infer, std::string("resnet18_train"), Mode::kInfer, kAnalytical)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaxBatch, resnet18, std::string("resnet18_train"))->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_ProtobufParse, resnet50, std::string("resnet50_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Load, resnet50, std::string("resnet50_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Estimate, resnet50_train_analytical, std::string("resnet50_train"), Mode::kTrain, kAnalytical)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_CApiEstimate, resnet50_train_analytical_c_api, std::string("resnet50_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Estimate, resnet50_train_symbolic, std::string("resnet50_train"), Mode::kTrain, kSymbolic)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Estimate, resnet50_train_symbolic_checkpoint4, std::string("resnet50_train"), Mode::kTrain, kSymbolic, 4)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaxBatch, resnet50, std::string("resnet50_train"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateAtMaxBatch, resnet50_symbolic, std::string("resnet50_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaxBatch, resnet50_symbolic, std::string("resnet50_train"), kSymbolic)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxBatch, resnet50_symbolic_exact, std::string("resnet50_train"), kSymbolic, memest::MaxBatchSearch::kExact)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxBatch, resnet50_symbolic_zero2x4, std::string("resnet50_train"), kSymbolic, memest::MaxBatchSearch::kAuto, Mode::kTrain, 4)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxBatch, resnet50_symbolic_zero2x4_exact, std::string("resnet50_train"), kSymbolic, memest::MaxBatchSearch::kExact, Mode::kTrain, 4)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, resnet50_infer_analytical, std::string("resnet50_train"), Mode::kInfer, kAnalytical)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaxBatch, resnet50_infer, std::string("resnet50_train"), kAnalytical, memest::MaxBatchSearch::kAuto, Mode::kInfer)->Unit(benchmark::kMillisecond);

// ResNet-50 with its 102 MB of weights in the file: the load leaves them out before the parse.
BENCHMARK_CAPTURE(BM_ProtobufParse, resnet50_weighted, std::string("weighted:resnet50_train"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, resnet50_weighted, std::string("weighted:resnet50_train"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadFile, resnet50, std::string("resnet50_train"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadFile, resnet50_weighted, std::string("weighted:resnet50_train"))->Unit(benchmark::kMillisecond);
// The same weights in float_data (onnx.helper.make_tensor's way): left out too.
BENCHMARK_CAPTURE(BM_ProtobufParse, resnet50_typed, std::string("typed:resnet50_train"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, resnet50_typed, std::string("typed:resnet50_train"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadFile, resnet50_typed, std::string("typed:resnet50_train"))->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_ProtobufParse, gpt2_tiny, std::string("gpt2_tiny_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Load, gpt2_tiny, std::string("gpt2_tiny_train"))->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Estimate, gpt2_tiny_train, std::string("gpt2_tiny_train"), Mode::kTrain, kAnalytical)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaxBatch, gpt2_tiny, std::string("gpt2_tiny_train"))->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_ProtobufParse, chain10k, std::string("chain10k"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, chain10k, std::string("chain10k"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, chain10k_train_analytical, std::string("chain10k"), Mode::kTrain, kAnalytical)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, chain10k_train_symbolic, std::string("chain10k"), Mode::kTrain, kSymbolic)->Unit(benchmark::kMillisecond);
// Its answer (57,344 on h100-80gb) makes each activation a segment of its own: thousands of cached
// blocks of one size in one bin of the allocator model's free lists (symbolic/free_list.h).
BENCHMARK_CAPTURE(BM_MaxBatch, chain10k_symbolic, std::string("chain10k"), kSymbolic)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateAtMaxBatch, chain10k_symbolic, std::string("chain10k"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ProtobufParse, chain100k, std::string("chain100k"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, chain100k, std::string("chain100k"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, chain100k_train_analytical, std::string("chain100k"), Mode::kTrain, kAnalytical)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, chain100k_train_symbolic, std::string("chain100k"), Mode::kTrain, kSymbolic)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ProtobufParse, chain1m, std::string("chain1m"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, chain1m, std::string("chain1m"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, chain1m_train_analytical, std::string("chain1m"), Mode::kTrain, kAnalytical)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Estimate, chain1m_train_symbolic, std::string("chain1m"), Mode::kTrain, kSymbolic)->Unit(benchmark::kMillisecond);
// clang-format on

BENCHMARK_CAPTURE(BM_Load, gpt70b, std::string("gpt70b"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Parallel, gpt70b_one_gpu, std::string("gpt70b"), 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Parallel, gpt70b_world1024, std::string("gpt70b"), 1024)
    ->Unit(benchmark::kMillisecond);

// clang-format off
BENCHMARK_CAPTURE(BM_HfGenerate, llama2_7b, std::string("llama-2-7b-hf"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ProtobufParse, hf_llama2_7b, std::string("hf:llama-2-7b-hf"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, hf_llama2_7b, std::string("hf:llama-2-7b-hf"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_HfGenerateAndEstimate, llama2_7b_seq4096_symbolic, std::string("llama-2-7b-hf"), kSymbolic)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_HfGenerateAndEstimate, llama2_7b_seq4096_analytical, std::string("llama-2-7b-hf"), kAnalytical)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_HfGenerate, llama2_70b_shape, std::string("llama-2-70b-shape"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ProtobufParse, hf_llama2_70b_shape, std::string("hf:llama-2-70b-shape"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_HfGenerateAndEstimate, llama2_70b_shape_seq4096_symbolic, std::string("llama-2-70b-shape"), kSymbolic)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateSeq, qwen25_05b_train_seq2048, std::string("hf:qwen2.5-0.5b"), 2048)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateAtMaxSeq, qwen25_05b_train, std::string("hf:qwen2.5-0.5b"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxSeq, qwen25_05b_train, std::string("hf:qwen2.5-0.5b"), memest::MaxBatchSearch::kAuto)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxSeq, qwen25_05b_train_exact, std::string("hf:qwen2.5-0.5b"), memest::MaxBatchSearch::kExact)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateSeq, qwen25_05b_train_seq2048_analytical, std::string("hf:qwen2.5-0.5b"), 2048, "analytical")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxSeq, qwen25_05b_train_analytical, std::string("hf:qwen2.5-0.5b"), memest::MaxBatchSearch::kAuto, "analytical")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimateSeq, qwen25_05b_prefill_seq2048_analytical, std::string("hf-prefill:qwen2.5-0.5b"), 2048, "analytical", Mode::kInfer)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxSeq, qwen25_05b_prefill_analytical, std::string("hf-prefill:qwen2.5-0.5b"), memest::MaxBatchSearch::kAuto, "analytical", Mode::kInfer)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimatePast, qwen25_05b_decode_past2048, std::string("qwen2.5-0.5b"), 2048)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimatePast, qwen25_05b_decode_at_answer, std::string("qwen2.5-0.5b"), 0)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxPast, qwen25_05b_decode, std::string("qwen2.5-0.5b"), memest::MaxBatchSearch::kAuto)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxPast, qwen25_05b_decode_exact, std::string("qwen2.5-0.5b"), memest::MaxBatchSearch::kExact)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimatePast, qwen25_05b_decode_past2048_analytical, std::string("qwen2.5-0.5b"), 2048, "analytical")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EstimatePast, qwen25_05b_decode_at_answer_analytical, std::string("qwen2.5-0.5b"), 0, "analytical")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaxPast, qwen25_05b_decode_analytical, std::string("qwen2.5-0.5b"), memest::MaxBatchSearch::kAuto, "analytical")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_HfPrefillEstimate, llama3_8b_prefill_seq2k, std::string("hf-prefill:meta-llama-3-8b"), 2048)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_HfPrefillEstimate, llama3_8b_prefill_seq32k, std::string("hf-prefill:meta-llama-3-8b"), 32768)->Unit(benchmark::kMillisecond);
// clang-format on

// Graphs of one shape each (datasets/zoo/shapes.h) at two widths ten times apart: each row's
// per_node stays flat from the first to the second when no pass is worse than linear in a
// tensor's consumers, a node's inputs or outputs, the activations alive at once or the graph's
// outputs (the chains above have one of each).
const bool kShapeRowsRegistered = [] {
  for (const std::string& kind : memest::zoo::ShapeKinds()) {
    for (const int width : {4'000, 40'000}) {
      const std::string name = "shape:" + kind + ":" + std::to_string(width);
      const std::string row = "/shape_" + kind + std::to_string(width / 1'000) + "k";
      benchmark::RegisterBenchmark(("BM_ProtobufParse" + row).c_str(), BM_ProtobufParse, name)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("BM_Load" + row).c_str(), BM_Load, name)
          ->Unit(benchmark::kMillisecond);
      for (const std::string& backend : {kAnalytical, kSymbolic}) {
        benchmark::RegisterBenchmark(("BM_Estimate" + row + "_train_" + backend).c_str(),
                                     [name, backend](benchmark::State& state) {
                                       BM_Estimate(state, name, Mode::kTrain, backend);
                                     })
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  return true;
}();

BENCHMARK_MAIN();
