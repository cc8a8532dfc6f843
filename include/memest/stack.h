// memest/stack.h -- the software stack on a GPU, kept apart from the GPU itself.
//
// A GPU profile (memest/gpu_profile.h) says what the hardware is: capacity, compute capability.
// A stack profile says what the software on it costs at device level, beyond the tensors the
// backends simulate: the CUDA context (lazy or eager module loading), the memory cuBLAS and cuDNN
// take outside PyTorch's allocator (handles, lazily loaded kernels), the cuDNN convolution
// workspaces allocated through the allocator for each call, and how far the device-level
// estimate is known to miss (a residual band measured on rows not used to fit it).
//
// Stacks ship compiled in (base/stacks.json; `memest --list-gpus` lists them); a user's own
// file, written by `memest calibrate`, is loaded at run time with LoadStackProfile() (validated;
// a bad file is an error naming the field, never a crash). docs/stacks.md describes the schema
// and the calibration recipe; every value carries its source.
//
// Stacks are immutable values; the compiled-in table is built once and is thread-safe to read.
#ifndef MEMEST_STACK_H_
#define MEMEST_STACK_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "memest/gpu_profile.h"
#include "memest/status.h"

namespace memest {

// A dimensionless coefficient with its provenance (ProfileValue is for bytes).
struct StackCoefficient {
  double value = 0.0;
  std::string source;
  bool calibrated = false;  // fitted by `memest calibrate` on measured rows
};

// The relative residual band of one backend's peak_device: measured / predicted - 1 lies in
// [low, high] on the share `coverage` of `rows` rows that were not used to fit the stack.
// device_low/high of an estimate are peak_device * (1 + low) and peak_device * (1 + high).
struct ResidualBand {
  double low = 0.0;
  double high = 0.0;
  double coverage = 0.0;  // measured share of held-out rows inside [low, high]; 0 = no data
  int rows = 0;           // held-out rows the band was measured on
  std::string source;
};

// Another GPU the same software stack was measured on, with the same fixed costs as on the
// stack's own `gpu` (a replicate of its measurements, not a second calibration).
struct StackReplicate {
  std::string gpu;  // a GPU profile name ("h100-80gb")
  std::string source;
};

struct StackProfile {
  std::string name;          // "pytorch2-lazy"
  std::string display_name;  // one line for --list-gpus
  // The GPU profile this stack was calibrated on ("a100-40gb"); empty: any GPU.
  std::string gpu;
  // Other GPU profiles its measurements were repeated on with the same results; an estimate for
  // one of them is not warned about (stack_gpu_mismatch). Optional in the file.
  std::vector<StackReplicate> also_measured_on;
  // True when the stack holds for `gpu_name`: made for any GPU, calibrated on it, or measured
  // again on it (also_measured_on).
  [[nodiscard]] bool HoldsOn(std::string_view gpu_name) const {
    if (gpu.empty() || gpu == gpu_name) return true;
    for (const StackReplicate& r : also_measured_on) {
      if (r.gpu == gpu_name) return true;
    }
    return false;
  }
  // Software versions and settings as known ("pytorch": "2.4", "cuda": "12.4", "cudnn": "9",
  // "cudnn_benchmark": "false", ...); free text, for provenance and --list-gpus.
  std::map<std::string, std::string> software;
  bool lazy_loading = true;  // CUDA_MODULE_LOADING=LAZY (PyTorch >= 1.13 sets it)
  // The CUDA context right after creation, lazy or eager per `lazy_loading`.
  ProfileValue cuda_context;
  // Memory cuBLAS/cuDNN and their lazily loaded kernels take outside PyTorch's allocator after
  // one training step: device level minus context minus reserved.
  ProfileValue library_memory;
  // cuDNN convolution workspace of one call (forward, data gradient or weight gradient), allocated
  // through the caching allocator for the call and freed after it (memory-model.md §2.5). The rule
  // is memory::ConvWorkspaceRule (memory/device.h): a multiple of the call's input + output +
  // weight bytes, with one coefficient per kind of convolution. 0: none.
  //   conv_workspace: spatial convolutions (a kernel larger than 1 in some dimension, not
  //     depthwise), grouped ones included;
  //   conv_workspace_pointwise: pointwise (every kernel dimension 1) and depthwise (one input
  //     channel per group) convolutions.
  StackCoefficient conv_workspace;
  StackCoefficient conv_workspace_pointwise;
  // What a spatial convolution's weight-gradient call takes beyond that rule, in bytes: its
  // workspace is the rule's plus this (memory::ConvWorkspaceRule). A few MiB where measured,
  // whatever the batch, so the call never fits the block the same layer's forward call freed:
  // the caching allocator reserves a new segment for it. Added only where the rule gives a
  // workspace (a coefficient above 0). Optional in the file (absent: 0).
  ProfileValue conv_weight_gradient_extra;
  // cuDNN workspace of one recurrent-layer call (an LSTM/GRU/RNN forward, or its backward),
  // allocated for the call and freed after it (memory-model.md §2.6). The rule is
  // memory::RecurrentWorkspaceRule (memory/device.h): a multiple of the layer's output bytes,
  // with hidden sizes below 256 counted as 256. 0: none. Optional in the file (absent: 0).
  StackCoefficient rnn_workspace;
  // The residual band of each backend it was measured for ("symbolic", "analytical"); empty: no
  // interval. A backend without a band here gives no interval under this stack.
  std::map<std::string, ResidualBand> bands;
  // The band of `backend`, or nullptr.
  const ResidualBand* band(std::string_view backend) const {
    auto it = bands.find(std::string(backend));
    return it == bands.end() ? nullptr : &it->second;
  }
  // How the stack was fitted (`memest calibrate`): rows, row hashes, date, residual summary.
  // Free-form JSON text; empty for stacks written by hand.
  std::string calibration_json;
};

// The compiled-in stacks, in a stable order. The first is the default: current PyTorch with lazy
// module loading, every value cited, not fitted to anyone's measurements. A calibrated stack is
// never chosen implicitly: it describes one measured setup (its `software`), so the user names it.
const std::vector<StackProfile>& StackProfiles();
// Case-insensitive lookup by name; NotFound lists the known names.
Result<StackProfile> FindStackProfile(std::string_view name);
// The stack `name`, or the default stack (the first) when `name` is empty.
Result<StackProfile> ResolveStack(std::string_view name);

// Parses a stack file (format memest-stack/2, as `memest calibrate` writes it). InvalidArgument
// names the field at fault. A memest-stack/1 file (one `conv_workspace` coefficient times the
// larger of a call's input and output, for every convolution) is read when that coefficient is 0,
// which means the same under both formats (both coefficients 0, same source); a non-zero one has
// no exact equivalent and is refused with an error that says to run `memest calibrate` again.
Result<StackProfile> ParseStackProfile(std::string_view json_text, const std::string& where);
Result<StackProfile> LoadStackProfile(const std::string& path);
// The JSON text of a stack (format memest-stack/2); ParseStackProfile reads it back unchanged.
std::string StackProfileToJson(const StackProfile& stack);

}  // namespace memest

#endif  // MEMEST_STACK_H_
