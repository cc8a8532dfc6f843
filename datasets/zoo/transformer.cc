// datasets/zoo/transformer.cc -- Transformer family: BERT-like encoders (sequence
// classification) and GPT-like decoder-only language models.
//
// Graph (x: [batch, seq, d_model]; every dim but batch concrete):
//  * embeddings: Gather(token table [vocab, d], input_ids) + learned positions [seq, d]
//    (broadcast Add), then (post-LN only) LayerNorm, then Dropout;
//  * attention: one Linear to 3d, Split, Reshape [0, seq, heads, d_head] (0 copies the batch),
//    Transpose to [b, h, s, dh] (keys to [b, h, dh, s]), MatMul, Div by sqrt(d_head), for decoders
//    Where(causal mask, -inf, scores) with the mask built in-graph
//    (ConstantOfShape([seq, seq], true) -> Trilu(upper, k=1)), Softmax(-1), Dropout, MatMul with
//    values, Transpose back, Reshape [0, seq, d], output Linear, Dropout;
//  * MLP: Linear(d, ffn) -> GELU (erf form or tanh approximation, decomposed) -> Linear(ffn, d)
//    -> Dropout; LayerNormalization-17 around both blocks (pre-LN or post-LN);
//  * heads: decoders: final LayerNorm (pre-LN) and an LM head, untied ([d, vocab], no bias) or
//    tied (MatMul with Transpose of the token table); encoders: first token -> Linear -> Tanh
//    (pooler) -> Dropout -> Linear to the classes.
#include <cmath>
#include <limits>
#include <utility>

#include "datasets/zoo/families.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo {
namespace {

constexpr int64_t kTransformerMaxParams = 800'000'000;

int64_t TransformerParams(const TransformerConfig& c) {
  const int64_t d = c.d_model;
  int64_t p = c.vocab * d + c.seq * d;
  p += c.layers * (3 * d * d + 3 * d + d * d + d + 2 * d * c.ffn + c.ffn + d + 4 * d);
  p += 2 * d;  // final LN (pre) or embedding LN (post)
  if (c.arch == "decoder") {
    p += c.tied ? 0 : d * c.vocab;
  } else {
    p += d * d + d + d * c.num_classes + c.num_classes;
  }
  return p;
}

struct Ctx {
  GraphWriter& w;
  const TransformerConfig& c;
  float dropout;
  std::string mask;  // decoders
};

std::string MaybeDropout(Ctx& ctx, const std::string& x) {
  return ctx.dropout > 0 ? Dropout(ctx.w, x, ctx.dropout) : x;
}

std::string Attention(Ctx& ctx, const std::string& scope, const std::string& h) {
  GraphWriter& w = ctx.w;
  const TransformerConfig& c = ctx.c;
  const int64_t d = c.d_model, dh = c.d_model / c.heads;
  w.SetScope(scope + "/qkv");
  const std::string qkv = Linear3d(w, h, d, 3 * d);
  w.SetScope(scope);
  const auto parts = w.Node("Split", {qkv, w.Int64s({d, d, d})}, 3, {Attr("axis", int64_t{2})});
  const std::string heads_shape = w.Int64s({0, c.seq, c.heads, dh});
  auto split_heads = [&](const std::string& t, const std::vector<int64_t>& perm) {
    return w.Op("Transpose", {w.Op("Reshape", {t, heads_shape})}, {Attr("perm", perm)});
  };
  const std::string q = split_heads(parts[0], {0, 2, 1, 3});
  const std::string k = split_heads(parts[1], {0, 2, 3, 1});
  const std::string v = split_heads(parts[2], {0, 2, 1, 3});
  std::string scores = w.Op("MatMul", {q, k});
  scores = w.Op("Div", {scores, w.FloatScalar(std::sqrt(static_cast<float>(dh)))});
  if (!ctx.mask.empty()) {
    scores =
        w.Op("Where", {ctx.mask, w.FloatScalar(-std::numeric_limits<float>::infinity()), scores});
  }
  std::string probs = w.Op("Softmax", {scores}, {Attr("axis", int64_t{-1})});
  probs = MaybeDropout(ctx, probs);
  std::string y = w.Op("MatMul", {probs, v});
  y = w.Op("Transpose", {y}, {Attr("perm", std::vector<int64_t>{0, 2, 1, 3})});
  y = w.Op("Reshape", {y, w.Int64s({0, c.seq, d})});
  w.SetScope(scope + "/proj");
  y = Linear3d(w, y, d, d);
  return MaybeDropout(ctx, y);
}

std::string FeedForward(Ctx& ctx, const std::string& scope, const std::string& h) {
  GraphWriter& w = ctx.w;
  w.SetScope(scope + "/fc1");
  std::string y = Linear3d(w, h, ctx.c.d_model, ctx.c.ffn);
  w.SetScope(scope + "/act");
  y = Activation(w, ctx.c.gelu, y);
  w.SetScope(scope + "/fc2");
  y = Linear3d(w, y, ctx.c.ffn, ctx.c.d_model);
  return MaybeDropout(ctx, y);
}

std::string Norm(GraphWriter& w, const std::string& scope, const std::string& x, int64_t d) {
  w.SetScope(scope);
  return LayerNorm(w, x, d);
}

}  // namespace

