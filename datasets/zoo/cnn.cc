// datasets/zoo/cnn.cc -- CNN family: VGG-like, ResNet-like, MobileNet-like (inverted residuals,
// depthwise convs) and EfficientNet-like (MBConv + squeeze-excite), NCHW, 3-channel input.
//
// Policy:
//  * Conv layers have no bias when a BatchNorm follows (as torchvision); every Conv+BN pair is
//    Conv -> BatchNormalization(training) -> activation.
//  * Spatial sizes are tracked here (ConvOut) so classifier widths are exact.
//  * vgg: stages of 3x3 convs, MaxPool 2x2 after each; classifier either GAP + Linear or the
//    classic Flatten -> Linear -> act -> Dropout -> Linear -> act -> Dropout -> Linear.
//  * resnet: ImageNet stem (7x7/2 + MaxPool 3x3/2) at resolution >= 128, else a 3x3/1 stem;
//    basic (2 x 3x3) or bottleneck (1x1, 3x3, 1x1 x4) blocks; projection shortcut (1x1 conv +
//    BN) when shape changes; residual Add then ReLU.
//  * mobilenet: MobileNetV2's (t, c, n, s) table scaled by width/depth multipliers; expansion
//    1x1 -> depthwise kxk (group = channels) -> projection 1x1; ReLU6 as Clip(0, 6) or
//    HardSwish; optional squeeze-excite with HardSigmoid gate (V3 style).
//  * efficientnet: EfficientNet-B0's stage table scaled by width/depth coefficients; MBConv with
//    squeeze-excite (GlobalAveragePool -> Conv 1x1 -> SiLU -> Conv 1x1 -> Sigmoid -> Mul), SiLU
//    activations, no stochastic depth (p = 0, as the export needs).
#include <algorithm>
#include <utility>

#include "datasets/zoo/families.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo {
namespace {

constexpr int64_t kCnnMaxParams = 250'000'000;
constexpr int64_t kTinyMaxParams = 1'000'000;

int64_t MakeDivisible(int64_t v, int64_t divisor = 8) {
  int64_t r = std::max(divisor, (v + divisor / 2) / divisor * divisor);
  if (r * 10 < v * 9) r += divisor;  // do not go down by more than 10 % (torchvision's rule)
  return r;
}

// Feature map being built: tensor name, channels, spatial size (square).
struct Fmap {
  std::string x;
  int64_t c = 0;
  int64_t hw = 0;
};

// Conv (no bias) + BN + activation ("" = no activation).
Fmap ConvBnAct(GraphWriter& w, const std::string& scope, const Fmap& in, int64_t out,
               int64_t kernel, int64_t stride, int64_t group, const std::string& act) {
  w.SetScope(scope + "/conv");
  ConvSpec s;
  s.in = in.c;
  s.out = out;
  s.kernel = kernel;
  s.stride = stride;
  s.group = group;
  Fmap f{Conv(w, in.x, s), out, ConvOut(in.hw, kernel, stride, kernel / 2)};
  w.SetScope(scope + "/bn");
  f.x = BatchNorm(w, f.x, out);
  if (!act.empty()) {
    w.SetScope(scope + "/act");
    f.x = Activation(w, act, f.x);
  }
  return f;
}

// GlobalAveragePool -> Flatten -> (Dropout) -> Linear.
std::string PoolHead(GraphWriter& w, const Fmap& f, int64_t classes, int dropout_percent) {
  w.SetScope("head");
  std::string x = w.Op("Flatten", {w.Op("GlobalAveragePool", {f.x})}, {Attr("axis", int64_t{1})});
  if (dropout_percent > 0) x = Dropout(w, x, static_cast<float>(dropout_percent) / 100.0f);
  w.SetScope("head/fc");
  return Linear2d(w, x, f.c, classes);
}

// Squeeze-excite on `f` with `squeeze` channels; gate is "sigmoid" or "hardsigmoid".
std::string SqueezeExcite(GraphWriter& w, const std::string& scope, const Fmap& f, int64_t squeeze,
                          const std::string& inner_act, const std::string& gate) {
  w.SetScope(scope + "/se");
  const std::string pooled = w.Op("GlobalAveragePool", {f.x});
  ConvSpec reduce{f.c, squeeze, 1, 1, 0, 1, true};
  w.SetScope(scope + "/se/reduce");
  std::string s = Activation(w, inner_act, Conv(w, pooled, reduce));
  ConvSpec expand{squeeze, f.c, 1, 1, 0, 1, true};
  w.SetScope(scope + "/se/expand");
  s = Conv(w, s, expand);
  s = gate == "sigmoid"
          ? w.Op("Sigmoid", {s})
          : w.Op("HardSigmoid", {s}, {Attr("alpha", 1.0f / 6.0f), Attr("beta", 0.5f)});
  return w.Op("Mul", {f.x, s});
}

std::string BuildVgg(GraphWriter& w, const CnnConfig& c, Fmap f) {
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const CnnStage& st = c.stages[i];
    for (int64_t j = 0; j < st.blocks; ++j) {
      const std::string scope = "stage" + std::to_string(i) + "/conv" + std::to_string(j);
      if (c.batchnorm) {
        f = ConvBnAct(w, scope, f, st.channels, 3, 1, 1, c.activation);
      } else {
        w.SetScope(scope);
        ConvSpec s{f.c, st.channels, 3, 1, 1, 1, true};
        f = {Activation(w, c.activation, Conv(w, f.x, s)), st.channels, f.hw};
      }
    }
    w.SetScope("stage" + std::to_string(i) + "/pool");
    f.x = w.Op("MaxPool", {f.x},
               {Attr("kernel_shape", std::vector<int64_t>{2, 2}),
                Attr("pads", std::vector<int64_t>{0, 0, 0, 0}),
                Attr("strides", std::vector<int64_t>{2, 2})});
    f.hw = ConvOut(f.hw, 2, 2, 0);
  }
  if (c.head_hidden == 0) return PoolHead(w, f, c.num_classes, c.dropout_percent);
  w.SetScope("classifier");
  std::string x = w.Op("Flatten", {f.x}, {Attr("axis", int64_t{1})});
  int64_t in = f.c * f.hw * f.hw;
  for (int k = 0; k < 2; ++k) {
    w.SetScope("classifier/fc" + std::to_string(k));
    x = Activation(w, c.activation, Linear2d(w, x, in, c.head_hidden));
    if (c.dropout_percent > 0) x = Dropout(w, x, static_cast<float>(c.dropout_percent) / 100.0f);
    in = c.head_hidden;
  }
  w.SetScope("classifier/fc2");
  return Linear2d(w, x, in, c.num_classes);
}

