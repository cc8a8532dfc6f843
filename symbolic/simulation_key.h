// symbolic/simulation_key.h -- everything a simulation reads besides the bound graph, as one value
// compared field by field: the key under which a bound graph keeps a symbolic estimate
// (core/derived_cache.h) for the next query that would simulate the same step. A scheduler trying
// one job on several GPUs asks for the same simulation on every GPU with the same cuBLAS
// workspace and kernel choices (ResNet-50: the A100s, the L4 and the V100 share one).
//
// Policy:
//  * The simulation reads the options only through SimulationKey::options, a copy with the GPU
//    (gpu, custom_gpu), the fit policy and the memory fraction cleared: it cannot see them, so
//    queries that differ there alone share one simulation. What they decide for the simulation,
//    the allocator's budget, is a field of its own, unlimited unless the step needs more.
//  * Of the GPU it reads one figure, the cuBLAS workspace; the GPU also shapes the value facts
//    through its kernel choices (memory::KernelChoices). Both are in the key, the compute
//    capability only where the graph has an attention call: it picks nothing else
//    (ops/fusion.cc), so without one, GPUs of other generations share a simulation.
//  * The rest of the context -- the trainable set, the weights' storage, the KV cache, the
//    parallel plan, the stack -- is made from the graph and the options alone
//    (memory/context.cc EstimationContext::Make), and the value facts from those and the kernel
//    choices.
//  * == compares every field of Options; static_asserts on the options structs' sizes stop the
//    build when a field is added, until simulation_key.cc compares it too.
#ifndef MEMEST_SYMBOLIC_SIMULATION_KEY_H_
#define MEMEST_SYMBOLIC_SIMULATION_KEY_H_

#include <cstdint>
#include <limits>

#include "memest/options.h"
#include "memory/context.h"
#include "ops/fusion.h"

namespace memest::symbolic {

struct SimulationKey {
  Options options;  // gpu, custom_gpu and fit cleared
  ops::FusionChoices kernels;
  uint64_t cublas_workspace = 0;
  int stage = 0;
  // What the allocator may reserve before a request fails (memory::AllocatorBudget); unlimited in
  // the key Of() returns. The symbolic backend simulates under its GPU's budget and keeps a step
  // that never met it under the unlimited key, for GPUs with other budgets (symbolic/symbolic.cc).
  uint64_t allocator_budget = std::numeric_limits<uint64_t>::max();
  // Training iterations simulated: 0 (in the key Of() returns) for the loop until it repeats
  // itself (symbolic/timeline.h kMostIterations), else exactly so many.
  int iterations = 0;

  // The key of the simulation `ctx` asks for (at its current stage), without a budget.
  [[nodiscard]] static SimulationKey Of(const memory::EstimationContext& ctx);
  bool operator==(const SimulationKey& other) const;
};

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_SIMULATION_KEY_H_
