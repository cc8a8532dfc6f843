// learned/learned.h -- the learned backend: an MLP ensemble (learned/mlp.h) over features
// (learned/features.h) that corrects the symbolic estimate at device level (docs/learned.md).
//
// Weights: learned/weights.json, written by memest-train and compiled into the library
// (learned/CMakeLists.txt), so the library never reads files at run time.
//
// Estimate policy (Run):
//   * x = ComputeFeatures(model, options); each ensemble member m predicts L_m = log(bytes).
//   * point P = exp(mean_m L_m) (rounded up to a byte); interval [exp(min_m L_m - margin_below),
//     exp(max_m L_m + margin_above)], the margins calibrated by the trainer on out-of-group rows.
//   * peak_device = max(symbolic peak_device, P); device_low and device_high are clamped the same
//     way, so device_low <= peak_device <= device_high. The network is monotone in every feature
//     that grows with batch / train vs infer / optimizer state, and so is the symbolic estimate,
//     hence so is the learned one.
//   * peak_allocated, peak_reserved, the breakdown, peak_phase and peak_node are the symbolic
//     backend's, unscaled: the training data (GPUMemNet) holds device-level peaks only, so the
//     network says nothing about the levels below. The learned correction, peak_device minus the
//     symbolic peak_device, goes to breakdown.unaccounted ("measured but not explained by the
//     simulation": mostly CUDA context, library memory and allocator reserve the GPU profile
//     does not capture), so the breakdown sums to peak_device.
//   * A warning, code "extrapolating", message "trained on MLPs only (...); outside the training
//     range: <ops and features>", is added when the model or options leave the training domain
//     (an op type absent from the training graphs, or a feature more than 5 % of its training
//     range outside that range).
//
// Thread safety: the estimator is immutable; Run() is const and may be called concurrently.
#ifndef MEMEST_LEARNED_LEARNED_H_
#define MEMEST_LEARNED_LEARNED_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "learned/features.h"
#include "memest/estimator.h"

namespace memest::learned {

struct Network;  // learned/mlp.h

// The weights compiled into the library ("" when none were shipped).
std::string_view ShippedWeightsJson();

// The learned backend with the shipped weights. If they are missing or do not parse, Run()
// returns Unavailable with the reason.
std::unique_ptr<Estimator> MakeLearnedEstimator();

// Parses a weights file (JSON text) and checks its feature names against FeatureSpecs().
Result<Network> ParseWeights(std::string_view json);

// The learned backend over `network` (memest-train evaluates candidate weights with it).
std::unique_ptr<Estimator> MakeLearnedEstimatorWith(Network network);

// What the network says for one feature vector, before the symbolic clamp.
struct Prediction {
  std::vector<double> member_logs;  // log(bytes) per member
  double mean_log = 0.0;
  uint64_t point = 0, low = 0, high = 0;  // bytes
};
Prediction Predict(const Network& network, const Features& features);

// The learned Estimate from features computed with ComputeFeatures (the policy above).
Estimate EstimateFromFeatures(const Network& network, const Features& features);

// exp(log_bytes) rounded up to a whole byte, saturated to [0, UINT64_MAX].
uint64_t BytesFromLog(double log_bytes);

}  // namespace memest::learned

#endif  // MEMEST_LEARNED_LEARNED_H_
