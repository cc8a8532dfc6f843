// memory/weight_storage.cc -- Options::weight_dtype (policy in weight_storage.h).
#include "memory/weight_storage.h"

#include <optional>
#include <string>
#include <vector>

#include "base/checked.h"
#include "base/dtype.h"
#include "ops/rules.h"

namespace memest::memory {
namespace {

using base::SatAdd;
using base::SatMul;

uint64_t CeilDiv(uint64_t n, uint64_t d) { return n / d + (n % d != 0 ? 1 : 0); }

bool IsQuantized(WeightDtype d) {
  return d == WeightDtype::kInt8 || d == WeightDtype::kNf4 || d == WeightDtype::kNf4DoubleQuant;
}

// Whether node n is a MatMul / Gemm taking `id` as its weight (input 1) and not as its input,
// and not writing a graph output: the model's head, which transformers keeps unquantized.
bool IsLinearUse(const core::Graph& g, const core::Node& n, int id) {
  if (!n.domain.empty() || (n.op_type != "MatMul" && n.op_type != "Gemm")) return false;
  if (n.inputs.size() < 2 || n.inputs[1] != id || n.inputs[0] == id) return false;
  for (int out : n.outputs) {
    if (out >= 0 && g.value(out).graph_output) return false;
  }
  return true;
}

// A Linear layer's weight: the matmuls that use it and its output rows.
struct LinearWeight {
  std::vector<size_t> matmuls;
  uint64_t rows = 0;
};

// The Linear layer weight `id` is, when every use is as the weight of a MatMul/Gemm, directly or
// through one Transpose (training exports keep nn.Linear's W^T as a Transpose node); nullopt
// otherwise. Rows: the dim that is not the matmul's reduction.
std::optional<LinearWeight> AsLinearWeight(const core::BoundGraph& b, int id) {
  const core::Graph& g = *b.graph;
  const auto& shape = b.shapes[static_cast<size_t>(id)];
  if (!shape || shape->size() != 2 || g.value(id).consumers.empty()) return std::nullopt;
  LinearWeight w;
  for (int c : g.value(id).consumers) {
    const core::Node& n = g.node(c);
    bool transposed = n.op_type == "Gemm" && ops::IntAttr(n, "transB", 0) != 0;
    int weight = id;
    const core::Node* use = &n;
    if (n.op_type == "Transpose" && n.domain.empty() && n.outputs.size() == 1 &&
        n.outputs[0] >= 0 && !g.value(n.outputs[0]).consumers.empty()) {
      weight = n.outputs[0];
      transposed = true;
      for (int cc : g.value(weight).consumers) {
        const core::Node& m = g.node(cc);
        if (!IsLinearUse(g, m, weight) || ops::IntAttr(m, "transB", 0) != 0) return std::nullopt;
        w.matmuls.push_back(static_cast<size_t>(cc));
      }
    } else if (IsLinearUse(g, *use, weight)) {
      w.matmuls.push_back(static_cast<size_t>(c));
    } else {
      return std::nullopt;
    }
    w.rows = static_cast<uint64_t>((*shape)[transposed ? 0 : 1]);
  }
  return w;
}

}  // namespace

uint64_t QuantizedWeightBytes(WeightDtype dtype, uint64_t elements, uint64_t rows) {
  switch (dtype) {
    case WeightDtype::kInt8:
      return SatAdd(elements, SatMul(rows, 4));
    case WeightDtype::kNf4:
      return SatAdd(CeilDiv(elements, 2), SatMul(CeilDiv(elements, 64), 4));
    case WeightDtype::kNf4DoubleQuant: {
      const uint64_t blocks = CeilDiv(elements, 64);
      return SatAdd(SatAdd(CeilDiv(elements, 2), blocks), SatMul(CeilDiv(blocks, 256), 4) + 4);
    }
    case WeightDtype::kAuto:
    case WeightDtype::kFp16:
    case WeightDtype::kBf16:
      break;
  }
  return SatMul(elements, 2);
}

Result<WeightStorage> WeightStorage::Make(const core::BoundGraph& b, const TrainableSet& trainable,
                                          const Options& o) {
  WeightStorage s;
  if (o.weight_dtype == WeightDtype::kAuto) return s;
  const core::Graph& g = *b.graph;
  const bool train = o.mode == Mode::kTrain;
  const bool quantized = IsQuantized(o.weight_dtype);
  const uint64_t compute_bytes = o.precision == Precision::kFp32 ? 4 : 2;
  s.stored_.assign(g.values.size(), 0);
  s.forward_.assign(g.nodes.size(), 0);
  s.backward_.assign(g.nodes.size(), 0);
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    const int id = static_cast<int>(i);
    if (v.kind != core::ValueKind::kInitializer || v.consumers.empty()) continue;
    if (b.dtypes[i] != base::kFloat || !b.known(id)) continue;
    if (train && (!v.trainable || trainable.trainable[i])) continue;  // trains: stays as it is
    const uint64_t elements = b.Numel(id).value_or(0);
    uint64_t bytes = 0;
    if (quantized) {
      const std::optional<LinearWeight> linear = AsLinearWeight(b, id);
      if (!linear) continue;
      bytes = QuantizedWeightBytes(o.weight_dtype, elements, linear->rows);
      for (size_t k : linear->matmuls) {
        const core::Node& n = g.nodes[k];
        const uint64_t dequantized = SatMul(elements, compute_bytes);
        if (o.weight_dtype == WeightDtype::kInt8) {
          const uint64_t input = b.Numel(n.inputs[0]).value_or(0);
          const uint64_t output = n.outputs.empty() ? 0 : b.Numel(n.outputs[0]).value_or(0);
          s.forward_[k] = SatAdd(s.forward_[k], SatAdd(input, SatMul(output, 4)));
        } else {
          s.forward_[k] = SatAdd(s.forward_[k], dequantized);
        }
        s.backward_[k] = SatAdd(s.backward_[k], dequantized);
      }
    } else {
      bytes = SatMul(elements, 2);
    }
    s.stored_[i] = bytes;
    ++s.tensors_;
    s.elements_ = SatAdd(s.elements_, elements);
    s.before_ = SatAdd(s.before_, b.Bytes(id));
    s.after_ = SatAdd(s.after_, bytes);
  }
  if (s.tensors_ == 0) {
    const std::string what = std::string("weight dtype ") + ToString(o.weight_dtype);
    if (train && trainable.trained == trainable.parameters) {
      return InvalidArgument(what +
                             " applies to parameters that do not train, and every parameter "
                             "trains: freeze the base model with --freeze or --trainable");
    }
    return InvalidArgument(what + " applies to no parameter of this model" +
                           (quantized ? " (it quantizes 2-D MatMul/Gemm weights, as bitsandbytes "
                                        "replaces nn.Linear layers)"
                                      : ""));
  }
  return s;
}

}  // namespace memest::memory