std::string BuildResnet(GraphWriter& w, const CnnConfig& c, Fmap f) {
  if (c.resolution >= 128) {
    f = ConvBnAct(w, "stem", f, c.stem_channels, 7, 2, 1, c.activation);
    w.SetScope("stem/pool");
    f.x = w.Op("MaxPool", {f.x},
               {Attr("kernel_shape", std::vector<int64_t>{3, 3}),
                Attr("pads", std::vector<int64_t>{1, 1, 1, 1}),
                Attr("strides", std::vector<int64_t>{2, 2})});
    f.hw = ConvOut(f.hw, 3, 2, 1);
  } else {
    f = ConvBnAct(w, "stem", f, c.stem_channels, 3, 1, 1, c.activation);
  }
  const bool bottleneck = c.block == "bottleneck";
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const CnnStage& st = c.stages[i];
    const int64_t out = bottleneck ? st.channels * 4 : st.channels;
    for (int64_t j = 0; j < st.blocks; ++j) {
      const std::string scope = "stage" + std::to_string(i) + "/block" + std::to_string(j);
      const int64_t stride = j == 0 ? st.stride : 1;
      Fmap y;
      if (bottleneck) {
        y = ConvBnAct(w, scope + "/a", f, st.channels, 1, 1, 1, c.activation);
        y = ConvBnAct(w, scope + "/b", y, st.channels, 3, stride, 1, c.activation);
        y = ConvBnAct(w, scope + "/c", y, out, 1, 1, 1, "");
      } else {
        y = ConvBnAct(w, scope + "/a", f, out, 3, stride, 1, c.activation);
        y = ConvBnAct(w, scope + "/b", y, out, 3, 1, 1, "");
      }
      std::string shortcut = f.x;
      if (stride != 1 || f.c != out) {
        shortcut = ConvBnAct(w, scope + "/downsample", f, out, 1, stride, 1, "").x;
      }
      w.SetScope(scope);
      f = {Activation(w, c.activation, w.Op("Add", {y.x, shortcut})), out, y.hw};
    }
  }
  return PoolHead(w, f, c.num_classes, c.dropout_percent);
}

