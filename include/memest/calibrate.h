// memest/calibrate.h -- fitting a stack profile (memest/stack.h) to device-level measurements.
//
// A user measures 10-20 training jobs on their own cluster (nvidia-smi's per-process peak, or
// torch.cuda.max_memory_reserved() plus the context), and memest fits what its models cannot
// know about that software stack: the memory outside the allocator (library memory) and the
// cuDNN workspace coefficient of spatial convolutions (memest/stack.h conv_workspace). The
// pointwise/depthwise coefficient (conv_workspace_pointwise) is kept from the base stack: those
// workspaces are small where measured, and device-level rows cannot tell the two apart; so is
// the weight-gradient call's extra (conv_weight_gradient_extra), a few MiB per call.
// Everything else stays memest's simulation.
//
// The fit (api/calibrate.cc; docs/stacks.md has the recipe):
//  * For each spatial workspace coefficient c on a fixed grid, every job is estimated by the
//    symbolic backend with the base stack's CUDA context, no library memory and coefficient c. The
//    library memory is the median of (measured - estimated) over the jobs, at least 0 (robust to
//    a few bad rows); c is the grid value with the smallest mean relative error over the best
//    90 % of the jobs (a median would ignore the convolutional minority of a mixed set).
//  * Held out: the jobs are split into groups (their `group`: a model family, else the model),
//    and each group is predicted by a fit on the other groups only. Those held-out errors are
//    the figures reported, and the residual band is their 2.5 % and 97.5 % quantiles. The band's
//    coverage is measured the same way: each group against the band of the other groups. The
//    analytical backend is scored under the same folds and gets its own band.
//  * Refused, with a message naming the rows: fewer than 3 groups or 6 jobs; two jobs with the
//    same model and options whose measurements differ by more than 10 %; a truth level other
//    than device. Jobs the caller marks as excluded (censored: the GPU was full) are not fitted.
#ifndef MEMEST_CALIBRATE_H_
#define MEMEST_CALIBRATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memest/model.h"
#include "memest/options.h"
#include "memest/stack.h"
#include "memest/status.h"

namespace memest {

// One measured job: a model, the options it ran with, and its device-level peak.
struct MeasuredJob {
  std::string id;                      // stable id for provenance, e.g. "resnet50:64"
  std::string model_name;              // for messages and grouping
  std::string group;                   // held-out unit (family); empty: the model name
  std::shared_ptr<const Model> model;  // loaded
  Options options;                     // batch and knobs (gpu is set by the settings)
  uint64_t measured_bytes = 0;         // device level
};

struct CalibrationSettings {
  std::string name;  // of the stack written
  std::string display_name;
  std::string gpu;          // the GPU profile the jobs ran on
  StackProfile base;        // context, lazy loading and software to start from
  std::string data_source;  // where the rows came from (file name), for provenance
  // Values tried for the spatial coefficient (x input + output + weight bytes of a call).
  std::vector<double> conv_workspace_grid = {0, 0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8};
};

// A job's errors: relative error = predicted / measured - 1 (negative: under-estimate).
struct JobResidual {
  std::string id;
  std::string group;
  uint64_t measured = 0;
  uint64_t fitted = 0;    // predicted by the fit on every job
  uint64_t held_out = 0;  // predicted by the fit without the job's group
  double fitted_error = 0;
  double held_out_error = 0;
  bool inside_band = false;  // measured within the band fitted without the job's group
};

struct ErrorSummary {
  int rows = 0;
  double median_abs = 0;  // of |relative error|
  double p90_abs = 0;
  double under = 0;             // share of rows under-estimated
  double under_5pct = 0;        // share under-estimated by more than 5 %
  double upper_under_5pct = 0;  // share under-estimated by more than 5 % by the band's top
};

struct CalibrationResult {
  StackProfile stack;
  std::vector<JobResidual> jobs;
  ErrorSummary fitted;               // in sample
  ErrorSummary held_out;             // leave-one-group-out, symbolic backend
  ErrorSummary held_out_analytical;  // the same folds, analytical backend
  ErrorSummary base;                 // the base stack, unfitted (what the user had before)
  int groups = 0;
};

[[nodiscard]] Result<CalibrationResult> Calibrate(const std::vector<MeasuredJob>& jobs,
                                                  const CalibrationSettings& settings);

// Reads a plain CSV of measured jobs (docs/stacks.md): header with at least model, batch,
// measured_mib; optional family, truth (must be "device"), censored (1: excluded), mode,
// optimizer, optimizer_impl, precision. `model` is a path relative to the CSV's folder. Models
// are loaded once each. InvalidArgument names the line at fault.
[[nodiscard]] Result<std::vector<MeasuredJob>> ReadMeasuredJobsCsv(const std::string& path,
                                                                   int* excluded);

}  // namespace memest

#endif  // MEMEST_CALIBRATE_H_
