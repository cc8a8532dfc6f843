// ops/shape_rules.cc -- the shape/dtype rule families (see ops/shape_rules.h for the contract).
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
#include "ops/shape_rules.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "core/dtype.h"

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

constexpr double kMaxExactDouble = 9007199254740992.0;  // 2^53

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
  bool ok = false;
  switch (t.data_type()) {
    case core::kInt64:
      if (t.int64_data_size() > 0) {
        ok = widen(t.int64_data());
      } else {
        std::vector<int64_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      }
      break;
    case core::kInt32:
    case core::kInt16:
    case core::kInt8:
    case core::kUInt16:
    case core::kUInt8:
    case core::kBool:
      if (t.int32_data_size() > 0) {
        ok = widen(t.int32_data());
      } else if (t.data_type() == core::kInt32) {
        std::vector<int32_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else if (t.data_type() == core::kInt16) {
        std::vector<int16_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else if (t.data_type() == core::kUInt16) {
        std::vector<uint16_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else if (t.data_type() == core::kInt8) {
        std::vector<int8_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else {
        std::vector<uint8_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      }
      break;
    case core::kUInt32:
    case core::kUInt64:
      if (t.uint64_data_size() > 0) {
        for (uint64_t x : t.uint64_data()) {
          if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          out.push_back(static_cast<int64_t>(x));
        }
        ok = true;
      } else if (t.data_type() == core::kUInt32) {
        std::vector<uint32_t> v;
        ok = ReadRaw(raw, n, &v) && widen(v);
      } else {
        std::vector<uint64_t> v;
        if (!ReadRaw(raw, n, &v)) return std::nullopt;
        for (uint64_t x : v) {
          if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          out.push_back(static_cast<int64_t>(x));
        }
        ok = true;
      }
      break;
    default:
      return std::nullopt;
  }
  if (!ok || out.size() != n) return std::nullopt;
  if (t.data_type() == core::kBool) {
    for (int64_t& x : out) x = x != 0;
  }
  return out;
}

std::optional<std::vector<double>> FloatPayload(const onnx::TensorProto& t, size_t n) {
  std::vector<double> out;
  if (t.data_type() == core::kFloat) {
    if (t.float_data_size() > 0) {
      out.assign(t.float_data().begin(), t.float_data().end());
    } else {
      std::vector<float> v;
      if (!ReadRaw(t.raw_data(), n, &v)) return std::nullopt;
      out.assign(v.begin(), v.end());
    }
  } else if (t.data_type() == core::kDouble) {
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

// Integer-valued doubles as exact DimExprs; nullopt when any is not an integer.
std::optional<std::vector<DimExpr>> IntegralValues(const std::vector<double>& f) {
  std::vector<DimExpr> out;
  out.reserve(f.size());
  for (double x : f) {
    if (!std::isfinite(x) || std::floor(x) != x || std::fabs(x) > kMaxExactDouble) {
      return std::nullopt;
    }
    out.emplace_back(static_cast<int64_t>(x));
  }
  return out;
}

bool IsIntegerDType(int32_t t) {
  switch (t) {
    case core::kInt8:
    case core::kInt16:
    case core::kInt32:
    case core::kInt64:
    case core::kUInt8:
    case core::kUInt16:
    case core::kUInt32:
    case core::kUInt64:
    case core::kBool:
      return true;
    default:
      return false;
  }
}

}  // namespace

SymTensor ConstantType(const onnx::TensorProto& t) {
  SymTensor out;
  out.dtype = core::IsKnownDType(t.data_type()) ? t.data_type() : 0;
  if (t.dims_size() > static_cast<int>(core::kMaxRank)) return out;
  std::vector<DimExpr> dims;
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
    out.values = IntegralValues(*floats);
    out.float_values = std::move(floats);
  }
  return out;
}

namespace shape {
namespace {

using Dims = std::vector<DimExpr>;

constexpr int32_t kI64 = core::kInt64;
constexpr int32_t kBoolT = core::kBool;

Status Bad(const InferContext& c, const std::string& what) {
  return InvalidModel(c.node().op_type + ": " + what);
}

// Normalizes `axis` against `rank` ([-rank, rank) ; [-rank-1, rank] when `inclusive`).
std::optional<size_t> NormAxis(int64_t axis, size_t rank, bool inclusive = false) {
  const auto r = static_cast<int64_t>(rank) + (inclusive ? 1 : 0);
  if (axis < -r || axis >= r) return std::nullopt;
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

// Constant dims, or nullopt.
std::optional<std::vector<int64_t>> ConstDims(const Dims& d) {
  std::vector<int64_t> out;
  out.reserve(d.size());
  for (const DimExpr& e : d) {
    auto c = e.AsConstant();
    if (!c || *c < 0) return std::nullopt;
    out.push_back(*c);
  }
  return out;
}

std::optional<size_t> ConstNumel(const Dims& d) {
  auto c = ConstDims(d);
  if (!c) return std::nullopt;
  uint64_t n = 1;
  for (int64_t x : *c) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(x), &n)) return std::nullopt;
  }
  if (n > core::kMaxTrackedElements) return std::nullopt;
  return static_cast<size_t>(n);
}

// Multidirectional (numpy) broadcasting of two shapes.
std::optional<Dims> BroadcastTwo(InferContext& c, const Dims& a, const Dims& b) {
  const size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    const DimExpr one(1);
    const DimExpr& x = i + a.size() >= r ? a[i + a.size() - r] : one;
    const DimExpr& y = i + b.size() >= r ? b[i + b.size() - r] : one;
    auto d = c.table().Broadcast(x, y);
    if (!d) return std::nullopt;
    out[i] = *d;
  }
  return out;
}

// Broadcast shape of inputs [first, last); nullopt when some rank is unknown; an error when
// dims cannot broadcast.
Result<std::optional<Dims>> BroadcastInputs(InferContext& c, size_t first, size_t last) {
  std::optional<Dims> out;
  for (size_t i = first; i < last && i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const Dims* s = c.shape(i);
    if (s == nullptr) return std::optional<Dims>();
    if (!out) {
      out = *s;
      continue;
    }
    auto b = BroadcastTwo(c, *out, *s);
    if (!b) return Bad(c, "input shapes do not broadcast");
    out = std::move(b);
  }
  return out;
}

// Row-major strides of constant dims.
std::vector<size_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<size_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * static_cast<size_t>(dims[i]);
  return s;
}

// Index into an input of dims `in` (strides `in_strides`) of output element `flat`, under
// numpy broadcasting to `out` (strides `out_strides`).
size_t BroadcastIndex(size_t flat, const std::vector<int64_t>& out,
                      const std::vector<size_t>& out_strides, const std::vector<int64_t>& in,
                      const std::vector<size_t>& in_strides) {
  const size_t off = out.size() - in.size();
  size_t idx = 0;
  for (size_t a = 0; a < in.size(); ++a) {
    const size_t coord = (flat / out_strides[a + off]) % static_cast<size_t>(out[a + off]);
    if (in[a] != 1) idx += coord * in_strides[a];
  }
  return idx;
}

// Elementwise fold of inputs [0, n) into output 0 (whose shape is set): `get(k)` gives input k's
// elements (nullptr: unknown), `fn` one element per input and returns the result or nullopt
// (then nothing is kept); `put` receives the results.
template <typename T, typename Get, typename Fn, typename Put>
void FoldBroadcast(InferContext& c, size_t n, Get get, Fn fn, Put put) {
  SymTensor& o = c.out(0);
  if (!o.shape) return;
  auto out_dims = ConstDims(*o.shape);
  auto numel = ConstNumel(*o.shape);
  if (!out_dims || !numel) return;
  std::vector<const std::vector<T>*> vals(n);
  std::vector<std::vector<int64_t>> in_dims(n);
  std::vector<std::vector<size_t>> in_strides(n);
  for (size_t k = 0; k < n; ++k) {
    vals[k] = get(k);
    const Dims* s = c.shape(k);
    if (vals[k] == nullptr || s == nullptr) return;
    auto d = ConstDims(*s);
    if (!d || d->size() > out_dims->size()) return;
    in_dims[k] = *d;
    in_strides[k] = Strides(in_dims[k]);
  }
  const std::vector<size_t> out_strides = Strides(*out_dims);
  std::vector<T> result;
  result.reserve(*numel);
  std::vector<T> args(n);
  for (size_t flat = 0; flat < *numel; ++flat) {
    for (size_t k = 0; k < n; ++k) {
      const size_t idx = BroadcastIndex(flat, *out_dims, out_strides, in_dims[k], in_strides[k]);
      if (idx >= vals[k]->size()) return;
      args[k] = (*vals[k])[idx];
    }
    auto r = fn(std::span<const T>(args));
    if (!r) return;
    result.push_back(std::move(*r));
  }
  put(std::move(result));
}

template <typename Fn>
void FoldElementwise(InferContext& c, size_t n, Fn fn) {
  FoldBroadcast<DimExpr>(
      c, n, [&](size_t k) { return c.values(k); }, fn,
      [&](Dims result) { c.out(0).values = std::move(result); });
}

// Float elementwise fold (shape arithmetic done in floating point: Div, Ceil, Clip of sizes)
// when every input's elements are known numbers; integral results are kept as integers too.
template <typename Fn>
void FoldFloat(InferContext& c, size_t n, Fn fn) {
  if (!core::IsFloatDType(c.out(0).dtype)) return;
  std::vector<std::vector<double>> numbers(n);
  for (size_t k = 0; k < n; ++k) {
    if (const auto* f = c.float_values(k)) {
      numbers[k] = *f;
    } else if (const Dims* v = c.values(k)) {
      for (const DimExpr& e : *v) {
        auto x = e.AsConstant();
        if (!x) return;
        numbers[k].push_back(static_cast<double>(*x));
      }
    } else {
      return;
    }
  }
  FoldBroadcast<double>(
      c, n, [&](size_t k) { return &numbers[k]; },
      [&](std::span<const double> a) -> std::optional<double> {
        const double r = fn(a);
        if (!std::isfinite(r)) return std::nullopt;
        return r;
      },
      [&](std::vector<double> result) {
        SymTensor& o = c.out(0);
        Dims ints;
        for (double x : result) {
          if (std::floor(x) != x || std::fabs(x) > kMaxExactDouble) break;
          ints.emplace_back(static_cast<int64_t>(x));
        }
        if (!o.values && ints.size() == result.size()) o.values = std::move(ints);
        o.float_values = std::move(result);
      });
}

// Reads an "axes"-like list from attribute `name` when present, else from input `input`.
// nullopt: not given at all; an empty optional inside a Result means given but unknown.
struct IntList {
  bool given = false;
  std::optional<std::vector<int64_t>> values;
};
IntList AttrOrInput(const InferContext& c, std::string_view name, size_t input) {
  IntList l;
  if (auto a = c.attr_ints(name)) {
    l.given = true;
    l.values = std::move(a);
    return l;
  }
  if (c.has_input(input)) {
    l.given = true;
    l.values = c.ints(input);
    if (!l.values) {
      // A known empty 1-D tensor is an empty list.
      const Dims* s = c.shape(input);
      if (s != nullptr && s->size() == 1 && (*s)[0] == DimExpr(0)) l.values.emplace();
    }
  }
  return l;
}

// Normalized, sorted, unique axes; an error when out of range.
Result<std::vector<size_t>> NormAxes(const InferContext& c, const std::vector<int64_t>& axes,
                                     size_t rank) {
  std::vector<size_t> out;
  for (int64_t a : axes) {
    auto n = NormAxis(a, rank);
    if (!n)
      return Bad(c, "axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
    out.push_back(*n);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) return Bad(c, "repeated axis");
  return out;
}

// One output axis of a strided view: it walks input axis `in_axis` from `start` by `step`.
struct StridedAxis {
  size_t in_axis = 0;
  int64_t start = 0;
  int64_t step = 1;
};

// Folds the known elements of input 0 into output 0 when the output is a strided view of it
// (Transpose, Slice): output element [i0, i1, ...] is input element with coordinate
// start + i_k * step on each axis's input axis. Both shapes must be constant and small.
void FoldStrided(InferContext& c, const std::vector<StridedAxis>& axes) {
  SymTensor& o = c.out(0);
  const SymTensor* in = c.input(0);
  if (in == nullptr || !in->shape || !o.shape || (!in->values && !in->float_values)) return;
  const auto in_dims = ConstDims(*in->shape);
  const auto out_dims = ConstDims(*o.shape);
  const auto in_n = ConstNumel(*in->shape), out_n = ConstNumel(*o.shape);
  if (!in_dims || !out_dims || !in_n || !out_n || axes.size() != out_dims->size()) return;
  if ((in->values && in->values->size() != *in_n) ||
      (in->float_values && in->float_values->size() != *in_n)) {
    return;
  }
  std::vector<int64_t> stride(in_dims->size(), 1);
  for (size_t k = in_dims->size(); k-- > 1;) stride[k - 1] = stride[k] * (*in_dims)[k];
  Dims vals;
  std::vector<double> floats;
  std::vector<int64_t> idx(out_dims->size(), 0);
  for (size_t e = 0; e < *out_n; ++e) {
    int64_t src = 0;
    for (size_t k = 0; k < idx.size(); ++k) {
      const StridedAxis& a = axes[k];
      const int64_t coord = a.start + idx[k] * a.step;
      if (a.in_axis >= in_dims->size() || coord < 0 || coord >= (*in_dims)[a.in_axis]) return;
      src += coord * stride[a.in_axis];
    }
    if (in->values) vals.push_back((*in->values)[static_cast<size_t>(src)]);
    if (in->float_values) floats.push_back((*in->float_values)[static_cast<size_t>(src)]);
    for (size_t k = idx.size(); k-- > 0;) {  // next output index, row-major
      if (++idx[k] < (*out_dims)[k]) break;
      idx[k] = 0;
    }
  }
  if (in->values) o.values = std::move(vals);
  if (in->float_values) o.float_values = std::move(floats);
}

void KeepValues(InferContext& c, size_t from) {
  SymTensor& o = c.out(0);
  const SymTensor* in = c.input(from);
  if (in == nullptr || !o.shape) return;
  auto n = ConstNumel(*o.shape);
  if (!n) return;
  if (in->values && in->values->size() == *n) o.values = in->values;
  if (in->float_values && in->float_values->size() == *n) o.float_values = in->float_values;
}

}  // namespace

// -------------------------------------------------------------------------------------------
// Elementwise, one input.

Status Unary(InferContext& c) {
  const SymTensor* x = c.input(0);
  if (x == nullptr) return Status::Ok();
  SymTensor& y = c.out(0);
  y.dtype = x->dtype;
  y.shape = x->shape;
  return Status::Ok();
}

Status Identity(InferContext& c) {
  const SymTensor* x = c.input(0);
  if (x != nullptr) c.out(0) = *x;
  return Status::Ok();
}

Status Neg(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (const Dims* v = c.values(0)) {
    Dims r;
    for (const DimExpr& e : *v) {
      auto n = core::Neg(e);
      if (!n) return Status::Ok();
      r.push_back(*n);
    }
    c.out(0).values = std::move(r);
  }
  return Status::Ok();
}

Status Rounding(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (const Dims* v = c.values(0)) c.out(0).values = *v;  // integers round to themselves
  const std::string& op = c.node().op_type;
  FoldFloat(c, 1, [&](std::span<const double> a) {
    return op == "Ceil" ? std::ceil(a[0]) : op == "Floor" ? std::floor(a[0]) : std::nearbyint(a[0]);
  });
  return Status::Ok();
}

Status Clip(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
  if (c.attr("min") != nullptr) lo = c.attr_float("min", 0.0F);  // opset < 11
  if (c.attr("max") != nullptr) hi = c.attr_float("max", 0.0F);
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!c.has_input(i)) continue;
    const auto* f = c.float_values(i);
    auto v = c.ints(i);
    if ((f == nullptr || f->size() != 1) && (!v || v->size() != 1)) return Status::Ok();
    const double bound = f != nullptr && f->size() == 1 ? (*f)[0] : static_cast<double>((*v)[0]);
    (i == 1 ? lo : hi) = bound;
  }
  FoldFloat(c, 1, [&](std::span<const double> a) { return std::min(std::max(a[0], lo), hi); });
  return Status::Ok();
}

