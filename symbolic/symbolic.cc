// symbolic/symbolic.cc -- the symbolic backend: the simulated step, on a GPU of limited memory.
//
// Policy (docs/memory-model.md §1.5):
//  * The step is simulated within what the caching allocator can have on the GPU
//    (memory::AllocatorBudget). When a new segment would pass it, the allocator model frees its
//    cached segments and retries, as c10/cuda/CUDACachingAllocator.cpp does before it raises
//    OutOfMemoryError.
//    - A step that never met the limit is the step without one: PyTorch never sees a failed
//      cudaMalloc. It is also kept as the unlimited simulation, which a GPU with another budget
//      reuses when the step stays within its budget too (symbolic/simulation_key.h).
//    - A step that stays within the budget only through the release is the estimate, noted
//      `allocator_retries`: each retry synchronizes the device and frees segments (slower
//      steps).
//    - A step that still runs out is simulated again without the limit, and that is the
//      estimate (what it would need; more than the budget, so it does not fit), noted
//      `out_of_memory` with the request that failed.
//  * The limited simulation departs from the unlimited one only at the first request past the
//    budget, so the two agree wherever the step stays within it.
//  * A decode step after its prefill (Options::prefill) reports the step's peaks, reset after the
//    prefill. Where the cache is emptied between them, those peaks can stay within the budget
//    while the prefill's did not, so an unlimited step within the budget says nothing of the
//    limited one: it is always simulated within the budget. And where that runs out while the
//    unlimited step's reserved peak stays within the budget, the unlimited prefill went past it
//    (the two runs are the same until one meets the budget; it ran out in the prefill, or in the
//    step where the prefill's retries left other segments) -- and it is the prefill's peaks,
//    simulated alone, that say what the process would need, noted `prefill_out_of_memory`: it
//    does not fit. A timeline (SimulateModel) draws the same simulation the estimate shows.
#include "symbolic/symbolic.h"

#include <limits>
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

std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// Whose peaks the estimate of a step that ran out shows: the step's without the limit, or the
// prefill's before it (policy above).
enum class Shown { kStep, kPrefill };

