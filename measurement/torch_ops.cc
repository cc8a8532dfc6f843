// measurement/torch_ops.cc -- the ONNX -> ATen op table (policy at the top of torch_ops.h).
//
// One entry per op type in kOps at the bottom; unary and binary element-wise ops come from two
// small families. Ops read their shape-like inputs (Reshape's shape, Slice's starts, ...) as host
// integers; the executor keeps those on the CPU (OpDef::host_inputs).
#include "measurement/torch_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

namespace memest::measurement {
namespace {

// Generated tensors (ConstantOfShape, Range) above this many elements are created on the run's
// device, like torch.zeros(..., device=x.device) in eager code; smaller ones are shape data and
// stay on the host.
constexpr int64_t kHostElements = 64;

[[noreturn]] void Fail(const std::string& message) { throw OpError(message); }

std::vector<int64_t> IntsOf(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).to(at::kLong).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

int64_t IntOf(const at::Tensor& t) {
  if (t.numel() != 1)
    Fail("expected a single integer, got " + std::to_string(t.numel()) + " values");
  return IntsOf(t)[0];
}

double FloatOf(const at::Tensor& t) {
  if (t.numel() != 1) Fail("expected a scalar, got " + std::to_string(t.numel()) + " values");
  return t.to(at::kCPU).to(at::kDouble).item<double>();
}

int64_t NormAxis(int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1)) {
    Fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  }
  return a;
}

int64_t Product(at::IntArrayRef dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// The input's dtype for a generated float32 tensor, honouring the run's float type.
at::ScalarType FloatTarget(const OpContext& c, int32_t onnx_dtype) {
  const at::ScalarType t = ToScalarType(onnx_dtype);
  return t == at::kFloat ? c.float_type : t;
}

at::Device PlaceGenerated(const OpContext& c, at::IntArrayRef sizes) {
  int64_t n = 1;
  for (int64_t d : sizes) n *= d;
  return n > kHostElements ? c.device : at::Device(at::kCPU);
}

std::vector<at::Tensor> One(at::Tensor t) { return {std::move(t)}; }

// ---------------------------------------------------------------------------------------------
// Element-wise families.

template <at::Tensor (*F)(const at::Tensor&)>
std::vector<at::Tensor> Unary(const OpContext& c) {
  return One(F(c.in[0]));
}

at::Tensor Relu(const at::Tensor& x) { return at::relu(x); }
at::Tensor Sigmoid(const at::Tensor& x) { return at::sigmoid(x); }
at::Tensor Tanh(const at::Tensor& x) { return at::tanh(x); }
at::Tensor Exp(const at::Tensor& x) { return at::exp(x); }
at::Tensor Log(const at::Tensor& x) { return at::log(x); }
at::Tensor Neg(const at::Tensor& x) { return at::neg(x); }
at::Tensor Sqrt(const at::Tensor& x) { return at::sqrt(x); }
at::Tensor Reciprocal(const at::Tensor& x) { return at::reciprocal(x); }
at::Tensor Abs(const at::Tensor& x) { return at::abs(x); }
at::Tensor Erf(const at::Tensor& x) { return at::erf(x); }
at::Tensor Floor(const at::Tensor& x) { return at::floor(x); }
at::Tensor Ceil(const at::Tensor& x) { return at::ceil(x); }
at::Tensor Round(const at::Tensor& x) { return at::round(x); }
at::Tensor Sign(const at::Tensor& x) { return at::sign(x); }
at::Tensor Sin(const at::Tensor& x) { return at::sin(x); }
at::Tensor Cos(const at::Tensor& x) { return at::cos(x); }
at::Tensor Tan(const at::Tensor& x) { return at::tan(x); }
at::Tensor Atan(const at::Tensor& x) { return at::atan(x); }
at::Tensor Not(const at::Tensor& x) { return at::logical_not(x); }
at::Tensor IsNaN(const at::Tensor& x) { return at::isnan(x); }
at::Tensor IsInf(const at::Tensor& x) { return at::isinf(x); }
at::Tensor HardSwish(const at::Tensor& x) { return at::hardswish(x); }
at::Tensor Selu(const at::Tensor& x) { return at::selu(x); }
at::Tensor Softplus(const at::Tensor& x) { return at::softplus(x); }
at::Tensor Softsign(const at::Tensor& x) { return x / (at::abs(x) + 1); }
at::Tensor Mish(const at::Tensor& x) { return at::mish(x); }
at::Tensor Identity(const at::Tensor& x) { return x; }

template <at::Tensor (*F)(const at::Tensor&, const at::Tensor&)>
std::vector<at::Tensor> Binary(const OpContext& c) {
  return One(F(c.in[0], c.in[1]));
}

at::Tensor Add(const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }
at::Tensor Sub(const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); }
at::Tensor Mul(const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); }
at::Tensor Div(const at::Tensor& a, const at::Tensor& b) {
  if (!at::isFloatingType(a.scalar_type()) && !at::isFloatingType(b.scalar_type())) {
    return at::div(a, b, "trunc");
  }
  return at::div(a, b);
}
at::Tensor Pow(const at::Tensor& a, const at::Tensor& b) {
  if (b.dim() == 0 && b.device().is_cpu()) return at::pow(a, b.item());  // x ** 2 in eager code
  return at::pow(a, b);
}
at::Tensor Equal(const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); }
at::Tensor Less(const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); }
at::Tensor LessOrEqual(const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); }
at::Tensor Greater(const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); }
at::Tensor GreaterOrEqual(const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); }
at::Tensor And(const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); }
at::Tensor Or(const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); }
at::Tensor Xor(const at::Tensor& a, const at::Tensor& b) { return at::logical_xor(a, b); }
at::Tensor BitwiseAnd(const at::Tensor& a, const at::Tensor& b) { return at::bitwise_and(a, b); }
at::Tensor BitwiseOr(const at::Tensor& a, const at::Tensor& b) { return at::bitwise_or(a, b); }

// Max / Min / Sum / Mean: variadic with broadcasting.
template <int kKind>
std::vector<at::Tensor> Variadic(const OpContext& c) {
  at::Tensor acc = c.in.at(0);
  for (size_t i = 1; i < c.in.size(); ++i) {
    if (!c.has(i)) continue;
    switch (kKind) {
      case 0:
        acc = at::maximum(acc, c.in[i]);
        break;
      case 1:
        acc = at::minimum(acc, c.in[i]);
        break;
      default:
        acc = at::add(acc, c.in[i]);
        break;
    }
  }
  if (kKind == 3) acc = acc / static_cast<double>(c.in.size());
  return One(acc);
}

std::vector<at::Tensor> Mod(const OpContext& c) {
  if (c.node.Int("fmod").value_or(0) != 0) return One(at::fmod(c.in[0], c.in[1]));
  return One(at::remainder(c.in[0], c.in[1]));
}