Status Abs(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (const Dims* v = c.values(0)) {
    Dims r;
    for (const DimExpr& e : *v) {
      if (c.table().NonNegative(e)) {
        r.push_back(e);
      } else if (auto n = core::Neg(e); n && c.table().NonNegative(*n)) {
        r.push_back(*n);
      } else {
        return Status::Ok();
      }
    }
    c.out(0).values = std::move(r);
  }
  return Status::Ok();
}

Status BoolUnary(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  c.out(0).dtype = kBoolT;
  return Status::Ok();
}

Status Not(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BoolUnary(c));
  if (auto v = c.ints(0)) {
    Dims r;
    for (int64_t x : *v) r.emplace_back(x == 0 ? 1 : 0);
    c.out(0).values = std::move(r);
  }
  return Status::Ok();
}

Status Dropout(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  if (c.has_output(1) && c.shape(0) != nullptr) c.Set(1, kBoolT, *c.shape(0));
  return Status::Ok();
}

Status Cast(InferContext& c) {
  const int64_t to = c.attr_int("to", 0);
  if (!core::IsKnownDType(static_cast<int32_t>(to))) return Bad(c, "unknown 'to' type");
  const SymTensor* x = c.input(0);
  SymTensor& y = c.out(0);
  y.dtype = static_cast<int32_t>(to);
  if (x == nullptr) return Status::Ok();
  y.shape = x->shape;
  const bool to_float = core::IsFloatDType(y.dtype);
  if (y.dtype == kBoolT) {
    if (auto v = c.ints(0)) {
      Dims r;
      for (int64_t e : *v) r.emplace_back(e != 0 ? 1 : 0);
      y.values = std::move(r);
    } else if (x->float_values) {
      Dims r;
      for (double e : *x->float_values) r.emplace_back(e != 0.0 ? 1 : 0);
      y.values = std::move(r);
    }
  } else if (IsIntegerDType(y.dtype) || to_float) {
    if (x->values) {
      y.values = x->values;
    } else if (x->float_values && !to_float) {
      Dims r;  // float -> integer truncates toward zero
      for (double e : *x->float_values) {
        if (!std::isfinite(e) || std::fabs(e) > kMaxExactDouble) return Status::Ok();
        r.emplace_back(static_cast<int64_t>(std::trunc(e)));
      }
      y.values = std::move(r);
    }
    if (to_float) {
      if (x->float_values) {
        y.float_values = x->float_values;
      } else if (auto v = c.ints(0)) {
        y.float_values.emplace(v->begin(), v->end());
      }
    }
  }
  return Status::Ok();
}

Status CastLike(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Identity(c));
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(1);
  if (!IsIntegerDType(y.dtype) && !core::IsFloatDType(y.dtype)) {
    y.values.reset();
    y.float_values.reset();
  }
  if (!core::IsFloatDType(y.dtype)) y.float_values.reset();
  return Status::Ok();
}

Status LikeWithDtype(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int64_t dt = c.attr_int("dtype", -1);
  if (dt != -1) {
    if (!core::IsKnownDType(static_cast<int32_t>(dt))) return Bad(c, "unknown dtype");
    c.out(0).dtype = static_cast<int32_t>(dt);
  }
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Broadcasting.

namespace {

// Broadcast shape of every input into output 0 with `dtype` (0: input 0's).
Status BroadcastAll(InferContext& c, int32_t dtype, size_t first = 0) {
  SymTensor& y = c.out(0);
  y.dtype = dtype != 0 ? dtype : c.dtype(first);
  MEMEST_ASSIGN_OR_RETURN(auto s, BroadcastInputs(c, first, c.num_inputs()));
  if (s) {
    if (s->size() > core::kMaxRank) return Status::Ok();
    y.shape = std::move(*s);
  }
  return Status::Ok();
}

}  // namespace

Status Arith(InferContext& c) { return BroadcastAll(c, 0); }

Status Add(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) { return core::Add(a[0], a[1]); });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] + a[1]; });
  return Status::Ok();
}

Status Sub(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) { return core::Sub(a[0], a[1]); });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] - a[1]; });
  return Status::Ok();
}

Status Mul(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) { return core::Mul(a[0], a[1]); });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] * a[1]; });
  return Status::Ok();
}

