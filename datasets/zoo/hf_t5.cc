// datasets/zoo/hf_t5.cc -- T5ForConditionalGeneration from a Hugging Face config (t5-*,
// t5-v1_1, flan-t5), training phase.
//
// Policy (as modeling_t5.py):
//  * One `shared` embedding [vocab, d_model] read by the encoder (input_ids [batch, seq]) and the
//    decoder (decoder_input_ids [batch, tgt_seq]). Pre-norm blocks with T5LayerNorm (RMSNorm
//    without bias, in fp32), Dropout after every sublayer and after the embeddings and each
//    stack's final norm. Attention has no 1/sqrt(d_kv) scale (T5 folds it into the weights).
//  * Relative position bias: only block 0 of each stack has relative_attention_bias
//    [num_buckets, heads]; the bias is computed once per stack in the graph (buckets from Range,
//    Sub, Abs/Min, Log, Cast, Where: _relative_position_bucket), Gathered, permuted to
//    [1, heads, q, k] and added to the scores of every self-attention layer of that stack, as
//    the model passes position_bias on. The decoder's causal mask is applied with Where.
//  * Feed-forward: DenseReluDense (wi, act, Dropout, wo) or, for "gated-*", wi_0 (act) * wi_1.
//  * Head: tied (tie_word_embeddings, the default): sequence_output * d_model**-0.5, then MatMul
//    with the transposed `shared`; untied (v1.1, flan): a separate lm_head [d_model, vocab].
#include <cmath>
#include <string>
#include <utility>

#include "datasets/zoo/hf_internal.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo::hf {
namespace {

class T5Graph {
 public:
  T5Graph(const T5Spec& s, const HfGraphOptions& o, const std::string& name)
      : s_(s), o_(o), w_(name), b_(w_, /*training=*/true) {}

  HfModel Build();

 private:
  std::string Norm(const std::string& x, const std::string& name) {
    return b_.RmsNorm(x, s_.d_model, s_.norm_eps, name, /*plus_one=*/false);
  }
  // Buckets of _relative_position_bucket, Gathered from the block-0 table: [1, heads, q, k].
  std::string PositionBias(const std::string& q_len, const std::string& k_len, bool bidirectional,
                           const std::string& table);
  std::string Attention(const std::string& hq, const std::string& hkv, const std::string& name,
                        const std::string& bias, const std::string& mask);
  std::string FeedForward(const std::string& h, const std::string& name);

