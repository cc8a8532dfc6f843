// ops/value_facts.h -- per-value facts every backend derives once dims are bound.
//
// From a BoundGraph and the options' precision, computed once (immutable afterwards):
//   * requires_grad: ops::RequiresGrad (trainable parameters and what is computed from them);
//   * low: the value is fp16/bf16 at run time (AMP: produced by a lower-precision op or by a
//     pass-through op on low inputs, facts 5.2/5.3; bf16: every fp32 value);
//   * root: the value that owns the storage (a view's source, transitively; facts 3.1 views);
//   * bytes: run-time bytes (halved when low); for a value whose shape is unknown, the largest
//     known tensor its producer touches (a conservative guess, listed in fallback_ops).
#ifndef MEMEST_OPS_VALUE_FACTS_H_
#define MEMEST_OPS_VALUE_FACTS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/bind.h"
#include "memest/options.h"
#include "ops/rules.h"

namespace memest::ops {

class ValueFacts {
 public:
  ValueFacts(const core::BoundGraph& graph, Precision precision);

  const std::vector<bool>& requires_grad() const { return requires_grad_; }
  bool requires_grad(int id) const { return id >= 0 && requires_grad_[static_cast<size_t>(id)]; }
  bool low(int id) const { return id >= 0 && low_[static_cast<size_t>(id)]; }
  int root(int id) const { return id < 0 ? id : root_[static_cast<size_t>(id)]; }
  uint64_t bytes(int id) const { return id < 0 ? 0 : bytes_[static_cast<size_t>(id)]; }
  // Op types whose outputs had to be sized by the fallback.
  const std::set<std::string>& fallback_ops() const { return fallback_ops_; }
  // The rule of node `n` (cached lookup), or nullptr.
  const OpRule* rule(size_t n) const { return rules_[n]; }
  // Whether the graph runs GEMMs (cuBLAS workspace, facts 2.3).
  bool has_gemm() const { return has_gemm_; }
  // Bytes of the low-precision autocast copy of a trainable fp32 weight used by a
  // lower-precision op (facts 5.1); 0 when there is none.
  uint64_t amp_cast_bytes(int id) const;

 private:
  const core::BoundGraph& graph_;
  Precision precision_;
  std::vector<const OpRule*> rules_;
  std::vector<bool> requires_grad_;
  std::vector<bool> low_;
  std::vector<int> root_;
  std::vector<uint64_t> bytes_;
  std::set<std::string> fallback_ops_;
  bool has_gemm_ = false;
};

}  // namespace memest::ops

#endif  // MEMEST_OPS_VALUE_FACTS_H_