Status Div(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  const bool integer = IsIntegerDType(c.out(0).dtype);
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    if (auto q = core::DivExact(a[0], a[1])) return q;
    // Integer division truncates; it is floor division when both operands are >= 0.
    if (integer && c.table().NonNegative(a[0]) && c.table().Less(0, a[1]).value_or(false)) {
      return c.table().FloorDiv(a[0], a[1]);
    }
    return std::nullopt;
  });
  FoldFloat(c, 2, [](std::span<const double> a) { return a[0] / a[1]; });
  return Status::Ok();
}

Status Mod(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Arith(c));
  const bool fmod = c.attr_int("fmod", 0) != 0;
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    const bool positive = c.table().Less(0, a[1]).value_or(false);
    if (!positive) return std::nullopt;
    if (fmod && !c.table().NonNegative(a[0])) return std::nullopt;  // C fmod: sign of a
    return c.table().Mod(a[0], a[1]);
  });
  return Status::Ok();
}

Status Compare(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, kBoolT));
  const std::string& op = c.node().op_type;
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    std::optional<bool> r;
    DimTable& t = c.table();
    if (op == "Equal") {
      r = t.Equal(a[0], a[1]);
    } else if (op == "Less") {
      r = t.Less(a[0], a[1]);
    } else if (op == "Greater") {
      r = t.Less(a[1], a[0]);
    } else if (op == "LessOrEqual") {
      if (auto g = t.Less(a[1], a[0])) r = !*g;
    } else if (op == "GreaterOrEqual") {
      if (auto l = t.Less(a[0], a[1])) r = !*l;
    }
    if (!r) return std::nullopt;
    return DimExpr(*r ? 1 : 0);
  });
  return Status::Ok();
}

Status Logical(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, kBoolT));
  const std::string& op = c.node().op_type;
  FoldElementwise(c, 2, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    auto x = a[0].AsConstant(), y = a[1].AsConstant();
    if (!x || !y) return std::nullopt;
    const bool p = *x != 0, q = *y != 0;
    const bool r = op == "And" ? (p && q) : op == "Or" ? (p || q) : (p != q);
    return DimExpr(r ? 1 : 0);
  });
  return Status::Ok();
}

Status Variadic(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, 0));
  const std::string& op = c.node().op_type;
  if (op == "Mean" || c.num_inputs() == 0) return Status::Ok();
  FoldElementwise(c, c.num_inputs(), [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    DimExpr r = a[0];
    for (size_t i = 1; i < a.size(); ++i) {
      if (op == "Sum") {
        auto s = core::Add(r, a[i]);
        if (!s) return std::nullopt;
        r = *s;
      } else if (op == "Max") {
        r = c.table().Max(r, a[i]);
      } else {
        r = c.table().Min(r, a[i]);
      }
    }
    return r;
  });
  FoldFloat(c, c.num_inputs(), [&](std::span<const double> a) {
    double r = a[0];
    for (size_t i = 1; i < a.size(); ++i) {
      r = op == "Sum" ? r + a[i] : op == "Max" ? std::max(r, a[i]) : std::min(r, a[i]);
    }
    return r;
  });
  return Status::Ok();
}

Status Where(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(BroadcastAll(c, 0, 0));
  c.out(0).dtype = c.dtype(1) != 0 ? c.dtype(1) : c.dtype(2);
  FoldElementwise(c, 3, [&](std::span<const DimExpr> a) -> std::optional<DimExpr> {
    auto cond = a[0].AsConstant();
    if (!cond) return std::nullopt;
    return *cond != 0 ? a[1] : a[2];
  });
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Reductions.

Status Reduce(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const bool keep = c.attr_int("keepdims", 1) != 0;
  const IntList axes = AttrOrInput(c, "axes", 1);
  if (axes.given && !axes.values) {
    if (keep) {  // rank known, which dims become 1 is not
      Dims d;
      for (size_t i = 0; i < x->size(); ++i) d.push_back(c.Unknown());
      y.shape = std::move(d);
    }
    return Status::Ok();
  }
  std::vector<size_t> reduced;
  if (axes.given && !axes.values->empty()) {
    MEMEST_ASSIGN_OR_RETURN(reduced, NormAxes(c, *axes.values, x->size()));
  } else if (c.attr_int("noop_with_empty_axes", 0) != 0) {
    y.shape = *x;
    KeepValues(c, 0);
    return Status::Ok();
  } else {
    reduced.resize(x->size());
    std::iota(reduced.begin(), reduced.end(), size_t{0});
  }
  Dims d;
  for (size_t i = 0; i < x->size(); ++i) {
    const bool r = std::binary_search(reduced.begin(), reduced.end(), i);
    if (!r) {
      d.push_back((*x)[i]);
    } else if (keep) {
      d.emplace_back(1);
    }
  }
  y.shape = std::move(d);
  // Fold a 1-D integer reduction (x.numel() exports as ReduceProd(Shape(x))).
  const std::string& op = c.node().op_type;
  const Dims* v = c.values(0);
  if (v != nullptr && x->size() == 1 && !v->empty() &&
      (op == "ReduceSum" || op == "ReduceProd" || op == "ReduceMax" || op == "ReduceMin")) {
    DimExpr acc = (*v)[0];
    for (size_t i = 1; i < v->size(); ++i) {
      if (op == "ReduceSum") {
        acc = c.Add(acc, (*v)[i]);
      } else if (op == "ReduceProd") {
        acc = c.Mul(acc, (*v)[i]);
      } else if (op == "ReduceMax") {
        acc = c.Max(acc, (*v)[i]);
      } else {
        acc = c.Min(acc, (*v)[i]);
      }
    }
    y.values = Dims{acc};
  }
  return Status::Ok();
}

Status ArgReduce(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", 0), x->size());
  if (!axis) return Bad(c, "axis out of range");
  Dims d = *x;
  if (c.attr_int("keepdims", 1) != 0) {
    d[*axis] = 1;
  } else {
    d.erase(d.begin() + static_cast<std::ptrdiff_t>(*axis));
  }
  y.shape = std::move(d);
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Convolution and pooling.

namespace {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string auto_pad;
  bool kernel_known = true;
};

// Reads kernel/strides/dilations/pads for `n` spatial dims. `kernel_from_w`: W's dims[2:].
Result<Window> ReadWindow(InferContext& c, size_t n, const Dims* w, bool kernel_from_w) {
  Window win;
  if (auto k = c.attr_ints("kernel_shape")) {
    win.kernel = *k;
  } else if (w != nullptr && w->size() == n + 2) {
    for (size_t i = 0; i < n; ++i) {
      auto d = (*w)[i + 2].AsConstant();
      win.kernel_known = win.kernel_known && d.has_value();
      win.kernel.push_back(d.value_or(1));
    }
  } else if (kernel_from_w) {
    win.kernel_known = false;  // W's shape is unknown: so are the output's spatial dims
    win.kernel.assign(n, 1);
  } else {
    return Bad(c, "no kernel_shape");
  }
  win.strides = c.attr_ints("strides").value_or(std::vector<int64_t>(n, 1));
  win.dilations = c.attr_ints("dilations").value_or(std::vector<int64_t>(n, 1));
  win.pads = c.attr_ints("pads").value_or(std::vector<int64_t>(2 * n, 0));
  win.auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (win.kernel.size() != n || win.strides.size() != n || win.dilations.size() != n ||
      win.pads.size() != 2 * n) {
    return Bad(c, "kernel_shape/strides/dilations/pads do not match the input's rank");
  }
  for (size_t i = 0; i < n; ++i) {
    if (win.kernel[i] < 1 || win.strides[i] < 1 || win.dilations[i] < 1 || win.pads[i] < 0 ||
        win.pads[i + n] < 0 || win.kernel[i] > (int64_t{1} << 31) ||
        win.strides[i] > (int64_t{1} << 31) || win.dilations[i] > (int64_t{1} << 31) ||
        win.pads[i] > (int64_t{1} << 40) || win.pads[i + n] > (int64_t{1} << 40)) {
      return Bad(c, "invalid kernel_shape/strides/dilations/pads");
    }
  }
  return win;
}

// Output spatial dims of a convolution or pooling window over `in`.
Dims WindowOutput(InferContext& c, const Dims& in, const Window& w, bool ceil_mode) {
  Dims out;
  for (size_t i = 0; i < in.size(); ++i) {
    const DimExpr stride(w.strides[i]);
    if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      out.push_back(c.CeilDiv(in[i], stride));
      continue;
    }
    if (!w.kernel_known) {
      out.push_back(c.Unknown());
      continue;
    }
    const int64_t pads = w.auto_pad == "VALID" ? 0 : w.pads[i] + w.pads[i + in.size()];
    const int64_t effective_kernel = (w.kernel[i] - 1) * w.dilations[i] + 1;
    const DimExpr span = c.Sub(c.Add(in[i], pads), effective_kernel);
    const DimExpr steps = ceil_mode ? c.CeilDiv(span, stride) : c.FloorDiv(span, stride);
    out.push_back(c.Add(steps, 1));
  }
  return out;
}

// Conv-like: x at `xi`, W at `wi`, output dtype `dtype`.
Status ConvLike(InferContext& c, size_t xi, size_t wi, int32_t dtype) {
  SymTensor& y = c.out(0);
  y.dtype = dtype;
  const Dims* x = c.shape(xi);
  const Dims* w = c.shape(wi);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  if (w != nullptr && w->size() != x->size()) return Bad(c, "weight rank differs from input rank");
  const size_t n = x->size() - 2;
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, w, /*kernel_from_w=*/true));
  Dims d{(*x)[0]};
  d.push_back(w != nullptr ? (*w)[0] : c.Unknown());
  const Dims spatial(x->begin() + 2, x->end());
  for (DimExpr& e : WindowOutput(c, spatial, win, false)) d.push_back(std::move(e));
  c.out(0).shape = std::move(d);
  return Status::Ok();
}

}  // namespace

Status Conv(InferContext& c) { return ConvLike(c, 0, 1, c.dtype(0)); }
Status ConvInteger(InferContext& c) { return ConvLike(c, 0, 1, core::kInt32); }
Status QLinearConv(InferContext& c) {
  return ConvLike(c, 0, 3, c.dtype(7) != 0 ? c.dtype(7) : c.dtype(0));
}

