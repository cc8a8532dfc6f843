// learned/mlp.h -- a small partially monotone MLP ensemble, trained with Adam (Eigen).
//
// One member maps a feature vector x (learned/features.h) to log(device bytes):
//
//   z   = (x - mean) * scale                      scale = 1/std, or 0 for a constant feature
//   out = c + sum_j v_j tanh(b_j + sum_i W_ji z_i) + sum_i u_i z_i
//   log(bytes) = y_mean + y_scale * out
//
// with v >= 0, W_ji >= 0 and u_i >= 0 for every monotone feature i. tanh is increasing, so the
// output is non-decreasing in every monotone feature, whatever the free features are (the
// constraints are kept by projection after each Adam step). The skip term u lets the network
// extrapolate linearly in log space where tanh saturates.
//
// Training (Train): features and target standardized on the training rows (all members share
// the normalization); each member has its own seed, its own training and validation rows (group
// splits chosen by the caller) and stops early on its validation loss (mean squared error of the
// standardized target), keeping its best epoch. Deterministic for a seed: a SplitMix64 generator
// (Rng) drives initialization and shuffling with memest's own mapping from bits to numbers (no
// std:: distributions, whose output differs between standard libraries).
//
// Inference (Network::PredictMember) uses plain loops in a fixed order, so a prediction is
// bit-for-bit reproducible from the weights file. Thread safety: a Network is immutable after
// creation; Predict* are const.
#ifndef MEMEST_LEARNED_MLP_H_
#define MEMEST_LEARNED_MLP_H_

#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "memest/status.h"

namespace memest::learned {

// SplitMix64 (public-domain constants); the mapping to doubles and bounded ints is memest's.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, 1): the top 53 bits of Next() times 2^-53.
  double Uniform();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n), n >= 1 (rejection sampling, no modulo bias).
  uint64_t Below(uint64_t n);
  // Fisher-Yates shuffle.
  template <typename T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[Below(i)]);
  }

 private:
  uint64_t state_;
};

struct Member {
  Eigen::MatrixXd w;  // hidden x features
  Eigen::VectorXd b;  // hidden
  Eigen::VectorXd v;  // hidden, >= 0
  Eigen::VectorXd u;  // features, >= 0 on monotone features
  double c = 0.0;
  // Training record.
  uint64_t seed = 0;
  int epochs = 0;                                  // epochs run
  int best_epoch = 0;                              // epoch whose weights were kept (1-based)
  double train_loss = 0.0, validation_loss = 0.0;  // at best_epoch, standardized MSE
};

struct Network {
  std::vector<std::string> feature_names;
  std::vector<bool> monotone;
  Eigen::VectorXd mean, scale;  // per feature
  double y_mean = 0.0, y_scale = 1.0;
  std::vector<Member> members;
  // Interval margins in log space (learned/learned.h, calibrated by the trainer): the interval
  // is [min_m - below, max_m + above] over the members' log predictions.
  double margin_below = 0.0, margin_above = 0.0;
  // Training domain: per-feature range of the training rows, and the op types they contain.
  std::vector<double> feature_min, feature_max;
  std::vector<std::string> known_ops;

  size_t features() const { return feature_names.size(); }
  // log(bytes) predicted by member `m` (plain loops, fixed order).
  double PredictMember(size_t m, std::span<const double> x) const;
  // Every member's log(bytes).
  std::vector<double> Predict(std::span<const double> x) const;
};

struct TrainConfig {
  int hidden = 16;
  int batch_size = 64;
  double learning_rate = 3e-3;
  double weight_decay = 1e-4;  // L2 on W, v, u (not on biases)
  int max_epochs = 300;
  int patience = 30;  // epochs without a better validation loss before stopping
  uint64_t seed = 1;
};

// Rows are samples.
struct Dataset {
  Eigen::MatrixXd x;
  Eigen::VectorXd y;  // log(bytes)
};

// The rows one member trains on and validates on (indices into the Dataset).
struct MemberSplit {
  std::vector<int> train, validation;
};

// One split per member, by group: member m shuffles `groups` with Rng(seed * 7919 + m) and
// validates on the `rows` whose group (group_of(row)) is among the first `validation_groups` of
// that order; the other rows train it. Rows keep their order on both sides.
std::vector<MemberSplit> GroupMemberSplits(const std::vector<int>& rows,
                                           const std::function<const std::string&(int)>& group_of,
                                           const std::vector<std::string>& groups,
                                           size_t validation_groups, int members, uint64_t seed);

// Trains one member per split. `normalize_rows` are the rows the normalization is fitted on
// (usually the union of the members' rows). Member m uses seed config.seed * 1000003 + m.
// InvalidArgument for empty splits, mismatched sizes or non-finite data.
Result<Network> Train(const Dataset& data, const std::vector<MemberSplit>& splits,
                      const std::vector<int>& normalize_rows,
                      const std::vector<std::string>& feature_names,
                      const std::vector<bool>& monotone, const TrainConfig& config);

// Mean squared error of member `m` on rows, in log(bytes) units squared.
double MeanSquaredError(const Network& net, size_t m, const Dataset& data,
                        const std::vector<int>& rows);

// JSON round trip of every field above (doubles are written so that they read back exactly).
nlohmann::json ToJson(const Network& net);
Result<Network> NetworkFromJson(const nlohmann::json& j);

}  // namespace memest::learned

#endif  // MEMEST_LEARNED_MLP_H_