TransformerConfig SampleTransformer(Rng& rng, Scale scale) {
  const bool tiny = scale == Scale::kTiny;
  for (;;) {
    TransformerConfig c;
    c.arch = rng.Percent(50) ? "encoder" : "decoder";
    if (tiny) {
      c.layers = rng.Int(1, 2);
      c.d_model = rng.Pick(std::vector<int64_t>{32, 64});
      c.heads = rng.Pick(std::vector<int64_t>{2, 4});
      c.seq = rng.Pick(std::vector<int64_t>{16, 32, 64});
      c.vocab = rng.Pick(std::vector<int64_t>{100, 500, 1000});
    } else {
      c.layers = rng.Int(1, 24);
      c.d_model =
          rng.Pick(std::vector<int64_t>{64, 128, 192, 256, 384, 512, 768, 1024, 1280, 1536, 2048});
      const int64_t dh = c.d_model == 64 ? rng.Pick(std::vector<int64_t>{16, 32, 64})
                                         : rng.Pick(std::vector<int64_t>{32, 64, 128});
      c.heads = c.d_model / dh;
      c.seq = rng.Pick(std::vector<int64_t>{32, 64, 128, 256, 512, 1024, 2048});
      c.vocab = rng.Pick(std::vector<int64_t>{1000, 5000, 8192, 16384, 30522, 32000, 50257});
    }
    c.ffn = c.d_model * rng.Pick(std::vector<int64_t>{2, 3, 4, 4});
    c.num_classes = rng.Pick(std::vector<int64_t>{2, 3, 10, 100});
    c.norm = rng.Percent(c.arch == "decoder" ? 85 : 30) ? "pre" : "post";
    c.gelu = rng.Percent(50) ? "gelu" : "gelu_tanh";
    c.tied = c.arch == "decoder" && rng.Percent(50);
    c.dropout_percent = rng.Percent(80) ? 10 : 0;
    if (TransformerParams(c) <= kTransformerMaxParams) return c;
  }
}

BuiltModel BuildTransformer(const TransformerConfig& c, const std::string& name) {
  GraphWriter w(name);
  Ctx ctx{w, c, static_cast<float>(c.dropout_percent) / 100.0f, ""};
  const int64_t d = c.d_model;
  const std::string ids = w.Input("input_ids", kInt64, {kBatch, c.seq});
  w.SetScope("embeddings");
  const std::string table = w.Weight("token.weight", {c.vocab, d});
  std::string x = w.Op("Gather", {table, ids}, {Attr("axis", int64_t{0})});
  x = w.Op("Add", {x, w.Weight("position.weight", {c.seq, d})});
  if (c.norm == "post") x = Norm(w, "embeddings/ln", x, d);
  w.SetScope("embeddings");
  x = MaybeDropout(ctx, x);
  if (c.arch == "decoder") {
    w.SetScope("causal_mask");
    onnx::TensorProto one;
    one.set_data_type(kBool);
    one.add_dims(1);
    one.add_int32_data(1);
    const std::string ones =
        w.Op("ConstantOfShape", {w.Int64s({c.seq, c.seq})}, {Attr("value", one)});
    ctx.mask = w.Op("Trilu", {ones, w.Int64Scalar(1)}, {Attr("upper", int64_t{1})});
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string layer = "layer" + std::to_string(i);
    if (c.norm == "pre") {
      std::string a = Attention(ctx, layer + "/attn", Norm(w, layer + "/ln1", x, d));
      w.SetScope(layer);
      x = w.Op("Add", {x, a});
      std::string f = FeedForward(ctx, layer + "/mlp", Norm(w, layer + "/ln2", x, d));
      w.SetScope(layer);
      x = w.Op("Add", {x, f});
    } else {
      std::string a = Attention(ctx, layer + "/attn", x);
      w.SetScope(layer);
      x = Norm(w, layer + "/ln1", w.Op("Add", {x, a}), d);
      std::string f = FeedForward(ctx, layer + "/mlp", x);
      w.SetScope(layer);
      x = Norm(w, layer + "/ln2", w.Op("Add", {x, f}), d);
    }
  }
  std::string logits;
  if (c.arch == "decoder") {
    if (c.norm == "pre") x = Norm(w, "final_ln", x, d);
    w.SetScope("lm_head");
    if (c.tied) {
      logits = w.Op("MatMul",
                    {x, w.Op("Transpose", {table}, {Attr("perm", std::vector<int64_t>{1, 0})})});
    } else {
      logits = w.Op("MatMul", {x, w.Weight("weight", {d, c.vocab})});
    }
    logits = w.Rename(logits, "logits");
    w.Output(logits, kFloat, {kBatch, c.seq, c.vocab});
  } else {
    if (c.norm == "pre") x = Norm(w, "final_ln", x, d);
    w.SetScope("pooler");
    std::string first = w.Op("Gather", {x, w.Int64Scalar(0)}, {Attr("axis", int64_t{1})});
    w.SetScope("pooler/fc");
    std::string pooled = w.Op("Tanh", {Linear2d(w, first, d, d)});
    w.SetScope("classifier");
    pooled = MaybeDropout(ctx, pooled);
    w.SetScope("classifier/fc");
    logits = w.Rename(Linear2d(w, pooled, d, c.num_classes), "logits");
    w.Output(logits, kFloat, {kBatch, c.num_classes});
  }
  const int64_t parameters = w.parameter_elements();
  return {std::move(w).Finish(), parameters, {kBatch, c.seq}, "int64"};
}

}  // namespace memest::zoo