Status ConvTranspose(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* w = c.shape(1);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  if (w != nullptr && w->size() != x->size()) return Bad(c, "weight rank differs from input rank");
  const size_t n = x->size() - 2;
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, w, /*kernel_from_w=*/true));
  const int64_t group = c.attr_int("group", 1);
  if (group < 1 || group > (int64_t{1} << 31)) return Bad(c, "invalid group");
  Dims d{(*x)[0]};
  d.push_back(w != nullptr && w->size() >= 2 ? c.Mul((*w)[1], group) : c.Unknown());
  if (auto os = c.attr_ints("output_shape")) {
    if (os->size() < n) return Bad(c, "output_shape shorter than the spatial rank");
    for (size_t i = os->size() - n; i < os->size(); ++i) {
      if ((*os)[i] < 0) return Bad(c, "negative output_shape");
      d.emplace_back((*os)[i]);
    }
    c.out(0).shape = std::move(d);
    return Status::Ok();
  }
  const auto out_pad = c.attr_ints("output_padding").value_or(std::vector<int64_t>(n, 0));
  if (out_pad.size() != n) return Bad(c, "output_padding does not match the rank");
  for (size_t i = 0; i < n; ++i) {
    const DimExpr& in = (*x)[i + 2];
    if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER") {
      d.push_back(c.Mul(in, win.strides[i]));
      continue;
    }
    if (out_pad[i] < 0 || out_pad[i] > (int64_t{1} << 31)) return Bad(c, "invalid output_padding");
    if (!win.kernel_known) {
      d.push_back(c.Unknown());
      continue;
    }
    const int64_t pads = win.auto_pad == "VALID" ? 0 : win.pads[i] + win.pads[i + n];
    const int64_t k = (win.kernel[i] - 1) * win.dilations[i] + 1;
    DimExpr e = c.Mul(c.Sub(in, 1), win.strides[i]);
    e = c.Add(e, out_pad[i] + k - pads);
    d.push_back(e);
  }
  c.out(0).shape = std::move(d);
  return Status::Ok();
}

Status Pool(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  const size_t n = x->size() - 2;
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, nullptr, /*kernel_from_w=*/false));
  Dims d{(*x)[0], (*x)[1]};
  const Dims spatial(x->begin() + 2, x->end());
  for (DimExpr& e : WindowOutput(c, spatial, win, c.attr_int("ceil_mode", 0) != 0)) {
    d.push_back(std::move(e));
  }
  if (c.has_output(1)) c.Set(1, kI64, d);
  c.out(0).shape = std::move(d);
  return Status::Ok();
}

// MaxUnpool (opset 9, 11): X [N, C, D1..Dn], I (indices, X's shape) [, output_shape] ->
// output_shape's elements when given (unknown sizes when they are not constant), else
// [N, C, (Di - 1) * stride_i + kernel_i - pad_begin_i - pad_end_i]. memest's own rule: ONNX
// 1.12's inference for it reads I's dim 1 without checking I's rank (a fuzzer crash).
Status MaxUnpool(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 3) return Bad(c, "input rank below 3");
  if (const Dims* ind = c.shape(1); ind != nullptr && ind->size() != x->size()) {
    return Bad(c, "indices rank differs from the input's");
  }
  const size_t n = x->size() - 2;
  if (c.has_input(2)) {
    if (const Dims* os = c.shape(2); os != nullptr && os->size() != 1) {
      return Bad(c, "output_shape is not rank 1");
    }
    const Dims* v = c.values(2);
    if (v != nullptr && v->size() != x->size()) {
      return Bad(c, "output_shape does not have one element per input dim");
    }
    Dims d;
    for (size_t i = 0; i < x->size(); ++i) d.push_back(v != nullptr ? (*v)[i] : c.Unknown());
    y.shape = std::move(d);
    return Status::Ok();
  }
  MEMEST_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, nullptr, /*kernel_from_w=*/false));
  Dims d{(*x)[0], (*x)[1]};
  for (size_t i = 0; i < n; ++i) {
    const DimExpr scaled = c.Mul(c.Sub((*x)[i + 2], 1), win.strides[i]);
    d.push_back(c.Add(scaled, win.kernel[i] - win.pads[i] - win.pads[i + n]));
  }
  y.shape = std::move(d);
  return Status::Ok();
}

Status GlobalPool(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() < 2) return Bad(c, "input rank below 2");
  Dims d{(*x)[0], (*x)[1]};
  d.resize(x->size(), DimExpr(1));
  y.shape = std::move(d);
  return Status::Ok();
}

// RoiAlign (opset 10+): X [N, C, H, W], rois [R, 4], batch_indices [R] ->
// [R, C, output_height, output_width]. MaxRoiPool: X, rois [R, 5] -> [R, C, pooled_shape].
Status RoiAlign(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* rois = c.shape(1);
  if (x == nullptr || rois == nullptr) return Status::Ok();
  if (x->size() != 4 || rois->size() != 2) return Bad(c, "expects X of rank 4 and rois of rank 2");
  const bool max_roi = c.node().op_type == "MaxRoiPool";
  DimExpr h(1), w(1);
  if (max_roi) {
    const auto pooled = c.attr_ints("pooled_shape");
    if (!pooled || pooled->size() != 2 || (*pooled)[0] < 1 || (*pooled)[1] < 1) {
      return Bad(c, "pooled_shape must hold two positive sizes");
    }
    h = DimExpr((*pooled)[0]);
    w = DimExpr((*pooled)[1]);
  } else {
    const int64_t oh = c.attr_int("output_height", 1), ow = c.attr_int("output_width", 1);
    if (oh < 1 || ow < 1) return Bad(c, "output_height/output_width must be positive");
    h = DimExpr(oh);
    w = DimExpr(ow);
  }
  y.shape = Dims{(*rois)[0], (*x)[1], h, w};
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Products.

namespace {

Status MatMulShapes(InferContext& c, size_t ai, size_t bi, int32_t dtype) {
  SymTensor& y = c.out(0);
  y.dtype = dtype;
  const Dims* a = c.shape(ai);
  const Dims* b = c.shape(bi);
  if (a == nullptr || b == nullptr) return Status::Ok();
  if (a->empty() || b->empty()) return Bad(c, "scalar operand");
  Dims x = *a, w = *b;
  const bool a_vec = x.size() == 1, b_vec = w.size() == 1;
  if (a_vec) x.insert(x.begin(), DimExpr(1));
  if (b_vec) w.push_back(DimExpr(1));
  const Dims xb(x.begin(), x.end() - 2), wb(w.begin(), w.end() - 2);
  auto batch = BroadcastTwo(c, xb, wb);
  if (!batch) return Bad(c, "batch dims do not broadcast");
  Dims d = std::move(*batch);
  if (!a_vec) d.push_back(x[x.size() - 2]);
  if (!b_vec) d.push_back(w.back());
  y.shape = std::move(d);
  return Status::Ok();
}

}  // namespace

Status MatMul(InferContext& c) { return MatMulShapes(c, 0, 1, c.dtype(0)); }
Status MatMulInteger(InferContext& c) { return MatMulShapes(c, 0, 1, core::kInt32); }
Status QLinearMatMul(InferContext& c) {
  return MatMulShapes(c, 0, 3, c.dtype(7) != 0 ? c.dtype(7) : c.dtype(0));
}

Status Gemm(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* a = c.shape(0);
  const Dims* b = c.shape(1);
  if (a == nullptr || b == nullptr) return Status::Ok();
  if (a->size() != 2 || b->size() != 2) return Bad(c, "operands must be 2-D");
  const bool ta = c.attr_int("transA", 0) != 0, tb = c.attr_int("transB", 0) != 0;
  y.shape = Dims{(*a)[ta ? 1 : 0], (*b)[tb ? 0 : 1]};
  return Status::Ok();
}

Status Einsum(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  std::string eq;
  for (char ch : c.attr_string("equation", "")) {
    if (ch != ' ') eq += ch;
  }
  if (eq.empty()) return Bad(c, "no equation");
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.num_inputs()) return Bad(c, "equation does not match the inputs");
  std::map<char, DimExpr> label_dim;
  std::map<char, int> count;
  std::optional<Dims> ellipsis;
  for (size_t k = 0; k < terms.size(); ++k) {
    const Dims* s = c.shape(k);
    if (s == nullptr) return Status::Ok();
    std::string t = terms[k];
    const size_t dots = t.find("...");
    size_t letters = 0;
    for (char ch : t) letters += std::isalpha(static_cast<unsigned char>(ch)) ? 1 : 0;
    if (letters + (dots == std::string::npos ? 0 : 3) != t.size()) return Bad(c, "bad term");
    if (dots == std::string::npos ? letters != s->size() : letters > s->size()) {
      return Bad(c, "term rank does not match its input");
    }
    const size_t ell_rank = s->size() - letters;
    size_t axis = 0;
    for (size_t i = 0; i < t.size();) {
      if (i == dots) {
        Dims e(s->begin() + static_cast<std::ptrdiff_t>(axis),
               s->begin() + static_cast<std::ptrdiff_t>(axis + ell_rank));
        if (!ellipsis) {
          ellipsis = std::move(e);
        } else {
          auto b = BroadcastTwo(c, *ellipsis, e);
          if (!b) return Bad(c, "ellipsis dims do not broadcast");
          ellipsis = std::move(b);
        }
        axis += ell_rank;
        i += 3;
        continue;
      }
      const char l = t[i];
      ++count[l];
      auto [it, inserted] = label_dim.emplace(l, (*s)[axis]);
      if (!inserted && it->second == DimExpr(1)) it->second = (*s)[axis];
      ++axis;
      ++i;
    }
  }
  Dims d;
  if (arrow == std::string::npos) {  // implicit: ellipsis, then labels seen once, sorted
    if (ellipsis) d = *ellipsis;
    for (const auto& [l, n] : count) {
      if (n == 1) d.push_back(label_dim[l]);
    }
  } else {
    const std::string rhs = eq.substr(arrow + 2);
    for (size_t i = 0; i < rhs.size();) {
      if (rhs.compare(i, 3, "...") == 0) {
        if (ellipsis) d.insert(d.end(), ellipsis->begin(), ellipsis->end());
        i += 3;
        continue;
      }
      auto it = label_dim.find(rhs[i]);
      if (it == label_dim.end()) return Bad(c, "output label not in any input");
      d.push_back(it->second);
      ++i;
    }
  }
  y.shape = std::move(d);
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Shape manipulation.

Status Reshape(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  std::optional<Dims> target;
  if (auto a = c.attr_ints("shape")) {  // opset < 5
    target.emplace(a->begin(), a->end());
  } else if (const Dims* v = c.values(1)) {
    target = *v;
  }
  if (!target) {
    const Dims* ts = c.shape(1);
    if (ts != nullptr && ts->size() == 1) {
      if (auto n = (*ts)[0].AsConstant();
          n && *n >= 0 && *n <= static_cast<int64_t>(core::kMaxRank)) {
        Dims d;
        for (int64_t i = 0; i < *n; ++i) d.push_back(c.Unknown());
        y.shape = std::move(d);
      }
    }
    return Status::Ok();
  }
  const bool allowzero = c.attr_int("allowzero", 0) != 0;
  Dims d;
  std::optional<size_t> infer;
  for (size_t i = 0; i < target->size(); ++i) {
    const DimExpr& e = (*target)[i];
    const auto k = e.AsConstant();
    if (k && *k == -1) {
      if (infer) return Bad(c, "more than one -1 in the target shape");
      infer = i;
      d.emplace_back(1);
    } else if (k && *k == 0 && !allowzero) {
      if (x == nullptr) {
        d.push_back(c.Unknown());
      } else if (i < x->size()) {
        d.push_back((*x)[i]);
      } else {
        return Bad(c, "0 in the target shape past the input's rank");
      }
    } else if (k && *k < 0) {
      return Bad(c, "negative dim in the target shape");
    } else {
      d.push_back(e);
    }
  }
  if (infer) {
    if (x == nullptr) {
      d[*infer] = c.Unknown();
    } else {
      d[*infer] = c.ExactDiv(c.Product(*x), c.Product(d));
    }
  }
  y.shape = std::move(d);
  KeepValues(c, 0);
  return Status::Ok();
}

Status Flatten(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  // Flatten's axis lies in [-r, r]; a negative one counts from r.
  const int64_t a = c.attr_int("axis", 1);
  const auto r = static_cast<int64_t>(x->size());
  if (a < -r || a > r) return Bad(c, "axis out of range");
  const auto axis = static_cast<size_t>(a < 0 ? a + r : a);
  const std::span<const DimExpr> all(*x);
  y.shape = Dims{c.Product(all.subspan(0, axis)), c.Product(all.subspan(axis))};
  KeepValues(c, 0);
  return Status::Ok();
}

Status Squeeze(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const IntList axes = AttrOrInput(c, "axes", 1);
  if (axes.given && !axes.values) return Status::Ok();
  Dims d;
  if (axes.given && !axes.values->empty()) {
    MEMEST_ASSIGN_OR_RETURN(auto drop, NormAxes(c, *axes.values, x->size()));
    for (size_t i = 0; i < x->size(); ++i) {
      if (!std::binary_search(drop.begin(), drop.end(), i)) {
        d.push_back((*x)[i]);
      } else if (auto k = (*x)[i].AsConstant(); k && *k != 1) {
        return Bad(c, "squeezed dim is not 1");
      }
    }
  } else {
    for (const DimExpr& e : *x) {
      auto k = e.AsConstant();
      if (!k) return Status::Ok();  // a symbolic dim might be 1
      if (*k != 1) d.push_back(e);
    }
  }
  y.shape = std::move(d);
  KeepValues(c, 0);
  return Status::Ok();
}

Status Unsqueeze(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const IntList axes = AttrOrInput(c, "axes", 1);
  if (x == nullptr || !axes.values) return Status::Ok();
  const size_t rank = x->size() + axes.values->size();
  if (rank > core::kMaxRank) return Bad(c, "rank too large");
  MEMEST_ASSIGN_OR_RETURN(auto add, NormAxes(c, *axes.values, rank));
  Dims d;
  size_t k = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (std::binary_search(add.begin(), add.end(), i)) {
      d.emplace_back(1);
    } else {
      d.push_back((*x)[k++]);
    }
  }
  y.shape = std::move(d);
  KeepValues(c, 0);
  return Status::Ok();
}

