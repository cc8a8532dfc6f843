// datasets/zoo/hf_encoder.cc -- BERT and RoBERTa encoders from a Hugging Face config, as
// BertModel / RobertaModel with the pooler (what AutoModel builds, and what the published
// parameter counts count: bert-base-uncased 109,482,240, roberta-base 124,645,632).
//
// Policy:
//  * Embeddings: word + token type (all ids 0, as the model's token_type_ids buffer) + absolute
//    positions (BERT: 0 .. seq-1; RoBERTa: padding_idx + 1 .. padding_idx + seq, from a batch
//    without padding), LayerNorm, Dropout. Post-LN layers: separate query/key/value Linear,
//    eager attention (MatMul, scale, Softmax, Dropout, MatMul; no mask: no padding), output
//    dense + Dropout + residual + LayerNorm, intermediate dense + activation, output dense +
//    Dropout + residual + LayerNorm. Pooler: first token -> dense -> Tanh.
//  * Outputs: last_hidden_state [batch, seq, hidden] first (memest's training loss goes on it:
//    with --loss auto a cross-entropy over the hidden features, standing in for a task head
//    whose parameters are not in the count), then pooler_output [batch, hidden].
//  * Whatever `architectures` says (BertForMaskedLM, ...), the graph is the base model: task
//    heads differ per task and are not part of the published counts. Training phase only.
#include <cmath>
#include <string>
#include <utility>

#include "datasets/zoo/hf_internal.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo::hf {

Result<EncoderSpec> ReadEncoder(const ConfigReader& r) {
  EncoderSpec s;
  s.model_type = r.model_type();
  const bool roberta = s.model_type == "roberta";
  s.architecture = roberta ? "RobertaModel" : "BertModel";
  MEMEST_ASSIGN_OR_RETURN(s.vocab, r.Int({"vocab_size"}, 1, kMaxVocab));
  MEMEST_ASSIGN_OR_RETURN(s.hidden, r.Int({"hidden_size"}, 1, kMaxHidden));
  MEMEST_ASSIGN_OR_RETURN(s.layers, r.Int({"num_hidden_layers"}, 1, kMaxLayers));
  MEMEST_ASSIGN_OR_RETURN(s.heads, r.Int({"num_attention_heads"}, 1, kMaxHeads));
  if (s.hidden % s.heads != 0) {
    return r.Error("hidden_size",
                   "= " + std::to_string(s.hidden) +
                       " is not divisible by 'num_attention_heads' = " + std::to_string(s.heads));
  }
  MEMEST_ASSIGN_OR_RETURN(s.intermediate, r.Int({"intermediate_size"}, 1, kMaxIntermediate));
  MEMEST_ASSIGN_OR_RETURN(s.positions, r.Int({"max_position_embeddings"}, 1, kMaxPositions));
  MEMEST_ASSIGN_OR_RETURN(s.type_vocab, r.IntOr({"type_vocab_size"}, 2, 1, kMaxVocab));
  MEMEST_ASSIGN_OR_RETURN(const std::string act, r.StringOr({"hidden_act"}, "gelu"));
  MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "hidden_act", act));
  MEMEST_ASSIGN_OR_RETURN(s.norm_eps, r.NumberOr({"layer_norm_eps"}, 1e-12, 0.0, 1.0));
  MEMEST_ASSIGN_OR_RETURN(const double hidden_dropout,
                          r.NumberOr({"hidden_dropout_prob"}, 0.1, 0.0, 0.999));
  MEMEST_ASSIGN_OR_RETURN(const double attn_dropout,
                          r.NumberOr({"attention_probs_dropout_prob"}, 0.1, 0.0, 0.999));
  s.hidden_dropout = static_cast<float>(hidden_dropout);
  s.attn_dropout = static_cast<float>(attn_dropout);
  MEMEST_ASSIGN_OR_RETURN(const std::string pe,
                          r.StringOr({"position_embedding_type"}, "absolute"));
  if (pe != "absolute") {
    return r.Error("position_embedding_type", "= \"" + pe + "\" is not supported (absolute only)");
  }
  if (roberta) {
    MEMEST_ASSIGN_OR_RETURN(const int64_t pad, r.IntOr({"pad_token_id"}, 1, 0, kMaxVocab));
    s.position_offset = pad + 1;
    if (s.position_offset >= s.positions) {
      return r.Error("max_position_embeddings",
                     "= " + std::to_string(s.positions) + " leaves no position after the " +
                         "padding offset " + std::to_string(s.position_offset));
    }
  }
  ParamBudget b(r);
  MEMEST_RETURN_IF_ERROR(b.Add("the token embedding", 1, s.vocab, s.hidden));
  MEMEST_RETURN_IF_ERROR(b.Add("the position table", 1, s.positions, s.hidden));
  MEMEST_RETURN_IF_ERROR(b.Add("the token type table", 1, s.type_vocab, s.hidden));
  MEMEST_RETURN_IF_ERROR(b.Add("the attention weights", s.layers * 4, s.hidden, s.hidden));
  MEMEST_RETURN_IF_ERROR(b.Add("the MLP weights", s.layers * 2, s.hidden, s.intermediate));
  return s;
}

