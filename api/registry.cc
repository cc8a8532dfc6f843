// api/registry.cc -- the backend registry, fit check and max-batch search.
//
// The registry is a constant table: each entry names a backend, says whether it is available, and
// creates it. The one mutable slot is the measurement backend's factory, set once by programs
// that link memest_measurement (RegisterMeasurementFactory); it is atomic.
#include <algorithm>
#include <atomic>
#include <limits>

#include "analytical/analytical.h"
#include "base/checked.h"
#include "learned/learned.h"
#include "memest/estimator.h"
#include "symbolic/symbolic.h"

namespace memest {
namespace {

struct Entry {
  const char* name;
  const char* description;
  const char* unavailable_reason;        // nullptr when available
  std::unique_ptr<Estimator> (*make)();  // nullptr: registered at run time, or unavailable
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
#ifdef MEMEST_TORCH_FOUND
     "not linked into this program: the LibTorch harness runs in memest-measure (see "
     "docs/measurement.md)",
#else
     "built without LibTorch (install libtorch-dev and rebuild; see docs/measurement.md)",
#endif
     nullptr},
};

std::atomic<EstimatorFactory> measurement_factory{nullptr};

// The entry's factory, and why it is unavailable (nullptr when it is available).
std::pair<EstimatorFactory, const char*> Resolve(const Entry& e) {
  if (e.make != nullptr) return {e.make, nullptr};
  if (std::string_view(e.name) == "measurement") {
    if (EstimatorFactory f = measurement_factory.load()) return {f, nullptr};
  }
  return {nullptr, e.unavailable_reason};
}

}  // namespace

void RegisterMeasurementFactory(EstimatorFactory make) { measurement_factory.store(make); }

std::vector<BackendInfo> ListBackends() {
  std::vector<BackendInfo> out;
  for (const Entry& e : kBackends) {
    const auto [make, reason] = Resolve(e);
    out.push_back({e.name, e.description, make != nullptr, reason ? reason : ""});
  }
  return out;
}

Result<std::unique_ptr<Estimator>> MakeEstimator(std::string_view name) {
  std::string names;
  for (const Entry& e : kBackends) {
    if (name == e.name) {
      const auto [make, reason] = Resolve(e);
      if (make == nullptr) {
        return Unavailable(std::string("backend '") + e.name + "' is unavailable: " + reason);
      }
      return make();
    }
    names += (names.empty() ? "" : ", ") + std::string(e.name);
  }
  return NotFound("unknown backend '" + std::string(name) + "' (known: " + names + ")");
}

namespace {

// have - need, saturating at int64_t's range.
int64_t Room(uint64_t have, uint64_t need) {
  const auto clamp = [](uint64_t v) {
    return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
  };
  return have >= need ? clamp(have - need) : -clamp(need - have);
}

}  // namespace

Fit CheckFit(const Estimate& estimate, const GpuProfile& gpu, const FitPolicy& policy) {
  Fit f;
  f.capacity = gpu.usable_memory.bytes;
  f.on_upper = policy.on == FitOn::kUpper && estimate.device_high.has_value();
  f.judged =
      f.on_upper ? std::max(*estimate.device_high, estimate.peak_device) : estimate.peak_device;
  f.margin = policy.MarginBytes(f.capacity);
  const uint64_t need = base::SatAdd(f.judged, f.margin);
  f.fits = need <= f.capacity;
  f.headroom = Room(f.capacity, need);
  return f;
}

Fit CheckFit(const Estimate& estimate, const GpuProfile& gpu, const Options& options) {
  Fit f = CheckFit(estimate, gpu, options.fit);
  const std::optional<uint64_t> limit = options.allocator.ReservedLimit(gpu.total_memory.bytes);
  if (!limit) return f;
  f.reserved_limit = *limit;
  const int64_t room = Room(*limit, estimate.peak_reserved);
  f.fits = f.fits && room >= 0;
  f.headroom = std::min(f.headroom, room);
  return f;
}

