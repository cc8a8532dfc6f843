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
  // The policy's safety holds within the limit too: what the interval adds to the point estimate
  // (judged - peak_device) and the margin on the limit are kept free beside the reserved peak.
  const uint64_t safety =
      base::SatAdd(f.judged - estimate.peak_device, options.fit.MarginBytes(*limit));
  const int64_t room = Room(*limit, base::SatAdd(estimate.peak_reserved, safety));
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

// The candidates of the max-batch search (policy in memest/estimator.h and docs/cli.md
// `--max-batch`): safeguarded interpolation on SearchSignal. The device peak is close to affine
// in the batch, so a candidate is where the line through two estimates meets the capacity.
// Unbracketed (no failing batch yet), the line runs through the last two estimates and a
// candidate is at least one more than the largest fitting batch (twice it when the line does not
// rise). Bracketed, the line runs through the largest fitting and smallest failing batch and the
// candidate is clamped into the open bracket; a batch that failed just below the capacity line
// is followed by steps down from it (1, 2, 4, ... batches); a step that did not halve the
// bracket, or a bracket that does not straddle the capacity, is followed by a bisection.
class Candidates {
 public:
  Candidates(double capacity, int64_t limit, const Estimate& at_one)
      : cap_(capacity),
        limit_(limit),
        good_peak_(SearchSignal(at_one)),
        last_{1, good_peak_, static_cast<double>(at_one.peak_allocated)} {}

  // Whether the answer is known: the limit fits, or the bracket is two adjacent batches.
  bool done() const { return bad_ == 0 ? good_ >= limit_ : bad_ - good_ <= 1; }
  int64_t largest_fitting() const { return good_; }

  // The batch to estimate next; a step down doubles the one after it.
  int64_t Next() {
    if (bad_ == 0) return Extrapolate();
    if (!bisect_ && good_peak_ <= cap_ && cap_ < bad_peak_) return Interpolate();
    if (last_.batch == bad_ && FailedJustBelowCapacity()) {
      const int64_t next = std::max(good_ + 1, bad_ - down_);
      down_ *= 2;
      return next;
    }
    return good_ + (bad_ - good_) / 2;
  }

  // The verdict and estimate at `batch`, the last Next().
  void Record(int64_t batch, bool fits, const Estimate& e) {
    const int64_t width = bad_ == 0 ? 0 : bad_ - good_;
    prev_ = last_;
    last_ = {batch, SearchSignal(e), static_cast<double>(e.peak_allocated)};
    if (fits) {
      good_ = batch;
      good_peak_ = last_.peak;
      down_ = 1;
    } else {
      bad_ = batch;
      bad_peak_ = last_.peak;
    }
    bisect_ = width > 0 && !bisect_ && 2 * (bad_ - good_) > width;
  }

 private:
  struct Point {
    int64_t batch = 0;
    double peak = 0;       // SearchSignal
    double allocated = 0;  // peak_allocated
  };
  // A failing batch is within this many batches' growth of the capacity line.
  static constexpr double kNearCapacity = 16;

  int64_t Extrapolate() const {
    // Where the device peak does not rise yet (segments rounded up hide small batches'
    // growth), the allocated bytes' slope, which does.
    const double step = static_cast<double>(last_.batch - prev_.batch);
    double slope = prev_.batch > 0 ? (last_.peak - prev_.peak) / step : 0;
    if (!(slope > 0) && prev_.batch > 0) slope = (last_.allocated - prev_.allocated) / step;
    double predicted =
        slope > 0 ? static_cast<double>(last_.batch) + (cap_ - last_.peak) / slope : 0;
    if (slope <= 0 || !(predicted > static_cast<double>(good_))) {
      return good_ > limit_ / 2 ? limit_ : good_ * 2;
    }
    predicted = std::min(predicted, static_cast<double>(limit_));
    return std::max<int64_t>(static_cast<int64_t>(predicted), good_ + 1);
  }

  int64_t Interpolate() const {
    const double t = (cap_ - good_peak_) / (bad_peak_ - good_peak_);
    const int64_t next = good_ + static_cast<int64_t>(t * static_cast<double>(bad_ - good_));
    return std::clamp<int64_t>(next, good_ + 1, bad_ - 1);
  }

  // The failing batch's line value is below the capacity (cached segments it could not
  // release) by at most kNearCapacity batches' growth: the boundary is usually a few batches
  // down.
  bool FailedJustBelowCapacity() const {
    const double per_batch = (bad_peak_ - good_peak_) / static_cast<double>(bad_ - good_);
    return bad_peak_ <= cap_ && cap_ - bad_peak_ <= kNearCapacity * per_batch;
  }

  const double cap_;
  const int64_t limit_;
  int64_t good_ = 1;
  double good_peak_;
  int64_t bad_ = 0;  // 0 = no failing batch found yet
  double bad_peak_ = 0;
  Point last_, prev_;  // the last two evaluations
  bool bisect_ = false;
  int64_t down_ = 1;  // the next step down from a batch that failed just below the capacity
};

// The largest value v in [1, limit] for which the model fits with set(o, v) applied (Candidates
// above). label(v) names a candidate in errors ("batch 64", "seq 4096"). v = 0 when even 1 does
// not fit.
template <typename Set, typename Label>
Result<MaxBatchResult> SearchLargestFitting(const Estimator& estimator, const Model& model,
                                            const Options& options, const GpuProfile& gpu,
                                            int64_t limit, Label label, Set set) {
  MaxBatchResult r;
  Options o = options;
  auto estimate = [&](int64_t v) -> Result<Estimate> {
    set(&o, v);
    ++r.evaluations;
    auto e = estimator.Run(model, o);
    if (!e.ok()) return e.status().WithContext(label(v));
    return e;
  };
  MEMEST_ASSIGN_OR_RETURN(r.at_batch, estimate(1));
  if (!CheckFit(r.at_batch, gpu, options).fits) {
    r.batch = 0;
    return r;
  }
  Candidates search(static_cast<double>(gpu.usable_memory.bytes), limit, r.at_batch);
  while (!search.done()) {
    const int64_t next = search.Next();
    MEMEST_ASSIGN_OR_RETURN(Estimate e, estimate(next));
    const bool fits = CheckFit(e, gpu, options).fits;
    search.Record(next, fits, e);
    if (fits) r.at_batch = std::move(e);
  }
  r.batch = search.largest_fitting();
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