  const T5Spec& s_;
  const HfGraphOptions& o_;
  GraphWriter w_;
  Builder b_;
};

std::string T5Graph::PositionBias(const std::string& q_len, const std::string& k_len,
                                  bool bidirectional, const std::string& table) {
  auto range = [&](const std::string& n) {
    return w_.Op("Range", {w_.Int64Scalar(0), n, w_.Int64Scalar(1)});
  };
  std::string rp = w_.Op("Sub", {b_.Unsqueeze(range(k_len), {0}), b_.Unsqueeze(range(q_len), {1})});
  int64_t buckets = s_.buckets;
  std::string sign;
  if (bidirectional) {
    buckets /= 2;
    sign = w_.Op("Mul", {w_.Op("Cast", {w_.Op("Greater", {rp, w_.Int64Scalar(0)})},
                               {Attr("to", int64_t{kInt64})}),
                         w_.Int64Scalar(buckets)});
    rp = w_.Op("Abs", {rp});
  } else {
    rp = w_.Op("Neg", {w_.Op("Min", {rp, w_.Int64Scalar(0)})});
  }
  const int64_t max_exact = buckets / 2;
  const std::string small = w_.Op("Less", {rp, w_.Int64Scalar(max_exact)});
  const std::string ratio = w_.Op("Div", {w_.Op("Cast", {rp}, {Attr("to", int64_t{kFloat})}),
                                          w_.FloatScalar(static_cast<float>(max_exact))});
  const float log_range =
      std::log(static_cast<float>(s_.max_distance) / static_cast<float>(max_exact));
  std::string large =
      w_.Op("Mul", {w_.Op("Div", {w_.Op("Log", {ratio}), w_.FloatScalar(log_range)}),
                    w_.FloatScalar(static_cast<float>(buckets - max_exact))});
  large = w_.Op("Add",
                {w_.Op("Cast", {large}, {Attr("to", int64_t{kInt64})}), w_.Int64Scalar(max_exact)});
  large = w_.Op("Min", {large, w_.Int64Scalar(buckets - 1)});
  std::string bucket = w_.Op("Where", {small, rp, large});
  if (!sign.empty()) bucket = w_.Op("Add", {bucket, sign});
  const std::string values = w_.Op("Gather", {table, bucket}, {Attr("axis", int64_t{0})});
  return b_.Unsqueeze(b_.Transpose(values, {2, 0, 1}), {0});
}

std::string T5Graph::Attention(const std::string& hq, const std::string& hkv,
                               const std::string& name, const std::string& bias,
                               const std::string& mask) {
  const int64_t d = s_.d_model, inner = s_.heads * s_.d_kv;
  const std::string q =
      b_.SplitHeads(b_.Linear(hq, d, inner, false, name + ".q"), s_.heads, s_.d_kv);
  const std::string k =
      b_.SplitHeads(b_.Linear(hkv, d, inner, false, name + ".k"), s_.heads, s_.d_kv);
  const std::string v =
      b_.SplitHeads(b_.Linear(hkv, d, inner, false, name + ".v"), s_.heads, s_.d_kv);
  const std::string y =
      b_.Attention(q, k, v, s_.heads, s_.heads, s_.d_kv, 1.0f, bias, mask, s_.dropout);
  return b_.Linear(y, inner, d, false, name + ".o");
}

std::string T5Graph::FeedForward(const std::string& h, const std::string& name) {
  const int64_t d = s_.d_model, f = s_.d_ff;
  std::string y;
  if (s_.gated) {
    y = w_.Op("Mul", {Activation(w_, s_.act, b_.Linear(h, d, f, false, name + ".wi_0")),
                      b_.Linear(h, d, f, false, name + ".wi_1")});
  } else {
    y = Activation(w_, s_.act, b_.Linear(h, d, f, false, name + ".wi"));
  }
  return b_.Linear(b_.Dropout(y, s_.dropout), f, d, false, name + ".wo");
}

HfModel T5Graph::Build() {
  const int64_t d = s_.d_model;
  const std::string ids = w_.SymbolicInput("input_ids", kInt64, {kBatch, "seq"});
  const std::string dec_ids = w_.SymbolicInput("decoder_input_ids", kInt64, {kBatch, "tgt_seq"});
  const std::string shared = b_.Param("shared.weight", {s_.vocab, d});
  // Encoder.
  w_.SetScope("encoder");
  const std::string seq = b_.Element(w_.Op("Shape", {ids}), 1);
  std::string x =
      b_.Dropout(w_.Op("Gather", {shared, ids}, {Attr("axis", int64_t{0})}), s_.dropout);
  const std::string rel = "SelfAttention.relative_attention_bias.weight";
  const std::string enc_bias = PositionBias(
      seq, seq, true, b_.Param("encoder.block.0.layer.0." + rel, {s_.buckets, s_.heads}));
  for (int64_t i = 0; i < s_.encoder_layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".";
    w_.SetScope("encoder.block." + std::to_string(i));
    const std::string h = Norm(x, p + "layer.0.layer_norm");
    x = w_.Op("Add", {x, b_.Dropout(Attention(h, h, p + "layer.0.SelfAttention", enc_bias, ""),
                                    s_.dropout)});
    const std::string h2 = Norm(x, p + "layer.1.layer_norm");
    x = w_.Op("Add", {x, b_.Dropout(FeedForward(h2, p + "layer.1.DenseReluDense"), s_.dropout)});
  }
  w_.SetScope("encoder");
  const std::string encoded = b_.Dropout(Norm(x, "encoder.final_layer_norm"), s_.dropout);
  // Decoder.
  w_.SetScope("decoder");
  Dims dims;
  dims.seq = b_.Element(w_.Op("Shape", {dec_ids}), 1);
  dims.total = dims.seq;
  std::string y =
      b_.Dropout(w_.Op("Gather", {shared, dec_ids}, {Attr("axis", int64_t{0})}), s_.dropout);
  const std::string dec_bias =
      PositionBias(dims.seq, dims.seq, false,
                   b_.Param("decoder.block.0.layer.0." + rel, {s_.buckets, s_.heads}));
  const std::string mask = b_.CausalMask(dims);
  for (int64_t i = 0; i < s_.decoder_layers; ++i) {
    const std::string p = "decoder.block." + std::to_string(i) + ".";
    w_.SetScope("decoder.block." + std::to_string(i));
    const std::string h = Norm(y, p + "layer.0.layer_norm");
    y = w_.Op("Add", {y, b_.Dropout(Attention(h, h, p + "layer.0.SelfAttention", dec_bias, mask),
                                    s_.dropout)});
    const std::string h2 = Norm(y, p + "layer.1.layer_norm");
    y = w_.Op("Add", {y, b_.Dropout(Attention(h2, encoded, p + "layer.1.EncDecAttention", "", ""),
                                    s_.dropout)});
    const std::string h3 = Norm(y, p + "layer.2.layer_norm");
    y = w_.Op("Add", {y, b_.Dropout(FeedForward(h3, p + "layer.2.DenseReluDense"), s_.dropout)});
  }
  w_.SetScope("decoder");
  y = b_.Dropout(Norm(y, "decoder.final_layer_norm"), s_.dropout);
  w_.SetScope("lm_head");
  std::string logits;
  if (s_.tied) {
    y = w_.Op("Mul", {y, w_.FloatScalar(1.0f / std::sqrt(static_cast<float>(d)))});
    logits = w_.Op("MatMul", {y, b_.Transpose(shared, {1, 0})});
  } else {
    logits = w_.Op("MatMul", {y, b_.Param("lm_head.weight", {d, s_.vocab})});
  }
  logits = w_.Rename(logits, "logits");
  w_.SymbolicOutput(logits, kFloat, {kBatch, "tgt_seq", s_.vocab});
  HfModel m = FinishModel(std::move(w_), o_);
  m.model_type = "t5";
  m.architecture = "T5ForConditionalGeneration";
  m.layers = s_.encoder_layers + s_.decoder_layers;
  m.hidden = d;
  m.heads = m.kv_heads = s_.heads;
  m.head_dim = s_.d_kv;
  m.vocab = s_.vocab;
  m.tied = s_.tied;
  m.notes = s_.notes;
  return m;
}

}  // namespace

