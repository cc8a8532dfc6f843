#include "ops/value_facts.h"

#include <algorithm>

#include "core/dtype.h"

namespace memest::ops {
namespace {

bool IsGemm(const core::Node& n) {
  return n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm" ||
                              n.op_type == "Einsum" || n.op_type == "LSTM" ||
                              n.op_type == "GRU" || n.op_type == "RNN");
}

}  // namespace

ValueFacts::ValueFacts(const core::BoundGraph& graph, Precision precision)
    : graph_(graph), precision_(precision) {
  const core::Graph& g = *graph.graph;
  const size_t nv = g.values.size();
  rules_.reserve(g.nodes.size());
  for (const core::Node& n : g.nodes) {
    rules_.push_back(FindRule(n.domain, n.op_type));
    has_gemm_ = has_gemm_ || IsGemm(n);
  }
  requires_grad_ = RequiresGrad(graph);

  // Run-time precision (facts 5.2/5.3).
  low_.assign(nv, false);
  if (precision == Precision::kBf16) {
    for (size_t i = 0; i < nv; ++i) low_[i] = graph.dtypes[i] == core::kFloat;
  } else if (precision != Precision::kFp32) {
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const core::Node& n = g.nodes[k];
      const AmpPolicy policy = rules_[k] ? rules_[k]->amp : AmpPolicy::kPassThrough;
      bool any_low = false, all_low = true, any_float = false;
      for (int in : n.inputs) {
        if (in < 0 || !core::IsFloatDType(graph.dtypes[static_cast<size_t>(in)])) continue;
        any_float = true;
        any_low = any_low || low_[static_cast<size_t>(in)];
        all_low = all_low && low_[static_cast<size_t>(in)];
      }
      bool out_low = false;
      switch (policy) {
        case AmpPolicy::kLowerPrecision: out_low = true; break;
        case AmpPolicy::kPassThrough: out_low = any_low; break;
        case AmpPolicy::kPromote: out_low = any_float && all_low; break;
        case AmpPolicy::kFp32: out_low = false; break;
      }
      for (int out : n.outputs) {
        if (out >= 0 && graph.dtypes[static_cast<size_t>(out)] == core::kFloat) {
          low_[static_cast<size_t>(out)] = out_low;
        }
      }
    }
  }

  // Storage owners (views share their source's storage).
  root_.resize(nv);
  for (size_t i = 0; i < nv; ++i) root_[i] = static_cast<int>(i);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const core::Node& n = g.nodes[k];
    if (!rules_[k] || !rules_[k]->view || n.inputs.empty() || n.inputs[0] < 0) continue;
    for (int out : n.outputs) {
      if (out >= 0) root_[static_cast<size_t>(out)] = root_[static_cast<size_t>(n.inputs[0])];
    }
  }

  // Run-time bytes; unknown sizes take the largest known tensor of their producer.
  bytes_.assign(nv, 0);
  auto known = [&](int id) {
    const uint64_t b = graph.Bytes(id);
    return low_[static_cast<size_t>(id)] ? b / 2 : b;
  };
  for (size_t i = 0; i < nv; ++i) {
    const int id = static_cast<int>(i);
    if (graph.known(id)) {
      bytes_[i] = known(id);
      continue;
    }
    const core::Value& v = g.value(id);
    if (v.producer < 0) continue;
    const core::Node& n = g.nodes[static_cast<size_t>(v.producer)];
    uint64_t guess = 0;
    for (int x : n.inputs) {
      if (x >= 0 && graph.known(x)) guess = std::max(guess, known(x));
    }
    for (int x : n.outputs) {
      if (x >= 0 && graph.known(x)) guess = std::max(guess, known(x));
    }
    bytes_[i] = guess;
    fallback_ops_.insert(n.op_type);
  }
}

uint64_t ValueFacts::amp_cast_bytes(int id) const {
  if (precision_ != Precision::kAmpFp16 && precision_ != Precision::kAmpBf16) return 0;
  const core::Value& v = graph_.graph->value(id);
  if (!v.trainable || v.dtype != core::kFloat) return 0;
  for (int c : v.consumers) {
    const OpRule* r = rules_[static_cast<size_t>(c)];
    if (r && r->amp == AmpPolicy::kLowerPrecision) return graph_.Bytes(id) / 2;
  }
  return 0;
}

}  // namespace memest::ops
