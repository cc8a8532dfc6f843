#include "memest/estimate.h"

#include "base/checked.h"

namespace memest {

uint64_t Breakdown::Total() const {
  uint64_t t = 0;
  for (uint64_t v :
       {weights, gradients, optimizer_state, saved_activations, transient, allocator_overhead,
        cached_free, cuda_context, library_memory, unaccounted, collective_buffers, nccl_buffers}) {
    t = base::SatAdd(t, v);
  }
  return t;
}

const char* ToString(Phase p) {
  switch (p) {
    case Phase::kUnknown:
      return "unknown";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizerStep:
      return "optimizer_step";
    case Phase::kInference:
      return "inference";
  }
  return "unknown";
}

}  // namespace memest