std::vector<at::Tensor> LeakyRelu(const OpContext& c) {
  return One(at::leaky_relu(c.in[0], c.node.Float("alpha").value_or(0.01)));
}
std::vector<at::Tensor> Elu(const OpContext& c) {
  return One(at::elu(c.in[0], c.node.Float("alpha").value_or(1.0)));
}
std::vector<at::Tensor> Celu(const OpContext& c) {
  return One(at::celu(c.in[0], c.node.Float("alpha").value_or(1.0)));
}
std::vector<at::Tensor> ThresholdedRelu(const OpContext& c) {
  return One(at::threshold(c.in[0], c.node.Float("alpha").value_or(1.0), 0.0));
}
std::vector<at::Tensor> Gelu(const OpContext& c) {
  return One(at::gelu(c.in[0], c.node.String("approximate").value_or("none")));
}
std::vector<at::Tensor> HardSigmoid(const OpContext& c) {
  const double alpha = c.node.Float("alpha").value_or(0.2);
  const double beta = c.node.Float("beta").value_or(0.5);
  if (std::abs(alpha - 1.0 / 6.0) < 1e-6 && std::abs(beta - 0.5) < 1e-6) {
    return One(at::hardsigmoid(c.in[0]));  // nn.Hardsigmoid
  }
  return One(at::clamp(c.in[0] * alpha + beta, 0.0, 1.0));
}
std::vector<at::Tensor> PRelu(const OpContext& c) {
  at::Tensor slope = c.in[1];
  const at::Tensor& x = c.in[0];
  // nn.PReLU keeps one slope per channel (or one in all); ONNX stores it broadcastable.
  if (x.dim() >= 2 && slope.numel() == x.size(1)) slope = slope.reshape({x.size(1)});
  if (slope.numel() == 1) slope = slope.reshape({1});
  return One(at::prelu(x, slope));
}

std::vector<at::Tensor> Clip(const OpContext& c) {
  c10::optional<at::Scalar> lo, hi;
  if (c.node.opset < 11) {
    if (auto v = c.node.Float("min")) lo = *v;
    if (auto v = c.node.Float("max")) hi = *v;
  } else {
    if (c.has(1)) lo = c.in[1].to(at::kCPU).item();
    if (c.has(2)) hi = c.in[2].to(at::kCPU).item();
  }
  if (!lo && !hi) return One(c.in[0]);
  if (lo && hi && lo->toDouble() == 0.0 && hi->toDouble() == 6.0) {
    return One(at::hardtanh(c.in[0], 0.0, 6.0));  // nn.ReLU6
  }
  return One(at::clamp(c.in[0], lo, hi));
}

std::vector<at::Tensor> Where(const OpContext& c) {
  at::Tensor cond = c.in[0].scalar_type() == at::kBool ? c.in[0] : c.in[0].to(at::kBool);
  return One(at::where(cond, c.in[1], c.in[2]));
}

// ---------------------------------------------------------------------------------------------
// Linear algebra.

std::vector<at::Tensor> MatMul(const OpContext& c) { return One(at::matmul(c.in[0], c.in[1])); }

std::vector<at::Tensor> Gemm(const OpContext& c) {
  const double alpha = c.node.Float("alpha").value_or(1.0);
  const double beta = c.node.Float("beta").value_or(1.0);
  const bool trans_a = c.node.Int("transA").value_or(0) != 0;
  const bool trans_b = c.node.Int("transB").value_or(0) != 0;
  const at::Tensor& a = c.in[0];
  const at::Tensor& b = c.in[1];
  if (!trans_a && trans_b && alpha == 1.0 && (beta == 1.0 || !c.has(2)) &&
      (!c.has(2) || c.in[2].dim() <= 1)) {
    // nn.Linear: y = x W^T + b.
    return One(at::linear(a, b, c.has(2) ? c.in[2] : at::Tensor()));
  }
  at::Tensor ma = trans_a ? a.t() : a;
  at::Tensor mb = trans_b ? b.t() : b;
  if (c.has(2)) return One(at::addmm(c.in[2], ma, mb, beta, alpha));
  at::Tensor y = at::mm(ma, mb);
  return One(alpha == 1.0 ? y : y * alpha);
}

std::vector<at::Tensor> Einsum(const OpContext& c) {
  auto eq = c.node.String("equation");
  if (!eq) Fail("Einsum without an equation");
  std::vector<at::Tensor> ops;
  for (size_t i = 0; i < c.in.size(); ++i) ops.push_back(c.in[i]);
  return One(at::einsum(*eq, ops));
}

// ---------------------------------------------------------------------------------------------
// Convolution and pooling.

struct Window {
  std::vector<int64_t> kernel, stride, dilation, pad_begin, pad_end;
  bool symmetric() const { return pad_begin == pad_end; }
};

// Reads kernel_shape/strides/dilations/pads/auto_pad for `n` spatial dims of input `x`.
Window ReadWindow(const OpContext& c, const at::Tensor& x, size_t n, std::vector<int64_t> kernel) {
  Window w;
  w.kernel = c.node.Ints("kernel_shape").value_or(kernel);
  if (w.kernel.size() != n) Fail("kernel_shape has " + std::to_string(w.kernel.size()) + " dims");
  w.stride = c.node.Ints("strides").value_or(std::vector<int64_t>(n, 1));
  w.dilation = c.node.Ints("dilations").value_or(std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = c.node.Ints("pads").value_or(std::vector<int64_t>(2 * n, 0));
  if (w.stride.size() != n || w.dilation.size() != n || pads.size() != 2 * n) {
    Fail("strides/dilations/pads do not match the kernel rank");
  }
  w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(n));
  w.pad_end.assign(pads.begin() + static_cast<int64_t>(n), pads.end());
  const std::string auto_pad = c.node.String("auto_pad").value_or("NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      const int64_t in = x.size(static_cast<int64_t>(i + 2));
      const int64_t out = (in + w.stride[i] - 1) / w.stride[i];
      const int64_t total = std::max<int64_t>(
          (out - 1) * w.stride[i] + (w.kernel[i] - 1) * w.dilation[i] + 1 - in, 0);
      const int64_t small = total / 2;
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.pad_end[i] = total - w.pad_begin[i];
    }
  } else if (auto_pad == "VALID") {
    std::fill(w.pad_begin.begin(), w.pad_begin.end(), 0);
    std::fill(w.pad_end.begin(), w.pad_end.end(), 0);
  }
  return w;
}

// Pads the spatial dims explicitly (F.pad), for asymmetric padding.
at::Tensor PadSpatial(const at::Tensor& x, const Window& w, double value) {
  std::vector<int64_t> pad;  // last dim first: (begin, end) pairs
  for (size_t i = w.pad_begin.size(); i-- > 0;) {
    pad.push_back(w.pad_begin[i]);
    pad.push_back(w.pad_end[i]);
  }
  return at::constant_pad_nd(x, pad, value);
}

