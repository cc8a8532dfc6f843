// datasets/zoo/layers.cc -- see layers.h.
#include "datasets/zoo/layers.h"

#include <algorithm>
#include <cmath>

namespace memest::zoo {

const std::vector<std::string>& ActivationNames() {
  static const auto* names = new std::vector<std::string>{
      "relu", "leaky_relu", "prelu", "elu",       "selu",      "tanh",  "sigmoid", "softplus",
      "silu", "mish",       "gelu",  "gelu_tanh", "hardswish", "relu6", "identity"};
  return *names;
}

bool IsActivation(const std::string& name) {
  const auto& names = ActivationNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

namespace {

// The tanh GELU from its cube (Pow or Muls) and, when made already, 0.5 * x (else made last).
std::string GeluTanh(GraphWriter& w, const std::string& x, const std::string& cube,
                     std::string half = "") {
  const std::string inner =
      w.Op("Add", {x, w.Op("Mul", {cube, w.FloatScalar(0.044714998453855515f)})});
  const std::string t =
      w.Op("Tanh", {w.Op("Mul", {inner, w.FloatScalar(0.79788458347320556640625f)})});
  const std::string one_plus = w.Op("Add", {t, w.FloatScalar(1.0f)});
  if (half.empty()) half = w.Op("Mul", {x, w.FloatScalar(0.5f)});
  return w.Op("Mul", {half, one_plus});
}

}  // namespace

std::string Activation(GraphWriter& w, const std::string& name, const std::string& x) {
  if (name == "relu") return w.Op("Relu", {x});
  if (name == "leaky_relu") return w.Op("LeakyRelu", {x}, {Attr("alpha", 0.01f)});
  if (name == "prelu") return w.Op("PRelu", {x, w.Weight("prelu.weight", {1})});
  if (name == "elu") return w.Op("Elu", {x}, {Attr("alpha", 1.0f)});
  if (name == "selu") return w.Op("Selu", {x});
  if (name == "tanh") return w.Op("Tanh", {x});
  if (name == "sigmoid") return w.Op("Sigmoid", {x});
  if (name == "softplus") return w.Op("Softplus", {x});
  if (name == "silu") return w.Op("Mul", {x, w.Op("Sigmoid", {x})});
  if (name == "mish") return w.Op("Mul", {x, w.Op("Tanh", {w.Op("Softplus", {x})})});
  if (name == "gelu") {
    // x * 0.5 * (1 + erf(x / sqrt(2))), in torch 1.13's export order.
    const std::string e =
        w.Op("Erf", {w.Op("Div", {x, w.FloatScalar(1.41421353816986083984375f)})});
    const std::string one_plus = w.Op("Add", {e, w.FloatScalar(1.0f)});
    return w.Op("Mul", {w.Op("Mul", {x, one_plus}), w.FloatScalar(0.5f)});
  }
  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))): the cube as a Pow, as Python code
  // writes it (op by op in PyTorch), or as Muls, as torch.onnx writes F.gelu(approximate="tanh")
  // below opset 20 (one kernel in PyTorch; ops/fusion.h fuses this form only). Python evaluates
  // the left factor 0.5 * x first and holds it while the rest runs (NewGELUActivation in
  // transformers' activations.py), one more tensor of x's size alive at the chain's peak.
  if (name == "gelu_tanh") {
    const std::string half = w.Op("Mul", {x, w.FloatScalar(0.5f)});
    return GeluTanh(w, x, w.Op("Pow", {x, w.FloatScalar(3.0f)}), half);
  }
  if (name == "gelu_tanh_kernel") return GeluTanh(w, x, w.Op("Mul", {x, w.Op("Mul", {x, x})}));
  if (name == "hardswish") return w.Op("HardSwish", {x});
  if (name == "relu6") return w.Op("Clip", {x, w.FloatScalar(0.0f), w.FloatScalar(6.0f)});
  return x;  // identity
}

std::string Linear2d(GraphWriter& w, const std::string& x, int64_t in, int64_t out, bool bias) {
  std::vector<std::string> inputs = {x, w.Weight("weight", {out, in})};
  if (bias) inputs.push_back(w.Weight("bias", {out}));
  return w.Op("Gemm", inputs,
              {Attr("alpha", 1.0f), Attr("beta", 1.0f), Attr("transB", int64_t{1})});
}

std::string Linear3d(GraphWriter& w, const std::string& x, int64_t in, int64_t out, bool bias) {
  std::string y = w.Op("MatMul", {x, w.Weight("weight", {in, out})});
  if (bias) y = w.Op("Add", {y, w.Weight("bias", {out})});
  return y;
}

std::string BatchNorm(GraphWriter& w, const std::string& x, int64_t channels) {
  const std::string scale = w.Weight("bn.weight", {channels});
  const std::string b = w.Weight("bn.bias", {channels});
  const std::string mean = w.Weight("bn.running_mean", {channels}, false);
  const std::string var = w.Weight("bn.running_var", {channels}, false);
  return w.Node(
      "BatchNormalization", {x, scale, b, mean, var}, 3,
      {Attr("epsilon", 1e-5f), Attr("momentum", 0.9f), Attr("training_mode", int64_t{1})})[0];
}

std::string Dropout(GraphWriter& w, const std::string& x, float ratio) {
  return w.Node("Dropout", {x, w.FloatScalar(ratio), w.BoolScalar(true)}, 2)[0];
}

std::string LayerNorm(GraphWriter& w, const std::string& x, int64_t features) {
  const std::string scale = w.Weight("ln.weight", {features});
  const std::string b = w.Weight("ln.bias", {features});
  return w.Op("LayerNormalization", {x, scale, b},
              {Attr("axis", int64_t{-1}), Attr("epsilon", 1e-5f)});
}

std::string Conv(GraphWriter& w, const std::string& x, const ConvSpec& s) {
  const int64_t pad = s.pad < 0 ? s.kernel / 2 : s.pad;
  std::vector<std::string> inputs = {
      x, w.Weight("conv.weight", {s.out, s.in / s.group, s.kernel, s.kernel})};
  if (s.bias) inputs.push_back(w.Weight("conv.bias", {s.out}));
  return w.Op("Conv", inputs,
              {Attr("dilations", std::vector<int64_t>{1, 1}), Attr("group", s.group),
               Attr("kernel_shape", std::vector<int64_t>{s.kernel, s.kernel}),
               Attr("pads", std::vector<int64_t>{pad, pad, pad, pad}),
               Attr("strides", std::vector<int64_t>{s.stride, s.stride})});
}

int64_t ConvOut(int64_t size, int64_t kernel, int64_t stride, int64_t pad) {
  return (size + 2 * pad - kernel) / stride + 1;
}

}  // namespace memest::zoo
