// ops/shape_rules.cc -- InferContext, ConstantType, and the policy every shape rule follows (see
// ops/shape_rules.h for the contract).
//
// Policy:
//  * Semantics are the ONNX operator spec's (onnx/defs, read for meaning only). Where an attribute
//    moved to an input between opsets (Squeeze/Unsqueeze/Reduce axes, Split sizes, Pad pads,
//    Slice starts/ends, TopK k, Resize scales), the rule looks at what the node carries: the
//    attribute when present, else the input. That reads every opset alike.
//  * Elements of shape tensors are folded only when exact: integer arithmetic on DimExprs,
//    comparisons only when provable (core/symdim.h), float tensors only while their elements are
//    integers. Anything else drops the elements, never guesses them.
//  * A Reshape target element that is not a constant is taken as the dim itself: exporters write
//    the special values -1 and 0 only as constants.
//  * When two dims must be equal (Concat's other axes, MatMul's K) and are not provably so, the
//    first input's dim is used: in any model that runs they are equal.
//  * Data-dependent sizes are DataDependent() unknowns; sizes a rule cannot work out (an unknown
//    Reshape target, a non-integer scale on a symbolic dim) are Unknown().
//
// The rules live by family, one file each:
//   ops/shape_rules_elementwise.cc  elementwise one input, broadcasting, reductions
//   ops/shape_rules_conv.cc         convolution, pooling, products (MatMul, Gemm, Einsum)
//   ops/shape_rules_reshape.cc      Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Expand, Tile,
//                                   Pad, Resize, DepthToSpace, SpaceToDepth
//   ops/shape_rules_slicing.cc      Concat, Split, Slice, Gather*, Scatter, Compress
//   ops/shape_rules_values.cc       shape values and generators (Shape, Constant, Range, ...) and
//                                   selection (TopK, NonZero, Unique, NonMaxSuppression)
//   ops/shape_rules_nn.cc           normalization, losses, recurrent, attention, quantization
// with the helpers several families share in ops/shape_rules_internal.h.
#include "ops/shape_rules.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "base/dtype.h"
#include "ops/shape_rules_internal.h"