Status Transpose(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  std::vector<int64_t> perm(x->size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(perm.size() - 1 - i);
  if (auto p = c.attr_ints("perm")) perm = *p;
  if (perm.size() != x->size()) return Bad(c, "perm does not match the rank");
  std::vector<bool> seen(perm.size(), false);
  Dims d;
  for (int64_t p : perm) {
    auto a = NormAxis(p, x->size());
    if (!a || seen[*a]) return Bad(c, "perm is not a permutation");
    seen[*a] = true;
    d.push_back((*x)[*a]);
  }
  y.shape = std::move(d);
  std::vector<StridedAxis> view;
  for (int64_t p : perm) view.push_back({*NormAxis(p, x->size()), 0, 1});
  FoldStrided(c, view);
  return Status::Ok();
}

Status Expand(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* target = c.values(1);
  if (x == nullptr) return Status::Ok();
  if (target == nullptr) {
    const Dims* ts = c.shape(1);
    if (ts != nullptr && ts->size() == 1) {
      if (auto n = (*ts)[0].AsConstant();
          n && *n >= 0 && *n <= static_cast<int64_t>(core::kMaxRank)) {
        Dims d;
        for (size_t i = 0; i < std::max(x->size(), static_cast<size_t>(*n)); ++i) {
          d.push_back(c.Unknown());
        }
        y.shape = std::move(d);
      }
    }
    return Status::Ok();
  }
  if (target->size() > core::kMaxRank) return Bad(c, "rank too large");
  auto b = BroadcastTwo(c, *x, *target);
  if (!b) return Bad(c, "shape does not broadcast");
  y.shape = std::move(*b);
  FoldElementwise(c, 1, [](std::span<const DimExpr> a) { return std::optional<DimExpr>(a[0]); });
  return Status::Ok();
}

Status Tile(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const Dims* r = c.values(1);
  Dims d;
  if (r != nullptr && r->size() != x->size()) return Bad(c, "repeats do not match the rank");
  for (size_t i = 0; i < x->size(); ++i) {
    d.push_back(r != nullptr ? c.Mul((*x)[i], (*r)[i]) : c.Unknown());
  }
  y.shape = std::move(d);
  return Status::Ok();
}

Status Pad(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const size_t r = x->size();
  std::optional<Dims> pads;
  if (auto a = c.attr_ints("pads")) {
    pads.emplace(a->begin(), a->end());
  } else if (auto p = c.attr_ints("paddings")) {
    pads.emplace(p->begin(), p->end());
  } else if (const Dims* v = c.values(1)) {
    pads = *v;
  }
  std::vector<size_t> axes(r);
  std::iota(axes.begin(), axes.end(), size_t{0});
  if (c.has_input(3)) {
    auto a = c.ints(3);
    if (!a) {
      pads.reset();
    } else {
      axes.clear();
      for (int64_t ax : *a) {
        auto n = NormAxis(ax, r);
        if (!n) return Bad(c, "axis out of range");
        axes.push_back(*n);
      }
    }
  }
  Dims d = *x;
  if (!pads) {
    for (size_t a : axes) d[a] = c.Unknown();
  } else {
    if (pads->size() != 2 * axes.size()) return Bad(c, "pads do not match the axes");
    for (size_t k = 0; k < axes.size(); ++k) {
      d[axes[k]] = c.Add(d[axes[k]], c.Add((*pads)[k], (*pads)[k + axes.size()]));
    }
  }
  y.shape = std::move(d);
  return Status::Ok();
}

namespace {

// floor(dim * scale), exactly: constants in double, a symbolic dim when scale or 1/scale is an
// integer.
DimExpr ScaleDim(InferContext& c, const DimExpr& dim, double scale) {
  if (!std::isfinite(scale) || scale < 0) return c.Unknown();
  if (auto k = dim.AsConstant()) {
    const double v = std::floor(static_cast<double>(*k) * scale);
    if (v < 0 || v > kMaxExactDouble) return c.Unknown();
    return static_cast<int64_t>(v);
  }
  if (scale >= 1 && std::floor(scale) == scale && scale <= kMaxExactDouble) {
    return c.Mul(dim, static_cast<int64_t>(scale));
  }
  if (scale > 0 && scale < 1) {
    const double inv = std::round(1.0 / scale);
    if (inv <= kMaxExactDouble && 1.0 / inv == scale) {
      return c.FloorDiv(dim, static_cast<int64_t>(inv));
    }
  }
  return c.Unknown();
}

}  // namespace

Status Resize(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const size_t r = x->size();
  const bool upsample = c.node().op_type == "Upsample";
  size_t scales_in = 2;
  if (upsample || c.opset() < 11) scales_in = 1;
  // sizes (Resize >= 11): input 3, used when present and non-empty.
  if (!upsample && c.opset() >= 11 && c.has_input(3)) {
    const Dims* sizes = c.values(3);
    const Dims* ss = c.shape(3);
    if (sizes != nullptr && !sizes->empty()) {
      Dims d = *x;
      std::vector<size_t> axes(r);
      std::iota(axes.begin(), axes.end(), size_t{0});
      if (auto a = c.attr_ints("axes")) {
        axes.clear();
        for (int64_t ax : *a) {
          auto n = NormAxis(ax, r);
          if (!n) return Bad(c, "axis out of range");
          axes.push_back(*n);
        }
      }
      if (sizes->size() != axes.size()) return Bad(c, "sizes do not match the rank");
      for (size_t k = 0; k < axes.size(); ++k) d[axes[k]] = (*sizes)[k];
      y.shape = std::move(d);
      return Status::Ok();
    }
    if (sizes == nullptr && !(ss != nullptr && ss->size() == 1 && (*ss)[0] == DimExpr(0))) {
      Dims d;
      for (size_t i = 0; i < r; ++i) d.push_back(c.Unknown());
      y.shape = std::move(d);
      return Status::Ok();
    }
  }
  std::optional<std::vector<double>> scales;
  if (auto a = c.attr_floats("scales")) {
    scales.emplace(a->begin(), a->end());
  } else if (const auto* f = c.float_values(scales_in)) {
    scales = *f;
  }
  if (!scales) {
    Dims d;
    for (size_t i = 0; i < r; ++i) d.push_back(c.Unknown());
    y.shape = std::move(d);
    return Status::Ok();
  }
  if (scales->size() != r) return Bad(c, "scales do not match the rank");
  Dims d;
  for (size_t i = 0; i < r; ++i) d.push_back(ScaleDim(c, (*x)[i], (*scales)[i]));
  y.shape = std::move(d);
  return Status::Ok();
}

Status DepthToSpace(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const int64_t b = c.attr_int("blocksize", 0);
  if (x->size() != 4 || b < 1 || b > (int64_t{1} << 20))
    return Bad(c, "needs rank 4, blocksize >= 1");
  y.shape = Dims{(*x)[0], c.ExactDiv((*x)[1], b * b), c.Mul((*x)[2], b), c.Mul((*x)[3], b)};
  return Status::Ok();
}

Status SpaceToDepth(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const int64_t b = c.attr_int("blocksize", 0);
  if (x->size() != 4 || b < 1 || b > (int64_t{1} << 20))
    return Bad(c, "needs rank 4, blocksize >= 1");
  y.shape = Dims{(*x)[0], c.Mul((*x)[1], b * b), c.ExactDiv((*x)[2], b), c.ExactDiv((*x)[3], b)};
  return Status::Ok();
}

Status Concat(InferContext& c) {
  SymTensor& y = c.out(0);
  for (size_t i = 0; i < c.num_inputs() && y.dtype == 0; ++i) y.dtype = c.dtype(i);
  const int64_t axis_attr = c.attr_int("axis", std::numeric_limits<int64_t>::min());
  if (axis_attr == std::numeric_limits<int64_t>::min()) return Bad(c, "no axis");
  std::optional<Dims> d;
  std::optional<size_t> axis;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const Dims* s = c.shape(i);
    if (s == nullptr) return Status::Ok();
    if (!d) {
      axis = NormAxis(axis_attr, s->size());
      if (!axis) return Bad(c, "axis out of range");
      d = *s;
      continue;
    }
    if (s->size() != d->size()) return Bad(c, "inputs of different ranks");
    for (size_t k = 0; k < s->size(); ++k) {
      if (k == *axis) {
        (*d)[k] = c.Add((*d)[k], (*s)[k]);
      } else if (!(*d)[k].IsConstant() && (*s)[k].IsConstant()) {
        (*d)[k] = (*s)[k];
      }
    }
  }
  if (!d) return Status::Ok();
  y.shape = std::move(d);
  // Elements of 1-D concatenations (shape vectors); an input of known length whose elements
  // are not known contributes unknowns.
  if (y.shape->size() != 1 || !ConstNumel(*y.shape)) return Status::Ok();
  Dims vals;
  std::vector<double> floats;
  bool all_floats = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const Dims* v = c.values(i);
    const auto* f = c.float_values(i);
    all_floats = all_floats && f != nullptr;
    if (f != nullptr) floats.insert(floats.end(), f->begin(), f->end());
    if (v != nullptr) {
      vals.insert(vals.end(), v->begin(), v->end());
      continue;
    }
    auto n = ConstNumel(*c.shape(i));
    if (!n) return Status::Ok();
    for (size_t k = 0; k < *n; ++k) vals.push_back(c.Unknown());
  }
  y.values = std::move(vals);
  if (all_floats) y.float_values = std::move(floats);
  return Status::Ok();
}