Result<T5Spec> ReadT5(const ConfigReader& r) {
  T5Spec s;
  MEMEST_ASSIGN_OR_RETURN(s.vocab, r.Int({"vocab_size"}, 1, kMaxVocab));
  MEMEST_ASSIGN_OR_RETURN(s.d_model, r.Int({"d_model", "hidden_size"}, 1, kMaxHidden));
  MEMEST_ASSIGN_OR_RETURN(s.d_kv, r.Int({"d_kv"}, 1, kMaxHeadDim));
  MEMEST_ASSIGN_OR_RETURN(s.heads, r.Int({"num_heads", "num_attention_heads"}, 1, kMaxHeads));
  MEMEST_ASSIGN_OR_RETURN(s.d_ff, r.Int({"d_ff"}, 1, kMaxIntermediate));
  MEMEST_ASSIGN_OR_RETURN(s.encoder_layers,
                          r.Int({"num_layers", "num_hidden_layers"}, 1, kMaxLayers));
  MEMEST_ASSIGN_OR_RETURN(s.decoder_layers,
                          r.IntOr({"num_decoder_layers"}, s.encoder_layers, 1, kMaxLayers));
  MEMEST_ASSIGN_OR_RETURN(s.buckets, r.IntOr({"relative_attention_num_buckets"}, 32, 4, 4096));
  MEMEST_ASSIGN_OR_RETURN(s.max_distance,
                          r.IntOr({"relative_attention_max_distance"}, 128, 1, kMaxPositions));
  if (s.max_distance <= s.buckets / 2) {
    return r.Error("relative_attention_max_distance",
                   "= " + std::to_string(s.max_distance) +
                       " must exceed half of 'relative_attention_num_buckets' (" +
                       std::to_string(s.buckets) + ")");
  }
  MEMEST_ASSIGN_OR_RETURN(s.norm_eps, r.NumberOr({"layer_norm_epsilon"}, 1e-6, 0.0, 1.0));
  MEMEST_ASSIGN_OR_RETURN(const double dropout, r.NumberOr({"dropout_rate"}, 0.1, 0.0, 0.999));
  s.dropout = static_cast<float>(dropout);
  MEMEST_ASSIGN_OR_RETURN(s.tied, r.BoolOr({"tie_word_embeddings"}, true));
  MEMEST_ASSIGN_OR_RETURN(const std::string proj, r.StringOr({"feed_forward_proj"}, "relu"));
  std::string act = proj;
  if (proj.rfind("gated-", 0) == 0) {
    s.gated = true;
    act = proj.substr(6);
  } else if (proj.find('-') != std::string::npos) {
    return r.Error("feed_forward_proj",
                   "= \"" + proj + "\" is not ACT or gated-ACT (e.g. relu, gated-gelu)");
  }
  if (proj == "gated-gelu") act = "gelu_new";  // T5Config: gated-gelu means gelu_new
  MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "feed_forward_proj", act));
  ParamBudget b(r);
  const int64_t inner = s.heads * s.d_kv;
  const int64_t attentions = s.encoder_layers + 2 * s.decoder_layers;
  MEMEST_RETURN_IF_ERROR(b.Add("the shared embedding", 1, s.vocab, s.d_model));
  MEMEST_RETURN_IF_ERROR(b.Add("the attention weights", attentions * 4, s.d_model, inner));
  MEMEST_RETURN_IF_ERROR(b.Add("the feed-forward weights",
                               (s.encoder_layers + s.decoder_layers) * (s.gated ? 3 : 2), s.d_model,
                               s.d_ff));
  if (!s.tied) MEMEST_RETURN_IF_ERROR(b.Add("the LM head", 1, s.d_model, s.vocab));
  return s;
}

Result<HfModel> BuildT5(const T5Spec& s, const HfGraphOptions& o) {
  if (o.phase != HfGraphOptions::kTrain) {
    return InvalidArgument(o.source + ": phase " + std::string(PhaseName(o.phase)) +
                           " is not written for T5ForConditionalGeneration (t5): train only");
  }
  if (o.logits_last_only) {
    return InvalidArgument(o.source +
                           ": --logits last is for the inference phases; t5 has "
                           "the train phase only");
  }
  return T5Graph(s, o, SafeName(o.name.empty() ? "hf_t5" : o.name)).Build();
}

}  // namespace memest::zoo::hf
