// memest/gpu_profile.h -- GPU profiles, kept as data (base/gpu_profiles.json, compiled in).
//
// A GPU profile is the hardware: capacity, compute capability, and what PyTorch derives from the
// compute capability alone (the cuBLAS workspace size). What the software on the GPU costs (CUDA
// context, library memory, convolution workspaces) is a stack profile (memest/stack.h).
//
// Every value carries its provenance: a measurement (with its committed data file), a citation,
// or "uncalibrated". Profiles are immutable; the table is built once, thread-safe to read.
#ifndef MEMEST_GPU_PROFILE_H_
#define MEMEST_GPU_PROFILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memest/status.h"

namespace memest {

struct ProfileValue {
  uint64_t bytes = 0;
  std::string source;       // where the number comes from (data file, citation)
  bool calibrated = false;  // true only when measured on this GPU model by memest's harness
};

struct GpuProfile {
  std::string name;          // "h100-80gb"
  std::string display_name;  // "NVIDIA H100 80GB HBM3"
  int sm_major = 0;
  int sm_minor = 0;
  std::string sm_source;  // where the compute capability comes from
  ProfileValue
      total_memory;  // cudaMemGetInfo total (= torch.cuda.get_device_properties().total_memory)
  ProfileValue usable_memory;  // the capacity a job may fill (device-level peak must stay <= this)
  ProfileValue
      cublas_workspace;  // one cuBLAS workspace (per thread/stream), from the caching allocator
  std::string allocator = "native";  // "native" (CUDACachingAllocator) or "cudaMallocAsync"
  // A MIG slice (GPU instance) of another profile's GPU: the parent profile's name and the MIG
  // profile ("3g.40gb"); both empty for a whole GPU. A slice's capacity is the instance memory
  // nvidia-smi reports for it (docs/gpu-profiles.md, MIG slices).
  std::string mig_parent;
  std::string mig_profile;
  bool is_mig() const { return !mig_profile.empty(); }
};

// All profiles, in a stable order.
const std::vector<GpuProfile>& GpuProfiles();
// Case-insensitive lookup by name; NotFound lists the known names.
Result<GpuProfile> FindGpuProfile(std::string_view name);

// The profile of a device as CUDA names it (torch.cuda.get_device_name(), nvidia-smi's name, a
// measured row's device.name): the profile whose display name matches, ignoring case; else,
// for a whole GPU of a family the table knows ("NVIDIA A100-SXM4-80GB-something"), that
// family's profile. A MIG device ("... MIG 1g.18gb") matches only its own slice profile, never its
// parent GPU. NotFound when nothing matches.
[[nodiscard]] Result<GpuProfile> FindGpuProfileForDevice(std::string_view device_name);

// GPU profiles given at run time, for a GPU the built-in table lacks (Options::custom_gpu): a
// document in the built-in table's format ("memest-gpu-profiles/1", docs/gpu-profiles.md), every
// byte value with its source. InvalidArgument naming the field for anything malformed; NotFound
// for a missing file; files above 1 MiB are refused.
[[nodiscard]] Result<std::vector<GpuProfile>> ParseGpuProfiles(std::string_view json);
[[nodiscard]] Result<std::vector<GpuProfile>> LoadGpuProfiles(const std::string& path);

// `profiles` as a document in the table's own format ("memest-gpu-profiles/1", the format
// ParseGpuProfiles and --gpu-file read): the writer of that reader, so a listed profile can be
// saved, edited and given back.
std::string GpuProfilesToJson(const std::vector<GpuProfile>& profiles);

// `profile` with its total and usable memory set to `bytes` (a MIG slice or a capacity the
// scheduler imposes), the source saying so.
GpuProfile WithCapacity(GpuProfile profile, uint64_t bytes);

}  // namespace memest

#endif  // MEMEST_GPU_PROFILE_H_
