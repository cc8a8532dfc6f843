#include "symbolic/symbolic.h"

#include <new>

#include "memory/context.h"

namespace memest::symbolic {
namespace {

// Simulations a bound graph keeps (core/derived_cache.h), each a few KB: a scheduler's queries
// of one batch over 8 option sets on GPUs of 2 kinds (ResNet-50: the H100, and the A100s, L4 and
// V100, which share a cuBLAS workspace) ask for 16; the graph keeps twice that.
constexpr size_t kSimulationsKept = 32;

class Symbolic final : public Estimator {
 public:
  std::string_view name() const override { return "symbolic"; }
  // The simulation's estimate, shared by every query on the same bound graph with an equal
  // SimulationKey (symbolic/simulation_key.h): another GPU with the same cuBLAS workspace and
  // kernel choices, another fit policy. An error is kept too: it is what the same inputs give.
  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override {
    const auto kept = ctx.bound().derived.GetOrMake<Result<Estimate>>(
        SimulationKey::Of(ctx), /*values=*/1,
        [&ctx](const SimulationKey& key) {
          Result<Simulation> sim = Simulate(ctx, key, /*record_events=*/false);
          return std::make_shared<const Result<Estimate>>(
              sim.ok() ? Result<Estimate>(std::move(sim->estimate))
                       : Result<Estimate>(sim.status()));
        },
        kSimulationsKept);
    return *kept;
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
    MEMEST_ASSIGN_OR_RETURN(Simulation sim, Simulate(*ctx, record_events));
    memory::AddCommonDiagnostics(*ctx, &sim.estimate);
    return sim;
  } catch (const std::bad_alloc&) {
    return Internal("symbolic: out of memory while simulating");
  } catch (const std::exception& e) {
    return Internal(std::string("symbolic: unexpected error: ") + e.what());
  }
}

}  // namespace memest::symbolic
