// memory/category.h -- what a tensor is for: the one list of categories that the symbolic
// simulation labels each allocation with and the measurement harness attributes its measured
// peak with, so that the two breakdowns (Estimate::breakdown, a measured row's at_peak) split
// bytes the same way.
#ifndef MEMEST_MEMORY_CATEGORY_H_
#define MEMEST_MEMORY_CATEGORY_H_

#include <cstdint>

namespace memest::memory {

enum class Category : uint8_t {
  kWeights,         // parameters, buffers, autocast weight copies
  kGradients,       // .grad of parameters
  kOptimizerState,  // exp_avg, exp_avg_sq, momentum buffers
  kActivations,     // input batch and forward tensors kept for backward
  kTransient,       // everything short-lived: unsaved outputs, activation gradients, loss,
                    // optimizer temporaries, cuBLAS workspaces
  kCollective,      // many GPUs: DDP buckets, parameters gathered for a unit and its unsharded
                    // gradients (memory/parallel.h)
};
inline constexpr int kNumCategories = 6;

// "weights", "gradients", "optimizer_state", "activations", "transient", "collective_buffers"
// (the category column of --timeline's CSV).
const char* ToString(Category c);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_CATEGORY_H_