std::vector<at::Tensor> Conv(const OpContext& c) {
  at::Tensor x = c.in[0];
  const at::Tensor& weight = c.in[1];
  const size_t n = static_cast<size_t>(weight.dim() - 2);
  std::vector<int64_t> k(weight.sizes().begin() + 2, weight.sizes().end());
  Window w = ReadWindow(c, x, n, k);
  std::vector<int64_t> padding = w.pad_begin;
  if (!w.symmetric()) {
    x = PadSpatial(x, w, 0.0);
    std::fill(padding.begin(), padding.end(), 0);
  }
  const int64_t groups = c.node.Int("group").value_or(1);
  return One(at::convolution(x, weight, c.has(2) ? c.in[2] : at::Tensor(), w.stride, padding,
                             w.dilation, /*transposed=*/false, std::vector<int64_t>(n, 0), groups));
}

std::vector<at::Tensor> ConvTranspose(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const at::Tensor& weight = c.in[1];
  const size_t n = static_cast<size_t>(weight.dim() - 2);
  if (c.node.Ints("output_shape")) Fail("ConvTranspose with output_shape is not supported");
  std::vector<int64_t> k(weight.sizes().begin() + 2, weight.sizes().end());
  Window w = ReadWindow(c, x, n, k);
  if (!w.symmetric()) Fail("ConvTranspose with asymmetric pads is not supported");
  std::vector<int64_t> out_pad = c.node.Ints("output_padding").value_or(std::vector<int64_t>(n, 0));
  return One(at::convolution(x, weight, c.has(2) ? c.in[2] : at::Tensor(), w.stride, w.pad_begin,
                             w.dilation, /*transposed=*/true, out_pad,
                             c.node.Int("group").value_or(1)));
}

std::vector<at::Tensor> MaxPool(const OpContext& c) {
  at::Tensor x = c.in[0];
  const size_t n = static_cast<size_t>(x.dim() - 2);
  if (n < 1 || n > 3) Fail("MaxPool over " + std::to_string(n) + " spatial dims");
  if (c.node.Int("storage_order").value_or(0) != 0) Fail("MaxPool storage_order=1");
  Window w = ReadWindow(c, x, n, {});
  std::vector<int64_t> padding = w.pad_begin;
  if (!w.symmetric()) {
    x = PadSpatial(x, w, -std::numeric_limits<double>::infinity());
    std::fill(padding.begin(), padding.end(), 0);
  }
  const bool ceil = c.node.Int("ceil_mode").value_or(0) != 0;
  if (c.needs(1)) {
    std::tuple<at::Tensor, at::Tensor> r;
    if (n == 1) {
      r = at::max_pool1d_with_indices(x, w.kernel, w.stride, padding, w.dilation, ceil);
    } else if (n == 2) {
      r = at::max_pool2d_with_indices(x, w.kernel, w.stride, padding, w.dilation, ceil);
    } else {
      r = at::max_pool3d_with_indices(x, w.kernel, w.stride, padding, w.dilation, ceil);
    }
    return {std::get<0>(r), std::get<1>(r)};
  }
  if (n == 1) return One(at::max_pool1d(x, w.kernel, w.stride, padding, w.dilation, ceil));
  if (n == 2) return One(at::max_pool2d(x, w.kernel, w.stride, padding, w.dilation, ceil));
  return One(at::max_pool3d(x, w.kernel, w.stride, padding, w.dilation, ceil));
}

std::vector<at::Tensor> AveragePool(const OpContext& c) {
  at::Tensor x = c.in[0];
  const size_t n = static_cast<size_t>(x.dim() - 2);
  if (n < 1 || n > 3) Fail("AveragePool over " + std::to_string(n) + " spatial dims");
  Window w = ReadWindow(c, x, n, {});
  std::vector<int64_t> padding = w.pad_begin;
  if (!w.symmetric()) {
    x = PadSpatial(x, w, 0.0);
    std::fill(padding.begin(), padding.end(), 0);
  }
  const bool ceil = c.node.Int("ceil_mode").value_or(0) != 0;
  const bool include = c.node.Int("count_include_pad").value_or(0) != 0;
  if (n == 1) return One(at::avg_pool1d(x, w.kernel, w.stride, padding, ceil, include));
  if (n == 2) return One(at::avg_pool2d(x, w.kernel, w.stride, padding, ceil, include));
  return One(at::avg_pool3d(x, w.kernel, w.stride, padding, ceil, include));
}

std::vector<at::Tensor> GlobalAveragePool(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  switch (x.dim()) {
    case 3:
      return One(at::adaptive_avg_pool1d(x, {1}));
    case 4:
      return One(at::adaptive_avg_pool2d(x, {1, 1}));  // nn.AdaptiveAvgPool2d(1)
    case 5:
      return One(at::adaptive_avg_pool3d(x, {1, 1, 1}));
    default:
      break;
  }
  std::vector<int64_t> dims;
  for (int64_t i = 2; i < x.dim(); ++i) dims.push_back(i);
  return One(at::mean(x, dims, /*keepdim=*/true));
}

std::vector<at::Tensor> GlobalMaxPool(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  if (x.dim() == 4) return One(std::get<0>(at::adaptive_max_pool2d(x, {1, 1})));
  std::vector<int64_t> dims;
  for (int64_t i = 2; i < x.dim(); ++i) dims.push_back(i);
  return One(at::amax(x, dims, /*keepdim=*/true));
}

// ---------------------------------------------------------------------------------------------
// Normalization, softmax, dropout.

std::vector<at::Tensor> BatchNormalization(const OpContext& c) {
  const double eps = c.node.Float("epsilon").value_or(1e-5);
  const double momentum = c.node.Float("momentum").value_or(0.9);  // ONNX: weight of the old stat
  bool train_node;
  if (c.node.opset >= 14) {
    train_node = c.node.Int("training_mode").value_or(0) != 0;
  } else {
    train_node = c.node.outputs.size() > 1 && c.node.outputs[1] >= 0;
  }
  const bool training = c.training && train_node;
  at::Tensor y = at::batch_norm(c.in[0], c.in[1], c.in[2], c.in[3], c.in[4], training,
                                /*momentum=*/1.0 - momentum, eps, /*cudnn_enabled=*/true);
  // Outputs 1/2 are the running statistics, updated in place by batch_norm.
  return {y, c.in[3], c.in[4]};
}

std::vector<at::Tensor> InstanceNormalization(const OpContext& c) {
  return One(at::instance_norm(c.in[0], c.in[1], c.in[2], at::Tensor(), at::Tensor(),
                               /*use_input_stats=*/true, 0.1,
                               c.node.Float("epsilon").value_or(1e-5), true));
}

std::vector<at::Tensor> LayerNormalization(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(-1), x.dim());
  std::vector<int64_t> shape(x.sizes().begin() + axis, x.sizes().end());
  const double eps = c.node.Float("epsilon").value_or(1e-5);
  if (c.needs(1) || c.needs(2)) {
    auto [y, mean, rstd] =
        at::native_layer_norm(x, shape, c.in[1], c.has(2) ? c.in[2] : at::Tensor(), eps);
    return {y, mean, rstd};
  }
  return One(at::layer_norm(x, shape, c.in[1], c.has(2) ? c.in[2] : at::Tensor(), eps));
}

