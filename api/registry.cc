// api/registry.cc -- the backend registry and the fit check (the max-batch search is in
// api/max_batch.cc).
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

}  // namespace memest