namespace {

// What the search draws its line through: the device peak, except for a step the symbolic
// backend simulated within the allocator's budget (noted allocator_retries or out_of_memory,
// symbolic/symbolic.cc). Its reserved peak is held at the budget by released caches, or is the
// unlimited step's, so it is the allocated bytes that meet the capacity: the device peak less
// what the allocator held cached but free.
double SearchSignal(const Estimate& e) {
  const bool within_budget =
      std::any_of(e.diagnostics.begin(), e.diagnostics.end(), [](const Diagnostic& d) {
        return d.code == "allocator_retries" || d.code == "out_of_memory";
      });
  const uint64_t cached_free = e.peak_reserved - std::min(e.peak_allocated, e.peak_reserved);
  return static_cast<double>(
      within_budget && e.peak_device >= cached_free ? e.peak_device - cached_free : e.peak_device);
}

// The largest value v in [1, limit] for which the model fits with set(o, v) applied, searched by
// safeguarded interpolation on the estimated device peak. label(v) names a candidate in errors
// ("batch 64", "seq 4096"). v = 0 when even 1 does not fit.
template <typename Set, typename Label>
Result<MaxBatchResult> SearchLargestFitting(const Estimator& estimator, const Model& model,
                                            const Options& options, const GpuProfile& gpu,
                                            int64_t limit, Label label, Set set) {
  MaxBatchResult r;
  Options o = options;
  auto fits = [&](int64_t v) -> Result<std::pair<bool, Estimate>> {
    set(&o, v);
    ++r.evaluations;
    auto e = estimator.Run(model, o);
    if (!e.ok()) return e.status().WithContext(label(v));
    bool ok = CheckFit(*e, gpu, options).fits;
    return std::make_pair(ok, std::move(e).value());
  };
  MEMEST_ASSIGN_OR_RETURN(auto first, fits(1));
  if (!first.first) {
    r.batch = 0;
    r.at_batch = std::move(first.second);
    return r;
  }
  // Safeguarded interpolation search. The device peak is close to affine in the batch, so the
  // next candidate is where the line through the last two estimates meets the capacity; each
  // candidate is checked with a real estimate, so the answer is exact for any peak that grows
  // with the batch. Without a failing batch yet, a candidate is at least one more than the best
  // fitting one (twice it when the line does not rise); inside a bracket it is clamped into the
  // open bracket, and a step that did not halve the bracket is followed by a bisection.
  const double cap = static_cast<double>(gpu.usable_memory.bytes);
  int64_t good = 1;
  double good_peak = SearchSignal(first.second);
  Estimate good_estimate = std::move(first.second);
  int64_t bad = 0;  // 0 = no failing batch found yet
  double bad_peak = 0;
  int64_t prev = 0;  // the evaluation before the last, for the line while unbracketed
  double prev_peak = 0;
  double prev_allocated = 0;
  int64_t last = 1;
  double last_peak = good_peak;
  double last_allocated = static_cast<double>(good_estimate.peak_allocated);
  bool bisect = false;
  while (bad == 0 ? good < limit : bad - good > 1) {
    int64_t next;
    if (bad == 0) {
      // Where the device peak does not rise yet (segments rounded up hide small batches'
      // growth), the allocated bytes' slope, which does.
      const double step = static_cast<double>(last - prev);
      double slope = prev > 0 ? (last_peak - prev_peak) / step : 0;
      if (!(slope > 0) && prev > 0) slope = (last_allocated - prev_allocated) / step;
      double predicted = slope > 0 ? static_cast<double>(last) + (cap - last_peak) / slope : 0;
      if (slope <= 0 || !(predicted > static_cast<double>(good))) {
        next = good > limit / 2 ? limit : good * 2;
      } else {
        predicted = std::min(predicted, static_cast<double>(limit));
        next = std::max<int64_t>(static_cast<int64_t>(predicted), good + 1);
      }
    } else if (bisect || !(good_peak <= cap && cap < bad_peak)) {
      next = good + (bad - good) / 2;
    } else {
      const double t = (cap - good_peak) / (bad_peak - good_peak);
      next = good + static_cast<int64_t>(t * static_cast<double>(bad - good));
      next = std::clamp<int64_t>(next, good + 1, bad - 1);
    }
    const int64_t width = bad == 0 ? 0 : bad - good;
    MEMEST_ASSIGN_OR_RETURN(auto t, fits(next));
    prev = last;
    prev_peak = last_peak;
    prev_allocated = last_allocated;
    last = next;
    last_peak = SearchSignal(t.second);
    last_allocated = static_cast<double>(t.second.peak_allocated);
    if (t.first) {
      good = next;
      good_peak = last_peak;
      good_estimate = std::move(t.second);
    } else {
      bad = next;
      bad_peak = last_peak;
    }
    bisect = width > 0 && !bisect && 2 * (bad - good) > width;
  }
  r.batch = good;
  r.at_batch = std::move(good_estimate);
  return r;
}

}  // namespace

