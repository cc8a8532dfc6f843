// tools/train_device.h -- memest-train --device-truth: the learned correction over the symbolic
// backend under a calibrated stack, trained and scored on device-level truth of many model families
// (docs/learned.md, "Device-level residual over a calibrated stack").
//
// Data: the timm A100-40GB rows (datasets/timm-a100/jobs.csv), our H200 rows
// (datasets/h200-torch211/jobs.csv) and a deterministic subsample of GPUMemNet's MLP rows. Every
// row is estimated by the symbolic backend under its dataset's base stack with no library memory
// and each convolution-workspace coefficient of the calibration grid (api/calibrate.cc's table).
//
// Target: log(measured) - log(symbolic peak_device under the calibrated stack): what the symbolic
// backend with a calibrated stack cannot know. Features carry across families: the shares of that
// estimate (weights, gradients, optimizer state, saved activations, transient, allocator cache,
// context, library), its size, the batch, the op-class mix, the GPU's size and the stack's
// constants; never a model or family name.
//
// Scoring: leave one family out. For each timm family F, every dataset's stack is fitted (memest
// calibrate's fit: median library memory, trimmed-mean workspace coefficient) on that dataset's
// rows outside F, the network is trained on the rows outside F (both GPUs; GPUMemNet rows are never
// scored), and F's rows are predicted. The symbolic baseline on the same rows is the fold's stack
// alone, which is exactly memest calibrate's held-out figure (docs/accuracy-device.md).
// Deterministic for a seed. It writes no weights: held out, the residual did not beat the
// symbolic backend on every measure (docs/learned.md has the numbers), so the learned backend keeps
// its GPUMemNet weights.
#ifndef MEMEST_TOOLS_TRAIN_DEVICE_H_
#define MEMEST_TOOLS_TRAIN_DEVICE_H_

#include <cstdint>
#include <string>

#include "learned/mlp.h"

namespace memest {

struct DeviceTrainArgs {
  std::string root = ".";
  std::string report;       // also write the report here
  std::string predictions;  // per-row held-out predictions (CSV) here
  uint64_t seed = 1;
  int members = 5;
  int gpumemnet_stride = 10;  // every Nth GPUMemNet row (0: none)
  learned::TrainConfig config;
};

// Runs the leave-one-family-out evaluation and prints the report. Exit codes as memest-train's.
int RunDeviceTraining(const DeviceTrainArgs& args);

}  // namespace memest

#endif  // MEMEST_TOOLS_TRAIN_DEVICE_H_