// MobileNet / EfficientNet.
std::string BuildInvertedResidual(GraphWriter& w, const CnnConfig& c, Fmap f) {
  const bool effnet = c.arch == "efficientnet";
  f = ConvBnAct(w, "stem", f, c.stem_channels, 3, 2, 1, c.activation);
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const CnnStage& st = c.stages[i];
    for (int64_t j = 0; j < st.blocks; ++j) {
      const std::string scope = "stage" + std::to_string(i) + "/block" + std::to_string(j);
      const int64_t stride = j == 0 ? st.stride : 1;
      const int64_t hidden = f.c * st.expand;
      Fmap y = f;
      if (st.expand != 1) y = ConvBnAct(w, scope + "/expand", y, hidden, 1, 1, 1, c.activation);
      y = ConvBnAct(w, scope + "/dw", y, hidden, st.kernel, stride, hidden, c.activation);
      if (st.se) {
        const int64_t squeeze = effnet ? std::max<int64_t>(1, f.c / 4) : MakeDivisible(hidden / 4);
        y.x = SqueezeExcite(w, scope, y, squeeze, effnet ? "silu" : "relu",
                            effnet ? "sigmoid" : "hardsigmoid");
      }
      y = ConvBnAct(w, scope + "/project", y, st.channels, 1, 1, 1, "");
      if (stride == 1 && f.c == st.channels) {
        w.SetScope(scope);
        y.x = w.Op("Add", {y.x, f.x});
      }
      f = y;
    }
  }
  f = ConvBnAct(w, "head/conv", f, c.head_channels, 1, 1, 1, c.activation);
  return PoolHead(w, f, c.num_classes, c.dropout_percent);
}

int64_t CountParams(const CnnConfig& c) {
  // Cheap upper-level estimate via a dry build is simplest and exact.
  return BuildCnn(c, "count").parameters;
}

CnnConfig SampleVgg(Rng& rng, CnnConfig c, bool tiny) {
  int64_t max_stages = 0;
  for (int64_t r = c.resolution; r >= 2 && max_stages < 5; r /= 2) ++max_stages;
  if (tiny) max_stages = 3;
  const int64_t stages = rng.Int(std::min<int64_t>(tiny ? 2 : 3, max_stages), max_stages);
  const int64_t base =
      tiny ? rng.Pick(std::vector<int64_t>{8, 16}) : rng.Pick(std::vector<int64_t>{16, 32, 64, 96});
  for (int64_t i = 0; i < stages; ++i) {
    CnnStage s;
    s.blocks = tiny ? rng.Int(1, 2) : rng.Int(1, 4);
    s.channels = std::min<int64_t>(base << i, 8 * base);
    c.stages.push_back(s);
  }
  c.batchnorm = rng.Percent(50);
  c.activation = rng.Percent(75)
                     ? "relu"
                     : rng.Pick(std::vector<std::string>{"leaky_relu", "silu", "gelu", "elu"});
  c.head_hidden = !rng.Percent(50) ? 0
                  : tiny           ? rng.Pick(std::vector<int64_t>{32, 64})
                                   : rng.Pick(std::vector<int64_t>{256, 512, 1024, 2048, 4096});
  c.dropout_percent = rng.Percent(60) ? 50 : 0;
  return c;
}

CnnConfig SampleResnet(Rng& rng, CnnConfig c, bool tiny) {
  c.block = rng.Percent(50) ? "basic" : "bottleneck";
  const int64_t base = tiny ? rng.Pick(std::vector<int64_t>{8, 16})
                            : rng.Pick(std::vector<int64_t>{16, 32, 48, 64, 96});
  c.stem_channels = base;
  const int64_t stages = tiny ? rng.Int(2, 3) : rng.Int(2, 4);
  for (int64_t i = 0; i < stages; ++i) {
    CnnStage s;
    s.blocks = tiny ? rng.Int(1, 2) : rng.Int(1, 6);
    s.channels = base << i;
    s.stride = i == 0 ? 1 : 2;
    c.stages.push_back(s);
  }
  c.activation = rng.Percent(80) ? "relu" : rng.Pick(std::vector<std::string>{"silu", "gelu"});
  c.dropout_percent = rng.Percent(20) ? 20 : 0;
  return c;
}

