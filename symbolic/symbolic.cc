#include "symbolic/symbolic.h"

#include "core/bind.h"

namespace memest::symbolic {
namespace {

class Symbolic final : public Estimator {
 public:
  std::string_view name() const override { return "symbolic"; }
  Result<Estimate> Run(const Model& model, const Options& options) const override {
    MEMEST_ASSIGN_OR_RETURN(Simulation sim, SimulateModel(model, options, false));
    return std::move(sim.estimate);
  }
};

}  // namespace

std::unique_ptr<Estimator> MakeSymbolicEstimator() { return std::make_unique<Symbolic>(); }

Result<Simulation> SimulateModel(const Model& model, const Options& options, bool record_events) {
  try {
    MEMEST_ASSIGN_OR_RETURN(GpuProfile gpu, FindGpuProfile(options.gpu));
    MEMEST_ASSIGN_OR_RETURN(core::BoundGraph bound, core::Bind(model.graph(), options));
    return Simulate(bound, options, gpu, record_events);
  } catch (const std::exception& e) {
    return Internal(std::string("symbolic: unexpected error: ") + e.what());
  }
}

}  // namespace memest::symbolic
