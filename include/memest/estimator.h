// memest/estimator.h -- the one interface every backend implements, and the registry.
//
// Thread safety: an Estimator is immutable after creation; Run() is const and may be called
// concurrently from many threads, on the same or different models.
// Errors are values: Run() never throws.
#ifndef MEMEST_ESTIMATOR_H_
#define MEMEST_ESTIMATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memest/estimate.h"
#include "memest/gpu_profile.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest {

namespace memory {
class EstimationContext;  // memory/context.h (internal)
}

// The options not every backend models. A backend declares the ones it does (supports()); Run()
// rejects a non-default value of any other with InvalidArgument naming the option, before the
// backend runs, so that no option is ever silently ignored. The other options (mode, batch,
// dims, optimizer, weight decay, precision, loss, gpu, library workspaces) every backend honours.
struct OptionSupport {
  bool micro_batches = true;        // Options::micro_batches > 1 (training)
  bool checkpoint_segments = true;  // checkpoint_segments > 1 or checkpoint_blocks (training)
  bool fused_optimizer = true;      // Options::optimizer_impl == kFused (training)
  bool allocator_settings = true;   // any Options::allocator field off its default
  bool stacks = true;               // a stack other than the default (Options::stack, custom_stack)
  bool attention = true;            // Options::attention other than eager
  bool trainable_set = true;        // Options::trainable / freeze set (training)
  // Options::weight_dtype other than auto, or a bitsandbytes 8-bit optimizer (training).
  bool low_bit_storage = true;
  // Options::parallel with a world size > 1 (many GPUs, per-rank estimates).
  bool parallelism = true;
  // Options::kv_cache_dtype other than auto, or Options::paged_kv_cache (inference).
  bool kv_cache = true;
  // Options::outputs_held false (training).
  bool dropped_outputs = true;
  // Options::prefill set (a decode step after its prefill, inference).
  bool prefill = true;
};

class Estimator {
 public:
  virtual ~Estimator() = default;
  virtual std::string_view name() const = 0;
  // Which of the OptionSupport options this backend models (all, unless it says otherwise).
  virtual OptionSupport supports() const { return {}; }

  // Predicts the peak memory of one step of `model` under `options`: the one pipeline every
  // backend shares (memory/context.h) -- validates the options, rejects those the backend does
  // not model, looks up the GPU profile and binds the graph once, runs EstimateIn(), adds the
  // common diagnostics and turns an escaping exception into Internal. Fails with UnboundDim when
  // a symbolic dim has no value, NotFound for an unknown GPU profile, InvalidArgument for bad or
  // unmodelled options.
  [[nodiscard]] Result<Estimate> Run(const Model& model, const Options& options) const;

  // The backend proper, over a context Run() built. Public so that a backend that consults
  // another (learned reads analytical and symbolic) runs it over the same context; callers
  // outside the library use Run().
  virtual Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const = 0;
};

struct BackendInfo {
  std::string name;  // "analytical", "symbolic", "learned", "measurement"
  std::string description;
  bool available = false;
  std::string reason;  // why not available (empty when available)
};

// Every backend memest knows of, available or not, in a stable order.
std::vector<BackendInfo> ListBackends();

// Creates the named backend. Unavailable (with the reason) when it was not built or is not
// implemented yet; NotFound for an unknown name.
Result<std::unique_ptr<Estimator>> MakeEstimator(std::string_view name);

// Backends outside the core library. The LibTorch measurement backend lives in its own library,
// memest_measurement, so that programs which only estimate (the memest CLI, schedulers linking
// memest) never load LibTorch; a program linking it calls
// memest::measurement::RegisterMeasurementBackend() once at start-up. Until then ListBackends()
// lists "measurement" as unavailable, saying where it is. Registering is idempotent and
// thread-safe; `make` must stay valid for the life of the process.
using EstimatorFactory = std::unique_ptr<Estimator> (*)();
void RegisterMeasurementFactory(EstimatorFactory make);

