// measurement/measurement.h -- the `measurement` backend: ground truth by running the graph.
//
// Run() builds a Plan (measurement/plan.h), executes two training iterations (or inference
// passes) with LibTorch (measurement/executor.h) and reports what was measured:
//  * On CUDA: peak_allocated / peak_reserved from the caching allocator, peak_device from
//    cudaMemGetInfo; the breakdown holds the measured parameter/buffer and optimizer-state
//    bytes, reserved - allocated as allocator overhead, the measured context, and the rest as
//    `unaccounted` (CUDA has no per-block attribution).
//  * On CPU (no usable GPU): peak_allocated = peak_reserved = peak_device = the tracked tensor
//    peak (sum of nbytes); the breakdown is the attribution of the blocks live at that peak
//    (executor.h PeakAttribution), with nothing invented for context or allocator segments.
//    A diagnostic says so.
// The GPU profile in options.gpu is validated (NotFound for an unknown name) but never used:
// the numbers are what this machine measured.
//
// Thread safety: Run() is const and may be called from many threads; the runs themselves are
// serialized process-wide (executor.h).
#ifndef MEMEST_MEASUREMENT_MEASUREMENT_H_
#define MEMEST_MEASUREMENT_MEASUREMENT_H_

#include <memory>

#include "memest/estimator.h"

namespace memest::measurement {

std::unique_ptr<Estimator> MakeMeasurementEstimator();

// Makes "measurement" available through ListBackends()/MakeEstimator() in this process
// (memest/estimator.h, RegisterMeasurementFactory). Idempotent.
void RegisterMeasurementBackend();

}  // namespace memest::measurement

#endif  // MEMEST_MEASUREMENT_MEASUREMENT_H_