Status Split(InferContext& c) {
  const size_t n = c.num_outputs();
  for (size_t i = 0; i < n; ++i) c.out(i).dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr || n == 0) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", 0), x->size());
  if (!axis) return Bad(c, "axis out of range");
  const DimExpr& dim = (*x)[*axis];
  Dims sizes;
  const IntList split = AttrOrInput(c, "split", 1);
  if (split.given && !split.values) {
    const Dims* v = c.values(1);
    if (v == nullptr) {
      for (size_t i = 0; i < n; ++i) sizes.push_back(c.Unknown());
    } else {
      sizes = *v;
    }
  } else if (split.given && !split.values->empty()) {
    sizes.assign(split.values->begin(), split.values->end());
  } else {
    const int64_t parts = c.attr_int("num_outputs", static_cast<int64_t>(n));
    if (parts < 1 || static_cast<size_t>(parts) != n) return Bad(c, "num_outputs mismatch");
    const auto k = dim.AsConstant();
    if (c.attr("num_outputs") != nullptr && k && *k % parts != 0) {
      const int64_t chunk = (*k + parts - 1) / parts;  // opset 18: last chunk smaller
      for (int64_t i = 0; i < parts; ++i)
        sizes.emplace_back(std::max<int64_t>(0, std::min(chunk, *k - i * chunk)));
    } else {
      for (int64_t i = 0; i < parts; ++i) sizes.push_back(c.ExactDiv(dim, parts));
    }
  }
  if (sizes.size() != n) return Bad(c, "split sizes do not match the outputs");
  const Dims* v = c.values(0);
  auto ks = [&]() -> std::optional<std::vector<int64_t>> {
    std::vector<int64_t> out;
    for (const DimExpr& s : sizes) {
      auto k = s.AsConstant();
      if (!k || *k < 0) return std::nullopt;
      out.push_back(*k);
    }
    return out;
  }();
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    Dims d = *x;
    d[*axis] = sizes[i];
    c.Set(i, c.dtype(0), d);
    if (v != nullptr && x->size() == 1 && ks &&
        offset + static_cast<size_t>((*ks)[i]) <= v->size()) {
      c.out(i).values = Dims(v->begin() + static_cast<std::ptrdiff_t>(offset),
                             v->begin() + static_cast<std::ptrdiff_t>(offset + (*ks)[i]));
      offset += static_cast<size_t>((*ks)[i]);
    }
  }
  return Status::Ok();
}

namespace {

// ONNX's start/end normalization: negative values count from the end; symbolic values must be
// provably non-negative or negative.
std::optional<DimExpr> FromEnd(InferContext& c, const DimExpr& v, const DimExpr& dim) {
  if (auto k = v.AsConstant()) {
    if (*k < 0) return c.Add(dim, *k);
    return v;
  }
  if (c.table().NonNegative(v)) return v;
  if (c.table().Less(v, 0).value_or(false)) return c.Add(dim, v);
  return std::nullopt;
}

DimExpr Clamp(InferContext& c, const DimExpr& v, const DimExpr& lo, const DimExpr& hi) {
  return c.Min(c.Max(v, lo), hi);
}

}  // namespace

Status Slice(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const size_t r = x->size();
  std::optional<Dims> starts, ends;
  std::optional<std::vector<int64_t>> axes, steps;
  bool axes_unknown = false;
  if (auto s = c.attr_ints("starts")) {  // opset < 10
    starts.emplace(s->begin(), s->end());
    if (auto e = c.attr_ints("ends")) ends.emplace(e->begin(), e->end());
    axes = c.attr_ints("axes");
  } else {
    if (const Dims* v = c.values(1)) starts = *v;
    if (const Dims* v = c.values(2)) ends = *v;
    if (c.has_input(3)) {
      axes = c.ints(3);
      axes_unknown = !axes;
    }
    if (c.has_input(4)) {
      steps = c.ints(4);
      if (!steps) {
        Dims d = *x;
        if (axes) {
          for (int64_t a : *axes) {
            if (auto n = NormAxis(a, r)) d[*n] = c.Unknown();
          }
        } else {
          for (auto& e : d) e = c.Unknown();
        }
        y.shape = std::move(d);
        return Status::Ok();
      }
    }
  }
  if (!starts || !ends || axes_unknown) {
    Dims d = *x;
    if (axes) {
      for (int64_t a : *axes) {
        if (auto n = NormAxis(a, r)) d[*n] = c.Unknown();
      }
    } else {
      for (auto& e : d) e = c.Unknown();
    }
    y.shape = std::move(d);
    return Status::Ok();
  }
  const size_t n = starts->size();
  if (ends->size() != n) return Bad(c, "starts and ends differ in length");
  if (!axes) {
    axes.emplace(n);
    std::iota(axes->begin(), axes->end(), int64_t{0});
  }
  if (!steps) steps.emplace(n, 1);
  if (axes->size() != n || steps->size() != n) return Bad(c, "axes/steps length mismatch");
  Dims d = *x;
  std::vector<bool> seen(r, false);
  // Per axis: constant start and step, for folding elements (FoldStrided).
  std::vector<StridedAxis> view(r);
  for (size_t a = 0; a < r; ++a) view[a].in_axis = a;
  bool foldable = true;
  for (size_t k = 0; k < n; ++k) {
    auto axis = NormAxis((*axes)[k], r);
    if (!axis || seen[*axis]) return Bad(c, "axis out of range or repeated");
    seen[*axis] = true;
    const int64_t step = (*steps)[k];
    if (step == 0) return Bad(c, "step 0");
    const DimExpr dim = (*x)[*axis];
    auto s = FromEnd(c, (*starts)[k], dim);
    auto e = FromEnd(c, (*ends)[k], dim);
    if (!s || !e) {
      d[*axis] = c.Unknown();
      foldable = false;
      continue;
    }
    DimExpr len, first;
    if (step > 0) {
      first = Clamp(c, *s, 0, dim);
      len = c.Max(0, c.CeilDiv(c.Sub(Clamp(c, *e, 0, dim), first), step));
    } else {
      const DimExpr last = c.Sub(dim, 1);
      first = Clamp(c, *s, 0, last);
      len = c.Max(0, c.CeilDiv(c.Sub(first, Clamp(c, *e, -1, last)),
                               step == std::numeric_limits<int64_t>::min()
                                   ? std::numeric_limits<int64_t>::max()
                                   : -step));
    }
    d[*axis] = len;
    const auto start = first.AsConstant();
    foldable = foldable && start.has_value();
    view[*axis].start = start.value_or(0);
    view[*axis].step = step;
  }
  y.shape = std::move(d);
  if (foldable) FoldStrided(c, view);  // elements of a sliced constant tensor
  return Status::Ok();
}

Status Gather(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* idx = c.shape(1);
  if (x == nullptr || idx == nullptr) return Status::Ok();
  if (x->empty()) return Bad(c, "scalar data");
  auto axis = NormAxis(c.attr_int("axis", 0), x->size());
  if (!axis) return Bad(c, "axis out of range");
  Dims d(x->begin(), x->begin() + static_cast<std::ptrdiff_t>(*axis));
  d.insert(d.end(), idx->begin(), idx->end());
  d.insert(d.end(), x->begin() + static_cast<std::ptrdiff_t>(*axis) + 1, x->end());
  if (d.size() > core::kMaxRank) return Bad(c, "rank too large");
  y.shape = d;
  // Fold: data elements known, indices constant.
  const Dims* v = c.values(0);
  auto ind = c.ints(1);
  auto xd = ConstDims(*x);
  if (v == nullptr || !ind || !xd || !ConstNumel(d)) return Status::Ok();
  size_t outer = 1, inner = 1;
  for (size_t i = 0; i < *axis; ++i) outer *= static_cast<size_t>((*xd)[i]);
  for (size_t i = *axis + 1; i < xd->size(); ++i) inner *= static_cast<size_t>((*xd)[i]);
  const int64_t dim = (*xd)[*axis];
  Dims vals;
  for (size_t o = 0; o < outer; ++o) {
    for (int64_t j : *ind) {
      if (j < 0) j += dim;
      if (j < 0 || j >= dim) return Bad(c, "index out of range");
      for (size_t k = 0; k < inner; ++k) {
        const size_t src = (o * static_cast<size_t>(dim) + static_cast<size_t>(j)) * inner + k;
        if (src >= v->size()) return Status::Ok();
        vals.push_back((*v)[src]);
      }
    }
  }
  y.values = std::move(vals);
  return Status::Ok();
}

