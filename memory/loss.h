// memory/loss.h -- what the loss on the model's first output keeps and makes (docs/memory-model.md
// §3.2), stated once: the analytical backend counts it, the symbolic backend replays it.
//
// Options::loss picks the loss; kAuto is cross-entropy when the output's last dim is > 1 (class
// logits [N, C], or [N, T, V] flattened as a language model's loss), else mean squared error.
//  * Cross-entropy (F.cross_entropy = log_softmax + nll_loss) keeps the log-probabilities for
//    backward and reads int64 class targets, one per row. The log-probs are fp32 under autocast
//    (log_softmax and nll_loss are on its fp32 list) and the logits' dtype otherwise: bf16 in a
//    model cast to bf16 (log_softmax returns its input's dtype). Its backward makes
//    NllLossBackward's dense gradient of the log-probs (their dtype), then LogSoftmaxBackward's
//    gradient of the logits while the first is still alive.
//  * MSE reads a target the size of the output; its backward makes one gradient the size of
//    the output.
// Under tensor parallelism the log-probs of a vocabulary-parallel head are split like the logits
// (Megatron-LM's vocab_parallel_cross_entropy).
#ifndef MEMEST_MEMORY_LOSS_H_
#define MEMEST_MEMORY_LOSS_H_

#include <cstdint>

#include "core/bind.h"
#include "memest/options.h"
#include "ops/value_facts.h"

namespace memest::memory {

struct LossTensors {
  bool cross_entropy = false;
  uint64_t log_probs = 0;    // cross-entropy: the log-probs kept for backward (0 for MSE)
  uint64_t targets = 0;      // int64 class indices, or the MSE target
  uint64_t output_grad = 0;  // the gradient of the output the loss backward makes

  // The loss backward's tensors alive at once: the log-probs' gradient beside the output's
  // (cross-entropy), or the output's gradient alone (MSE).
  uint64_t BackwardPeak() const { return cross_entropy ? log_probs + output_grad : output_grad; }
};

// The loss tensors of a training step whose loss reads graph value `output`.
[[nodiscard]] LossTensors LossTensorsFor(const core::BoundGraph& bound,
                                         const ops::ValueFacts& facts, const Options& options,
                                         int output);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_LOSS_H_