std::vector<at::Tensor> GroupNormalization(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const int64_t groups = c.node.Int("num_groups").value_or(1);
  at::Tensor scale = c.in[1], bias = c.in[2];
  const int64_t channels = x.size(1);
  if (scale.numel() == groups && groups != channels) {  // opset 18: one value per group
    scale = scale.repeat_interleave(channels / groups);
    bias = bias.repeat_interleave(channels / groups);
  }
  return One(at::group_norm(x, groups, scale, bias, c.node.Float("epsilon").value_or(1e-5)));
}

template <bool kLog>
std::vector<at::Tensor> Softmax(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  if (c.node.opset < 13) {  // coerced to 2-D at `axis` (default 1)
    const int64_t axis = NormAxis(c.node.Int("axis").value_or(1), x.dim());
    at::Tensor flat = x.reshape({Product(x.sizes(), 0, static_cast<size_t>(axis)),
                                 Product(x.sizes(), static_cast<size_t>(axis), x.sizes().size())});
    at::Tensor y = kLog ? at::log_softmax(flat, 1) : at::softmax(flat, 1);
    return One(y.reshape(x.sizes()));
  }
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(-1), x.dim());
  return One(kLog ? at::log_softmax(x, axis) : at::softmax(x, axis));
}

std::vector<at::Tensor> Dropout(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  double ratio = 0.5;
  bool train_node = true;
  if (c.node.opset >= 12) {
    if (c.has(1)) ratio = FloatOf(c.in[1]);
    train_node = c.has(2) && FloatOf(c.in[2]) != 0.0;
  } else {
    ratio = c.node.Float("ratio").value_or(0.5);
  }
  const bool training = c.training && train_node && ratio > 0.0;
  if (!training) {
    at::Tensor mask;
    if (c.needs(1)) mask = at::ones(x.sizes(), x.options().dtype(at::kBool));
    return {x, mask};
  }
  // native_dropout on every device: it is what nn.Dropout runs on CUDA (the fused kernel,
  // saving a bool mask; memory-model.md §3.2 dropout). On the CPU at::dropout would instead
  // multiply by a saved float noise tensor (4x the mask's bytes), so CPU rows would not follow the
  // CUDA memory semantics the estimators model.
  auto [y, mask] = at::native_dropout(x, ratio, true);
  if (!c.needs(1)) mask = at::Tensor();
  return {y, mask};
}

// ---------------------------------------------------------------------------------------------
// Shape and data movement.

std::vector<at::Tensor> Reshape(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  std::vector<int64_t> shape = IntsOf(c.in[1]);
  const bool allow_zero = c.node.Int("allowzero").value_or(0) != 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (static_cast<int64_t>(i) >= x.dim()) Fail("Reshape copies a dim the input lacks");
      shape[i] = x.size(static_cast<int64_t>(i));
    }
  }
  return One(x.reshape(shape));
}

std::vector<at::Tensor> Flatten(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  int64_t axis = c.node.Int("axis").value_or(1);
  if (axis < 0) axis += x.dim();
  if (axis < 0 || axis > x.dim()) Fail("Flatten axis out of range");
  return One(x.reshape({Product(x.sizes(), 0, static_cast<size_t>(axis)),
                        Product(x.sizes(), static_cast<size_t>(axis), x.sizes().size())}));
}

std::vector<at::Tensor> Transpose(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  std::vector<int64_t> perm = c.node.Ints("perm").value_or(std::vector<int64_t>());
  if (perm.empty()) {
    for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
  }
  return One(x.permute(perm));
}

std::vector<at::Tensor> Concat(const OpContext& c) {
  std::vector<at::Tensor> parts;
  int64_t rank = 0;
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (!c.has(i)) continue;
    parts.push_back(c.in[i]);
    rank = std::max<int64_t>(rank, c.in[i].dim());
  }
  if (parts.empty()) Fail("Concat without inputs");
  return One(at::cat(parts, NormAxis(c.node.Int("axis").value_or(0), rank)));
}

std::vector<at::Tensor> Split(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(0), x.dim());
  const int64_t dim = x.size(axis);
  std::vector<int64_t> sizes;
  if (c.has(1)) {
    sizes = IntsOf(c.in[1]);
  } else if (auto s = c.node.Ints("split")) {
    sizes = *s;
  } else {
    const int64_t parts =
        c.node.Int("num_outputs").value_or(static_cast<int64_t>(c.node.outputs.size()));
    if (parts <= 0) Fail("Split into no parts");
    const int64_t chunk = (dim + parts - 1) / parts;  // the last part may be smaller (opset 18)
    for (int64_t left = dim; left > 0; left -= chunk) sizes.push_back(std::min(chunk, left));
  }
  return at::split_with_sizes(x, sizes, axis);
}

std::vector<at::Tensor> Slice(const OpContext& c) {
  at::Tensor x = c.in[0];
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.node.opset < 10) {
    starts = c.node.Ints("starts").value_or(std::vector<int64_t>());
    ends = c.node.Ints("ends").value_or(std::vector<int64_t>());
    axes = c.node.Ints("axes").value_or(std::vector<int64_t>());
  } else {
    starts = IntsOf(c.in[1]);
    ends = IntsOf(c.in[2]);
    if (c.has(3)) axes = IntsOf(c.in[3]);
    if (c.has(4)) steps = IntsOf(c.in[4]);
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    Fail("Slice starts/ends/axes/steps differ in length");
  }
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = NormAxis(axes[i], x.dim());
    const int64_t dim = x.size(axis);
    const int64_t step = steps[i];
    if (step == 0) Fail("Slice step 0");
    if (step > 0) {
      int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
      int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      x = x.slice(axis, s, std::max(s, e), step);
    } else {
      int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
      int64_t e = ends[i] < 0
                      ? (ends[i] <= std::numeric_limits<int64_t>::min() / 2 ? -1 : ends[i] + dim)
                      : ends[i];
      s = std::clamp<int64_t>(s, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      std::vector<int64_t> idx;
      for (int64_t k = s; k > e; k += step) idx.push_back(k);
      at::Tensor index = at::tensor(idx, at::kLong).to(x.device());
      x = at::index_select(x, axis, index);
    }
  }
  return One(x);
}

std::vector<at::Tensor> Gather(const OpContext& c) {
  const at::Tensor& data = c.in[0];
  at::Tensor idx = c.in[1];
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(0), data.dim());
  if (idx.scalar_type() != at::kLong) idx = idx.to(at::kLong);
  if (idx.numel() > 0 && at::lt(idx, 0).any().item<bool>()) {
    idx = at::where(idx < 0, idx + data.size(axis), idx);
  }
  if (axis == 0 && data.dim() == 2 && data.requires_grad() && data.is_leaf()) {
    return One(at::embedding(data, idx));  // nn.Embedding
  }
  if (idx.dim() == 0) return One(data.select(axis, idx.item<int64_t>()));  // x[:, i]
  std::vector<int64_t> shape(data.sizes().begin(), data.sizes().begin() + axis);
  shape.insert(shape.end(), idx.sizes().begin(), idx.sizes().end());
  shape.insert(shape.end(), data.sizes().begin() + axis + 1, data.sizes().end());
  return One(at::index_select(data, axis, idx.reshape({-1})).reshape(shape));
}

