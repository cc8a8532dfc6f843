// learned/features.h -- the feature vector of the learned backend (docs/learned.md, Features).
//
// Computed from a loaded Model and Options through the shared layers every backend uses:
// core::Bind (concrete shapes at the bound dims), ops::ValueFacts (run-time bytes per value,
// precision aware), ops::SavedTensors (the per-op rule table), and the analytical and symbolic
// backends themselves (their estimates are features: the network learns a correction on top).
//
// Every feature is a double; byte and count features enter as log(1 + x) ("log1p") so that the
// network sees orders of magnitude. Features are either
//   * monotone: the network is constrained to be non-decreasing in them (learned/mlp.h). These
//     are exactly the features that grow with the batch, with train vs infer, or with the
//     optimizer's state: byte sizes at the bound batch, the two estimates, log1p(batch), the mode
//     and the optimizer's ordered encoding. Hence the learned estimate is non-decreasing in batch,
//     train >= infer and sgd <= momentum <= adam == adamw (the contract in contract_test.cc);
//   * free: everything that does not change with those options (graph shape, op counts, the
//     activation kind, precision, GPU profile constants).
// The optimizer is encoded as two ordered indicators (has a momentum buffer, has a second moment)
// rather than a one-hot, so that Adam and AdamW (same state) give identical features and the
// ordering can be guaranteed by the monotone network.
//
// Deterministic: the same model and options give bit-identical features. Thread-safe (no shared
// state).
#ifndef MEMEST_LEARNED_FEATURES_H_
#define MEMEST_LEARNED_FEATURES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "memest/estimate.h"
#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest::memory {
class EstimationContext;  // memory/context.h
}  // namespace memest::memory

namespace memest::learned {

struct FeatureSpec {
  std::string name;
  bool monotone = false;  // the network is non-decreasing in this feature
};

// The fixed feature list, in vector order. Changing it invalidates shipped weights (the weights
// file stores the names and the loader checks them).
const std::vector<FeatureSpec>& FeatureSpecs();
std::vector<std::string> FeatureNames();

// The op types counted one by one; every other op counts as "other" (feature op_other).
const std::vector<std::string>& OpVocabulary();

// Activation kinds recognised in the graph (feature act_<kind>, a one-hot of the most frequent
// kind; ties go to the earlier kind in this list). Composite patterns are recognised the way
// torch.onnx exports them: GELU = Erf (or Gelu), SiLU = x * Sigmoid(x), Mish = x * Tanh(Softplus(x)).
const std::vector<std::string>& ActivationKinds();

// The raw facts behind the features (exact integers, for tests and reports).
struct GraphFacts {
  int64_t nodes = 0;                   // top-level nodes
  int64_t parameters = 0;              // ModelSummary::parameter_count
  uint64_t parameter_bytes = 0;        // run-time bytes of trainable initializers
  uint64_t activation_bytes = 0;       // sum of run-time bytes of every non-initializer value
  uint64_t activation_bytes_per_sample = 0;  // the same, bound at batch 1 (= activation_bytes
                                             // when the model has no batch to bind)
  uint64_t saved_bytes = 0;            // input batch + tensors autograd saves (deduplicated)
  int64_t batch = 1;
  std::map<std::string, int64_t> op_counts;  // vocabulary op -> count; "other" for the rest
  std::string activation = "none";           // one of ActivationKinds()
  std::vector<std::string> op_types;         // distinct op types ("domain::Op" off ai.onnx)
};

struct Features {
  std::vector<double> values;  // parallel to FeatureSpecs()
  GraphFacts facts;
  Estimate symbolic;    // the symbolic backend's estimate (the base of the learned one)
  Estimate analytical;  // the analytical backend's estimate
};

// Errors are those of Bind and the two backends (UnboundDim, NotFound for the GPU profile,
// InvalidArgument for bad options, ...). The first form builds its own context (memest-train,
// tests); the second runs over the context of an Estimator::Run() call.
Result<Features> ComputeFeatures(const Model& model, const Options& options);
Result<Features> ComputeFeatures(const memory::EstimationContext& ctx);

// log(1 + x), the transform of every byte and count feature.
double Log1p(double x);

}  // namespace memest::learned

#endif  // MEMEST_LEARNED_FEATURES_H_
