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

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "base/checked.h"
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

// The sizes of the tensors the optimizer creates for one parameter: at most kMost, kept inline
// (the estimates ask once per parameter, and a heap vector each was a fifth of the mallocs of
// an analytical estimate of a 100,000-node graph). Sizes past kMost are dropped; no optimizer
// memest models makes more than four.
class StateTensorSizes {
 public:
  static constexpr size_t kMost = 4;
  StateTensorSizes(std::initializer_list<uint64_t> sizes) {
    for (uint64_t s : sizes) {
      if (count_ < kMost) bytes_[count_++] = s;
    }
  }
  StateTensorSizes(size_t count, uint64_t each) : count_(std::min(count, kMost)) {
    std::fill_n(bytes_.begin(), count_, each);
  }
  const uint64_t* begin() const { return bytes_.data(); }
  const uint64_t* end() const { return bytes_.data() + count_; }
  size_t size() const { return count_; }

 private:
  std::array<uint64_t, kMost> bytes_{};
  size_t count_ = 0;
};

// The tensors the optimizer creates for one trainable parameter of `elements` elements stored in
// `bytes` bytes, in creation order (each is its own allocation).
inline StateTensorSizes StateTensorBytes(Optimizer o, uint64_t elements, uint64_t bytes) {
  const int k = StateTensorsPerParameter(o);
  if (!IsEightBit(o)) return StateTensorSizes(static_cast<size_t>(k), bytes);
  if (elements < kMin8bitElements) return {base::SatMul(elements, 4), base::SatMul(elements, 4)};
  const uint64_t blocks = elements / kEightBitBlock + (elements % kEightBitBlock ? 1 : 0);
  return {elements, elements, base::SatMul(blocks, 4), base::SatMul(blocks, 4)};
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

// The temporaries one optimizer step makes (§4.3), over the parameters it updates -- each
// parameter tensor, or under ZeRO/FSDP the rank's flat shard (memory/parallel.h):
//  * foreach (torch.optim's default on CUDA): parameter-sized lists, one temporary per parameter,
//    made one after another: L2 weight decay's copy of the gradients (`device_grads =
//    torch._foreach_add(...)`, deleted with `del device_grads` once the moments are updated), then
//    Adam's `torch._foreach_sqrt(exp_avg_sqs)`. Each list is freed before the next is made, so
//    the step's peak holds one list.
//  * single-tensor: one parameter at a time, the L2 copy and Adam's sqrt and quotient alive
//    together.
//  * fused, bitsandbytes' kernels and DeepSpeed's ZeRO step (one kernel over the flat
//    partition): none.
struct StepTemporaries {
  int lists = 0;          // foreach: lists made in turn
  int per_parameter = 0;  // single-tensor: parameter-sized temporaries alive at once
};

// Whether the step updates the rank's flat ZeRO/FSDP shard rather than each parameter.
inline bool StepsAFlatShard(const Options& o) {
  const Sharding s = o.parallel.sharding;
  return o.parallel.enabled() && s != Sharding::kNone && s != Sharding::kFsdpNoShard;
}

inline StepTemporaries StepTemporariesFor(const Options& o) {
  const bool l2 = WeightDecayIsL2(o), adam = HasSecondMoment(o.optimizer);
  if (o.optimizer_impl == OptimizerImpl::kFused) return {};
  if (StepsAFlatShard(o)) {  // DeepSpeed: one kernel; FSDP: foreach over the shard
    return IsZero(o.parallel.sharding) ? StepTemporaries{} : StepTemporaries{adam + l2, 0};
  }
  if (o.optimizer_impl == OptimizerImpl::kSingleTensor) return {0, 2 * adam + l2};
  return {adam + l2, 0};
}

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_OPTIMIZER_H_
