// memory/trainable.h -- which parameters train: Options::trainable and Options::freeze.
//
// Policy:
//  * The loader's parameters (core/loader.cc: float initializers that feed a node as a weight)
//    are the candidates; the two regular expressions (POSIX extended, searched in the name, as
//    grep -E does) pick the trainable ones. glibc matches them without backtracking, so no
//    expression can make an estimate hang. Both empty: every parameter trains, as before.
//  * A frozen parameter keeps its weights on the device but gets no gradient and no optimizer
//    state; requires_grad then flows only from the trainable ones (ops::RequiresGrad), so a frozen
//    prefix saves nothing for backward and a MatMul whose weight is frozen keeps only what the
//    input's gradient needs.
//  * Names longer than kMaxMatchedName are never matched (a bound on the work per name); such a
//    parameter keeps its default.
//  * An invalid expression is InvalidArgument naming the option (memest::Validate checks it
//    first), and so is one that matches no parameter name (a typo must not be a silent no-op).
//    Expressions that leave nothing to train (--freeze .) are allowed (a forward-and-backward of
//    frozen weights is a real job) but reported by a warning (memory/context.cc).
#ifndef MEMEST_MEMORY_TRAINABLE_H_
#define MEMEST_MEMORY_TRAINABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/graph.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::memory {

inline constexpr size_t kMaxMatchedName = 1024;

struct TrainableSet {
  std::vector<bool> trainable;  // per value id
  int parameters = 0;           // the loader's parameter tensors
  int trained = 0;              // of which train under the options
  uint64_t parameter_elements = 0;
  uint64_t trained_elements = 0;
};

// The trainable parameters of `graph` under options.trainable / options.freeze.
[[nodiscard]] Result<TrainableSet> SelectTrainable(const core::Graph& graph,
                                                   const Options& options);

}  // namespace memest::memory

#endif  // MEMEST_MEMORY_TRAINABLE_H_
