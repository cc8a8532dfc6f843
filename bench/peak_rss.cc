// bench/peak_rss.cc -- memest_peak_rss: the peak memory (RSS) of memest itself, per model.
//
// For each model (bench/bench_models.h: the bundled and real exports, ResNet-50 and VGG-16 with
// their weights in the file (the load leaves them out before the parse), the generated GPT-70B,
// Llama-2-7B and Llama-2-70B-shaped training graphs, and chains of 10k, 100k and 1M nodes) three
// fresh processes (fork) each build the model's bytes, give freed memory back (malloc_trim),
// reset the kernel's high-water mark (/proc/self/clear_refs, "5") and then run:
//   parse: onnx::ModelProto::ParseFromString of the bytes (the floor any ONNX tool pays);
//   load:  LoadModelFromBytes (parse, validation, symbolic shape inference);
//   total: the load and one analytical and one symbolic training estimate (batch 64; the HF
//          graphs at batch 1, seq 4096), the model kept loaded;
//   search: the load and the symbolic backend's largest batch that fits an h100-80gb
//          (FindMaxBatch; the HF graphs at seq 4096), which holds its traces, the curves through
//          them and the allocator's run at the answer while it estimates there;
//   full caches: the load and analytical estimates at 32 batches x 8 option sets that each need
//          their own value facts (precision fp32 / amp-bf16 / amp-fp16 / bf16, fused kernels on
//          and off), so that the model's caches hold all they may: up to 32 bound graphs
//          (core/bind_cache.h: 4 of any size, more for small graphs), each with up to 8 sets of
//          facts within 1M values' worth (core/derived_cache.h). A long-running process asking
//          many questions of one model peaks here, not at `total`.
// The figure is VmHWM after the run minus VmRSS before it (the model's bytes excluded), shown as
// MiB, bytes per node and a ratio to the parse's own peak. Linux only.
//
//   ./build/bench/memest_peak_rss              # every model
//   ./build/bench/memest_peak_rss chain1m gpt70b
//   ./build/bench/memest_peak_rss --check      # exit 1 when a chain exceeds a bound below
#include <malloc.h>
#include <onnx/onnx_pb.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_models.h"
#include "core/bind_cache.h"
#include "memest/memest.h"

namespace {

// The bound stated in README.md (Speed): memest's peak RSS (load and both estimates) per node of
// a chain; measured 3.5-3.9 KB from 10k to 1M nodes (2026-11-29).
constexpr double kMaxBytesPerNode = 4096;
// The symbolic max-batch search's (on h100-80gb): measured 7.8 / 7.4 / 6.8 KB at 10k / 100k / 1M
// nodes (2026-12-05, at 39bce33: the first trace kept without spare capacity, the probes' runs
// and the other traces freed before the answer's estimate, 4 bytes a traced request in the
// curves).
constexpr double kMaxSearchBytesPerNode = 9216;

// A field of /proc/self/status ("VmRSS", "VmHWM") in bytes; 0 when absent.
uint64_t ProcStatusBytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0)
      return std::strtoull(line.c_str() + prefix.size(), nullptr, 10) * 1024;
  }
  return 0;
}

// Makes the current RSS the high-water mark (and gives freed heap pages back first).
void ResetPeak() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}

struct Sample {
  uint64_t peak = 0;  // bytes above the RSS before the run
  int64_t nodes = 0;
  uint64_t model_bytes = 0;
  bool ok = false;
};

// How far one run goes: the parse alone, LoadModelFromBytes, the load and both estimates, the
// load and a symbolic max-batch search, or the load and the estimates that fill the caches.
enum class Stage { kParse, kLoad, kEstimate, kSearch, kFullCaches };

// Estimates that fill the model's caches (see the header): every batch with every option set.
bool FillCaches(const memest::Model& model, bool hf) {
  auto est = memest::MakeEstimator("analytical");
  if (!est.ok()) return false;
  for (int64_t batch = 16;
       batch <= 16 * static_cast<int64_t>(memest::core::BindCache::kSmallEntries); batch += 16) {
    for (const memest::Precision p : {memest::Precision::kFp32, memest::Precision::kAmpBf16,
                                      memest::Precision::kAmpFp16, memest::Precision::kBf16}) {
      for (const bool fused : {true, false}) {
        memest::Options o;
        o.batch = hf ? 1 : batch;
        if (hf) o.dims["seq"] = batch * 64;
        o.precision = p;
        o.fused_kernels = fused;
        if (!(*est)->Run(model, o).ok()) return false;
      }
    }
  }
  return true;
}