Result<HfModel> BuildEncoder(const EncoderSpec& s, const HfGraphOptions& o) {
  if (o.phase != HfGraphOptions::kTrain) {
    return InvalidArgument(o.source + ": phase " + std::string(PhaseName(o.phase)) +
                           " needs a decoder with a KV cache; " + s.architecture + " (" +
                           s.model_type + ") has the train phase only");
  }
  if (o.logits_last_only) {
    return InvalidArgument(o.source + ": --logits last applies to language-model heads; " +
                           s.architecture + " has none");
  }
  GraphWriter w(SafeName(o.name.empty() ? "hf_" + s.model_type : o.name));
  Builder b(w, /*training=*/true);
  const int64_t h = s.hidden, hd = s.hidden / s.heads;
  const std::string ids = w.SymbolicInput("input_ids", kInt64, {kBatch, "seq"});
  w.SetScope("embeddings");
  const std::string shape = w.Op("Shape", {ids});
  Dims d;
  d.seq = b.Element(shape, 1);
  d.total = d.seq;
  std::string x = w.Op("Gather", {b.Param("embeddings.word_embeddings.weight", {s.vocab, h}), ids},
                       {Attr("axis", int64_t{0})});
  onnx::TensorProto zero;
  zero.set_data_type(kInt64);
  zero.add_dims(1);
  zero.add_int64_data(0);
  const std::string types = w.Op("ConstantOfShape", {shape}, {Attr("value", zero)});
  x = w.Op("Add",
           {x, w.Op("Gather",
                    {b.Param("embeddings.token_type_embeddings.weight", {s.type_vocab, h}), types},
                    {Attr("axis", int64_t{0})})});
  std::string positions = b.Positions(d);
  if (s.position_offset > 0) {
    positions = w.Op("Add", {positions, w.Int64Scalar(s.position_offset)});
  }
  x = w.Op("Add",
           {x, w.Op("Gather",
                    {b.Param("embeddings.position_embeddings.weight", {s.positions, h}), positions},
                    {Attr("axis", int64_t{0})})});
  x = b.Dropout(b.LayerNorm(x, h, s.norm_eps, "embeddings.LayerNorm"), s.hidden_dropout);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    w.SetScope("encoder.layer." + std::to_string(i) + "/attention");
    const std::string q =
        b.SplitHeads(b.Linear(x, h, h, true, p + "attention.self.query"), s.heads, hd);
    const std::string k =
        b.SplitHeads(b.Linear(x, h, h, true, p + "attention.self.key"), s.heads, hd);
    const std::string v =
        b.SplitHeads(b.Linear(x, h, h, true, p + "attention.self.value"), s.heads, hd);
    std::string a = b.Attention(q, k, v, s.heads, s.heads, hd, scale, "", "", s.attn_dropout);
    a = b.Dropout(b.Linear(a, h, h, true, p + "attention.output.dense"), s.hidden_dropout);
    x = b.LayerNorm(w.Op("Add", {a, x}), h, s.norm_eps, p + "attention.output.LayerNorm");
    w.SetScope("encoder.layer." + std::to_string(i) + "/mlp");
    std::string f =
        Activation(w, s.act, b.Linear(x, h, s.intermediate, true, p + "intermediate.dense"));
    f = b.Dropout(b.Linear(f, s.intermediate, h, true, p + "output.dense"), s.hidden_dropout);
    x = b.LayerNorm(w.Op("Add", {f, x}), h, s.norm_eps, p + "output.LayerNorm");
  }
  w.SetScope("pooler");
  const std::string hidden = w.OpNamed("last_hidden_state", "Identity", {x});
  const std::string first = w.Op("Gather", {hidden, w.Int64Scalar(0)}, {Attr("axis", int64_t{1})});
  const std::string pooled =
      w.OpNamed("pooler_output", "Tanh", {b.Linear(first, h, h, true, "pooler.dense")});
  w.SymbolicOutput(hidden, kFloat, {kBatch, "seq", h});
  w.SymbolicOutput(pooled, kFloat, {kBatch, h});
  HfModel m = FinishModel(std::move(w), o);
  m.model_type = s.model_type;
  m.architecture = s.architecture;
  m.layers = s.layers;
  m.hidden = h;
  m.heads = m.kv_heads = s.heads;
  m.head_dim = hd;
  m.vocab = s.vocab;
  m.notes = s.notes;
  return m;
}

}  // namespace memest::zoo::hf