// Fit of an estimate on a GPU profile.
struct Fit {
  bool fits = false;
  uint64_t capacity = 0;  // profile usable memory
  uint64_t judged = 0;    // the peak the verdict used: device_high (on_upper) or peak_device
  bool on_upper = false;  // judged is the top of the estimate's interval
  uint64_t margin = 0;    // bytes kept free by the policy's safety margin
  int64_t headroom = 0;   // capacity - margin - judged (negative: over by that much)
  // Under Options::allocator.memory_fraction: the most the allocator may reserve
  // (AllocatorSettings::ReservedLimit of the GPU's total memory); 0 = no such limit.
  uint64_t reserved_limit = 0;
};
// fits = judged + margin <= capacity, where judged is device_high under FitOn::kUpper when the
// estimate has an interval, else peak_device; margin = policy.margin_fraction x capacity +
// policy.margin_bytes.
Fit CheckFit(const Estimate& estimate, const GpuProfile& gpu, const FitPolicy& policy = {});
// The same under options.fit, and under options.allocator.memory_fraction the estimate's
// reserved peak must stay within reserved_limit too (a cudaMalloc past it fails even when the GPU
// has room), with the policy's safety kept free beside it: what the interval adds to the point
// estimate (judged - peak_device, under FitOn::kUpper) and the margin on the limit
// (policy.MarginBytes(reserved_limit)); headroom is then the smaller of the two rooms. What every
// caller that has the options uses (FindMaxBatch, the CLI, the C and Python APIs).
Fit CheckFit(const Estimate& estimate, const GpuProfile& gpu, const Options& options);

// The largest batch (>= 1) for which `estimator` predicts the model fits `options.gpu`
// (options.batch is ignored). Returns 0 when even batch 1 does not fit. Searches up to `limit`
// by safeguarded interpolation on the estimated device peak (api/max_batch.cc, docs/cli.md
// `--max-batch`), in far fewer estimates than a bisection. Exact whenever "fits" does not turn
// back as the batch grows; where it can (near the capacity, which cached segments the allocator
// can release depends on every block size), the result is a batch that fits whose successor does
// not, and a smaller batch may not fit. Errors from the estimator are passed through.
//
// Under MaxBatchSearch::kAuto the symbolic backend's batches are probed by replaying its step's
// allocator requests, traced at two batches (FindMaxDim: two or three values), instead of
// estimating each (one estimate, at the answer, and one trace, of its successor, check the
// result; where the replay's answer cannot be vouched for so, the estimates at it and at its
// successor answer when the one fits and the other does not; anything else is searched as under
// kExact, from those two). Under kAuto the analytical backend's search takes the successor's
// verdict from the closed form of its estimates' terms where that form gave the answer's own
// estimate to the byte (api/term_candidates.h). kExact estimates every candidate.
enum class MaxBatchSearch { kAuto, kExact };
struct MaxBatchResult {
  int64_t batch = 0;    // the batch found (FindMaxDim: the dim's value)
  Estimate at_batch;    // estimate at `batch` (at batch 1 when batch == 0)
  int evaluations = 0;  // the backend's estimates
  // The symbolic backend's replay (api/max_batch.cc): traces of the step's allocator requests,
  // and batches probed by replaying them through the allocator model (each far cheaper than an
  // estimate).
  int traces = 0;
  int replays = 0;
  // The allocator requests those replays ran: all of the loop's, until it repeats, for a batch
  // that fits; up to the one that failed for one that does not. What the probes cost, where
  // `replays` only counts them.
  int64_t replayed_requests = 0;
};
Result<MaxBatchResult> FindMaxBatch(const Estimator& estimator, const Model& model,
                                    const Options& options, int64_t limit = int64_t{1} << 24,
                                    MaxBatchSearch search = MaxBatchSearch::kAuto);

// The largest value (>= 1) of the named symbolic dim `dim` (e.g. "seq") for which `estimator`
// predicts the model fits, with the batch and every other dim as `options` binds them; the same
// search as FindMaxBatch, result in MaxBatchResult::batch (0 when even 1 does not fit). A peak
// that grows faster than linearly (eager attention, quadratic in the sequence) takes a few more
// estimates in the exact search; the symbolic replay traces the step at two values and reads
// each size as the parabola through them and the origin, or the line through them where it
// grows more slowly than the value (at three values, each size the parabola through its three
// sizes, where neither can be). InvalidArgument when `dim` is not a
// symbolic dim of a data input, or is bound in options.dims too.
Result<MaxBatchResult> FindMaxDim(const Estimator& estimator, const Model& model,
                                  const Options& options, const std::string& dim,
                                  int64_t limit = int64_t{1} << 24,
                                  MaxBatchSearch search = MaxBatchSearch::kAuto);

}  // namespace memest

#endif  // MEMEST_ESTIMATOR_H_