CnnConfig SampleMobilenet(Rng& rng, CnnConfig c, bool tiny) {
  struct Row {
    int64_t t, ch, n, s;
  };
  static const std::vector<Row> kV2 = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                       {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  const int64_t width = tiny ? rng.Pick(std::vector<int64_t>{25, 35})
                             : rng.Pick(std::vector<int64_t>{35, 50, 75, 100, 125, 150});   // %
  const int64_t depth = tiny ? 35 : rng.Pick(std::vector<int64_t>{50, 75, 100, 125, 150});  // %
  const bool se = rng.Percent(40);
  c.activation = rng.Percent(50) ? "relu6" : "hardswish";
  c.stem_channels = MakeDivisible(32 * width / 100);
  for (const Row& r : kV2) {
    CnnStage s;
    s.expand = r.t == 1 ? 1 : rng.Pick(std::vector<int64_t>{3, 4, 6});
    s.channels = MakeDivisible(r.ch * width / 100);
    s.blocks = std::max<int64_t>(1, (r.n * depth + 99) / 100);
    s.stride = r.s;
    s.kernel = rng.Percent(30) ? 5 : 3;
    s.se = se && r.ch >= 40;
    c.stages.push_back(s);
  }
  c.head_channels = tiny ? 128 : MakeDivisible(1280 * std::max<int64_t>(width, 100) / 100);
  c.dropout_percent = 20;
  return c;
}

CnnConfig SampleEfficientnet(Rng& rng, CnnConfig c, bool tiny) {
  struct Row {
    int64_t t, k, s, ch, n;
  };
  static const std::vector<Row> kB0 = {{1, 3, 1, 16, 1}, {6, 3, 2, 24, 2},  {6, 5, 2, 40, 2},
                                       {6, 3, 2, 80, 3}, {6, 5, 1, 112, 3}, {6, 5, 2, 192, 4},
                                       {6, 3, 1, 320, 1}};
  const int64_t width = tiny ? rng.Pick(std::vector<int64_t>{25, 35})
                             : rng.Pick(std::vector<int64_t>{100, 110, 120, 140, 160, 180});
  const int64_t depth = tiny ? 35 : rng.Pick(std::vector<int64_t>{100, 110, 120, 140, 180, 220});
  c.activation = "silu";
  c.stem_channels = MakeDivisible(32 * width / 100);
  for (const Row& r : kB0) {
    CnnStage s;
    s.expand = r.t;
    s.kernel = r.k;
    s.stride = r.s;
    s.channels = MakeDivisible(r.ch * width / 100);
    s.blocks = std::max<int64_t>(1, (r.n * depth + 99) / 100);
    s.se = true;
    c.stages.push_back(s);
  }
  c.head_channels = tiny ? 128 : MakeDivisible(1280 * width / 100);
  c.dropout_percent = static_cast<int>(rng.Int(2, 5)) * 10;
  return c;
}

}  // namespace

CnnConfig SampleCnn(Rng& rng, Scale scale) {
  static const std::vector<std::string> kArchs = {"vgg", "resnet", "mobilenet", "efficientnet"};
  const bool tiny = scale == Scale::kTiny;
  for (;;) {
    CnnConfig c;
    c.arch = rng.Pick(kArchs);
    c.resolution =
        tiny ? 32 : rng.Pick(std::vector<int64_t>{32, 64, 96, 128, 160, 192, 224, 256, 320});
    c.num_classes = tiny ? 10 : rng.Pick(std::vector<int64_t>{10, 100, 200, 1000});
    if (c.arch == "vgg") {
      c = SampleVgg(rng, c, tiny);
    } else if (c.arch == "resnet") {
      c = SampleResnet(rng, c, tiny);
    } else if (c.arch == "mobilenet") {
      c = SampleMobilenet(rng, c, tiny);
    } else {
      c = SampleEfficientnet(rng, c, tiny);
    }
    if (CountParams(c) <= (tiny ? kTinyMaxParams : kCnnMaxParams)) return c;
  }
}

BuiltModel BuildCnn(const CnnConfig& c, const std::string& name) {
  GraphWriter w(name);
  Fmap f{w.Input("input", kFloat, {kBatch, 3, c.resolution, c.resolution}), 3, c.resolution};
  std::string logits;
  if (c.arch == "vgg") {
    logits = BuildVgg(w, c, f);
  } else if (c.arch == "resnet") {
    logits = BuildResnet(w, c, f);
  } else {
    logits = BuildInvertedResidual(w, c, f);
  }
  w.SetScope("");
  logits = w.Rename(logits, "logits");
  w.Output(logits, kFloat, {kBatch, c.num_classes});
  const int64_t parameters = w.parameter_elements();
  return {std::move(w).Finish(), parameters, {kBatch, 3, c.resolution, c.resolution}, "float32"};
}

}  // namespace memest::zoo
