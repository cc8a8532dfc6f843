// memory/optimizer.h -- what torch.optim keeps and adds per parameter (docs/memory-model.md
// §4.2-4.3), stated once: the analytical backend counts it, the symbolic backend replays it.
#ifndef MEMEST_MEMORY_OPTIMIZER_H_
#define MEMEST_MEMORY_OPTIMIZER_H_

#include "memest/options.h"

namespace memest::memory {

// Parameter-sized state tensors per parameter, created lazily at the first step (§4.2): SGD
// none, momentum its momentum_buffer, Adam and AdamW exp_avg and exp_avg_sq.
constexpr int StateTensorsPerParameter(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd:
      return 0;
    case Optimizer::kMomentum:
      return 1;
    case Optimizer::kAdam:
    case Optimizer::kAdamW:
      return 2;
  }
  return 2;  // an unknown optimizer is counted like the largest
}

// Adam's family: the step's sqrt/quotient temporaries over the second moment (§4.3).
constexpr bool HasSecondMoment(Optimizer o) {
  return o == Optimizer::kAdam || o == Optimizer::kAdamW;
}

// Weight decay added to the gradient (L2: a gradient-sized temporary in the step, §4.3) rather
// than decoupled and in place (AdamW).
constexpr bool WeightDecayIsL2(const Options& o) {
  return o.weight_decay > 0 && o.optimizer != Optimizer::kAdamW;
}

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_OPTIMIZER_H_
