// memory/optimizer.h -- what the optimizer keeps and adds per parameter (docs/memory-model.md
// §4.2-4.3), stated once: the analytical backend counts it, the symbolic backend replays it.
//
// torch.optim (SGD, momentum, Adam, AdamW) keeps parameter-sized state tensors in the parameter's
// dtype. bitsandbytes' 8-bit Adam/AdamW (bitsandbytes/optim/optimizer.py, Optimizer2State
// init_state) keep, per parameter of n >= 4096 elements (min_8bit_size), two uint8 state tensors
// of n bytes and two fp32 block maxima of ceil(n / 2048) elements (block-wise quantization); a
// smaller parameter keeps two fp32 state tensors instead. The two 256-entry fp32 quantization maps
// are created once for the whole optimizer. Their update is one kernel per parameter, with the
// weight decay inside it: no parameter-sized temporaries (§4.3).
#ifndef MEMEST_MEMORY_OPTIMIZER_H_
#define MEMEST_MEMORY_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "core/checked.h"
#include "memest/options.h"

namespace memest::memory {

constexpr bool IsEightBit(Optimizer o) {
  return o == Optimizer::kAdam8bit || o == Optimizer::kAdamW8bit;
}

// State tensors per parameter, created lazily at the first step (§4.2): SGD none, momentum its
// momentum_buffer, the Adam family exp_avg and exp_avg_sq (bitsandbytes: state1 and state2).
constexpr int StateTensorsPerParameter(Optimizer o) {
  switch (o) {
    case Optimizer::kSgd:
      return 0;
    case Optimizer::kMomentum:
      return 1;
    case Optimizer::kAdam:
    case Optimizer::kAdamW:
    case Optimizer::kAdam8bit:
    case Optimizer::kAdamW8bit:
      return 2;
  }
  return 2;  // an unknown optimizer is counted like the largest
}

// bitsandbytes' thresholds and block size (Optimizer8bit defaults).
inline constexpr uint64_t kMin8bitElements = 4096;
inline constexpr uint64_t kEightBitBlock = 2048;
inline constexpr uint64_t kEightBitQuantMapBytes = 2 * 256 * 4;  // "dynamic" and "udynamic"

// The tensors the optimizer creates for one trainable parameter of `elements` elements stored in
// `bytes` bytes, in creation order (each is its own allocation).
inline std::vector<uint64_t> StateTensorBytes(Optimizer o, uint64_t elements, uint64_t bytes) {
  const int k = StateTensorsPerParameter(o);
  if (!IsEightBit(o)) return std::vector<uint64_t>(static_cast<size_t>(k), bytes);
  if (elements < kMin8bitElements) return {core::SatMul(elements, 4), core::SatMul(elements, 4)};
  const uint64_t blocks = elements / kEightBitBlock + (elements % kEightBitBlock ? 1 : 0);
  return {elements, elements, core::SatMul(blocks, 4), core::SatMul(blocks, 4)};
}

// Bytes the optimizer creates once, whatever the parameters (bitsandbytes' quantization maps).
constexpr uint64_t SharedStateBytes(Optimizer o) {
  return IsEightBit(o) ? kEightBitQuantMapBytes : 0;
}

// Adam's family in torch.optim: the step's sqrt/quotient temporaries over the second moment
// (§4.3). bitsandbytes' kernels make none.
constexpr bool HasSecondMoment(Optimizer o) {
  return o == Optimizer::kAdam || o == Optimizer::kAdamW;
}

// Weight decay added to the gradient (L2: a gradient-sized temporary in the step, §4.3) rather
// than decoupled and in place (AdamW) or inside a bitsandbytes kernel.
constexpr bool WeightDecayIsL2(const Options& o) {
  return o.weight_decay > 0 && o.optimizer != Optimizer::kAdamW && !IsEightBit(o.optimizer);
}

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_OPTIMIZER_H_
