// memest/pack.h -- colocation: do these jobs fit on one GPU together, and how do N jobs go onto M
// GPUs, as a scheduler places them.
//
// Policy (docs/embedding.md, Colocation):
//  * Each job is estimated alone (its own Options, the one GPU profile given); its device-level
//    peak includes its own CUDA context and library memory, because every process has them.
//  * Jobs sharing a GPU are judged on the sum of their device peaks: their peaks need not coincide,
//    so the sum is an upper bound, which is what an admission decision that must never cause an
//    out-of-memory error needs. Under NVIDIA MPS the clients share one server context: the
//    CUDA context is counted once instead of once per job.
//  * Fit: sum + margin <= usable memory, the margin and the point-or-upper choice taken from the
//    FitPolicy (as CheckFit in memest/estimator.h); each job's judged peak is its device_high when
//    judging the upper end of an interval, else its peak_device.
//  * Placement: first-fit decreasing (jobs by judged peak, largest first, each onto the first GPU
//    with room) and best-fit decreasing (onto the GPU with the least room left that still fits);
//    PlaceJobs returns whichever leaves fewer jobs unplaced, then uses fewer GPUs, then is
//    first-fit. Jobs that fit on no GPU alone or in what is left are listed as unplaced.
#ifndef MEMEST_PACK_H_
#define MEMEST_PACK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memest/estimator.h"
#include "memest/gpu_profile.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest {

struct PackJob {
  std::string name;                    // how the job is reported ("a.onnx:batch=32")
  std::shared_ptr<const Model> model;  // loaded with LoadModel()
  Options options;                     // its GPU fields are ignored: the pack's GPU counts
};

enum class GpuSharing { kProcesses, kMps };

struct PackedJob {
  std::string name;
  uint64_t judged = 0;  // the bytes the job counts for (see the policy)
  Estimate estimate;
};

struct Colocation {
  bool fits = false;
  uint64_t capacity = 0;  // the GPU's usable memory
  uint64_t margin = 0;    // kept free by the fit policy
  uint64_t total = 0;     // what the jobs need together
  int64_t headroom = 0;   // capacity - margin - total (negative: over by that much)
  std::vector<PackedJob> jobs;
};

// Whether `jobs` fit on one `gpu` together. Errors of any job's estimate are returned with the
// job's name as context.
[[nodiscard]] Result<Colocation> CheckColocation(const Estimator& estimator,
                                                 const std::vector<PackJob>& jobs,
                                                 const GpuProfile& gpu, GpuSharing sharing,
                                                 const FitPolicy& policy = {});

struct Placement {
  std::string heuristic;                  // "first-fit-decreasing" or "best-fit-decreasing"
  std::vector<std::vector<size_t>> gpus;  // per GPU: indices into the jobs, in placing order
  std::vector<uint64_t> used;             // per GPU: bytes the placed jobs need together
  std::vector<size_t> unplaced;           // jobs no GPU could take
  std::vector<PackedJob> jobs;            // every job's estimate, in the order given
};

// Places `jobs` on `gpu_count` GPUs of profile `gpu` (policy above). InvalidArgument for
// gpu_count < 1 or above 1,048,576.
[[nodiscard]] Result<Placement> PlaceJobs(const Estimator& estimator,
                                          const std::vector<PackJob>& jobs, const GpuProfile& gpu,
                                          int64_t gpu_count, GpuSharing sharing,
                                          const FitPolicy& policy = {});

// The results as JSON ("memest.pack/1", docs/embedding.md): gpu, capacity, sharing, then for a
// colocation jobs [{name, judged}], total, margin, headroom, fits; for a placement heuristic,
// gpus [{gpu, jobs, used}], unplaced [names], fits (nothing unplaced).
std::string ColocationToJson(const Colocation& c, const GpuProfile& gpu, GpuSharing sharing);
std::string PlacementToJson(const Placement& p, const GpuProfile& gpu, GpuSharing sharing);

}  // namespace memest

#endif  // MEMEST_PACK_H_