Status GatherElements(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  if (const Dims* idx = c.shape(1)) y.shape = *idx;
  return Status::Ok();
}

Status GatherND(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* idx = c.shape(1);
  if (x == nullptr || idx == nullptr) return Status::Ok();
  if (idx->empty()) return Bad(c, "scalar indices");
  const int64_t b = c.attr_int("batch_dims", 0);
  auto m = idx->back().AsConstant();
  if (!m) return Status::Ok();
  if (b < 0 || *m < 0 || static_cast<uint64_t>(b) + static_cast<uint64_t>(*m) > x->size()) {
    return Bad(c, "indices do not fit the data's rank");
  }
  Dims d(idx->begin(), idx->end() - 1);
  d.insert(d.end(), x->begin() + b + *m, x->end());
  y.shape = std::move(d);
  return Status::Ok();
}

Status Scatter(InferContext& c) { return Unary(c); }

Status Compress(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const int64_t axis_attr = c.attr_int("axis", std::numeric_limits<int64_t>::min());
  std::optional<size_t> axis;
  if (axis_attr != std::numeric_limits<int64_t>::min()) {
    axis = NormAxis(axis_attr, x->size());
    if (!axis) return Bad(c, "axis out of range");
  }
  // The selected count: known when the condition is a constant and the selected dim is too
  // (a condition shorter than the dim selects from its prefix).
  DimExpr count = c.DataDependent("selected");
  const DimExpr dim = axis ? (*x)[*axis] : c.Product(*x);
  auto cond = c.ints(1);
  if (cond && dim.IsConstant()) {
    const auto n = static_cast<size_t>(
        std::min<int64_t>(*dim.AsConstant(), static_cast<int64_t>(cond->size())));
    count = static_cast<int64_t>(std::count_if(cond->begin(),
                                               cond->begin() + static_cast<std::ptrdiff_t>(n),
                                               [](int64_t e) { return e != 0; }));
  }
  if (!axis) {
    y.shape = Dims{count};
    return Status::Ok();
  }
  Dims d = *x;
  d[*axis] = count;
  y.shape = std::move(d);
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Shape values and generators.

Status Shape(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  const auto r = static_cast<int64_t>(x->size());
  auto norm = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
  const int64_t start = norm(c.attr_int("start", 0));
  const int64_t end = std::max(start, norm(c.attr_int("end", r)));
  y.shape = Dims{end - start};
  y.values = Dims(x->begin() + start, x->begin() + end);
  return Status::Ok();
}

Status Size(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  y.shape = Dims{};
  if (const Dims* x = c.shape(0)) y.values = Dims{c.Product(*x)};
  return Status::Ok();
}

Status Constant(InferContext& c) {
  SymTensor& y = c.out(0);
  auto ints = [&](std::vector<int64_t> v, bool scalar) {
    y.dtype = kI64;
    y.shape = scalar ? Dims{} : Dims{static_cast<int64_t>(v.size())};
    if (v.size() <= core::kMaxTrackedElements) y.values.emplace(v.begin(), v.end());
  };
  auto floats = [&](std::vector<double> v, bool scalar) {
    y.dtype = core::kFloat;
    y.shape = scalar ? Dims{} : Dims{static_cast<int64_t>(v.size())};
    if (v.size() <= core::kMaxTrackedElements) {
      y.values = IntegralValues(v);
      y.float_values = std::move(v);
    }
  };
  if (const auto* a = c.attr("value"); a != nullptr && a->has_t()) {
    y = ConstantType(a->t());
  } else if (const auto* s = c.attr("sparse_value"); s != nullptr && s->has_sparse_tensor()) {
    const auto& st = s->sparse_tensor();
    y.dtype = core::IsKnownDType(st.values().data_type()) ? st.values().data_type() : 0;
    Dims d;
    for (int64_t x : st.dims()) {
      if (x < 0) return Bad(c, "negative dim");
      d.emplace_back(x);
    }
    if (d.size() <= core::kMaxRank) y.shape = std::move(d);
  } else if (const auto* i = c.attr("value_int"); i != nullptr) {
    ints({i->i()}, true);
  } else if (auto is = c.attr_ints("value_ints")) {
    ints(std::move(*is), false);
  } else if (const auto* f = c.attr("value_float"); f != nullptr) {
    floats({static_cast<double>(f->f())}, true);
  } else if (auto fs = c.attr_floats("value_floats")) {
    floats(std::vector<double>(fs->begin(), fs->end()), false);
  } else if (c.attr("value_string") != nullptr) {
    y.dtype = core::kString;
    y.shape = Dims{};
  } else if (const auto* ss = c.attr("value_strings"); ss != nullptr) {
    y.dtype = core::kString;
    y.shape = Dims{static_cast<int64_t>(ss->strings_size())};
  } else {
    return Bad(c, "no value attribute");
  }
  return Status::Ok();
}

Status ConstantOfShape(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = core::kFloat;
  std::optional<DimExpr> fill(0);
  if (const auto* a = c.attr("value"); a != nullptr && a->has_t()) {
    SymTensor v = ConstantType(a->t());
    y.dtype = v.dtype;
    fill.reset();
    if (v.values && v.values->size() == 1) fill = (*v.values)[0];
  }
  const Dims* target = c.values(0);
  if (target == nullptr) {
    const Dims* ts = c.shape(0);
    if (ts != nullptr && ts->size() == 1) {
      if (auto n = (*ts)[0].AsConstant();
          n && *n >= 0 && *n <= static_cast<int64_t>(core::kMaxRank)) {
        Dims d;
        for (int64_t i = 0; i < *n; ++i) d.push_back(c.Unknown());
        y.shape = std::move(d);
      }
    }
    return Status::Ok();
  }
  if (target->size() > core::kMaxRank) return Bad(c, "rank too large");
  for (const DimExpr& e : *target) {
    if (auto k = e.AsConstant(); k && *k < 0) return Bad(c, "negative dim");
  }
  y.shape = *target;
  if (fill) {
    if (auto n = ConstNumel(*y.shape)) y.values.emplace(*n, *fill);
  }
  return Status::Ok();
}

Status Range(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  auto scalar = [&](size_t i) -> std::optional<DimExpr> {
    const Dims* v = c.values(i);
    if (v == nullptr || v->size() != 1) return std::nullopt;
    return (*v)[0];
  };
  auto fscalar = [&](size_t i) -> std::optional<double> {
    const auto* f = c.float_values(i);
    if (f != nullptr && f->size() == 1) return (*f)[0];
    if (auto k = scalar(i); k && k->IsConstant()) return static_cast<double>(*k->AsConstant());
    return std::nullopt;
  };
  const auto start = scalar(0), limit = scalar(1), delta = scalar(2);
  if (start && limit && delta && delta->IsConstant() && *delta->AsConstant() != 0) {
    const int64_t step = *delta->AsConstant();
    const DimExpr n =
        step > 0 ? c.CeilDiv(c.Sub(*limit, *start), step)
                 : c.CeilDiv(c.Sub(*start, *limit), step == std::numeric_limits<int64_t>::min()
                                                        ? std::numeric_limits<int64_t>::max()
                                                        : -step);
    const DimExpr len = c.Max(n, 0);
    y.shape = Dims{len};
    auto k = len.AsConstant();
    auto s = start->AsConstant();
    if (k && s && *k <= static_cast<int64_t>(core::kMaxTrackedElements)) {
      Dims vals;
      for (int64_t i = 0; i < *k; ++i) vals.push_back(c.Add(*s, c.Mul(i, step)));
      y.values = std::move(vals);
    }
    return Status::Ok();
  }
  const auto fs = fscalar(0), fl = fscalar(1), fd = fscalar(2);
  if (fs && fl && fd && *fd != 0) {
    const double n = std::ceil((*fl - *fs) / *fd);
    if (!std::isfinite(n) || n > kMaxExactDouble) return Bad(c, "absurd length");
    y.shape = Dims{std::max<int64_t>(0, static_cast<int64_t>(n))};
    return Status::Ok();
  }
  y.shape = Dims{c.Unknown()};
  return Status::Ok();
}

Status OneHot(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(2);
  const Dims* idx = c.shape(0);
  if (idx == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", -1), idx->size(), /*inclusive=*/true);
  if (!axis) return Bad(c, "axis out of range");
  DimExpr depth = c.Unknown();
  if (const Dims* v = c.values(1); v != nullptr && v->size() == 1) {
    depth = (*v)[0];
  } else if (const auto* f = c.float_values(1); f != nullptr && f->size() == 1) {
    if (!std::isfinite((*f)[0]) || std::fabs((*f)[0]) > kMaxExactDouble) return Bad(c, "bad depth");
    depth = static_cast<int64_t>((*f)[0]);
  }
  Dims d = *idx;
  d.insert(d.begin() + static_cast<std::ptrdiff_t>(*axis), depth);
  y.shape = std::move(d);
  return Status::Ok();
}

Status RandomShape(InferContext& c) {
  SymTensor& y = c.out(0);
  const int64_t dt = c.attr_int("dtype", core::kFloat);
  if (!core::IsKnownDType(static_cast<int32_t>(dt))) return Bad(c, "unknown dtype");
  y.dtype = static_cast<int32_t>(dt);
  auto s = c.attr_ints("shape");
  if (!s) return Bad(c, "no shape");
  if (s->size() > core::kMaxRank) return Bad(c, "rank too large");
  Dims d;
  for (int64_t x : *s) {
    if (x < 0) return Bad(c, "negative dim");
    d.emplace_back(x);
  }
  y.shape = std::move(d);
  return Status::Ok();
}

Status Multinomial(InferContext& c) {
  SymTensor& y = c.out(0);
  const int64_t dt = c.attr_int("dtype", core::kInt32);
  if (!core::IsKnownDType(static_cast<int32_t>(dt))) return Bad(c, "unknown dtype");
  y.dtype = static_cast<int32_t>(dt);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() != 2) return Bad(c, "input must be 2-D");
  const int64_t n = c.attr_int("sample_size", 1);
  if (n < 0) return Bad(c, "negative sample_size");
  y.shape = Dims{(*x)[0], n};
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Selection.

Status TopK(InferContext& c) {
  c.out(0).dtype = c.dtype(0);
  c.out(1).dtype = kI64;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", -1), x->size());
  if (!axis) return Bad(c, "axis out of range");
  DimExpr k = c.Unknown();
  if (const auto* a = c.attr("k"); a != nullptr && a->type() == onnx::AttributeProto::INT) {
    if (a->i() < 0) return Bad(c, "negative k");
    k = a->i();
  } else if (const Dims* v = c.values(1); v != nullptr && v->size() == 1) {
    k = (*v)[0];
    if (auto kc = k.AsConstant(); kc && *kc < 0) return Bad(c, "negative k");
  }
  Dims d = *x;
  d[*axis] = k;
  c.Set(0, c.dtype(0), d);
  c.Set(1, kI64, d);
  return Status::Ok();
}

Status NonZero(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = kI64;
  const Dims* x = c.shape(0);
  DimExpr count = c.DataDependent("nonzero");
  if (auto v = c.ints(0)) {
    count =
        static_cast<int64_t>(std::count_if(v->begin(), v->end(), [](int64_t e) { return e != 0; }));
  }
  y.shape = Dims{x != nullptr ? DimExpr(static_cast<int64_t>(x->size())) : c.Unknown(), count};
  return Status::Ok();
}

Status Unique(InferContext& c) {
  const Dims* x = c.shape(0);
  c.out(0).dtype = c.dtype(0);
  for (size_t i = 1; i < 4; ++i) c.out(i).dtype = kI64;
  if (x == nullptr) return Status::Ok();
  const DimExpr u = c.DataDependent("unique");
  const int64_t axis_attr = c.attr_int("axis", std::numeric_limits<int64_t>::min());
  Dims y;
  DimExpr inverse;
  if (axis_attr == std::numeric_limits<int64_t>::min()) {
    y = Dims{u};
    inverse = c.Product(*x);
  } else {
    auto axis = NormAxis(axis_attr, x->size());
    if (!axis) return Bad(c, "axis out of range");
    y = *x;
    y[*axis] = u;
    inverse = (*x)[*axis];
  }
  c.Set(0, c.dtype(0), y);
  c.Set(1, kI64, Dims{u});
  c.Set(2, kI64, Dims{inverse});
  c.Set(3, kI64, Dims{u});
  return Status::Ok();
}

Status NonMaxSuppression(InferContext& c) {
  c.Set(0, kI64, Dims{c.DataDependent("selected"), 3});
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Normalization, losses, recurrent, attention.

Status BatchNorm(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int32_t stat_dtype = c.dtype(3) != 0 ? c.dtype(3) : c.dtype(0);
  std::optional<Dims> stat;
  if (const Dims* m = c.shape(3)) {
    stat = *m;
  } else if (const Dims* x = c.shape(0); x != nullptr && x->size() >= 2) {
    stat = Dims{(*x)[1]};
  } else if (const Dims* s = c.shape(1)) {
    stat = *s;
  }
  for (size_t i = 1; i < c.num_outputs(); ++i) {
    c.out(i).dtype = stat_dtype;
    if (stat) c.out(i).shape = stat;
  }
  return Status::Ok();
}

Status LayerNorm(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int64_t stash = c.attr_int("stash_type", core::kFloat);
  if (!core::IsKnownDType(static_cast<int32_t>(stash))) return Bad(c, "unknown stash_type");
  for (size_t i = 1; i < 3; ++i) c.out(i).dtype = static_cast<int32_t>(stash);
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  auto axis = NormAxis(c.attr_int("axis", -1), x->size());
  if (!axis) return Bad(c, "axis out of range");
  Dims d = *x;
  for (size_t i = *axis; i < d.size(); ++i) d[i] = 1;
  for (size_t i = 1; i < 3; ++i) c.Set(i, static_cast<int32_t>(stash), d);
  return Status::Ok();
}

Status SoftmaxCrossEntropyLoss(InferContext& c) {
  c.out(0).dtype = c.dtype(0);
  const Dims* scores = c.shape(0);
  const Dims* labels = c.shape(1);
  if (c.has_output(1)) {
    c.out(1).dtype = c.dtype(0);
    if (scores != nullptr) c.out(1).shape = *scores;
  }
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction != "none") {
    c.out(0).shape = Dims{};
  } else if (labels != nullptr) {
    c.out(0).shape = *labels;
  }
  return Status::Ok();
}

Status NegativeLogLikelihoodLoss(InferContext& c) {
  c.out(0).dtype = c.dtype(0);
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction != "none") {
    c.out(0).shape = Dims{};
  } else if (const Dims* t = c.shape(1)) {
    c.out(0).shape = *t;
  }
  return Status::Ok();
}

Status Recurrent(InferContext& c) {
  const int32_t dt = c.dtype(0);
  for (size_t i = 0; i < c.num_outputs(); ++i) c.out(i).dtype = dt;
  const Dims* x = c.shape(0);
  if (x == nullptr) return Status::Ok();
  if (x->size() != 3) return Bad(c, "X must be 3-D");
  const bool batch_first = c.attr_int("layout", 0) != 0;
  const DimExpr seq = (*x)[batch_first ? 1 : 0];
  const DimExpr batch = (*x)[batch_first ? 0 : 1];
  const std::string direction = c.attr_string("direction", "forward");
  const DimExpr dirs(direction == "bidirectional" ? 2 : 1);
  DimExpr hidden = c.Unknown();
  if (const auto* h = c.attr("hidden_size");
      h != nullptr && h->type() == onnx::AttributeProto::INT) {
    if (h->i() < 0) return Bad(c, "negative hidden_size");
    hidden = h->i();
  } else if (const Dims* r = c.shape(2); r != nullptr && r->size() == 3) {
    hidden = (*r)[2];
  }
  c.Set(0, dt, batch_first ? Dims{batch, seq, dirs, hidden} : Dims{seq, dirs, batch, hidden});
  const Dims state = batch_first ? Dims{batch, dirs, hidden} : Dims{dirs, batch, hidden};
  for (size_t i = 1; i < c.num_outputs() && i < 3; ++i) c.Set(i, dt, state);
  return Status::Ok();
}

Status Attention(InferContext& c) {
  const int32_t dt = c.dtype(0);
  for (size_t i = 0; i < c.num_outputs(); ++i) c.out(i).dtype = i == 0 ? dt : c.dtype(1);
  const Dims* q = c.shape(0);
  const Dims* k = c.shape(1);
  const Dims* v = c.shape(2);
  if (q == nullptr || k == nullptr || v == nullptr) return Status::Ok();
  if (q->size() != k->size() || q->size() != v->size() || (q->size() != 3 && q->size() != 4)) {
    return Bad(c, "Q, K, V must all be 3-D or all 4-D");
  }
  DimExpr heads_q, heads_kv, dk, dv, lq, lkv;
  const DimExpr& b = (*q)[0];
  if (q->size() == 4) {
    heads_q = (*q)[1];
    lq = (*q)[2];
    heads_kv = (*k)[1];
    lkv = (*k)[2];
    dk = (*k)[3];
    dv = (*v)[3];
  } else {
    const int64_t hq = c.attr_int("q_num_heads", 0), hkv = c.attr_int("kv_num_heads", 0);
    if (hq < 1 || hkv < 1) return Bad(c, "3-D inputs need q_num_heads and kv_num_heads");
    heads_q = hq;
    heads_kv = hkv;
    lq = (*q)[1];
    lkv = (*k)[1];
    dk = c.ExactDiv((*k)[2], hkv);
    dv = c.ExactDiv((*v)[2], hkv);
  }
  if (q->size() == 4) {
    c.Set(0, dt, Dims{b, heads_q, lq, dv});
  } else {
    c.Set(0, dt, Dims{b, lq, c.Mul(heads_q, dv)});
  }
  DimExpr total = lkv;
  if (c.has_input(4)) {
    const Dims* past = c.shape(4);
    total = past != nullptr && past->size() == 4 ? c.Add((*past)[2], lkv) : c.Unknown();
  }
  if (c.has_output(1)) c.Set(1, c.dtype(1), Dims{b, heads_kv, total, dk});
  if (c.has_output(2)) c.Set(2, c.dtype(2), Dims{b, heads_kv, total, dv});
  if (c.has_output(3)) c.Set(3, dt, Dims{b, heads_q, lq, total});
  return Status::Ok();
}

Status GridSample(InferContext& c) {
  SymTensor& y = c.out(0);
  y.dtype = c.dtype(0);
  const Dims* x = c.shape(0);
  const Dims* grid = c.shape(1);
  if (x == nullptr || grid == nullptr) return Status::Ok();
  if (x->size() < 3 || grid->size() != x->size()) return Bad(c, "X and grid ranks do not match");
  Dims d{(*x)[0], (*x)[1]};
  d.insert(d.end(), grid->begin() + 1, grid->end() - 1);
  y.shape = std::move(d);
  return Status::Ok();
}

// -------------------------------------------------------------------------------------------
// Quantization.

Status QuantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  int32_t dt = c.has_input(2) ? c.dtype(2) : core::kUInt8;
  if (const int64_t o = c.attr_int("output_dtype", 0); o != 0) dt = static_cast<int32_t>(o);
  c.out(0).dtype = dt;
  return Status::Ok();
}

Status DequantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  const int32_t scale = c.dtype(1);
  c.out(0).dtype = core::IsFloatDType(scale) ? scale : core::kFloat;
  return Status::Ok();
}

Status DynamicQuantizeLinear(InferContext& c) {
  MEMEST_RETURN_IF_ERROR(Unary(c));
  c.out(0).dtype = core::kUInt8;
  c.Set(1, core::kFloat, Dims{});
  c.Set(2, core::kUInt8, Dims{});
  return Status::Ok();
}

}  // namespace shape
}  // namespace memest::ops
