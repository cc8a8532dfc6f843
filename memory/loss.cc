#include "memory/loss.h"

#include "base/checked.h"

namespace memest::memory {

LossTensors LossTensorsFor(const core::BoundGraph& bound, const ops::ValueFacts& facts,
                           const Options& options, int output) {
  LossTensors t;
  const auto& shape = bound.shapes[static_cast<size_t>(output)];
  const bool classes = shape && shape->size() >= 2 && shape->back() > 1;
  t.cross_entropy = options.loss == Loss::kCrossEntropy || (options.loss == Loss::kAuto && classes);
  t.output_grad = facts.bytes(output);
  if (t.cross_entropy && shape && !shape->empty() && shape->back() > 0) {
    const bool autocast =
        options.precision == Precision::kAmpFp16 || options.precision == Precision::kAmpBf16;
    const uint64_t numel = bound.Numel(output).value_or(0);
    t.log_probs = autocast ? facts.Share(output, base::SatMul(numel, 4)) : facts.bytes(output);
    t.targets = base::SatMul(numel / static_cast<uint64_t>(shape->back()), 8);
  } else {
    t.cross_entropy = false;
    t.targets = facts.bytes(output);
  }
  return t;
}

}  // namespace memest::memory
