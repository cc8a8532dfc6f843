// memory/category.cc -- see memory/category.h.
#include "memory/category.h"

namespace memest::memory {

const char* ToString(Category c) {
  switch (c) {
    case Category::kWeights:
      return "weights";
    case Category::kGradients:
      return "gradients";
    case Category::kOptimizerState:
      return "optimizer_state";
    case Category::kActivations:
      return "activations";
    case Category::kTransient:
      return "transient";
    case Category::kCollective:
      return "collective_buffers";
  }
  return "?";
}

}  // namespace memest::memory
