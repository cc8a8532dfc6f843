// memest/estimate.h -- the one result struct every backend returns.
//
// Three levels of truth (see docs and docs/memory-model.md §1.8 / §2.2):
//   peak_allocated: torch.cuda.max_memory_allocated() -- tensor blocks, 512-byte rounded;
//   peak_reserved:  torch.cuda.max_memory_reserved()  -- caching-allocator segments;
//   peak_device:    what nvidia-smi shows for the process = CUDA context + reserved + library
//                   memory outside the allocator (memory/device.h).
// The breakdown describes the moment of the device-level peak and always sums to peak_device.
// That moment is often the optimizer step, when activations are already freed; `largest` (where a
// backend simulates the step) says how large each category grew at any moment of the step.
#ifndef MEMEST_ESTIMATE_H_
#define MEMEST_ESTIMATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memest {

struct Breakdown {
  uint64_t weights = 0;            // parameters (+ buffers), in their storage dtype
  uint64_t gradients = 0;          // .grad of parameters alive at the peak
  uint64_t optimizer_state = 0;    // exp_avg / exp_avg_sq / momentum buffers
  uint64_t saved_activations = 0;  // tensors autograd keeps for backward (+ the input batch)
  uint64_t transient = 0;  // short-lived tensors, optimizer temporaries, cuBLAS/cuDNN workspaces
  uint64_t allocator_overhead = 0;  // allocated - requested bytes: block rounding (512 B, split
                                    // remainders too small to split off)
  uint64_t cached_free = 0;         // reserved - allocated bytes: segment memory the caching
                                    // allocator holds in free blocks (freed tensors, slack)
  uint64_t cuda_context = 0;        // the CUDA context (from the stack profile, memest/stack.h)
  uint64_t library_memory = 0;      // cuBLAS/cuDNN handles and lazily loaded kernels, outside the
                                    // caching allocator (from the stack profile)
  uint64_t unaccounted = 0;  // measured but not explained (measurement backend); 0 for models
  // Many GPUs (Options::parallel): the buffers collectives work in, inside the caching allocator
  // (DDP gradient buckets, parameters ZeRO-3/FSDP gathered for the units in flight and their
  // unsharded gradients before the reduce-scatter); and NCCL's own buffers, which NCCL allocates
  // outside the caching allocator (per communicator, memory/parallel.h). 0 on one GPU.
  uint64_t collective_buffers = 0;
  uint64_t nccl_buffers = 0;

  // Saturating sum of all fields.
  uint64_t Total() const;
};

enum class Phase { kUnknown, kForward, kBackward, kOptimizerStep, kInference };
const char* ToString(Phase p);

// The largest one category of memory grew to, and when it first did.
struct CategoryPeak {
  uint64_t bytes = 0;
  Phase phase = Phase::kUnknown;
  int iteration = 0;  // 1-based iteration of the simulated run; 0 when before the first
  std::string node;   // node running at that moment; empty when none (weights, step)
};

// The largest of each breakdown category over the simulated run (every iteration), each taken at
// its own moment; the fields do not add up to anything.
struct CategoryMaxima {
  CategoryPeak weights, gradients, optimizer_state, saved_activations, transient, cached_free;
};

enum class Severity { kInfo, kWarning };

struct Diagnostic {
  Severity severity = Severity::kInfo;
  std::string code;     // stable short tag, e.g. "unknown_op", "eval_mode_export"
  std::string message;  // human sentence
  std::string node;     // node name, when about a node
  std::string op_type;  // op type, when about a node
};

// Many GPUs (Options::parallel): one group of ranks that hold the same memory -- the ranks of
// one pipeline stage (tensor- and data-parallel ranks of a stage are alike).
struct RankPeak {
  int64_t first_rank = 0;  // ranks first_rank..last_rank (Megatron order, memest/options.h)
  int64_t last_rank = 0;
  int stage = 0;      // pipeline stage, 0-based
  int layers = 0;     // the graph's repeated blocks on this stage
  int in_flight = 1;  // micro-batches whose activations the stage holds (1F1B)
  uint64_t peak_device = 0;
  Breakdown breakdown;
  Phase peak_phase = Phase::kUnknown;
  std::string peak_node;
  uint64_t host_bytes = 0;  // offloaded to host memory (optimizer state, parameters)
  std::string note;         // what sets these ranks apart ("first stage: embedding", ...)
};

// One phase of a training step at its own peak, for a backend that accounts the phases apart:
// what the estimate's peak fields and breakdown would read were this phase the largest.
struct PhasePeak {
  Phase phase = Phase::kUnknown;
  uint64_t peak_allocated = 0;
  uint64_t peak_reserved = 0;
  uint64_t peak_device = 0;  // == breakdown.Total()
  Breakdown breakdown;
};

struct Estimate {
  std::string backend;
  uint64_t peak_allocated = 0;
  uint64_t peak_reserved = 0;
  uint64_t peak_device = 0;  // == breakdown.Total()
  Breakdown breakdown;
  Phase peak_phase = Phase::kUnknown;
  std::string peak_node;  // node at (or just before) the peak; empty if not known
  // Per-category maxima over the step; set by backends that replay the step (symbolic).
  std::optional<CategoryMaxima> largest;
  // Training by the analytical backend: the forward and backward's peak (kBackward) and the
  // optimizer step's (kOptimizerStep), in that order, then under DDP the wrap's (kUnknown: before
  // the first iteration, the weights and two of DDP's broadcast buffers); the peak fields above
  // are the one with the largest reserved bytes (of those that reserve the same, the first with
  // the most allocated). Below the batch where activations outgrow the optimizer step, the step
  // is the peak, and the backward's entry is what still says how the peak grows with the batch.
  // Many GPUs: the worst stage's (that of the fields above). Empty for every other backend and
  // for inference.
  std::vector<PhasePeak> phases;
  // Interval on peak_device: the learned backend's own, else the stack's residual band
  // measured on held-out rows (memory/device.h); unset when neither exists.
  std::optional<uint64_t> device_low;
  std::optional<uint64_t> device_high;
  std::vector<Diagnostic> diagnostics;
  // Many GPUs: every group of ranks, by stage; the fields above are the worst group's (the one
  // with the largest peak_device). Empty on one GPU.
  std::vector<RankPeak> ranks;
  uint64_t host_bytes = 0;  // the worst rank's bytes offloaded to host memory
};

}  // namespace memest

#endif  // MEMEST_ESTIMATE_H_
