// memest/coverage.h -- which operators the shared per-op rule table covers.
//
// Every backend reads one rule per op (ops/rules.cc): saved tensors, views, AMP policy and the
// shape rule over symbolic dims. An op without a rule is still estimated (conservatively: every
// input and output saved, ONNX's own shape inference for its outputs), and a diagnostic says so;
// this API lists where that happens. `memest --show-coverage [MODEL]` prints it.
//
// Thread safety: pure functions over immutable tables.
#ifndef MEMEST_COVERAGE_H_
#define MEMEST_COVERAGE_H_

#include <string>
#include <vector>

#include "memest/model.h"

namespace memest {

struct OpCoverage {
  // ONNX default-domain operators (newest version, deprecated/experimental ones left out).
  std::vector<std::string> onnx_ops;
  int rules = 0;                            // entries in the rule table (any domain)
  std::vector<std::string> without_rule;        // ONNX ops with no entry at all
  std::vector<std::string> without_shape_rule;  // ONNX ops with no shape rule (entry or not)
};

// The table against every ONNX operator. Sorted lists.
OpCoverage RuleCoverage();

// The op types of `model` (ModelSummary::op_types spelling: "domain::Op" off ai.onnx) that have
// no rule, and those that have a rule but no shape rule. Sorted.
struct ModelCoverage {
  std::vector<std::string> op_types;
  std::vector<std::string> without_rule;
  std::vector<std::string> without_shape_rule;
};
ModelCoverage RuleCoverage(const Model& model);

}  // namespace memest

#endif  // MEMEST_COVERAGE_H_
