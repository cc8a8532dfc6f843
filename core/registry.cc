// core/registry.cc -- the backend registry, fit check and max-batch search.
//
// The registry is a constant table (no global mutable state): each entry names a backend, says
// whether it is available in this build, and creates it.
#include <algorithm>
#include <limits>

#include "analytical/analytical.h"
#include "learned/learned.h"
#include "symbolic/symbolic.h"
#include "memest/estimator.h"
#ifdef MEMEST_HAVE_MEASUREMENT
#include "measurement/measurement.h"
#endif

namespace memest {
namespace {

struct Entry {
  const char* name;
  const char* description;
  const char* unavailable_reason;  // nullptr when available
  std::unique_ptr<Estimator> (*make)();
};

const Entry kBackends[] = {
    {"analytical",
     "closed-form accounting over the ONNX graph: parameters, gradients, optimizer state, saved "
     "activations, largest transient, GPU profile fixed costs",
     nullptr, &analytical::MakeAnalyticalEstimator},
    {"symbolic",
     "simulated PyTorch eager training timeline replayed through a model of the CUDA caching "
     "allocator",
     nullptr, &symbolic::MakeSymbolicEstimator},
    {"learned",
     "Eigen MLP ensemble (trained on GPUMemNet's MLP rows) correcting the symbolic estimate at "
     "device level, with an interval",
     nullptr, &learned::MakeLearnedEstimator},
    {"measurement", "runs the graph with LibTorch under a tracking allocator (ground truth)",
#ifdef MEMEST_HAVE_MEASUREMENT
     nullptr, &measurement::MakeMeasurementEstimator},
#else
     "built without LibTorch (install libtorch-dev and rebuild; see docs/measurement.md)",
     nullptr},
#endif
};

}  // namespace

std::vector<BackendInfo> ListBackends() {
  std::vector<BackendInfo> out;
  for (const Entry& e : kBackends) {
    out.push_back({e.name, e.description, e.unavailable_reason == nullptr,
                   e.unavailable_reason ? e.unavailable_reason : ""});
  }
  return out;
}

Result<std::unique_ptr<Estimator>> MakeEstimator(std::string_view name) {
  std::string names;
  for (const Entry& e : kBackends) {
    if (name == e.name) {
      if (e.unavailable_reason) {
        return Unavailable(std::string("backend '") + e.name + "' is unavailable: " +
                           e.unavailable_reason);
      }
      return e.make();
    }
    names += (names.empty() ? "" : ", ") + std::string(e.name);
  }
  return NotFound("unknown backend '" + std::string(name) + "' (known: " + names + ")");
}

Fit CheckFit(const Estimate& estimate, const GpuProfile& gpu) {
  Fit f;
  f.capacity = gpu.usable_memory.bytes;
  f.fits = estimate.peak_device <= f.capacity;
  const auto clamp = [](uint64_t v) {
    return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
  };
  f.headroom = f.fits ? clamp(f.capacity - estimate.peak_device)
                      : -clamp(estimate.peak_device - f.capacity);
  return f;
}

Result<MaxBatchResult> FindMaxBatch(const Estimator& estimator, const Model& model,
                                    const Options& options, int64_t limit) {
  if (options.micro_batches > 1) limit = std::max<int64_t>(limit / options.micro_batches, 1);
  auto gpu = FindGpuProfile(options.gpu);
  if (!gpu.ok()) return gpu.status();
  if (limit < 1) return InvalidArgument("max-batch search limit must be >= 1");
  MaxBatchResult r;
  Options o = options;
  // With gradient accumulation the search runs over the micro-batch size; batches are multiples.
  const int64_t k = std::max<int64_t>(options.micro_batches, 1);
  auto fits = [&](int64_t micro) -> Result<std::pair<bool, Estimate>> {
    const int64_t batch = micro * k;
    o.batch = batch;
    ++r.evaluations;
    auto e = estimator.Run(model, o);
    if (!e.ok()) return e.status().WithContext("batch " + std::to_string(batch));
    bool ok = CheckFit(*e, *gpu).fits;
    return std::make_pair(ok, std::move(e).value());
  };
  // The search needs a batch dim to bind: some data input whose leading dim is not fixed.
  bool has_batch_dim = false;
  for (const InputInfo& in : model.summary().data_inputs) {
    has_batch_dim = has_batch_dim || (!in.dims.empty() && in.dims[0].value < 0);
  }
  if (!has_batch_dim) {
    return InvalidArgument("the model has no batch dim to search over: every data input has a "
                           "fixed leading dim");
  }
  MEMEST_ASSIGN_OR_RETURN(auto first, fits(1));
  if (!first.first) {
    r.batch = 0;
    r.at_batch = std::move(first.second);
    return r;
  }
  int64_t good = 1;
  Estimate good_estimate = std::move(first.second);
  int64_t bad = 0;  // 0 = no failing batch found yet
  while (bad == 0 && good < limit) {
    const int64_t next = good > limit / 2 ? limit : good * 2;
    MEMEST_ASSIGN_OR_RETURN(auto t, fits(next));
    if (t.first) {
      good = next;
      good_estimate = std::move(t.second);
    } else {
      bad = next;
    }
  }
  while (bad != 0 && bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    MEMEST_ASSIGN_OR_RETURN(auto t, fits(mid));
    if (t.first) {
      good = mid;
      good_estimate = std::move(t.second);
    } else {
      bad = mid;
    }
  }
  r.batch = good * k;
  r.at_batch = std::move(good_estimate);
  return r;
}

}  // namespace memest
