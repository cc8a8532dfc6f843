#include "learned/learned.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>

#include "base/checked.h"
#include "learned/mlp.h"

namespace memest::learned {

extern const char kShippedWeightsJson[];  // learned_weights_data.cc (learned/CMakeLists.txt)

namespace {

constexpr size_t kMaxListed = 6;  // features/ops named in the extrapolation warning

class Learned final : public Estimator {
 public:
  explicit Learned(Network network) : network_(std::move(network)) {}
  explicit Learned(Status unavailable) : unavailable_(std::move(unavailable)) {}

  std::string_view name() const override { return "learned"; }

  // Trained on runs with PyTorch's default allocator settings: it cannot say what another
  // setting does to its correction.
  OptionSupport supports() const override {
    OptionSupport s;
    s.allocator_settings = false;
    // Trained on features computed with the default stack (docs/learned.md): under another
    // stack its correction would be applied twice.
    s.stacks = false;
    // Its features count every parameter as trained (docs/learned.md).
    s.trainable_set = false;
    // Nor were its training runs quantized or 8-bit: it would correct what it never saw.
    s.low_bit_storage = false;
    s.parallelism = false;      // trained on single-GPU runs
    s.kv_cache = false;         // trained on training steps (GPUMemNet's MLPs)
    s.dropped_outputs = false;  // its features hold the outputs
    s.prefill = false;          // nor a prefill before a step
    return s;
  }

  Result<Estimate> EstimateIn(const memory::EstimationContext& ctx) const override {
    if (!unavailable_.ok()) return unavailable_;
    MEMEST_ASSIGN_OR_RETURN(Features features, ComputeFeatures(ctx));
    return EstimateFromFeatures(network_, features);
  }

 private:
  Network network_;
  Status unavailable_;
};

// Why the features leave the training domain ("" when they do not).
std::string OutsideDomain(const Network& net, const Features& f) {
  std::vector<std::string> reasons;
  for (const std::string& op : f.facts.op_types) {
    if (std::find(net.known_ops.begin(), net.known_ops.end(), op) == net.known_ops.end()) {
      reasons.push_back("op " + op);
    }
  }
  for (size_t i = 0; i < net.features() && i < f.values.size(); ++i) {
    const double lo = net.feature_min[i], hi = net.feature_max[i];
    const double slack = 0.05 * (hi - lo);
    if (f.values[i] < lo - slack || f.values[i] > hi + slack) {
      reasons.push_back(net.feature_names[i]);
    }
  }
  if (reasons.empty()) return "";
  std::string out;
  for (size_t i = 0; i < reasons.size() && i < kMaxListed; ++i) {
    out += (i ? ", " : "") + reasons[i];
  }
  if (reasons.size() > kMaxListed) {
    out += " and " + std::to_string(reasons.size() - kMaxListed) + " more";
  }
  return out;
}

}  // namespace

std::string_view ShippedWeightsJson() { return kShippedWeightsJson; }

uint64_t BytesFromLog(double log_bytes) {
  if (std::isnan(log_bytes) || log_bytes <= 0.0) return 1;
  const double bytes = std::ceil(std::exp(log_bytes));
  // 2^64 as a double; anything at or above saturates.
  if (!(bytes < 18446744073709551616.0)) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(bytes);
}

Result<Network> ParseWeights(std::string_view json) {
  if (json.empty()) return Unavailable("no trained weights were shipped (learned/weights.json)");
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("learned weights: not valid JSON");
  MEMEST_ASSIGN_OR_RETURN(Network net, NetworkFromJson(j));
  const std::vector<std::string> names = FeatureNames();
  if (net.feature_names != names) {
    return InvalidArgument(
        "learned weights: feature list differs from this build's (learned/features.cc); "
        "retrain with memest-train");
  }
  const std::vector<FeatureSpec>& specs = FeatureSpecs();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (net.monotone[i] != specs[i].monotone) {
      return InvalidArgument("learned weights: monotone flag of " + names[i] + " differs");
    }
  }
  return net;
}

std::unique_ptr<Estimator> MakeLearnedEstimator() {
  auto net = ParseWeights(ShippedWeightsJson());
  if (!net.ok()) {
    return std::make_unique<Learned>(Unavailable("learned backend: " + net.status().message()));
  }
  return std::make_unique<Learned>(std::move(net).value());
}

std::unique_ptr<Estimator> MakeLearnedEstimatorWith(Network network) {
  return std::make_unique<Learned>(std::move(network));
}

Prediction Predict(const Network& network, const Features& features) {
  Prediction p;
  p.member_logs = network.Predict(features.values);
  double sum = 0.0, lo = std::numeric_limits<double>::infinity(),
         hi = -std::numeric_limits<double>::infinity();
  for (double l : p.member_logs) {
    sum += l;
    lo = std::min(lo, l);
    hi = std::max(hi, l);
  }
  p.mean_log = sum / static_cast<double>(p.member_logs.size());
  p.point = BytesFromLog(p.mean_log);
  p.low = BytesFromLog(lo - network.margin_below);
  p.high = BytesFromLog(hi + network.margin_above);
  return p;
}

Estimate EstimateFromFeatures(const Network& network, const Features& features) {
  const Prediction p = Predict(network, features);
  Estimate e = features.symbolic;
  e.backend = "learned";
  const uint64_t base = features.symbolic.peak_device;
  e.peak_device = std::max(base, p.point);
  e.breakdown.unaccounted = base::SatAdd(e.breakdown.unaccounted, e.peak_device - base);
  e.peak_device = e.breakdown.Total();
  e.device_low = std::min(std::max(base, p.low), e.peak_device);
  e.device_high = std::max(std::max(base, p.high), e.peak_device);
  e.diagnostics.push_back({Severity::kInfo, "learned_correction",
                           "learned ensemble of " + std::to_string(p.member_logs.size()) +
                               " over the symbolic estimate: +" +
                               std::to_string(e.peak_device - base) +
                               " bytes in unaccounted (interval " + std::to_string(*e.device_low) +
                               " .. " + std::to_string(*e.device_high) + ")",
                           "", ""});
  const std::string outside = OutsideDomain(network, features);
  if (!outside.empty()) {
    e.diagnostics.push_back(
        {Severity::kWarning, "extrapolating",
         "trained on MLPs only (GPUMemNet: A100-40GB, Adam, fp32 training); outside the "
         "training range: " +
             outside,
         "", ""});
  }
  return e;
}

}  // namespace memest::learned