// `stage` of `name` in a fresh process; it writes back "ok nodes peak model_bytes".
Sample InChild(const std::string& name, Stage stage) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string bytes = memest::bench::BuildModelBytes(name);
    ResetPeak();
    const uint64_t before = ProcStatusBytes("VmRSS");
    int64_t nodes = 0;
    bool ok = !bytes.empty();
    if (ok && stage == Stage::kParse) {
      onnx::ModelProto m;
      ok = m.ParseFromString(bytes);
      nodes = m.graph().node_size();
    } else if (ok) {
      auto model = memest::LoadModelFromBytes(bytes, ".", name);
      ok = model.ok();
      if (ok) nodes = (*model)->summary().node_count;
      const bool hf = name.rfind("hf:", 0) == 0;
      if (ok && stage == Stage::kFullCaches) ok = FillCaches(**model, hf);
      memest::Options o;
      o.batch = hf ? 1 : 64;
      if (hf) o.dims["seq"] = 4096;
      if (ok && stage == Stage::kEstimate) {
        for (const char* backend : {"analytical", "symbolic"}) {
          auto est = memest::MakeEstimator(backend);
          ok = ok && est.ok() && (*est)->Run(**model, o).ok();
        }
      }
      if (ok && stage == Stage::kSearch) {
        auto est = memest::MakeEstimator("symbolic");
        ok = est.ok() && memest::FindMaxBatch(**est, **model, o).ok();
      }
    }
    const uint64_t peak = ProcStatusBytes("VmHWM") - before;
    const std::string line = std::to_string(ok ? 1 : 0) + " " + std::to_string(nodes) + " " +
                             std::to_string(peak) + " " + std::to_string(bytes.size());
    (void)!write(fds[1], line.data(), line.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[128] = {};
  ssize_t n = 0, got = 0;
  while ((n = read(fds[0], buf + got, sizeof(buf) - 1 - static_cast<size_t>(got))) > 0) got += n;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  Sample s;
  int ok = 0;
  if (std::sscanf(buf, "%d %" SCNd64 " %" SCNu64 " %" SCNu64, &ok, &s.nodes, &s.peak,
                  &s.model_bytes) == 4) {
    s.ok = ok == 1;
  }
  return s;
}

const std::vector<std::string>& AllModels() {
  static const std::vector<std::string> models = {"mlp_small_train",
                                                  "resnet18_train",
                                                  "resnet50_train",
                                                  "gpt2_tiny_train",
                                                  "real/resnet50_train",
                                                  "real/vgg16_train",
                                                  "real/bert_base_train",
                                                  "real/vit_b_16_train",
                                                  "real/densenet121_train",
                                                  "weighted:resnet50_train",
                                                  "weighted:real/vgg16_train",
                                                  "typed:resnet50_train",
                                                  "gpt70b",
                                                  "hf:llama-2-7b-hf",
                                                  "hf:llama-2-70b-shape",
                                                  "chain10k",
                                                  "chain100k",
                                                  "chain1m"};
  return models;
}

}  // namespace

int main(int argc, char** argv) {
  bool check = false;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check") == 0) {
      check = true;
    } else {
      models.emplace_back(argv[i]);
    }
  }
  if (models.empty()) models = AllModels();
  std::printf("%-24s %9s %10s %10s %10s %10s %8s %8s %11s %8s %11s\n", "model", "nodes", "bytes",
              "parse MiB", "load MiB", "total MiB", "B/node", "x parse", "search MiB", "B/node",
              "caches MiB");
  int failures = 0;
  for (const std::string& name : models) {
    const Sample parse = InChild(name, Stage::kParse);
    const Sample load = InChild(name, Stage::kLoad);
    const Sample run = InChild(name, Stage::kEstimate);
    const Sample search = InChild(name, Stage::kSearch);
    const Sample full = InChild(name, Stage::kFullCaches);
    if (!parse.ok || !load.ok || !run.ok || !search.ok || !full.ok) {
      std::printf("%-24s failed\n", name.c_str());
      ++failures;
      continue;
    }
    const double per_node = static_cast<double>(run.peak) / static_cast<double>(run.nodes);
    const double search_per_node =
        static_cast<double>(search.peak) / static_cast<double>(search.nodes);
    std::printf(
        "%-24s %9" PRId64 " %10" PRIu64 " %10.1f %10.1f %10.1f %8.0f %8.2f %11.1f %8.0f %11.1f\n",
        name.c_str(), run.nodes, run.model_bytes, static_cast<double>(parse.peak) / (1 << 20),
        static_cast<double>(load.peak) / (1 << 20), static_cast<double>(run.peak) / (1 << 20),
        per_node,
        static_cast<double>(run.peak) / static_cast<double>(std::max<uint64_t>(parse.peak, 1)),
        static_cast<double>(search.peak) / (1 << 20), search_per_node,
        static_cast<double>(full.peak) / (1 << 20));
    // A chain's figure over its bound, with --check: said, and counted as a failure.
    const auto bound = [&](const char* what, double measured, double most) {
      if (!check || name.rfind("chain", 0) != 0 || measured <= most) return;
      std::printf("  %s over the bound: %.0f > %.0f bytes per node\n", what, measured, most);
      ++failures;
    };
    bound("load + estimates", per_node, kMaxBytesPerNode);
    bound("search", search_per_node, kMaxSearchBytesPerNode);
  }
  return failures == 0 ? 0 : 1;
}