std::vector<at::Tensor> GatherElements(const OpContext& c) {
  const at::Tensor& data = c.in[0];
  at::Tensor idx = c.in[1].to(at::kLong);
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(0), data.dim());
  idx = at::where(idx < 0, idx + data.size(axis), idx);
  return One(at::gather(data, axis, idx));
}

std::vector<at::Tensor> ScatterElements(const OpContext& c) {
  const at::Tensor& data = c.in[0];
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(0), data.dim());
  at::Tensor idx = c.in[1].to(at::kLong);
  idx = at::where(idx < 0, idx + data.size(axis), idx);
  const std::string reduction = c.node.String("reduction").value_or("none");
  if (reduction == "none") return One(at::scatter(data, axis, idx, c.in[2]));
  if (reduction == "add") return One(at::scatter_add(data, axis, idx, c.in[2]));
  return One(at::scatter_reduce(data, axis, idx, c.in[2], reduction == "mul" ? "prod" : reduction));
}

std::vector<at::Tensor> ScatterND(const OpContext& c) {
  const at::Tensor& data = c.in[0];
  at::Tensor idx = c.in[1].to(at::kLong);
  const int64_t k = idx.size(-1);
  c10::List<c10::optional<at::Tensor>> indices;
  for (int64_t i = 0; i < k; ++i) indices.push_back(idx.select(-1, i));
  const std::string reduction = c.node.String("reduction").value_or("none");
  if (reduction != "none" && reduction != "add") Fail("ScatterND reduction " + reduction);
  return One(at::index_put(data, indices, c.in[2], /*accumulate=*/reduction == "add"));
}

std::vector<int64_t> AxesOf(const OpContext& c, size_t input) {
  if (c.has(input)) return IntsOf(c.in[input]);
  return c.node.Ints("axes").value_or(std::vector<int64_t>());
}

std::vector<at::Tensor> Unsqueeze(const OpContext& c) {
  at::Tensor x = c.in[0];
  std::vector<int64_t> axes = AxesOf(c, 1);
  const int64_t rank = x.dim() + static_cast<int64_t>(axes.size());
  for (int64_t& a : axes) a = NormAxis(a, rank);
  std::sort(axes.begin(), axes.end());
  for (int64_t a : axes) x = x.unsqueeze(a);
  return One(x);
}

std::vector<at::Tensor> Squeeze(const OpContext& c) {
  at::Tensor x = c.in[0];
  std::vector<int64_t> axes = AxesOf(c, 1);
  if (axes.empty()) return One(x.squeeze());
  for (int64_t& a : axes) a = NormAxis(a, x.dim());
  std::sort(axes.rbegin(), axes.rend());
  for (int64_t a : axes) x = x.squeeze(a);
  return One(x);
}

std::vector<at::Tensor> Shape(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const int64_t rank = x.dim();
  int64_t start = c.node.Int("start").value_or(0);
  int64_t end = c.node.Int("end").value_or(rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> dims(x.sizes().begin() + start, x.sizes().begin() + end);
  return One(at::tensor(dims, at::kLong));
}

std::vector<at::Tensor> Size(const OpContext& c) {
  return One(at::scalar_tensor(c.in[0].numel(), at::kLong));
}

std::vector<at::Tensor> Constant(const OpContext& c) {
  if (const ConstTensor* t = c.node.Tensor("value")) return One(ConstToTensor(*t, c.float_type));
  if (auto v = c.node.Float("value_float")) {
    return One(at::scalar_tensor(*v, at::TensorOptions().dtype(c.float_type)));
  }
  if (auto v = c.node.Floats("value_floats")) {
    return One(at::tensor(*v, at::kDouble).to(c.float_type));
  }
  if (auto v = c.node.Int("value_int")) return One(at::scalar_tensor(*v, at::kLong));
  if (auto v = c.node.Ints("value_ints")) return One(at::tensor(*v, at::kLong));
  Fail("Constant without a supported value attribute (sparse or string constants)");
}

std::vector<at::Tensor> ConstantOfShape(const OpContext& c) {
  std::vector<int64_t> shape = IntsOf(c.in[0]);
  at::ScalarType type = c.float_type;
  double value = 0.0;
  if (const ConstTensor* t = c.node.Tensor("value")) {
    type = FloatTarget(c, t->dtype);
    if (t->has_data)
      value = t->floats.empty() ? static_cast<double>(t->ints.at(0)) : t->floats.at(0);
  }
  return One(
      at::full(shape, value, at::TensorOptions().dtype(type).device(PlaceGenerated(c, shape))));
}

std::vector<at::Tensor> Range(const OpContext& c) {
  const at::ScalarType type = c.in[0].scalar_type();
  const double start = FloatOf(c.in[0]), limit = FloatOf(c.in[1]), delta = FloatOf(c.in[2]);
  if (delta == 0) Fail("Range with delta 0");
  const int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((limit - start) / delta)), 0);
  const at::Device device = PlaceGenerated(c, {n});
  if (at::isFloatingType(type)) {
    return One(at::arange(start, limit, delta, at::TensorOptions().dtype(type).device(device)));
  }
  return One(at::arange(static_cast<int64_t>(start), static_cast<int64_t>(limit),
                        static_cast<int64_t>(delta),
                        at::TensorOptions().dtype(type).device(device)));
}

std::vector<at::Tensor> Cast(const OpContext& c) {
  auto to = c.node.Int("to");
  if (!to) Fail("Cast without 'to'");
  return One(c.in[0].to(FloatTarget(c, static_cast<int32_t>(*to))));
}

std::vector<at::Tensor> CastLike(const OpContext& c) {
  return One(c.in[0].to(c.in[1].scalar_type()));
}

std::vector<at::Tensor> Trilu(const OpContext& c) {
  const int64_t k = c.has(1) ? IntOf(c.in[1]) : 0;
  if (c.node.Int("upper").value_or(1) != 0) return One(at::triu(c.in[0], k));
  return One(at::tril(c.in[0], k));
}

std::vector<at::Tensor> Expand(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  std::vector<int64_t> shape = IntsOf(c.in[1]);
  const int64_t rank = std::max<int64_t>(x.dim(), static_cast<int64_t>(shape.size()));
  std::vector<int64_t> out(static_cast<size_t>(rank), 1);
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t xi = i - (rank - x.dim());
    const int64_t si = i - (rank - static_cast<int64_t>(shape.size()));
    const int64_t a = xi >= 0 ? x.size(xi) : 1;
    const int64_t b = si >= 0 ? shape[static_cast<size_t>(si)] : 1;
    if (a != b && a != 1 && b != 1) Fail("Expand: shapes do not broadcast");
    out[static_cast<size_t>(i)] = a == 1 ? b : a;
  }
  return One(x.expand(out));
}

std::vector<at::Tensor> Tile(const OpContext& c) { return One(c.in[0].repeat(IntsOf(c.in[1]))); }

