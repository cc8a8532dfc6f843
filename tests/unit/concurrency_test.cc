// Thread safety of the public API (include/memest/model.h, estimator.h): LoadModel may run on many
// threads at once, and one loaded Model and one Estimator may be shared by many threads calling
// Run and FindMaxBatch. Every thread must get exactly what a single-threaded run gets.
// Runs in the normal suite; scripts/sanitize.sh thread runs it under ThreadSanitizer.
#include <gtest/gtest.h>

#include <cstdint>
#include <latch>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "memest/memest.h"

namespace memest {
namespace {

constexpr int kThreads = 8;
// The backends that estimate from the graph alone (measurement executes it: not here).
const char* const kBackends[] = {"analytical", "symbolic", "learned"};
// FindMaxBatch bound: small enough for a sanitizer build, large enough for a real search.
constexpr int64_t kMaxBatchLimit = 4096;

std::string BundledPath(const std::string& name) {
  return std::string(MEMEST_SOURCE_DIR) + "/datasets/models/" + name + ".onnx";
}

// Everything a ModelSummary says, as text (equal text = equal summary).
std::string Describe(const ModelSummary& s) {
  std::ostringstream o;
  o << s.path << '|' << s.producer << '|' << s.ir_version << '|' << s.node_count << '|'
    << s.subgraph_node_count << '|' << s.parameter_count << '|' << s.parameter_bytes << '|';
  for (const auto& [domain, version] : s.opsets) o << domain << '=' << version << ',';
  for (const InputInfo& in : s.data_inputs) {
    o << in.name << ':' << in.dtype << '[';
    for (const DimInfo& d : in.dims) o << d.value << '/' << d.param << ',';
    o << ']';
  }
  for (const std::string& d : s.symbolic_dims) o << d << ',';
  for (const std::string& t : s.op_types) o << t << ',';
  for (const Diagnostic& d : s.diagnostics) o << d.code << ':' << d.node << ';';
  return o.str();
}

// Everything an Estimate says, as text.
std::string Describe(const Estimate& e) {
  std::ostringstream o;
  const Breakdown& b = e.breakdown;
  o << e.backend << " alloc=" << e.peak_allocated << " reserved=" << e.peak_reserved
    << " device=" << e.peak_device << " [" << b.weights << ',' << b.gradients << ','
    << b.optimizer_state << ',' << b.saved_activations << ',' << b.transient << ','
    << b.allocator_overhead << ',' << b.cached_free << ',' << b.cuda_context << ',' << b.unaccounted
    << "] phase=" << ToString(e.peak_phase) << " node=" << e.peak_node
    << " low=" << (e.device_low ? std::to_string(*e.device_low) : "-")
    << " high=" << (e.device_high ? std::to_string(*e.device_high) : "-") << " diag=";
  for (const Diagnostic& d : e.diagnostics) o << d.code << ':' << d.node << ':' << d.message << ';';
  return o.str();
}

template <typename T>
std::string Describe(const Result<T>& r) {
  return r.ok() ? Describe(*r) : "error " + r.status().ToString();
}

std::string Describe(const Result<MaxBatchResult>& r) {
  if (!r.ok()) return "error " + r.status().ToString();
  return "batch=" + std::to_string(r->batch) + " evals=" + std::to_string(r->evaluations) + " " +
         Describe(r->at_batch);
}

// Binds every symbolic dim except the leading dims of data inputs (the batch dim) to 16.
void BindNonBatchDims(const ModelSummary& s, Options* o) {
  std::set<std::string> batch;
  for (const InputInfo& in : s.data_inputs) {
    if (!in.dims.empty() && !in.dims[0].param.empty()) batch.insert(in.dims[0].param);
  }
  for (const std::string& d : s.symbolic_dims) {
    if (!batch.count(d)) o->dims[d] = 16;
  }
}

// Runs `body(thread_index)` on kThreads threads that start together.
template <typename Body>
void RunOnThreads(Body body) {
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  }
  for (std::thread& th : threads) th.join();
}

TEST(Concurrency, LoadModelOnManyThreadsGivesTheSameModel) {
  for (const std::string name : {"gpt2_tiny_train", "resnet18_train"}) {
    auto reference = LoadModel(BundledPath(name));
    ASSERT_TRUE(reference.ok()) << reference.status().ToString();
    const std::string expected = Describe((*reference)->summary());
    // An estimate from each copy too: the loader's internal graph must match, not only the summary.
    auto analytical = MakeEstimator("analytical");
    ASSERT_TRUE(analytical.ok());
    Options o;
    o.batch = 4;
    BindNonBatchDims((*reference)->summary(), &o);
    const std::string expected_estimate = Describe((*analytical)->Run(**reference, o));

    std::vector<std::string> got(kThreads), got_estimate(kThreads);
    RunOnThreads([&](int t) {
      auto m = LoadModel(BundledPath(name));
      got[t] = m.ok() ? Describe((*m)->summary()) : "error " + m.status().ToString();
      if (m.ok()) got_estimate[t] = Describe((*analytical)->Run(**m, o));
    });
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(got[t], expected) << name << " thread " << t;
      EXPECT_EQ(got_estimate[t], expected_estimate) << name << " thread " << t;
    }
  }
}