namespace memest::ops {

using core::DimTable;

// -------------------------------------------------------------------------------------------
// InferContext

InferContext::InferContext(const core::Node& node, std::span<const SymTensor* const> inputs,
                           std::span<SymTensor> outputs, DimTable* table)
    : node_(node), inputs_(inputs), outputs_(outputs), table_(table) {}

int64_t InferContext::opset() const {
  return node_.opset > 0 ? node_.opset : std::numeric_limits<int32_t>::max();
}

const std::vector<DimExpr>* InferContext::shape(size_t i) const {
  const SymTensor* t = input(i);
  return t != nullptr && t->shape ? &*t->shape : nullptr;
}

const std::vector<DimExpr>* InferContext::values(size_t i) const {
  const SymTensor* t = input(i);
  return t != nullptr && t->values ? &*t->values : nullptr;
}

const std::vector<double>* InferContext::float_values(size_t i) const {
  const SymTensor* t = input(i);
  return t != nullptr && t->float_values ? &*t->float_values : nullptr;
}

std::optional<std::vector<int64_t>> InferContext::ints(size_t i) const {
  const std::vector<DimExpr>* v = values(i);
  if (v == nullptr) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (const DimExpr& e : *v) {
    auto c = e.AsConstant();
    if (!c) return std::nullopt;
    out.push_back(*c);
  }
  return out;
}

bool InferContext::has_output(size_t i) const {
  return i < outputs_.size() && i < node_.outputs.size() && node_.outputs[i] >= 0;
}

SymTensor& InferContext::out(size_t i) {
  if (i < outputs_.size()) return outputs_[i];
  scratch_ = SymTensor();
  return scratch_;
}

void InferContext::Set(size_t i, int32_t dtype, std::vector<DimExpr> shape) {
  SymTensor& t = out(i);
  t = SymTensor();
  t.dtype = dtype;
  t.shape = std::move(shape);
}

const onnx::AttributeProto* InferContext::attr(std::string_view name) const {
  if (node_.proto == nullptr) return nullptr;
  for (const auto& a : node_.proto->attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

const onnx::AttributeProto* InferContext::typed_attr(
    std::string_view name, onnx::AttributeProto::AttributeType type) const {
  const auto* a = attr(name);
  if (a == nullptr || a->type() == type) return a;
  if (a->type() != onnx::AttributeProto::UNDEFINED && mistyped_.empty()) {
    mistyped_ = "attribute '" + std::string(name) + "' has type " +
                onnx::AttributeProto::AttributeType_Name(a->type()) + " where " +
                onnx::AttributeProto::AttributeType_Name(type) + " is expected";
  }
  return nullptr;
}

int64_t InferContext::attr_int(std::string_view name, int64_t def) const {
  const auto* a = typed_attr(name, onnx::AttributeProto::INT);
  return a != nullptr ? a->i() : def;
}

std::optional<std::vector<int64_t>> InferContext::attr_ints(std::string_view name) const {
  const auto* a = typed_attr(name, onnx::AttributeProto::INTS);
  if (a == nullptr) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

float InferContext::attr_float(std::string_view name, float def) const {
  const auto* a = typed_attr(name, onnx::AttributeProto::FLOAT);
  return a != nullptr ? a->f() : def;
}

std::optional<std::vector<float>> InferContext::attr_floats(std::string_view name) const {
  const auto* a = typed_attr(name, onnx::AttributeProto::FLOATS);
  if (a == nullptr) return std::nullopt;
  return std::vector<float>(a->floats().begin(), a->floats().end());
}

std::string InferContext::attr_string(std::string_view name, std::string_view def) const {
  const auto* a = typed_attr(name, onnx::AttributeProto::STRING);
  return a != nullptr ? a->s() : std::string(def);
}

DimExpr InferContext::Add(const DimExpr& a, const DimExpr& b) {
  auto r = core::Add(a, b);
  return r ? *r : Unknown();
}
DimExpr InferContext::Sub(const DimExpr& a, const DimExpr& b) {
  auto r = core::Sub(a, b);
  return r ? *r : Unknown();
}
DimExpr InferContext::Mul(const DimExpr& a, const DimExpr& b) {
  auto r = core::Mul(a, b);
  return r ? *r : Unknown();
}
DimExpr InferContext::Product(std::span<const DimExpr> dims) {
  DimExpr p(1);
  for (const DimExpr& d : dims) p = Mul(p, d);
  return p;
}
DimExpr InferContext::Unknown() {
  return table_->FreshExpr(node_.name, /*data_dependent=*/false, /*non_negative=*/false);
}
DimExpr InferContext::DataDependent(std::string_view what) {
  return table_->FreshExpr(node_.name + ":" + std::string(what), /*data_dependent=*/true);
}

// -------------------------------------------------------------------------------------------
// Constants

namespace {

template <typename T>
bool ReadRaw(const std::string& raw, size_t n, std::vector<T>* out) {
  if (raw.size() != n * sizeof(T)) return false;
  out->resize(n);
  if (n > 0) std::memcpy(out->data(), raw.data(), n * sizeof(T));
  return true;
}

// Integer elements of an integer/bool tensor, or nullopt.
std::optional<std::vector<int64_t>> IntPayload(const onnx::TensorProto& t, size_t n) {
  std::vector<int64_t> out;
  const std::string& raw = t.raw_data();
  auto widen = [&](const auto& v) {
    out.assign(v.begin(), v.end());
    return true;
  };
  auto narrow = [&](const auto& v) {  // uint64 elements: each must fit in int64
    for (uint64_t x : v) {
      if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out.push_back(static_cast<int64_t>(x));
    }
    return true;
  };
  bool ok = false;
  switch (t.data_type()) {
    case base::kInt64:
      if (t.int64_data_size() > 0) {
        ok = widen(t.int64_data());
      } else {
        std::vector<int64_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      }
      break;
    case base::kInt32:
    case base::kInt16:
    case base::kInt8:
    case base::kUInt16:
    case base::kUInt8:
    case base::kBool:
      if (t.int32_data_size() > 0) {
        ok = widen(t.int32_data());
      } else if (t.data_type() == base::kInt32) {
        std::vector<int32_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else if (t.data_type() == base::kInt16) {
        std::vector<int16_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else if (t.data_type() == base::kUInt16) {
        std::vector<uint16_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else if (t.data_type() == base::kInt8) {
        std::vector<int8_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else {
        std::vector<uint8_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      }
      break;
    case base::kUInt32:
    case base::kUInt64:
      if (t.uint64_data_size() > 0) {
        ok = narrow(t.uint64_data());
      } else if (t.data_type() == base::kUInt32) {
        std::vector<uint32_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else {
        std::vector<uint64_t> v;
        ok = ReadRaw(raw, n, &v) && narrow(v);
      }
      break;
    default:
      return std::nullopt;
  }
  if (!ok || out.size() != n) return std::nullopt;
  if (t.data_type() == base::kBool) {
    for (int64_t& x : out) x = x != 0;
  }
  return out;
}

std::optional<std::vector<double>> FloatPayload(const onnx::TensorProto& t, size_t n) {
  std::vector<double> out;
  if (t.data_type() == base::kFloat) {
    if (t.float_data_size() > 0) {
      out.assign(t.float_data().begin(), t.float_data().end());
    } else {
      std::vector<float> v;
      if (!ReadRaw(t.raw_data(), n, &v)) return std::nullopt;
      out.assign(v.begin(), v.end());
    }
  } else if (t.data_type() == base::kDouble) {
    if (t.double_data_size() > 0) {
      out.assign(t.double_data().begin(), t.double_data().end());
    } else if (!ReadRaw(t.raw_data(), n, &out)) {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
  if (out.size() != n) return std::nullopt;
  return out;
}

}  // namespace

SymTensor ConstantType(const onnx::TensorProto& t) {
  SymTensor out;
  out.dtype = base::IsKnownDType(t.data_type()) ? t.data_type() : 0;
  if (t.dims_size() > static_cast<int>(core::kMaxRank)) return out;
  std::vector<DimExpr> dims;
  dims.reserve(static_cast<size_t>(t.dims_size()));
  uint64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return out;
    dims.emplace_back(d);
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) return out;
  }
  out.shape = std::move(dims);
  if (numel > core::kMaxTrackedElements || t.data_location() == onnx::TensorProto::EXTERNAL) {
    return out;
  }
  const auto n = static_cast<size_t>(numel);
  if (auto ints = IntPayload(t, n)) {
    out.values.emplace(ints->begin(), ints->end());
  } else if (auto floats = FloatPayload(t, n)) {
    out.values = shape::internal::IntegralValues(*floats);
    out.float_values = std::move(floats);
  }
  return out;
}
}  // namespace memest::ops