std::vector<at::Tensor> Pad(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const std::string mode = c.node.String("mode").value_or("constant");
  std::vector<int64_t> pads;
  double value = 0.0;
  std::vector<int64_t> axes;
  if (c.node.opset < 11) {
    pads = c.node.Ints("pads").value_or(std::vector<int64_t>());
    value = c.node.Float("value").value_or(0.0);
  } else {
    pads = IntsOf(c.in[1]);
    if (c.has(2) && c.in[2].numel() > 0) value = FloatOf(c.in[2]);
    if (c.has(3)) axes = IntsOf(c.in[3]);
  }
  if (axes.empty()) {
    for (int64_t i = 0; i < x.dim(); ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) Fail("Pad: pads do not match the axes");
  std::vector<int64_t> begin(static_cast<size_t>(x.dim()), 0), end(static_cast<size_t>(x.dim()), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = static_cast<size_t>(NormAxis(axes[i], x.dim()));
    begin[a] = pads[i];
    end[a] = pads[i + axes.size()];
  }
  std::vector<int64_t> torch_pad;  // last dim first
  int64_t first_padded = x.dim();
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    torch_pad.push_back(begin[static_cast<size_t>(d)]);
    torch_pad.push_back(end[static_cast<size_t>(d)]);
    if (begin[static_cast<size_t>(d)] != 0 || end[static_cast<size_t>(d)] != 0) first_padded = d;
  }
  if (mode == "constant") return One(at::constant_pad_nd(x, torch_pad, value));
  // reflect / edge: only trailing spatial dims, as F.pad allows.
  const int64_t n = x.dim() - first_padded;
  torch_pad.resize(static_cast<size_t>(2 * std::max<int64_t>(n, 1)));
  if (n < 1 || n > 3 || first_padded < x.dim() - 3) Fail("Pad mode " + mode + " on these axes");
  if (mode == "reflect") {
    if (n == 1) return One(at::reflection_pad1d(x, torch_pad));
    if (n == 2) return One(at::reflection_pad2d(x, torch_pad));
    return One(at::reflection_pad3d(x, torch_pad));
  }
  if (mode == "edge") {
    if (n == 1) return One(at::replication_pad1d(x, torch_pad));
    if (n == 2) return One(at::replication_pad2d(x, torch_pad));
    return One(at::replication_pad3d(x, torch_pad));
  }
  Fail("Pad mode " + mode);
}

std::vector<at::Tensor> Resize(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const int64_t n = x.dim() - 2;
  if (n < 1 || n > 3) Fail("Resize of a rank-" + std::to_string(x.dim()) + " tensor");
  std::vector<int64_t> out(x.sizes().begin() + 2, x.sizes().end());
  // Resize-10 / Upsample: (X, scales); Resize-11+: (X, roi, scales, sizes).
  const size_t scales_at = (c.node.op_type == "Upsample" || c.node.opset < 11) ? 1 : 2;
  std::vector<double> scales;
  if (c.has(scales_at) && c.in[scales_at].numel() > 0) {
    at::Tensor s = c.in[scales_at].to(at::kCPU).to(at::kDouble).contiguous();
    scales.assign(s.data_ptr<double>(), s.data_ptr<double>() + s.numel());
  } else if (auto s = c.node.Floats("scales")) {
    scales = *s;
  }
  if (scales_at == 2 && c.has(3) && c.in[3].numel() > 0) {
    std::vector<int64_t> sizes = IntsOf(c.in[3]);
    if (static_cast<int64_t>(sizes.size()) != x.dim()) Fail("Resize sizes of another rank");
    out.assign(sizes.begin() + 2, sizes.end());
  } else if (static_cast<int64_t>(scales.size()) == x.dim()) {
    for (int64_t i = 0; i < n; ++i) {
      out[static_cast<size_t>(i)] = static_cast<int64_t>(
          std::floor(static_cast<double>(x.size(i + 2)) * scales[static_cast<size_t>(i + 2)]));
    }
  } else {
    Fail("Resize without scales or sizes");
  }
  const std::string mode = c.node.String("mode").value_or("nearest");
  const bool align =
      c.node.String("coordinate_transformation_mode").value_or("") == "align_corners";
  if (mode == "nearest") {
    if (n == 1) return One(at::upsample_nearest1d(x, out));
    if (n == 2) return One(at::upsample_nearest2d(x, out));
    return One(at::upsample_nearest3d(x, out));
  }
  if (mode == "linear" || mode == "bilinear" || mode == "trilinear") {
    if (n == 1) return One(at::upsample_linear1d(x, out, align));
    if (n == 2) return One(at::upsample_bilinear2d(x, out, align));
    return One(at::upsample_trilinear3d(x, out, align));
  }
  if (mode == "cubic" && n == 2) return One(at::upsample_bicubic2d(x, out, align));
  Fail("Resize mode " + mode);
}

// ---------------------------------------------------------------------------------------------
// Reductions and selection.

enum class Reduce { kMean, kSum, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSumExp };

template <Reduce kKind>
std::vector<at::Tensor> Reduction(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const bool axes_input = c.node.opset >= 18 || (kKind == Reduce::kSum && c.node.opset >= 13);
  std::vector<int64_t> axes = axes_input ? (c.has(1) ? IntsOf(c.in[1]) : std::vector<int64_t>())
                                         : c.node.Ints("axes").value_or(std::vector<int64_t>());
  const bool keep = c.node.Int("keepdims").value_or(1) != 0;
  if (axes.empty()) {
    if (c.node.Int("noop_with_empty_axes").value_or(0) != 0) return One(x);
    for (int64_t i = 0; i < x.dim(); ++i) axes.push_back(i);
  }
  for (int64_t& a : axes) a = NormAxis(a, x.dim());
  switch (kKind) {
    case Reduce::kMean:
      return One(at::mean(x, axes, keep));
    case Reduce::kSum:
      return One(at::sum(x, axes, keep));
    case Reduce::kMax:
      return One(at::amax(x, axes, keep));
    case Reduce::kMin:
      return One(at::amin(x, axes, keep));
    case Reduce::kL1:
      return One(at::norm(x, 1, axes, keep));
    case Reduce::kL2:
      return One(at::norm(x, 2, axes, keep));
    case Reduce::kSumSquare:
      return One(at::sum(x * x, axes, keep));
    case Reduce::kLogSumExp:
      return One(at::logsumexp(x, axes, keep));
    case Reduce::kProd: {
      at::Tensor y = x;
      std::sort(axes.rbegin(), axes.rend());
      for (int64_t a : axes) y = at::prod(y, a, keep);
      return One(y);
    }
  }
  Fail("unknown reduction");
}

template <bool kMax>
std::vector<at::Tensor> ArgReduce(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  if (c.node.Int("select_last_index").value_or(0) != 0) Fail("select_last_index=1");
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(0), x.dim());
  const bool keep = c.node.Int("keepdims").value_or(1) != 0;
  return One(kMax ? at::argmax(x, axis, keep) : at::argmin(x, axis, keep));
}

