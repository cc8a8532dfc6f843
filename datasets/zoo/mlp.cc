// datasets/zoo/mlp.cc -- MLP family: nn.Sequential of [Linear, (BatchNorm1d), act, (Dropout)] x
// depth, then Linear to the logits.
//
// Architectures (widths of the hidden layers; w0 is the first hidden width):
//  * pyramid: w0, then halve each layer, never below the output width (GPUMemNet's rule);
//  * uniform: w0 everywhere;
//  * bottleneck: pyramid plus one more halving layer (GPUMemNet's rule);
//  * gradual: linear decrease from w0 towards the output width (GPUMemNet's rule, from w0);
//  * diamond: double up to the middle layer, then halve (beyond GPUMemNet's space).
// w0 is the input width in 30 % of samples (as GPUMemNet), otherwise drawn on its own.
#include <algorithm>
#include <utility>

#include "datasets/zoo/families.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo {
namespace {

constexpr int64_t kMlpMaxParams = 300'000'000;
constexpr int64_t kMlpMaxWidth = 32768;
constexpr int64_t kTinyMaxParams = 500'000;

int64_t MlpParams(const MlpConfig& c) {
  int64_t params = 0, in = c.input;
  for (int64_t h : c.hidden) {
    params += in * h + h + (c.batchnorm ? 2 * h : 0) + (c.activation == "prelu" ? 1 : 0);
    in = h;
  }
  return params + in * c.output + c.output;
}

std::vector<int64_t> Widths(const std::string& arch, int64_t w0, int64_t depth, int64_t output) {
  std::vector<int64_t> w;
  if (arch == "uniform") return std::vector<int64_t>(static_cast<size_t>(depth), w0);
  if (arch == "gradual") {
    const int64_t dec = std::max<int64_t>((w0 - output) / depth, 0);
    int64_t cur = w0;
    for (int64_t i = 0; i < depth; ++i) {
      w.push_back(cur);
      cur = std::max(cur - dec, output);
    }
    return w;
  }
  if (arch == "diamond") {
    int64_t cur = w0;
    for (int64_t i = 0; i < depth; ++i) {
      w.push_back(cur);
      cur = i < depth / 2 ? std::min(cur * 2, kMlpMaxWidth) : std::max(cur / 2, output);
    }
    return w;
  }
  // pyramid / bottleneck
  int64_t cur = w0;
  for (int64_t i = 0; i < depth; ++i) {
    w.push_back(cur);
    cur = std::max(cur / 2, output);
  }
  if (arch == "bottleneck") w.push_back(cur);
  return w;
}

}  // namespace

MlpConfig SampleMlp(Rng& rng, Scale scale) {
  static const std::vector<std::string> kArchs = {"pyramid", "uniform", "bottleneck", "gradual",
                                                  "diamond"};
  static const std::vector<std::string> kActs = {
      "relu",     "relu", "leaky_relu", "prelu", "elu",       "selu",      "tanh",    "sigmoid",
      "softplus", "silu", "mish",       "gelu",  "gelu_tanh", "hardswish", "identity"};
  const bool tiny = scale == Scale::kTiny;
  for (;;) {
    MlpConfig c;
    c.arch = rng.Pick(kArchs);
    c.input = tiny ? rng.LogInt(16, 512) : rng.LogInt(16, 16384);
    c.output = tiny ? rng.LogInt(2, 64) : rng.LogInt(2, 4096);
    const int64_t depth = tiny ? rng.Int(1, 4) : rng.Int(1, 12);
    const int64_t w0 = rng.Percent(30) ? c.input
                       : tiny          ? rng.LogInt(16, 256)
                                       : rng.LogInt(32, 16384);
    c.hidden = Widths(c.arch, std::max(w0, c.output), depth, c.output);
    c.activation = rng.Pick(kActs);
    c.batchnorm = rng.Percent(40);
    c.dropout_percent = rng.Percent(40) ? static_cast<int>(rng.Int(1, 10)) * 5 : 0;
    if (MlpParams(c) <= (tiny ? kTinyMaxParams : kMlpMaxParams)) return c;
  }
}

BuiltModel BuildMlp(const MlpConfig& c, const std::string& name) {
  GraphWriter w(name);
  std::string x = w.Input("input", kFloat, {kBatch, c.input});
  int64_t in = c.input;
  for (size_t i = 0; i < c.hidden.size(); ++i) {
    const int64_t h = c.hidden[i];
    const std::string layer = "layer" + std::to_string(i);
    w.SetScope(layer + "/fc");
    x = Linear2d(w, x, in, h);
    if (c.batchnorm) {
      w.SetScope(layer + "/bn");
      x = BatchNorm(w, x, h);
    }
    w.SetScope(layer + "/act");
    x = Activation(w, c.activation, x);
    if (c.dropout_percent > 0) {
      w.SetScope(layer + "/dropout");
      x = Dropout(w, x, static_cast<float>(c.dropout_percent) / 100.0f);
    }
    in = h;
  }
  w.SetScope("head");
  x = Linear2d(w, x, in, c.output);
  w.SetScope("");
  const std::string logits = w.Rename(x, "logits");
  w.Output(logits, kFloat, {kBatch, c.output});
  const int64_t parameters = w.parameter_elements();
  return {std::move(w).Finish(), parameters, {kBatch, c.input}, "float32"};
}

}  // namespace memest::zoo
