#include "symbolic/symbolic.h"

#include <new>

#include "memory/context.h"

namespace memest::symbolic {
namespace {

class Symbolic final : public Estimator {
 public:
  std::string_view name() const override { return "symbolic"; }
  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override {
    MEMEST_ASSIGN_OR_RETURN(Simulation sim, Simulate(ctx, /*record_events=*/false));
    return std::move(sim.estimate);
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