std::vector<at::Tensor> TopK(const OpContext& c) {
  const at::Tensor& x = c.in[0];
  const int64_t k = c.node.opset < 10 ? c.node.Int("k").value_or(1) : IntOf(c.in[1]);
  const int64_t axis = NormAxis(c.node.Int("axis").value_or(-1), x.dim());
  auto [values, indices] = at::topk(x, k, axis, c.node.Int("largest").value_or(1) != 0,
                                    c.node.Int("sorted").value_or(1) != 0);
  return {values, indices};
}

std::vector<at::Tensor> CumSum(const OpContext& c) {
  at::Tensor x = c.in[0];
  const int64_t axis = NormAxis(IntOf(c.in[1]), x.dim());
  const bool reverse = c.node.Int("reverse").value_or(0) != 0;
  const bool exclusive = c.node.Int("exclusive").value_or(0) != 0;
  if (reverse) x = x.flip(axis);
  at::Tensor y = at::cumsum(x, axis);
  if (exclusive) y = y - x;
  if (reverse) y = y.flip(axis);
  return One(y);
}

std::vector<at::Tensor> NonZero(const OpContext& c) { return One(at::nonzero(c.in[0]).t()); }

std::vector<at::Tensor> OneHot(const OpContext& c) {
  const at::Tensor& idx = c.in[0];
  const int64_t depth = IntOf(c.in[1]);
  at::Tensor values = c.in[2];
  at::Tensor i = idx.to(at::kLong);
  i = at::where(i < 0, i + depth, i);
  at::Tensor hot = at::one_hot(i, depth);  // int64 [..., depth]
  const int64_t axis = c.node.Int("axis").value_or(-1);
  if (axis != -1 && axis != idx.dim()) hot = hot.movedim(-1, NormAxis(axis, idx.dim() + 1));
  at::Tensor off = values.select(0, 0), on = values.select(0, 1);
  return One(at::where(hot.to(at::kBool), on, off));
}

// ---------------------------------------------------------------------------------------------
// Recurrent layers (one ONNX node = one layer, possibly bidirectional).

struct RnnSetup {
  int64_t dirs = 1;
  bool reverse = false;
  bool batch_first = false;
  at::Tensor x;
  std::vector<at::Tensor> params;  // w_ih, w_hh, b_ih, b_hh per direction
};

RnnSetup SetupRnn(const OpContext& c, int64_t gates) {
  RnnSetup s;
  const std::string direction = c.node.String("direction").value_or("forward");
  s.dirs = direction == "bidirectional" ? 2 : 1;
  s.reverse = direction == "reverse";
  s.batch_first = c.node.Int("layout").value_or(0) != 0;
  if (c.has(4)) Fail("sequence_lens is not supported (packed sequences)");
  if (c.node.Float("clip")) Fail("clip is not supported");
  s.x = s.reverse ? c.in[0].flip(s.batch_first ? 1 : 0) : c.in[0];
  const at::Tensor& w = c.in[1];
  const at::Tensor& r = c.in[2];
  const int64_t hidden = r.size(2);
  if (w.size(1) != gates * hidden) Fail("unexpected weight shape");
  for (int64_t d = 0; d < s.dirs; ++d) {
    s.params.push_back(w.select(0, d));
    s.params.push_back(r.select(0, d));
    if (c.has(3)) {
      at::Tensor b = c.in[3].select(0, d);
      s.params.push_back(b.slice(0, 0, gates * hidden));
      s.params.push_back(b.slice(0, gates * hidden, 2 * gates * hidden));
    }
  }
  return s;
}

at::Tensor InitialState(const OpContext& c, size_t input, const RnnSetup& s, int64_t hidden) {
  if (c.has(input)) return s.batch_first ? c.in[input].transpose(0, 1) : c.in[input];
  const int64_t batch = s.x.size(s.batch_first ? 0 : 1);
  return at::zeros({s.dirs, batch, hidden}, s.x.options());
}

// [seq, batch, dirs*H] (or batch-first) -> ONNX Y: [seq, dirs, batch, H] (or [batch, seq, dirs,
// H]).
std::vector<at::Tensor> RnnOutputs(const RnnSetup& s, at::Tensor y, std::vector<at::Tensor> states,
                                   int64_t hidden) {
  if (s.reverse) y = y.flip(s.batch_first ? 1 : 0);
  at::Tensor out = s.batch_first ? y.view({y.size(0), y.size(1), s.dirs, hidden})
                                 : y.view({y.size(0), y.size(1), s.dirs, hidden}).transpose(1, 2);
  std::vector<at::Tensor> result = {out};
  for (at::Tensor& h : states) result.push_back(s.batch_first ? h.transpose(0, 1) : h);
  return result;
}

std::vector<at::Tensor> Lstm(const OpContext& c) {
  if (c.has(7)) Fail("peephole weights are not supported");
  const int64_t hidden = c.in[2].size(2);
  RnnSetup s = SetupRnn(c, 4);
  at::Tensor h0 = InitialState(c, 5, s, hidden), c0 = InitialState(c, 6, s, hidden);
  auto [y, hy, cy] =
      at::lstm(s.x, {h0, c0}, s.params, c.has(3), 1, 0.0, c.training, s.dirs == 2, s.batch_first);
  return RnnOutputs(s, y, {hy, cy}, hidden);
}

std::vector<at::Tensor> Gru(const OpContext& c) {
  if (c.node.Int("linear_before_reset").value_or(0) == 0) {
    Fail("GRU with linear_before_reset=0 (PyTorch's GRU applies the reset gate after the matmul)");
  }
  const int64_t hidden = c.in[2].size(2);
  RnnSetup s = SetupRnn(c, 3);
  at::Tensor h0 = InitialState(c, 5, s, hidden);
  auto [y, hy] =
      at::gru(s.x, h0, s.params, c.has(3), 1, 0.0, c.training, s.dirs == 2, s.batch_first);
  return RnnOutputs(s, y, {hy}, hidden);
}

std::vector<at::Tensor> Rnn(const OpContext& c) {
  const int64_t hidden = c.in[2].size(2);
  RnnSetup s = SetupRnn(c, 1);
  at::Tensor h0 = InitialState(c, 5, s, hidden);
  const auto acts = c.node.Strings("activations").value_or(std::vector<std::string>{"Tanh"});
  const bool relu = !acts.empty() && acts[0] == "Relu";
  auto [y, hy] = relu ? at::rnn_relu(s.x, h0, s.params, c.has(3), 1, 0.0, c.training, s.dirs == 2,
                                     s.batch_first)
                      : at::rnn_tanh(s.x, h0, s.params, c.has(3), 1, 0.0, c.training, s.dirs == 2,
                                     s.batch_first);
  return RnnOutputs(s, y, {hy}, hidden);
}

// ---------------------------------------------------------------------------------------------

constexpr uint32_t Bits(std::initializer_list<int> inputs) {
  uint32_t b = 0;
  for (int i : inputs) b |= 1u << i;
  return b;
}

