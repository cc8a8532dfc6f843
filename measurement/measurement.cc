// measurement/measurement.cc -- the `measurement` Estimator (contract in measurement.h).
#include "measurement/measurement.h"

#include <algorithm>

#include "measurement/executor.h"
#include "measurement/plan.h"
#include "memory/context.h"

namespace memest::measurement {
namespace {

// Iterations per Run(): the first (optimizer state created lazily) and one steady-state one.
constexpr int kIterations = 2;

class MeasurementEstimator final : public Estimator {
 public:
  std::string_view name() const override { return "measurement"; }

  // The harness has no gradient-accumulation loop, mirrors no fused optimizer kernels, and runs
  // with the allocator as it is (on the CPU there is no caching allocator to set).
  OptionSupport supports() const override {
    OptionSupport s;
    s.micro_batches = false;
    s.fused_optimizer = false;
    s.allocator_settings = false;
    // It runs the graph as exported, op by op, and measures rather than models the device.
    s.stacks = false;
    s.attention = false;
    s.trainable_set = false;    // the harness trains every float parameter (measurement/plan.cc)
    s.low_bit_storage = false;  // LibTorch has no bitsandbytes kernels
    s.parallelism = false;      // one process, one device
    s.kv_cache = false;         // the harness runs the graph's tensors in its own dtypes
    s.dropped_outputs = false;  // the harness holds its outputs to the step's end
    s.prefill = false;          // it runs the one graph it is given
    return s;
  }

  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override {
    const Options& options = ctx.options();
    MEMEST_ASSIGN_OR_RETURN(Plan plan, BuildPlan(ctx.model(), options));
    ExecuteOptions xo;
    xo.options = options;
    xo.iterations = kIterations;
    xo.optimizer_impl = options.optimizer_impl;
    MEMEST_ASSIGN_OR_RETURN(Measurement m, Execute(plan, xo));
    if (m.status != "ok") {
      return Unsupported("the measured run ran out of memory on " + m.device.kind + " (" +
                         m.device.name + "): " + m.error);
    }
    Estimate e;
    e.backend = "measurement";
    e.peak_phase = m.peak_phase;
    e.peak_node = m.peak_node;
    // The plan's diagnostics are the binding's, which Estimator::Run() adds to every estimate.
    Breakdown& b = e.breakdown;
    if (m.device.kind == "cpu") {
      const uint64_t peak = m.peaks.tensor.value_or(0);
      e.peak_allocated = e.peak_reserved = e.peak_device = peak;
      const PeakAttribution& a = m.at_peak;
      b.weights = a.weights;
      b.gradients = a.gradients;
      b.optimizer_state = a.optimizer_state;
      b.saved_activations = a.saved_activations;
      b.transient = a.transient;
      b.unaccounted = a.unaccounted;
      const uint64_t total = b.Total();  // equal by construction; keep the invariant regardless
      if (total < peak) b.unaccounted += peak - total;
      if (total > peak) e.peak_allocated = e.peak_reserved = e.peak_device = total;
      e.diagnostics.push_back(
          {Severity::kInfo, "cpu_measurement",
           "measured on the CPU (" + m.device.name + ", LibTorch " + m.device.torch +
               "): tensor bytes only -- no CUDA context, no caching-allocator rounding or "
               "segments, so allocated = reserved = device = the tensor peak",
           "", ""});
    } else {
      const uint64_t allocated = m.peaks.allocated.value_or(0);
      const uint64_t reserved = std::max(m.peaks.reserved.value_or(0), allocated);
      const uint64_t device = std::max(m.peaks.device.value_or(0), reserved);
      e.peak_allocated = allocated;
      e.peak_reserved = reserved;
      e.peak_device = device;
      b.weights = std::min(m.parameter_bytes + m.buffer_bytes, allocated);
      const bool state_alive = m.peak_iteration > 1 || m.peak_phase == Phase::kOptimizerStep;
      b.optimizer_state =
          state_alive ? std::min(m.optimizer_state_bytes, allocated - b.weights) : 0;
      b.unaccounted = allocated - b.weights - b.optimizer_state;
      b.cached_free = reserved - allocated;
      b.cuda_context =
          std::min(m.context_after_bytes.value_or(m.context_bytes.value_or(0)), device - reserved);
      b.unaccounted += device - reserved - b.cuda_context;
      e.diagnostics.push_back(
          {Severity::kInfo, "cuda_measurement",
           "measured on " + m.device.name + " (LibTorch " + m.device.torch +
               "); activations, gradients and temporaries are not attributed on CUDA and are "
               "reported as unaccounted",
           "", ""});
    }
    return e;
  }
};

}  // namespace

std::unique_ptr<Estimator> MakeMeasurementEstimator() {
  return std::make_unique<MeasurementEstimator>();
}

void RegisterMeasurementBackend() { RegisterMeasurementFactory(&MakeMeasurementEstimator); }

}  // namespace memest::measurement
