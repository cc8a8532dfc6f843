// symbolic/symbolic.cc -- the symbolic backend: the simulated step, on a GPU of limited memory.
//
// Policy (docs/memory-model.md §1.5):
//  * The step is simulated without a limit first. When it reserves at most what the caching
//    allocator can have on the GPU (memory::AllocatorBudget), PyTorch never meets a failed
//    cudaMalloc, and that simulation is the estimate.
//  * Otherwise the step is simulated again within the budget. When a new segment would pass it,
//    the allocator model frees its cached segments and retries, as
//    c10/cuda/CUDACachingAllocator.cpp does before it raises OutOfMemoryError.
//    - A step that then stays within the budget is the estimate, noted `allocator_retries`:
//      each retry synchronizes the device and frees segments, so the steps are slower.
//    - A step that still runs out keeps the unlimited simulation's peaks (what it would need;
//      more than the budget, so it does not fit), noted `out_of_memory` with the request that
//      failed.
//  * The limited simulation departs from the unlimited one only at the first request past the
//    budget, so a step that fits without retries is simulated once, and the budget is not part
//    of its key: GPUs that simulate alike share it (symbolic/simulation_key.h).
#include "symbolic/symbolic.h"

#include <new>
#include <string>

#include "memory/context.h"
#include "memory/device.h"

namespace memest::symbolic {
namespace {

// Simulations a bound graph keeps (core/derived_cache.h), each a few KB: a scheduler's queries
// of one batch over 8 option sets on GPUs of 2 kinds (ResNet-50: the H100, and the A100s, L4 and
// V100, which share a cuBLAS workspace) ask for 16; the graph keeps twice that.
constexpr size_t kSimulationsKept = 32;

uint64_t Budget(const memory::EstimationContext& ctx) {
  const uint64_t nccl =
      ctx.options().parallel.enabled() ? memory::NcclBufferBytes(ctx.parallel()) : 0;
  return memory::AllocatorBudget(ctx.options(), ctx.gpu(), ctx.stack(), nccl);
}

std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// What a step simulated within `budget` is noted with (policy above).
Diagnostic BudgetNote(const BudgetOutcome& outcome, uint64_t budget) {
  if (outcome.ran_out) {
    const CategoryPeak& at = outcome.ran_out_at;
    return {Severity::kInfo, "out_of_memory",
            "a request of " + MiB(at.bytes) + " in " + memest::ToString(at.phase) +
                " of iteration " + std::to_string(at.iteration) +
                " fails even after the caching allocator frees its cached segments (it may "
                "reserve " +
                MiB(budget) +
                "): PyTorch raises OutOfMemoryError there; the peaks shown are the step's "
                "without the limit",
            at.node, ""};
  }
  return {Severity::kInfo, "allocator_retries",
          "the step stays within the " + MiB(budget) +
              " the caching allocator may reserve only because it frees its cached segments "
              "when a cudaMalloc fails and retries (" +
              std::to_string(outcome.retries) +
              " times; each synchronizes the device: slower steps)",
          "", ""};
}

// The step within the budget, given the unlimited one (policy above).
void Settle(Simulation limited, uint64_t budget, Simulation* step) {
  const Diagnostic note = BudgetNote(limited.budget, budget);
  if (!limited.budget.ran_out) *step = std::move(limited);
  step->estimate.diagnostics.push_back(note);
}

class Symbolic final : public Estimator {
 public:
  std::string_view name() const override { return "symbolic"; }
  // The simulation's estimate, shared by every query on the same bound graph with an equal
  // SimulationKey (symbolic/simulation_key.h): another GPU with the same cuBLAS workspace and
  // kernel choices, another fit policy. An error is kept too: it is what the same inputs give.
  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override {
    SimulationKey key = SimulationKey::Of(ctx);
    const auto unlimited = Kept(ctx, key, nullptr);
    if (!unlimited->ok()) return *unlimited;
    const uint64_t budget = Budget(ctx);
    if ((*unlimited)->peak_reserved <= budget) return *unlimited;
    key.allocator_budget = budget;
    return *Kept(ctx, key, &**unlimited);
  }

 private:
  // The estimate under `key`, simulated unless the bound graph keeps it. `unlimited`: the step
  // without a limit, when `key` has a budget.
  static std::shared_ptr<const Result<Estimate>> Kept(const memory::EstimationContext& ctx,
                                                      const SimulationKey& key,
                                                      const Estimate* unlimited) {
    return ctx.bound().derived.GetOrMake<Result<Estimate>>(
        key, /*values=*/1,
        [&ctx, unlimited](const SimulationKey& k) {
          Result<Simulation> sim = Simulate(ctx, k, /*record_events=*/false);
          if (sim.ok() && unlimited != nullptr) {
            Simulation step;
            step.estimate = *unlimited;
            Settle(std::move(sim).value(), k.allocator_budget, &step);
            sim = std::move(step);
          }
          return std::make_shared<const Result<Estimate>>(
              sim.ok() ? Result<Estimate>(std::move(sim->estimate))
                       : Result<Estimate>(sim.status()));
        },
        kSimulationsKept);
  }
};

}  // namespace

std::unique_ptr<Estimator> MakeSymbolicEstimator() { return std::make_unique<Symbolic>(); }

Result<Simulation> SimulateModel(const Model& model, const Options& options, bool record_events) {
  try {
    MEMEST_RETURN_IF_ERROR(Validate(options));
    MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<memory::EstimationContext> ctx,
                            memory::EstimationContext::Make(model, options));
    // Pipeline stages: the rank of the stage with the highest device peak (the estimate's).
    int worst = 0;
    uint64_t worst_peak = 0;
    for (int s = 0; ctx->parallel().stages() > 1 && s < ctx->parallel().stages(); ++s) {
      ctx->set_stage(s);
      MEMEST_ASSIGN_OR_RETURN(Simulation probe, Simulate(*ctx, /*record_events=*/false));
      if (probe.estimate.peak_device > worst_peak) {
        worst = s;
        worst_peak = probe.estimate.peak_device;
      }
    }
    ctx->set_stage(worst);
    SimulationKey key = SimulationKey::Of(*ctx);
    MEMEST_ASSIGN_OR_RETURN(Simulation sim, Simulate(*ctx, key, record_events));
    if (const uint64_t budget = Budget(*ctx); sim.estimate.peak_reserved > budget) {
      key.allocator_budget = budget;
      MEMEST_ASSIGN_OR_RETURN(Simulation limited, Simulate(*ctx, key, record_events));
      Settle(std::move(limited), budget, &sim);
    }
    memory::AddCommonDiagnostics(*ctx, &sim.estimate);
    return sim;
  } catch (const std::bad_alloc&) {
    return Internal("symbolic: out of memory while simulating");
  } catch (const std::exception& e) {
    return Internal(std::string("symbolic: unexpected error: ") + e.what());
  }
}

}  // namespace memest::symbolic