Result<MaxBatchResult> FindMaxBatch(const Estimator& estimator, const Model& model,
                                    const Options& options, int64_t limit) {
  if (options.micro_batches > 1) limit = std::max<int64_t>(limit / options.micro_batches, 1);
  auto gpu = ResolveGpuProfile(options);
  if (!gpu.ok()) return gpu.status();
  if (limit < 1) return InvalidArgument("max-batch search limit must be >= 1");
  // The search needs a batch dim to bind: some data input whose leading dim is not fixed.
  bool has_batch_dim = false;
  for (const InputInfo& in : model.summary().data_inputs) {
    has_batch_dim = has_batch_dim || (!in.dims.empty() && in.dims[0].value < 0);
  }
  if (!has_batch_dim) {
    return InvalidArgument(
        "the model has no batch dim to search over: every data input has a "
        "fixed leading dim");
  }
  // With gradient accumulation the search runs over the micro-batch size; batches are multiples.
  const int64_t k = std::max<int64_t>(options.micro_batches, 1);
  MEMEST_ASSIGN_OR_RETURN(MaxBatchResult r,
                          SearchLargestFitting(
                              estimator, model, options, *gpu, limit,
                              [k](int64_t micro) { return "batch " + std::to_string(micro * k); },
                              [k](Options* o, int64_t micro) { o->batch = micro * k; }));
  r.batch *= k;
  return r;
}

Result<MaxBatchResult> FindMaxDim(const Estimator& estimator, const Model& model,
                                  const Options& options, const std::string& dim, int64_t limit) {
  auto gpu = ResolveGpuProfile(options);
  if (!gpu.ok()) return gpu.status();
  if (limit < 1) return InvalidArgument("max-dim search limit must be >= 1");
  bool named = false;
  std::string names;
  for (const InputInfo& in : model.summary().data_inputs) {
    for (const DimInfo& d : in.dims) {
      if (d.param.empty()) continue;
      named = named || d.param == dim;
      if (names.find("'" + d.param + "'") == std::string::npos) {
        names += (names.empty() ? "'" : ", '") + d.param + "'";
      }
    }
  }
  if (!named) {
    return InvalidArgument("dim '" + dim + "' is not a symbolic dim of the model's inputs (" +
                           (names.empty() ? std::string("it has none") : "it has " + names) +
                           "): there is nothing to search");
  }
  if (options.dims.count(dim) > 0) {
    return InvalidArgument("dim '" + dim + "' is both bound (--dim) and searched (--max-dim)");
  }
  return SearchLargestFitting(
      estimator, model, options, *gpu, limit,
      [&dim](int64_t v) { return dim + " " + std::to_string(v); },
      [&dim](Options* o, int64_t v) { o->dims[dim] = v; });
}

}  // namespace memest