// What a step simulated within `budget` is noted with (policy above).
Diagnostic BudgetNote(const BudgetOutcome& outcome, uint64_t budget, Shown shown) {
  if (outcome.ran_out) {
    const CategoryPeak& at = outcome.ran_out_at;
    return {Severity::kInfo, "out_of_memory",
            "a request of " + MiB(at.bytes) + " in " + memest::ToString(at.phase) +
                " of iteration " + std::to_string(at.iteration) +
                " fails even after the caching allocator frees its cached segments (it may "
                "reserve " +
                MiB(budget) + "): PyTorch raises OutOfMemoryError there; the peaks shown are " +
                (shown == Shown::kPrefill ? "the prefill's" : "the step's") + " without the limit",
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

// The step within `budget` (policy above): the limited simulation becomes *step unless it ran
// out, when *step must hold the unlimited one (`shown`'s); a step that met the budget is noted.
void Settle(Simulation limited, uint64_t budget, Simulation* step, Shown shown = Shown::kStep) {
  const bool met = limited.budget.met_limit();
  const Diagnostic note = BudgetNote(limited.budget, budget, shown);
  if (!limited.budget.ran_out) *step = std::move(limited);
  if (met) step->estimate.diagnostics.push_back(note);
}

// A step that ran out within `budget`, whose unlimited simulation is *unlimited: where that stays
// within the budget -- a decode step whose peaks were reset after a prefill that emptied the
// cache, the prefill past the budget (policy above) -- *unlimited becomes the prefill's own
// simulation without the limit, noted. Says whose peaks *unlimited shows.
Result<Shown> ShowWhatRanOut(const memory::EstimationContext& ctx, uint64_t budget,
                             bool record_events, Simulation* unlimited) {
  if (ctx.prefill() == nullptr || unlimited->estimate.peak_reserved > budget) return Shown::kStep;
  MEMEST_ASSIGN_OR_RETURN(*unlimited, SimulatePrefill(ctx, record_events));
  unlimited->estimate.diagnostics.push_back(
      {Severity::kInfo, "prefill_out_of_memory",
       "the prefill before the step reserves more than the " + MiB(budget) +
           " the caching allocator may reserve, and the process runs out of memory (in the "
           "prefill, or in the step where the prefill's retries left other segments) while the "
           "step's own peaks, reset after the prefill with the cache emptied, stay within: the "
           "peaks shown are the prefill's without the limit",
       "", ""});
  return Shown::kPrefill;
}

class Symbolic final : public Estimator {
 public:
  std::string_view name() const override { return "symbolic"; }
  // The step within the GPU's budget (policy above). Every simulation is kept by the bound
  // graph for the next query with an equal SimulationKey (symbolic/simulation_key.h): another GPU
  // with the same cuBLAS workspace and kernel choices, another fit policy. An error is kept too:
  // it is what the same inputs give.
  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override {
    const SimulationKey unlimited = SimulationKey::Of(ctx);
    const uint64_t budget = StepBudget(ctx);
    const core::DerivedCache& kept = ctx.bound().derived;
    // A kept unlimited step answers when it stays within this budget (or failed) -- unless its
    // peaks were reset after a prefill whose cache was emptied (policy above).
    const bool peaks_hide_prefill = ctx.options().prefill && ctx.options().prefill->cache_emptied;
    auto free_run = kept.Find<Result<Estimate>>(unlimited);
    if (free_run != nullptr &&
        (!free_run->ok() || ((*free_run)->peak_reserved <= budget && !peaks_hide_prefill))) {
      return *free_run;
    }
    SimulationKey limited = unlimited;
    limited.allocator_budget = budget;
    if (auto step = kept.Find<Result<Estimate>>(limited)) return *step;
    Result<Simulation> sim = Simulate(ctx, limited, /*record_events=*/false);
    if (!sim.ok()) return *Keep(ctx, unlimited, Result<Estimate>(sim.status()));
    if (!sim->budget.met_limit()) {
      return *Keep(ctx, unlimited, Result<Estimate>(std::move(sim->estimate)));
    }
    Simulation step;
    if (sim->budget.ran_out) {
      if (free_run == nullptr) {
        Result<Simulation> s = Simulate(ctx, unlimited, /*record_events=*/false);
        free_run =
            Keep(ctx, unlimited,
                 s.ok() ? Result<Estimate>(std::move(s->estimate)) : Result<Estimate>(s.status()));
      }
      if (!free_run->ok()) return *free_run;
      step.estimate = **free_run;
    }
    Shown shown = Shown::kStep;
    if (sim->budget.ran_out) {
      MEMEST_ASSIGN_OR_RETURN(shown, ShowWhatRanOut(ctx, budget, /*record_events=*/false, &step));
    }
    Settle(std::move(sim).value(), budget, &step, shown);
    return *Keep(ctx, limited, Result<Estimate>(std::move(step.estimate)));
  }

 private:
  // `estimate` kept by the bound graph under `key` (or what another thread kept there first).
  static std::shared_ptr<const Result<Estimate>> Keep(const memory::EstimationContext& ctx,
                                                      const SimulationKey& key,
                                                      Result<Estimate> estimate) {
    return ctx.bound().derived.GetOrMake<Result<Estimate>>(
        key, /*values=*/1,
        [&estimate](const SimulationKey&) {
          return std::make_shared<const Result<Estimate>>(std::move(estimate));
        },
        kSimulationsKept);
  }
};

}  // namespace

std::unique_ptr<Estimator> MakeSymbolicEstimator() { return std::make_unique<Symbolic>(); }

uint64_t StepBudget(const memory::EstimationContext& ctx) {
  const uint64_t nccl =
      ctx.options().parallel.enabled() ? memory::NcclBufferBytes(ctx.parallel()) : 0;
  return memory::AllocatorBudget(ctx.options(), ctx.gpu(), ctx.stack(), nccl);
}

namespace {

// The estimate of the step simulated within its budget by `simulate(key)`, a run followed.
template <typename Simulate>
Result<Estimate> FollowedWithinBudget(const memory::EstimationContext& ctx, Simulate simulate) {
  SimulationKey limited = SimulationKey::Of(ctx);
  const uint64_t budget = StepBudget(ctx);
  limited.allocator_budget = budget;
  MEMEST_ASSIGN_OR_RETURN(Simulation sim, simulate(limited));
  // As EstimateIn: a step that met the budget (retries; it did not run out) is noted so.
  Simulation step;
  Settle(std::move(sim), budget, &step);
  return std::move(step.estimate);
}

}  // namespace

Result<Estimate> EstimateFollowing(const memory::EstimationContext& ctx, const AllocatorRun& run) {
  return FollowedWithinBudget(ctx,
                              [&](const SimulationKey& key) { return Simulate(ctx, key, run); });
}

Result<Estimate> EstimateFromTrace(const memory::EstimationContext& ctx, const StepTrace& first,
                                   const std::vector<uint64_t>& first_shape,
                                   const AllocatorRun& run) {
  return FollowedWithinBudget(ctx, [&](const SimulationKey& key) {
    return SimulateFromTrace(ctx, key, run, first, first_shape);
  });
}

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
    const uint64_t budget = StepBudget(*ctx);
    key.allocator_budget = budget;
    MEMEST_ASSIGN_OR_RETURN(Simulation limited, Simulate(*ctx, key, record_events));
    Simulation sim;
    Shown shown = Shown::kStep;
    if (limited.budget.ran_out) {
      key.allocator_budget = std::numeric_limits<uint64_t>::max();
      MEMEST_ASSIGN_OR_RETURN(sim, Simulate(*ctx, key, record_events));
      MEMEST_ASSIGN_OR_RETURN(shown, ShowWhatRanOut(*ctx, budget, record_events, &sim));
    }
    Settle(std::move(limited), budget, &sim, shown);
    memory::AddCommonDiagnostics(*ctx, &sim.estimate);
    return sim;
  } catch (const std::bad_alloc&) {
    return Internal("symbolic: out of memory while simulating");
  } catch (const std::exception& e) {
    return Internal(std::string("symbolic: unexpected error: ") + e.what());
  }
}

}  // namespace memest::symbolic