TEST(Concurrency, SharedModelAndEstimatorsGiveSingleThreadedResults) {
  auto loaded = LoadModel(BundledPath("resnet18_train"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::shared_ptr<const Model> model = *loaded;

  std::vector<std::unique_ptr<Estimator>> estimators;
  for (const char* name : kBackends) {
    auto e = MakeEstimator(name);
    if (!e.ok() && e.status().code() == ErrorCode::kUnavailable) continue;
    ASSERT_TRUE(e.ok()) << name << ": " << e.status().ToString();
    estimators.push_back(std::move(e).value());
  }
  ASSERT_FALSE(estimators.empty());

  std::vector<Options> options;
  for (Mode mode : {Mode::kTrain, Mode::kInfer}) {
    for (int64_t batch : {1, 32}) {
      Options o;
      o.mode = mode;
      o.batch = batch;
      options.push_back(o);
    }
  }
  Options amp;  // a less common path: AMP, checkpointing, accumulation
  amp.batch = 16;
  amp.precision = Precision::kAmpFp16;
  amp.checkpoint_segments = 2;
  amp.micro_batches = 2;
  options.push_back(amp);

  // One job = (estimator, options) for Run, or (estimator, options) for FindMaxBatch.
  struct Job {
    const Estimator* estimator;
    const Options* options;
    bool max_batch;
  };
  std::vector<Job> jobs;
  for (const auto& e : estimators) {
    for (const Options& o : options) jobs.push_back({e.get(), &o, false});
    jobs.push_back({e.get(), &options[0], true});  // train
    jobs.push_back({e.get(), &options[2], true});  // infer
  }
  auto run = [&](const Job& j) {
    return j.max_batch ? Describe(FindMaxBatch(*j.estimator, *model, *j.options, kMaxBatchLimit))
                       : Describe(j.estimator->Run(*model, *j.options));
  };

  std::vector<std::string> expected;
  for (const Job& j : jobs) {
    expected.push_back(run(j));
    EXPECT_EQ(expected.back().rfind("error", 0), std::string::npos)
        << j.estimator->name() << ": " << expected.back();
  }

  // Every thread runs every job, each starting at a different job so that different backends
  // and options overlap in time.
  std::vector<std::vector<std::string>> got(kThreads, std::vector<std::string>(jobs.size()));
  RunOnThreads([&](int t) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      const size_t j = (k + static_cast<size_t>(t) * jobs.size() / kThreads) % jobs.size();
      got[t][j] = run(jobs[j]);
    }
  });
  for (int t = 0; t < kThreads; ++t) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      EXPECT_EQ(got[t][j], expected[j]) << "thread " << t << ", " << jobs[j].estimator->name()
                                        << (jobs[j].max_batch ? " FindMaxBatch" : " Run");
    }
  }
}

}  // namespace
}  // namespace memest