const OpDef kOps[] = {
    {"Abs", Unary<Abs>},
    {"Add", Binary<Add>},
    {"And", Binary<And>},
    {"ArgMax", ArgReduce<true>},
    {"ArgMin", ArgReduce<false>},
    {"Atan", Unary<Atan>},
    {"AveragePool", AveragePool},
    {"BatchNormalization", BatchNormalization},
    {"BitwiseAnd", Binary<BitwiseAnd>},
    {"BitwiseOr", Binary<BitwiseOr>},
    {"Cast", Cast},
    {"CastLike", CastLike},
    {"Ceil", Unary<Ceil>},
    {"Celu", Celu},
    {"Clip", Clip, Bits({1, 2})},
    {"Concat", Concat},
    {"Constant", Constant},
    {"ConstantOfShape", ConstantOfShape, Bits({0})},
    {"Conv", Conv},
    {"ConvTranspose", ConvTranspose},
    {"Cos", Unary<Cos>},
    {"CumSum", CumSum, Bits({1})},
    {"Div", Binary<Div>},
    {"Dropout", Dropout, Bits({1, 2})},
    {"Einsum", Einsum},
    {"Elu", Elu},
    {"Equal", Binary<Equal>},
    {"Erf", Unary<Erf>},
    {"Exp", Unary<Exp>},
    {"Expand", Expand, Bits({1})},
    {"Flatten", Flatten},
    {"Floor", Unary<Floor>},
    {"GRU", Gru},
    {"Gather", Gather},
    {"GatherElements", GatherElements},
    {"Gelu", Gelu},
    {"Gemm", Gemm},
    {"GlobalAveragePool", GlobalAveragePool},
    {"GlobalMaxPool", GlobalMaxPool},
    {"Greater", Binary<Greater>},
    {"GreaterOrEqual", Binary<GreaterOrEqual>},
    {"GroupNormalization", GroupNormalization},
    {"HardSigmoid", HardSigmoid},
    {"HardSwish", Unary<HardSwish>},
    {"Identity", Unary<Identity>},
    {"InstanceNormalization", InstanceNormalization},
    {"IsInf", Unary<IsInf>},
    {"IsNaN", Unary<IsNaN>},
    {"LSTM", Lstm},
    {"LayerNormalization", LayerNormalization},
    {"LeakyRelu", LeakyRelu},
    {"Less", Binary<Less>},
    {"LessOrEqual", Binary<LessOrEqual>},
    {"Log", Unary<Log>},
    {"LogSoftmax", Softmax<true>},
    {"MatMul", MatMul},
    {"Max", Variadic<0>},
    {"MaxPool", MaxPool},
    {"Mean", Variadic<3>},
    {"Min", Variadic<1>},
    {"Mish", Unary<Mish>},
    {"Mod", Mod},
    {"Mul", Binary<Mul>},
    {"Neg", Unary<Neg>},
    {"NonZero", NonZero},
    {"Not", Unary<Not>},
    {"OneHot", OneHot, Bits({1})},
    {"Or", Binary<Or>},
    {"PRelu", PRelu},
    {"Pad", Pad, Bits({1, 2, 3})},
    {"Pow", Binary<Pow>},
    {"RNN", Rnn},
    {"Range", Range, Bits({0, 1, 2})},
    {"Reciprocal", Unary<Reciprocal>},
    {"ReduceL1", Reduction<Reduce::kL1>, Bits({1})},
    {"ReduceL2", Reduction<Reduce::kL2>, Bits({1})},
    {"ReduceLogSumExp", Reduction<Reduce::kLogSumExp>, Bits({1})},
    {"ReduceMax", Reduction<Reduce::kMax>, Bits({1})},
    {"ReduceMean", Reduction<Reduce::kMean>, Bits({1})},
    {"ReduceMin", Reduction<Reduce::kMin>, Bits({1})},
    {"ReduceProd", Reduction<Reduce::kProd>, Bits({1})},
    {"ReduceSum", Reduction<Reduce::kSum>, Bits({1})},
    {"ReduceSumSquare", Reduction<Reduce::kSumSquare>, Bits({1})},
    {"Relu", Unary<Relu>},
    {"Reshape", Reshape, Bits({1})},
    {"Resize", Resize, Bits({1, 2, 3})},
    {"Round", Unary<Round>},
    {"ScatterElements", ScatterElements},
    {"ScatterND", ScatterND},
    {"Selu", Unary<Selu>},
    {"Shape", Shape},
    {"Sigmoid", Unary<Sigmoid>},
    {"Sign", Unary<Sign>},
    {"Sin", Unary<Sin>},
    {"Size", Size},
    {"Slice", Slice, Bits({1, 2, 3, 4})},
    {"Softmax", Softmax<false>},
    {"Softplus", Unary<Softplus>},
    {"Softsign", Unary<Softsign>},
    {"Split", Split, Bits({1})},
    {"Sqrt", Unary<Sqrt>},
    {"Squeeze", Squeeze, Bits({1})},
    {"Sub", Binary<Sub>},
    {"Sum", Variadic<2>},
    {"Tan", Unary<Tan>},
    {"Tanh", Unary<Tanh>},
    {"ThresholdedRelu", ThresholdedRelu},
    {"Tile", Tile, Bits({1})},
    {"TopK", TopK, Bits({1})},
    {"Transpose", Transpose},
    {"Trilu", Trilu, Bits({1})},
    {"Unsqueeze", Unsqueeze, Bits({1})},
    {"Upsample", Resize, Bits({1})},
    {"Where", Where},
    {"Xor", Binary<Xor>},
};

}  // namespace

const OpDef* FindOp(std::string_view domain, std::string_view op_type) {
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  for (const OpDef& op : kOps) {
    if (op.op_type == op_type) return &op;
  }
  return nullptr;
}

std::vector<std::string> SupportedOpTypes() {
  std::vector<std::string> out;
  for (const OpDef& op : kOps) out.emplace_back(op.op_type);
  std::sort(out.begin(), out.end());
  return out;
}

at::ScalarType ToScalarType(int32_t onnx_dtype) {
  switch (onnx_dtype) {
    case 1:
      return at::kFloat;
    case 2:
      return at::kByte;
    case 3:
      return at::kChar;
    case 5:
      return at::kShort;
    case 6:
      return at::kInt;
    case 7:
      return at::kLong;
    case 9:
      return at::kBool;
    case 10:
      return at::kHalf;
    case 11:
      return at::kDouble;
    case 16:
      return at::kBFloat16;
    default:
      break;
  }
  throw OpError("ONNX element type " + std::to_string(onnx_dtype) + " has no LibTorch dtype");
}

at::Tensor ConstToTensor(const ConstTensor& c, at::ScalarType float_type) {
  at::ScalarType type = ToScalarType(c.dtype);
  if (type == at::kFloat) type = float_type;
  if (!c.has_data) return at::zeros(c.dims, at::TensorOptions().dtype(type));
  at::Tensor t =
      c.floats.empty() ? at::tensor(c.ints, at::kLong) : at::tensor(c.floats, at::kDouble);
  return t.reshape(c.dims).to(type);
}

}  // namespace memest::measurement
