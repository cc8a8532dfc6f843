// datasets/zoo/rnn.cc -- RNN family: stacked LSTM / GRU sequence classifiers.
//
// Graph: input [batch, seq, features] float, or input_ids [batch, seq] int64 through an embedding
// (Gather); then `layers` ONNX LSTM/GRU ops with layout=1 (batch-first, so the batch stays dim 0),
// each followed by Reshape [0, seq, directions * hidden] and, between layers, an optional Dropout
// (nn.LSTM's dropout=p); the last time step (Gather axis 1) feeds a Linear to the classes.
// Weights as ONNX stores them: W [dirs, gates*hidden, in], R [dirs, gates*hidden, hidden],
// B [dirs, 2*gates*hidden] (PyTorch's b_ih and b_hh), so parameter counts equal PyTorch's.
// GRU uses linear_before_reset=1, which is PyTorch's formulation.
#include <utility>

#include "datasets/zoo/families.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo {
namespace {

constexpr int64_t kRnnMaxParams = 400'000'000;

int64_t RnnParams(const RnnConfig& c) {
  const int64_t gates = c.arch == "lstm" ? 4 : 3, dirs = c.bidirectional ? 2 : 1;
  int64_t p = c.vocab > 0 ? c.vocab * c.input : 0;
  int64_t in = c.input;
  for (int64_t l = 0; l < c.layers; ++l) {
    p += dirs * gates * c.hidden * (in + c.hidden + 2);
    in = dirs * c.hidden;
  }
  return p + in * c.num_classes + c.num_classes;
}

}  // namespace

RnnConfig SampleRnn(Rng& rng, Scale scale) {
  const bool tiny = scale == Scale::kTiny;
  for (;;) {
    RnnConfig c;
    c.arch = rng.Percent(50) ? "lstm" : "gru";
    c.layers = tiny ? rng.Int(1, 2) : rng.Int(1, 4);
    c.hidden = tiny ? rng.LogInt(16, 128) : rng.LogInt(32, 2048);
    c.bidirectional = rng.Percent(30);
    c.seq = tiny ? rng.Pick(std::vector<int64_t>{8, 16, 32})
                 : rng.Pick(std::vector<int64_t>{16, 32, 64, 128, 256, 512});
    if (rng.Percent(60)) {
      c.vocab = tiny ? rng.Pick(std::vector<int64_t>{100, 500, 1000})
                     : rng.Pick(std::vector<int64_t>{1000, 5000, 10000, 32000, 50000});
      c.input = tiny ? rng.Pick(std::vector<int64_t>{16, 32, 64})
                     : rng.Pick(std::vector<int64_t>{64, 128, 256, 300, 512, 1024});
    } else {
      c.vocab = 0;
      c.input = tiny ? rng.LogInt(8, 64) : rng.LogInt(8, 1024);
    }
    c.num_classes = tiny ? rng.Pick(std::vector<int64_t>{2, 10})
                         : rng.Pick(std::vector<int64_t>{2, 10, 100, 1000});
    c.dropout_percent = c.layers > 1 && rng.Percent(50) ? static_cast<int>(rng.Int(1, 5)) * 10 : 0;
    if (RnnParams(c) <= kRnnMaxParams) return c;
  }
}

BuiltModel BuildRnn(const RnnConfig& c, const std::string& name) {
  GraphWriter w(name);
  const int64_t gates = c.arch == "lstm" ? 4 : 3, dirs = c.bidirectional ? 2 : 1;
  std::string x;
  std::vector<int64_t> input_dims;
  std::string dtype;
  if (c.vocab > 0) {
    input_dims = {kBatch, c.seq};
    dtype = "int64";
    const std::string ids = w.Input("input_ids", kInt64, input_dims);
    w.SetScope("embedding");
    x = w.Op("Gather", {w.Weight("weight", {c.vocab, c.input}), ids}, {Attr("axis", int64_t{0})});
  } else {
    input_dims = {kBatch, c.seq, c.input};
    dtype = "float32";
    x = w.Input("input", kFloat, input_dims);
  }
  int64_t in = c.input;
  const std::string op = c.arch == "lstm" ? "LSTM" : "GRU";
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string scope = "rnn/layer" + std::to_string(l);
    w.SetScope(scope);
    const std::string wt = w.Weight("W", {dirs, gates * c.hidden, in});
    const std::string rt = w.Weight("R", {dirs, gates * c.hidden, c.hidden});
    const std::string bt = w.Weight("B", {dirs, 2 * gates * c.hidden});
    std::vector<Attribute> attrs = {
        Attr("direction", std::string(c.bidirectional ? "bidirectional" : "forward")),
        Attr("hidden_size", c.hidden), Attr("layout", int64_t{1})};
    if (op == "GRU") attrs.push_back(Attr("linear_before_reset", int64_t{1}));
    const int outputs = op == "LSTM" ? 3 : 2;
    const auto ys = w.Node(op, {x, wt, rt, bt}, outputs, attrs);
    // Y: [batch, seq, dirs, hidden] -> [batch, seq, dirs * hidden].
    x = w.Op("Reshape", {ys[0], w.Int64s({0, c.seq, dirs * c.hidden})});
    in = dirs * c.hidden;
    if (c.dropout_percent > 0 && l + 1 < c.layers) {
      x = Dropout(w, x, static_cast<float>(c.dropout_percent) / 100.0f);
    }
  }
  w.SetScope("head");
  const std::string last =
      w.Op("Gather", {x, w.Int64Scalar(c.seq - 1)}, {Attr("axis", int64_t{1})});
  w.SetScope("head/fc");
  const std::string logits = w.Rename(Linear2d(w, last, in, c.num_classes), "logits");
  w.Output(logits, kFloat, {kBatch, c.num_classes});
  const int64_t parameters = w.parameter_elements();
  return {std::move(w).Finish(), parameters, input_dims, dtype};
}

}  // namespace memest::zoo
