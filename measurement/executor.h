// measurement/executor.h -- runs a measurement Plan with LibTorch and reports the memory it took.
//
// This header is free of LibTorch types: the tool, the estimator and the tests include it; only
// executor.cc and torch_ops.cc include ATen. The policy (how a training step is run, what is
// counted, how the peak is attributed) is stated at the top of executor.cc.
//
// Thread safety: Execute() may be called from any thread, but runs are serialized process-wide
// (the CPU tracking allocator and the CUDA allocator statistics are process-global).
#ifndef MEMEST_MEASUREMENT_EXECUTOR_H_
#define MEMEST_MEASUREMENT_EXECUTOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "measurement/plan.h"
#include "measurement/tracker.h"
#include "memest/estimate.h"
#include "memest/measured_row.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::measurement {

enum class DeviceKind { kAuto, kCpu, kCuda };            // kAuto: CUDA when usable, else CPU
Result<DeviceKind> ParseDeviceKind(std::string_view s);  // "auto" | "cpu" | "cuda"
const char* ToString(DeviceKind d);

struct ExecuteOptions {
  Options options;  // mode, optimizer, weight_decay, precision, loss (batch/dims live in the plan)
  int iterations = 3;  // training iterations (or inference passes); >= 1
  DeviceKind device = DeviceKind::kAuto;
  uint64_t seed = 0;
  // CPU: live tensor bytes above this fail the run as out of memory. 0: 80% of MemAvailable.
  uint64_t host_limit_bytes = 0;
  // Which optimizer implementation to mirror (memest::OptimizerImpl; kFused is not mirrored and
  // fails the run as Unsupported). nullopt follows torch.optim's default for the device: the
  // foreach (multi-tensor) path for CUDA parameters, the single-tensor loop for CPU parameters.
  std::optional<OptimizerImpl> optimizer_impl;
  bool keep_trace = false;  // CPU: return every allocation event in Measurement::trace
};

// The four levels of docs/measured-row-schema.md (memest/measured_row.h); nullopt = not measured
// on this device. tensor: the CPU tracker's live nbytes, or CUDA's requested bytes.
using Peaks = MeasuredPeaks;

struct PhaseStats {
  bool ran = false;
  Peaks peaks;
  std::string peak_node;  // node (or "loss", "optimizer.step") at the phase's tensor peak
};

struct IterationStats {
  int iteration = 0;  // 1-based
  Peaks peaks;
  PhaseStats forward;  // forward + loss (after zero_grad)
  PhaseStats backward;
  PhaseStats step;  // optimizer step (train only)
};

// What the live tensor bytes at the run's tensor peak were (CPU; sums to peaks.tensor).
struct PeakAttribution {
  uint64_t weights = 0;            // parameters, buffers, graph constants
  uint64_t gradients = 0;          // .grad of parameters
  uint64_t optimizer_state = 0;    // exp_avg / exp_avg_sq / momentum buffers
  uint64_t saved_activations = 0;  // forward tensors alive past the end of the forward (+ inputs)
  uint64_t transient = 0;          // allocated in the peak's iteration and freed sooner
  uint64_t unaccounted = 0;        // alive from an earlier iteration but none of the above
};

struct DeviceInfo {
  std::string kind;  // "cpu" | "cuda"
  std::string name;
  std::optional<uint64_t> total_memory;
  std::optional<std::string> capability;  // "9.0"
  std::optional<std::string> driver;      // CUDA driver API version, "13.0"
  std::optional<std::string> cuda;        // CUDA runtime version
  std::string torch;                      // LibTorch version the harness was built with
};

struct Measurement {
  std::string status = "ok";  // "ok" | "oom"
  std::string error;          // the out-of-memory message when status == "oom"
  DeviceInfo device;
  Peaks peaks;                                  // maxima over all iterations
  std::optional<uint64_t> context_bytes;        // CUDA: device used - reserved after init
  std::optional<uint64_t> context_after_bytes;  // CUDA: the same after the last iteration
  std::vector<IterationStats> iterations;
  int peak_iteration = 0;
  Phase peak_phase = Phase::kUnknown;
  std::string peak_node;
  PeakAttribution at_peak;             // CPU only
  uint64_t parameter_bytes = 0;        // measured at creation
  uint64_t buffer_bytes = 0;           // running statistics and graph constants
  uint64_t input_bytes = 0;            // data inputs and loss targets
  uint64_t gradient_bytes = 0;         // sum of .grad nbytes after the last backward
  uint64_t optimizer_state_bytes = 0;  // after the last step
  std::vector<TraceEvent> trace;       // CPU, with keep_trace
  double seconds = 0;
};

// Runs `plan`. Errors: InvalidArgument (iterations < 1, bad options), Unavailable (CUDA asked for
// and not usable), Unsupported (an op or a precision this harness cannot run: the message names
// the op and the node), Internal (LibTorch failed inside a node: the message names it). Running
// out of memory is not an error: the Measurement says status "oom".
Result<Measurement> Execute(const Plan& plan, const ExecuteOptions& options);

// The first node of `plan` whose op the harness cannot run, as an Unsupported status naming the
// op and the node; OK when every op is covered.
Status CheckSupported(const Plan& plan);

// Every ONNX op type the harness runs, sorted.
std::vector<std::string> MeasuredOpTypes();

// Whether this build has CUDA support and a usable GPU.
bool CudaUsable();

// LibTorch version the harness was built with, e.g. "1.13.0".
std::string TorchVersion();

}  // namespace memest::measurement

#endif  // MEMEST_MEASUREMENT_EXECUTOR_H_
