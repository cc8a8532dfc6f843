// ops/coverage.cc -- memest/coverage.h over the rule table (ops/rules.h).
#include "memest/coverage.h"

#include "ops/rules.h"

namespace memest {

OpCoverage RuleCoverage() { return ops::OpsWithoutRules(); }

ModelCoverage RuleCoverage(const Model& model) {
  ModelCoverage out;
  out.op_types = model.summary().op_types;  // sorted, distinct
  for (const std::string& name : out.op_types) {
    const size_t sep = name.rfind("::");
    const std::string domain = sep == std::string::npos ? "" : name.substr(0, sep);
    const std::string op = sep == std::string::npos ? name : name.substr(sep + 2);
    const ops::OpRule* rule = ops::FindRule(domain, op);
    if (rule == nullptr) out.without_rule.push_back(name);
    if (rule == nullptr || rule->infer == nullptr) out.without_shape_rule.push_back(name);
  }
  return out;
}

}  // namespace memest
