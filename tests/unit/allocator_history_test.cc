// The caching-allocator model against PyTorch's own allocator on a real GPU: training rows (sdpa,
// Adam, 3 iterations) ran on a lent H100 with the allocator's history recorded
// (datasets/h100-lm-torch211/, calls 4 and 10, kind=lm_trace), and every malloc and free of each
// history is replayed here through CachingAllocatorModel (tests/data/allocator/*.events, written
// by scripts/allocator_history_events.py from the committed snapshots). Fed the real request
// stream, the model must reserve what the GPU's allocator reserved: its segments, splits and
// reuse, not the tensors, are what this checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unordered_map>

#include "symbolic/allocator.h"

namespace memest::symbolic {
namespace {

namespace fs = std::filesystem;

struct Replayed {
  AllocatorStats stats;
  size_t events = 0;
};

Replayed Replay(const fs::path& events) {
  std::ifstream in(events);
  EXPECT_TRUE(in.good()) << events;
  CachingAllocatorModel m;
  std::unordered_map<int64_t, CachingAllocatorModel::Handle> handles;
  Replayed r;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    char op = 0;
    is >> op;
    int64_t id = 0;
    if (op == 'a') {
      uint64_t bytes = 0;
      is >> id >> bytes;
      handles[id] = m.Malloc(bytes);
    } else if (op == 'f') {
      is >> id;
      auto it = handles.find(id);
      EXPECT_NE(it, handles.end()) << "free of an unknown block, line " << r.events + 1;
      if (it == handles.end()) break;
      m.Free(it->second);
      handles.erase(it);
    }
    ++r.events;
  }
  EXPECT_TRUE(m.misuse().ok()) << m.misuse().ToString();
  r.stats = m.stats();
  return r;
}

// The lm_trace row of a job: the largest of its iterations' allocator peaks.
struct Job {
  const char* events;  // tests/data/allocator/<events>.events
  const char* model;   // tests/data/hf file
  const char* precision;
  int64_t batch, seq;
};
struct Measured {
  uint64_t peak_allocated = 0, peak_reserved = 0;
};
Measured MeasuredRow(const Job& job) {
  std::ifstream in(fs::path(MEMEST_SOURCE_DIR) / "datasets/h100-lm-torch211/device-truth.jsonl");
  EXPECT_TRUE(in.good());
  Measured m;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json row = nlohmann::json::parse(line);
    if (row.value("kind", "") != "lm_trace" || row.value("model", "") != job.model ||
        row.value("precision", "") != job.precision || row.value("batch", 0) != job.batch ||
        row.value("seq", 0) != job.seq) {
      continue;
    }
    for (const nlohmann::json& it : row["iterations"]) {
      m.peak_allocated = std::max(m.peak_allocated, it["peak_allocated"].get<uint64_t>());
      m.peak_reserved = std::max(m.peak_reserved, it["peak_reserved"].get<uint64_t>());
    }
  }
  return m;
}

double RelativeError(uint64_t got, uint64_t want) {
  return (static_cast<double>(got) - static_cast<double>(want)) / static_cast<double>(want);
}

// The history starts after the model was made: its weights' blocks (and a few left by earlier
// code) are allocated first, in address order, which is not the order they were made in. So the
// replay may differ from the GPU by a segment's worth; 0.5 % of 5-50 GiB is 25-250 MiB. Replayed
// on 2026-11-27 (reserved MiB, replay / measured): GPT-2 amp-bf16 4,808 / 4,808, fp32 5,174 /
// 5,164; GPT-2 medium 15,952 / 15,954; Gemma-2B 52,220 / 52,092.
TEST(AllocatorHistoryTest, TheRealRequestStreamReservesWhatTheGpuReserved) {
  const Job jobs[] = {
      {"gpt2-sdpa-amp-bf16-4x512", "gpt2.json", "amp-bf16", 4, 512},
      {"gpt2-sdpa-fp32-4x512", "gpt2.json", "fp32", 4, 512},
      {"gpt2-medium-sdpa-amp-bf16-4x1024", "gpt2-medium.json", "amp-bf16", 4, 1024},
      {"gemma-2b-sdpa-amp-bf16-1x512", "gemma-2b.json", "amp-bf16", 1, 512},
  };
  for (const Job& job : jobs) {
    SCOPED_TRACE(job.events);
    const Replayed r = Replay(fs::path(MEMEST_SOURCE_DIR) / "tests/data/allocator" /
                              (std::string(job.events) + ".events"));
    const Measured m = MeasuredRow(job);
    ASSERT_GT(m.peak_reserved, 0u) << "no lm_trace row";
    EXPECT_GT(r.events, 5000u);
    EXPECT_LE(std::abs(RelativeError(r.stats.peak_reserved, m.peak_reserved)), 0.005)
        << "replayed " << r.stats.peak_reserved << ", measured " << m.peak_reserved;
    EXPECT_LE(std::abs(RelativeError(r.stats.peak_allocated, m.peak_allocated)), 0.005)
        << "replayed " << r.stats.peak_allocated << ", measured " << m.peak_allocated;
  }
}

}  // namespace
}  // namespace memest::symbolic
