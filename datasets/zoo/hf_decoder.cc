// datasets/zoo/hf_decoder.cc -- decoder-only language models from a Hugging Face config:
// llama, mistral, mixtral, qwen2, qwen3, gemma, phi, phi3, gpt2, gpt_neox, falcon (*ForCausalLM).
//
// Policy (what the graph is; docs/hf-config.md has the per-family table):
//  * One block structure per family, as modeling_<family>.py writes it: sequential
//    (x + attn(norm1(x)), then + mlp(norm2(x))), parallel with one norm (phi, falcon-7b:
//    x + attn(h) + mlp(h)) or parallel with two (gpt_neox use_parallel_residual, falcon's new
//    architecture). Norms: RMSNorm decomposed in fp32 (gemma: weight applied as 1 + w) or
//    LayerNormalization-17.
//  * Attention is eager and decomposed in the chain ops/fusion.cc recognises: MatMul(q, k^T),
//    Mul by 1/sqrt(head_dim), Where(causal mask, -inf), Softmax, Dropout (training, rate > 0),
//    MatMul with v. Grouped-query attention repeats k and v as repeat_kv does (Unsqueeze,
//    Expand, Reshape) before the MatMul; falcon's multi-query attention does not: its one k/v
//    head broadcasts in the MatMuls, as FalconAttention.forward's matmuls and SDPA call take it.
//    Rotary embeddings (full or partial) are applied with rotate_half (Slice, Neg, Concat); cos/sin
//    come from Range over the positions in the graph. Per-head norms on q and k (phi's
//    qk_layernorm: LayerNorm; qwen3's q_norm/k_norm: RMSNorm over head_dim, on [b, s, heads,
//    head_dim] before the transpose) come before the rotary.
//  * Mixture of experts (mixtral): router Linear -> Softmax -> TopK -> renormalised weights.
//    Routing is modelled as balanced: each expert takes ceil(tokens * top_k / experts) token rows
//    (Gather by a Range), runs its SwiGLU MLP, scales by its routing weights and adds into the
//    output with ScatterND(reduction add), as index_add_ does. The row count is computed in the
//    graph with integer division, so every batch and seq binds. Imbalance is not modelled.
//  * Phases: train (Dropout in training form where the config's rate is above 0), prefill and
//    decode (no Dropout; present.{i}.key/value outputs; decode concatenates past and new keys,
//    prefill copies the new ones with a one-input Concat, as DynamicCache's torch.cat does).
//  * Parameter names are the state_dict's; Linear weights are stored [in, out] (MatMul without a
//    Transpose, as GPT-2's Conv1D): the count is the same.
//  * Node order and lifetimes are the Python code's. PyTorch frees a tensor when its last
//    reference goes, and a Python variable or a call's argument is a reference: memest frees a
//    value after its last reader, so where Python holds a tensor longer, an Identity reads it
//    there (HeldUntilHere). Held: each norm's output while the attention or MLP it feeds runs
//    (the argument of that call, and the decoder layer's `hidden_states` until it is rebound
//    after the call returns; a parallel block's one norm until the sum); each layer's input until
//    the layer returns (the model's loop rebinds `hidden_states` then); the embeddings
//    (`inputs_embeds`, GPT-2's `position_embeds`) until the model's forward returns, after the
//    final norm. The gated MLP makes act_fn(gate_proj(x)) before up_proj(x), as Python evaluates
//    `act(gate(x)) * up(x)`; GPT-2's gelu_new makes 0.5 * x first (layers.cc). In training the held
//    tensors are saved anyway; prefill and decode steps are where it shows (docs/accuracy-lm.md).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "datasets/zoo/hf_internal.h"
#include "datasets/zoo/layers.h"

namespace memest::zoo::hf {
namespace {

std::string At(const std::string& pattern, int64_t i) {
  std::string s = pattern;
  const size_t pos = s.find("{i}");
  if (pos != std::string::npos) s.replace(pos, 3, std::to_string(i));
  return s;
}

DecoderNames LlamaNames() {
  DecoderNames n;
  n.embed = "model.embed_tokens.weight";
  n.layer = "model.layers.{i}";
  n.final_norm = "model.norm";
  n.lm_head = "lm_head";
  n.q = "self_attn.q_proj";
  n.k = "self_attn.k_proj";
  n.v = "self_attn.v_proj";
  n.qkv = "self_attn.qkv_proj";
  n.o = "self_attn.o_proj";
  n.ln1 = "input_layernorm";
  n.ln2 = "post_attention_layernorm";
  n.gate = "mlp.gate_proj";
  n.up = "mlp.up_proj";
  n.gate_up = "mlp.gate_up_proj";
  n.down = "mlp.down_proj";
  n.router = "block_sparse_moe.gate";
  n.experts = "block_sparse_moe.experts";
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reading the config.

struct Common {
  int64_t vocab, hidden, layers, heads, kv_heads, head_dim;
};

// vocab, hidden, layers, heads, kv heads and head_dim with their consistency checks. Absent kv
// heads are `kv_default` (0: as many as heads); an absent head_dim is `head_dim_default` (0:
// hidden / heads).
Result<Common> ReadCommon(const ConfigReader& r, std::initializer_list<const char*> hidden_keys,
                          std::initializer_list<const char*> layer_keys,
                          std::initializer_list<const char*> head_keys,
                          std::initializer_list<const char*> kv_keys, int64_t kv_default = 0,
                          int64_t head_dim_default = 0) {
  Common c{};
  MEMEST_ASSIGN_OR_RETURN(c.vocab, r.Int({"vocab_size"}, 1, kMaxVocab));
  MEMEST_ASSIGN_OR_RETURN(c.hidden, r.Int(hidden_keys, 1, kMaxHidden));
  MEMEST_ASSIGN_OR_RETURN(c.layers, r.Int(layer_keys, 1, kMaxLayers));
  MEMEST_ASSIGN_OR_RETURN(c.heads, r.Int(head_keys, 1, kMaxHeads));
  c.kv_heads = c.heads;
  if (kv_keys.size() > 0) {
    MEMEST_ASSIGN_OR_RETURN(c.kv_heads,
                            r.IntOr(kv_keys, kv_default > 0 ? kv_default : c.heads, 1, kMaxHeads));
  }
  const std::string heads_key = *head_keys.begin();
  if (c.heads % c.kv_heads != 0) {
    return r.Error(heads_key, "= " + std::to_string(c.heads) + " is not divisible by '" +
                                  *kv_keys.begin() + "' = " + std::to_string(c.kv_heads));
  }
  if (r.Has("head_dim")) {
    MEMEST_ASSIGN_OR_RETURN(c.head_dim, r.Int({"head_dim"}, 1, kMaxHeadDim));
  } else if (head_dim_default > 0) {
    c.head_dim = head_dim_default;
  } else {
    if (c.hidden % c.heads != 0) {
      return r.Error(*hidden_keys.begin(),
                     "= " + std::to_string(c.hidden) + " is not divisible by '" + heads_key +
                         "' = " + std::to_string(c.heads) + " (and there is no 'head_dim')");
    }
    c.head_dim = c.hidden / c.heads;
  }
  return c;
}

void Apply(const Common& c, DecoderSpec* s) {
  s->vocab = c.vocab;
  s->hidden = c.hidden;
  s->layers = c.layers;
  s->heads = c.heads;
  s->kv_heads = c.kv_heads;
  s->head_dim = c.head_dim;
}

// rotary_dim = int(head_dim * factor), even.
Status SetRotary(const ConfigReader& r, const char* key, double factor, DecoderSpec* s) {
  s->rotary_dim = static_cast<int64_t>(static_cast<double>(s->head_dim) * factor);
  if (s->rotary_dim < 2 || s->rotary_dim % 2 != 0) {
    return r.Error(key, "gives a rotary dimension of " + std::to_string(s->rotary_dim) +
                            " for head_dim " + std::to_string(s->head_dim) +
                            "; it must be even and at least 2");
  }
  return Status::Ok();
}

Result<float> Rate(const ConfigReader& r, std::initializer_list<const char*> keys,
                   double fallback) {
  MEMEST_ASSIGN_OR_RETURN(const double d, r.NumberOr(keys, fallback, 0.0, 0.999));
  return static_cast<float>(d);
}

void NoteSlidingWindow(const ConfigReader& r, const nlohmann::json& window, DecoderSpec* s) {
  if (!window.is_number_integer()) return;
  s->notes.push_back("sliding_window " + window.dump() +
                     " is not modelled: attention covers every earlier position (the same "
                     "memory up to that many positions; eager attention beyond it too)");
}

// llama, mistral, mixtral, qwen2, qwen3, gemma, phi3.
Result<DecoderSpec> ReadLlamaLike(const ConfigReader& r) {
  const std::string& t = r.model_type();
  const nlohmann::json& j = r.json();
  DecoderSpec s;
  s.names = LlamaNames();
  // Qwen3Config: head_dim 128 and num_key_value_heads 32 when absent (null kv heads: as many as
  // the heads), not hidden / heads.
  const bool qwen3 = t == "qwen3";
  const int64_t kv_default = qwen3 && !j.contains("num_key_value_heads") ? 32 : 0;
  MEMEST_ASSIGN_OR_RETURN(
      const Common c, ReadCommon(r, {"hidden_size"}, {"num_hidden_layers"}, {"num_attention_heads"},
                                 {"num_key_value_heads"}, kv_default, qwen3 ? 128 : 0));
  Apply(c, &s);
  MEMEST_ASSIGN_OR_RETURN(s.intermediate, r.Int({"intermediate_size"}, 1, kMaxIntermediate));
  MEMEST_ASSIGN_OR_RETURN(s.norm_eps, r.NumberOr({"rms_norm_eps"}, 1e-6, 0.0, 1.0));
  MEMEST_ASSIGN_OR_RETURN(s.rope_theta, r.NumberOr({"rope_theta"}, 10000.0, 1.0, 1e12));
  MEMEST_ASSIGN_OR_RETURN(const double factor,
                          r.NumberOr({"partial_rotary_factor"}, 1.0, 0.0, 1.0));
  MEMEST_RETURN_IF_ERROR(SetRotary(r, "partial_rotary_factor", factor, &s));
  MEMEST_ASSIGN_OR_RETURN(s.tied, r.BoolOr({"tie_word_embeddings"}, t == "gemma"));
  MEMEST_ASSIGN_OR_RETURN(s.attn_dropout, Rate(r, {"attention_dropout"}, 0.0));
  MEMEST_ASSIGN_OR_RETURN(const bool attention_bias, r.BoolOr({"attention_bias"}, false));
  s.qkv_bias = s.o_bias = attention_bias;
  MEMEST_ASSIGN_OR_RETURN(s.mlp_bias, r.BoolOr({"mlp_bias"}, false));
  std::string act;
  if (t == "gemma") {
    // transformers >= 4.38.1: hidden_activation, else gelu_pytorch_tanh (hidden_act is ignored).
    MEMEST_ASSIGN_OR_RETURN(act, r.StringOr({"hidden_activation"}, "gelu_pytorch_tanh"));
    MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "hidden_activation", act));
    s.norm = NormKind::kRmsPlusOne;
    s.scale_embeddings = true;
    s.architecture = "GemmaForCausalLM";
  } else {
    MEMEST_ASSIGN_OR_RETURN(act, r.StringOr({"hidden_act"}, "silu"));
    MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "hidden_act", act));
  }
  if (t == "llama") s.architecture = "LlamaForCausalLM";
  if (t == "mistral") s.architecture = "MistralForCausalLM";
  if (t == "qwen2") {
    s.architecture = "Qwen2ForCausalLM";
    s.qkv_bias = true;  // Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False
    s.o_bias = false;
  }
  if (qwen3) {
    // Qwen3Attention: q/k/v/o_proj bias = attention_bias (default false); q_norm and k_norm
    // RMSNorm(head_dim, rms_norm_eps) per head.
    s.architecture = "Qwen3ForCausalLM";
    s.qk_rmsnorm = true;
    s.names.q_norm = "self_attn.q_norm";
    s.names.k_norm = "self_attn.k_norm";
  }
  if (t == "phi3") {
    s.architecture = "Phi3ForCausalLM";
    s.qkv = QkvLayout::kFused;
    s.mlp = MlpKind::kGatedFused;
    MEMEST_ASSIGN_OR_RETURN(s.resid_dropout, Rate(r, {"resid_pdrop"}, 0.0));
    MEMEST_ASSIGN_OR_RETURN(s.embd_dropout, Rate(r, {"embd_pdrop"}, 0.0));
  }
  if (t == "mixtral") {
    s.architecture = "MixtralForCausalLM";
    s.mlp = MlpKind::kMoe;
    MEMEST_ASSIGN_OR_RETURN(s.experts, r.Int({"num_local_experts"}, 1, kMaxExperts));
    MEMEST_ASSIGN_OR_RETURN(s.experts_per_token, r.Int({"num_experts_per_tok"}, 1, kMaxExperts));
    if (s.experts_per_token > s.experts) {
      return r.Error("num_experts_per_tok",
                     "= " + std::to_string(s.experts_per_token) +
                         " exceeds 'num_local_experts' = " + std::to_string(s.experts));
    }
    if (s.experts * s.layers > kMaxExpertBlocks) {
      return r.Error("num_local_experts",
                     "x 'num_hidden_layers' = " + std::to_string(s.experts * s.layers) +
                         " expert MLPs exceeds the limit " + std::to_string(kMaxExpertBlocks));
    }
    s.notes.push_back("routing is modelled as balanced: each expert takes tokens x " +
                      std::to_string(s.experts_per_token) + " / " + std::to_string(s.experts) +
                      " rows; imbalance is not modelled");
  }
  // Qwen2/Qwen3: the window applies only with use_sliding_window (Qwen3Config's sliding_window
  // is 4096 when absent; without use_sliding_window it is None, whatever layer_types says).
  auto use_window = j.find("use_sliding_window");
  const bool qwen = t == "qwen2" || qwen3;
  const bool use = use_window != j.end() && use_window->is_boolean() && use_window->get<bool>();
  if (!qwen || use) {
    if (j.contains("sliding_window")) {
      NoteSlidingWindow(r, j["sliding_window"], &s);
    } else if (qwen3) {
      NoteSlidingWindow(r, nlohmann::json(4096), &s);
    }
  }
  return s;
}

Result<DecoderSpec> ReadGpt2(const ConfigReader& r) {
  DecoderSpec s;
  s.architecture = "GPT2LMHeadModel";
  MEMEST_ASSIGN_OR_RETURN(const Common c,
                          ReadCommon(r, {"n_embd", "hidden_size"}, {"n_layer", "num_hidden_layers"},
                                     {"n_head", "num_attention_heads"}, {}));
  Apply(c, &s);
  MEMEST_ASSIGN_OR_RETURN(s.learned_positions,
                          r.Int({"n_positions", "max_position_embeddings"}, 1, kMaxPositions));
  MEMEST_ASSIGN_OR_RETURN(s.intermediate, r.IntOr({"n_inner"}, 4 * s.hidden, 1, kMaxIntermediate));
  MEMEST_ASSIGN_OR_RETURN(const std::string act, r.StringOr({"activation_function"}, "gelu_new"));
  MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "activation_function", act));
  MEMEST_ASSIGN_OR_RETURN(s.norm_eps, r.NumberOr({"layer_norm_epsilon"}, 1e-5, 0.0, 1.0));
  MEMEST_ASSIGN_OR_RETURN(s.attn_dropout, Rate(r, {"attn_pdrop"}, 0.1));
  MEMEST_ASSIGN_OR_RETURN(s.resid_dropout, Rate(r, {"resid_pdrop"}, 0.1));
  MEMEST_ASSIGN_OR_RETURN(s.embd_dropout, Rate(r, {"embd_pdrop"}, 0.1));
  MEMEST_ASSIGN_OR_RETURN(s.tied, r.BoolOr({"tie_word_embeddings"}, true));
  MEMEST_ASSIGN_OR_RETURN(const bool cross, r.BoolOr({"add_cross_attention"}, false));
  if (cross) return r.Error("add_cross_attention", "= true is not supported");
  s.norm = NormKind::kLayerNorm;
  s.qkv = QkvLayout::kFused;
  s.qkv_bias = s.o_bias = s.mlp_bias = true;
  s.mlp = MlpKind::kPlain;
  DecoderNames& n = s.names;
  n.embed = "transformer.wte.weight";
  n.positions = "transformer.wpe.weight";
  n.layer = "transformer.h.{i}";
  n.final_norm = "transformer.ln_f";
  n.lm_head = "lm_head";
  n.qkv = "attn.c_attn";
  n.o = "attn.c_proj";
  n.ln1 = "ln_1";
  n.ln2 = "ln_2";
  n.fc1 = "mlp.c_fc";
  n.fc2 = "mlp.c_proj";
  n.norm_bias = true;
  return s;
}

Result<DecoderSpec> ReadNeox(const ConfigReader& r) {
  DecoderSpec s;
  s.architecture = "GPTNeoXForCausalLM";
  MEMEST_ASSIGN_OR_RETURN(const Common c, ReadCommon(r, {"hidden_size"}, {"num_hidden_layers"},
                                                     {"num_attention_heads"}, {}));
  Apply(c, &s);
  MEMEST_ASSIGN_OR_RETURN(s.intermediate, r.Int({"intermediate_size"}, 1, kMaxIntermediate));
  MEMEST_ASSIGN_OR_RETURN(const double pct,
                          r.NumberOr({"rotary_pct", "partial_rotary_factor"}, 0.25, 0.0, 1.0));
  MEMEST_RETURN_IF_ERROR(SetRotary(r, "rotary_pct", pct, &s));
  MEMEST_ASSIGN_OR_RETURN(s.rope_theta,
                          r.NumberOr({"rotary_emb_base", "rope_theta"}, 10000.0, 1.0, 1e12));
  MEMEST_ASSIGN_OR_RETURN(s.norm_eps, r.NumberOr({"layer_norm_eps"}, 1e-5, 0.0, 1.0));
  MEMEST_ASSIGN_OR_RETURN(const bool parallel, r.BoolOr({"use_parallel_residual"}, true));
  MEMEST_ASSIGN_OR_RETURN(const std::string act, r.StringOr({"hidden_act"}, "gelu"));
  MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "hidden_act", act));
  MEMEST_ASSIGN_OR_RETURN(const bool bias, r.BoolOr({"attention_bias"}, true));
  MEMEST_ASSIGN_OR_RETURN(s.tied, r.BoolOr({"tie_word_embeddings"}, false));
  MEMEST_ASSIGN_OR_RETURN(s.attn_dropout, Rate(r, {"attention_dropout"}, 0.0));
  MEMEST_ASSIGN_OR_RETURN(s.resid_dropout, Rate(r, {"hidden_dropout"}, 0.0));
  s.embd_dropout = s.resid_dropout;
  s.norm = NormKind::kLayerNorm;
  s.qkv = QkvLayout::kNeox;
  s.qkv_bias = s.o_bias = bias;
  s.mlp_bias = true;
  s.mlp = MlpKind::kPlain;
  s.block = parallel ? BlockKind::kParallelTwoNorms : BlockKind::kSequential;
  DecoderNames& n = s.names;
  n.embed = "gpt_neox.embed_in.weight";
  n.layer = "gpt_neox.layers.{i}";
  n.final_norm = "gpt_neox.final_layer_norm";
  n.lm_head = "embed_out";
  n.qkv = "attention.query_key_value";
  n.o = "attention.dense";
  n.ln1 = "input_layernorm";
  n.ln2 = "post_attention_layernorm";
  n.fc1 = "mlp.dense_h_to_4h";
  n.fc2 = "mlp.dense_4h_to_h";
  n.norm_bias = true;
  return s;
}

Result<DecoderSpec> ReadPhi(const ConfigReader& r) {
  DecoderSpec s;
  s.architecture = "PhiForCausalLM";
  MEMEST_ASSIGN_OR_RETURN(
      const Common c, ReadCommon(r, {"hidden_size"}, {"num_hidden_layers"}, {"num_attention_heads"},
                                 {"num_key_value_heads"}));
  Apply(c, &s);
  MEMEST_ASSIGN_OR_RETURN(s.intermediate, r.Int({"intermediate_size"}, 1, kMaxIntermediate));
  MEMEST_ASSIGN_OR_RETURN(const double factor,
                          r.NumberOr({"partial_rotary_factor"}, 0.5, 0.0, 1.0));
  MEMEST_RETURN_IF_ERROR(SetRotary(r, "partial_rotary_factor", factor, &s));
  MEMEST_ASSIGN_OR_RETURN(s.rope_theta, r.NumberOr({"rope_theta"}, 10000.0, 1.0, 1e12));
  MEMEST_ASSIGN_OR_RETURN(s.norm_eps, r.NumberOr({"layer_norm_eps"}, 1e-5, 0.0, 1.0));
  MEMEST_ASSIGN_OR_RETURN(const std::string act, r.StringOr({"hidden_act"}, "gelu_new"));
  MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "hidden_act", act));
  MEMEST_ASSIGN_OR_RETURN(s.qk_layernorm, r.BoolOr({"qk_layernorm"}, false));
  MEMEST_ASSIGN_OR_RETURN(s.tied, r.BoolOr({"tie_word_embeddings"}, false));
  MEMEST_ASSIGN_OR_RETURN(s.attn_dropout, Rate(r, {"attention_dropout"}, 0.0));
  MEMEST_ASSIGN_OR_RETURN(s.resid_dropout, Rate(r, {"resid_pdrop"}, 0.0));
  MEMEST_ASSIGN_OR_RETURN(s.embd_dropout, Rate(r, {"embd_pdrop"}, 0.0));
  s.norm = NormKind::kLayerNorm;
  s.qkv_bias = s.o_bias = s.mlp_bias = true;
  s.lm_head_bias = true;
  s.mlp = MlpKind::kPlain;
  s.block = BlockKind::kParallelSharedNorm;
  DecoderNames& n = s.names;
  n = LlamaNames();
  n.final_norm = "model.final_layernorm";
  n.o = "self_attn.dense";
  n.fc1 = "mlp.fc1";
  n.fc2 = "mlp.fc2";
  n.q_norm = "self_attn.q_layernorm";
  n.k_norm = "self_attn.k_layernorm";
  n.norm_bias = true;
  return s;
}

Result<DecoderSpec> ReadFalcon(const ConfigReader& r) {
  DecoderSpec s;
  s.architecture = "FalconForCausalLM";
  MEMEST_ASSIGN_OR_RETURN(const Common c,
                          ReadCommon(r, {"hidden_size"}, {"num_hidden_layers", "n_layer"},
                                     {"num_attention_heads", "n_head"}, {}));
  Apply(c, &s);
  MEMEST_ASSIGN_OR_RETURN(const bool alibi, r.BoolOr({"alibi"}, false));
  if (alibi) return r.Error("alibi", "= true (ALiBi position bias) is not supported");
  MEMEST_ASSIGN_OR_RETURN(const bool new_arch, r.BoolOr({"new_decoder_architecture"}, false));
  MEMEST_ASSIGN_OR_RETURN(const bool multi_query, r.BoolOr({"multi_query"}, true));
  MEMEST_ASSIGN_OR_RETURN(const bool parallel, r.BoolOr({"parallel_attn"}, true));
  if (new_arch) {
    MEMEST_ASSIGN_OR_RETURN(s.kv_heads,
                            r.IntOr({"num_kv_heads", "n_head_kv"}, s.heads, 1, kMaxHeads));
    if (s.heads % s.kv_heads != 0) {
      return r.Error("num_attention_heads",
                     "= " + std::to_string(s.heads) +
                         " is not divisible by 'num_kv_heads' = " + std::to_string(s.kv_heads));
    }
  } else {
    // Multi-query: one k/v head, broadcast over the query heads in eager's matmuls and passed to
    // SDPA as is, without enable_gqa (FalconAttention.forward), so no fused kernel takes it.
    s.kv_heads = multi_query ? 1 : s.heads;
    s.broadcast_kv = multi_query;
  }
  MEMEST_ASSIGN_OR_RETURN(s.intermediate,
                          r.IntOr({"ffn_hidden_size"}, 4 * s.hidden, 1, kMaxIntermediate));
  MEMEST_ASSIGN_OR_RETURN(const bool bias, r.BoolOr({"bias"}, false));
  MEMEST_ASSIGN_OR_RETURN(s.norm_eps, r.NumberOr({"layer_norm_epsilon"}, 1e-5, 0.0, 1.0));
  MEMEST_ASSIGN_OR_RETURN(s.rope_theta, r.NumberOr({"rope_theta"}, 10000.0, 1.0, 1e12));
  MEMEST_ASSIGN_OR_RETURN(const std::string act, r.StringOr({"activation"}, "gelu"));
  MEMEST_ASSIGN_OR_RETURN(s.act, MapActivation(r, "activation", act));
  MEMEST_ASSIGN_OR_RETURN(s.tied, r.BoolOr({"tie_word_embeddings"}, true));
  MEMEST_ASSIGN_OR_RETURN(s.attn_dropout, Rate(r, {"attention_dropout"}, 0.0));
  MEMEST_ASSIGN_OR_RETURN(s.resid_dropout, Rate(r, {"hidden_dropout"}, 0.0));
  // FalconDecoderLayer: two norms when not parallel; else ln_attn + ln_mlp when
  // num_ln_in_parallel_attn is 2 (its default with the new architecture), else one.
  MEMEST_ASSIGN_OR_RETURN(const int64_t lns,
                          r.IntOr({"num_ln_in_parallel_attn"}, new_arch ? 2 : 1, 1, 2));
  s.rotary_dim = s.head_dim;
  s.norm = NormKind::kLayerNorm;
  s.qkv = QkvLayout::kFused;
  s.qkv_bias = s.o_bias = s.mlp_bias = bias;
  s.mlp = MlpKind::kPlain;
  DecoderNames& n = s.names;
  n.embed = "transformer.word_embeddings.weight";
  n.layer = "transformer.h.{i}";
  n.final_norm = "transformer.ln_f";
  n.lm_head = "lm_head";
  n.qkv = "self_attention.query_key_value";
  n.o = "self_attention.dense";
  n.fc1 = "mlp.dense_h_to_4h";
  n.fc2 = "mlp.dense_4h_to_h";
  n.norm_bias = true;
  n.ln1 = "input_layernorm";
  n.ln2 = "post_attention_layernorm";
  if (!parallel) {
    s.block = BlockKind::kSequential;
  } else if (lns == 2) {
    s.block = BlockKind::kParallelTwoNorms;
    n.ln1 = "ln_attn";
    n.ln2 = "ln_mlp";
  } else {
    s.block = BlockKind::kParallelSharedNorm;
  }
  return s;
}

// The parameters the spec implies, bounded (the graph's own count is what is reported).
Status CheckBudget(const ConfigReader& r, const DecoderSpec& s) {
  ParamBudget b(r);
  const int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  MEMEST_RETURN_IF_ERROR(b.Add("the token embedding", 1, s.vocab, h));
  MEMEST_RETURN_IF_ERROR(b.Add("the position table", 1, s.learned_positions, h));
  MEMEST_RETURN_IF_ERROR(b.Add("the attention projections", s.layers, h, 2 * q + 2 * kv));
  const int64_t mlp_matrices = s.mlp == MlpKind::kPlain ? 2 : 3;
  const int64_t units = s.mlp == MlpKind::kMoe ? s.layers * s.experts : s.layers;
  MEMEST_RETURN_IF_ERROR(b.Add("the MLP weights", units * mlp_matrices, h, s.intermediate));
  if (!s.tied) MEMEST_RETURN_IF_ERROR(b.Add("the LM head", 1, h, s.vocab));
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// The graph.

class DecoderGraph {
 public:
  DecoderGraph(const DecoderSpec& s, const HfGraphOptions& o, const std::string& name)
      : s_(s), o_(o), w_(name), b_(w_, o.phase == HfGraphOptions::kTrain) {}

  HfModel Build();

 private:
  std::string Norm(const std::string& x, const std::string& name, int64_t features) {
    return s_.norm == NormKind::kLayerNorm
               ? b_.LayerNorm(x, features, s_.norm_eps, name)
               : b_.RmsNorm(x, features, s_.norm_eps, name, s_.norm == NormKind::kRmsPlusOne);
  }
  std::string Layer(const std::string& x, int64_t i);
  std::string SelfAttention(const std::string& h, int64_t i);
  std::string Mlp(const std::string& h, const std::string& prefix);
  std::string Moe(const std::string& h, const std::string& prefix);
  std::string Head(const std::string& x);
  // A Python variable still names `value` here: an Identity reads it, so it lives until this point
  // of the graph (the file's header).
  void HeldUntilHere(const std::string& value) { w_.Op("Identity", {value}); }

  const DecoderSpec& s_;
  const HfGraphOptions& o_;
  GraphWriter w_;
  Builder b_;
  Dims dims_;
  std::string ids_, table_, mask_;
  std::pair<std::string, std::string> rotary_;
  std::vector<std::string> present_;  // per layer: key, value
};

std::string DecoderGraph::SelfAttention(const std::string& h, int64_t i) {
  const std::string prefix = At(s_.names.layer, i) + ".";
  const int64_t hd = s_.head_dim, q_out = s_.heads * hd, kv_out = s_.kv_heads * hd;
  w_.SetScope(At(s_.names.layer, i) + "/attn");
  std::string q, k, v;
  switch (s_.qkv) {
    case QkvLayout::kSeparate: {
      // [b, s, n * hd] -> [b, s, n, hd] -> (qwen3: RMSNorm over hd) -> [b, n, s, hd].
      auto heads = [&](const std::string& name, int64_t n, const std::string& norm) {
        std::string x = b_.Linear(h, s_.hidden, n * hd, s_.qkv_bias, prefix + name);
        x = w_.Op("Reshape", {x, w_.Int64s({0, 0, n, hd})});
        if (!norm.empty()) x = b_.RmsNorm(x, hd, s_.norm_eps, prefix + norm, false);
        return b_.Transpose(x, {0, 2, 1, 3});
      };
      q = heads(s_.names.q, s_.heads, s_.qk_rmsnorm ? s_.names.q_norm : "");
      k = heads(s_.names.k, s_.kv_heads, s_.qk_rmsnorm ? s_.names.k_norm : "");
      v = heads(s_.names.v, s_.kv_heads, "");
      break;
    }
    case QkvLayout::kFused: {
      const std::string qkv =
          b_.Linear(h, s_.hidden, q_out + 2 * kv_out, s_.qkv_bias, prefix + s_.names.qkv);
      const auto parts = w_.Node("Split", {qkv, w_.Int64s({q_out, kv_out, kv_out})}, 3,
                                 {Attr("axis", int64_t{-1})});
      q = b_.SplitHeads(parts[0], s_.heads, hd);
      k = b_.SplitHeads(parts[1], s_.kv_heads, hd);
      v = b_.SplitHeads(parts[2], s_.kv_heads, hd);
      break;
    }
    case QkvLayout::kNeox: {  // [b, s, heads, 3 * hd], q/k/v interleaved per head
      const std::string qkv =
          b_.Linear(h, s_.hidden, 3 * q_out, s_.qkv_bias, prefix + s_.names.qkv);
      const std::string heads = w_.Op("Reshape", {qkv, w_.Int64s({0, 0, s_.heads, 3 * hd})});
      const auto parts =
          w_.Node("Split", {heads, w_.Int64s({hd, hd, hd})}, 3, {Attr("axis", int64_t{-1})});
      q = b_.Transpose(parts[0], {0, 2, 1, 3});
      k = b_.Transpose(parts[1], {0, 2, 1, 3});
      v = b_.Transpose(parts[2], {0, 2, 1, 3});
      break;
    }
  }
  if (s_.qk_layernorm) {
    q = b_.LayerNorm(q, hd, s_.norm_eps, prefix + s_.names.q_norm);
    k = b_.LayerNorm(k, hd, s_.norm_eps, prefix + s_.names.k_norm);
  }
  if (s_.rotary_dim > 0) {
    q = b_.ApplyRotary(q, rotary_, s_.rotary_dim, hd);
    k = b_.ApplyRotary(k, rotary_, s_.rotary_dim, hd);
  }
  if (o_.phase == HfGraphOptions::kDecode) {
    const std::string n = std::to_string(i);
    k = w_.Op("Concat", {"past_key_values." + n + ".key", k}, {Attr("axis", int64_t{2})});
    v = w_.Op("Concat", {"past_key_values." + n + ".value", v}, {Attr("axis", int64_t{2})});
  } else if (o_.phase == HfGraphOptions::kPrefill) {
    // transformers' DynamicCache stores torch.cat([empty, k]) (cache_utils.py, DynamicLayer.update)
    // and attention reads that copy: k and v (a view into the fused qkv output where the
    // projection is fused) are not what the cache keeps.
    k = w_.Op("Concat", {k}, {Attr("axis", int64_t{2})});
    v = w_.Op("Concat", {v}, {Attr("axis", int64_t{2})});
  }
  if (o_.phase != HfGraphOptions::kTrain) {
    const std::string n = "present." + std::to_string(i);
    present_.push_back(w_.OpNamed(n + ".key", "Identity", {k}));
    present_.push_back(w_.OpNamed(n + ".value", "Identity", {v}));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::string y = b_.Attention(q, k, v, s_.heads, s_.kv_heads, hd, scale, "", mask_,
                               s_.attn_dropout, s_.broadcast_kv);
  y = b_.Linear(y, q_out, s_.hidden, s_.o_bias, prefix + s_.names.o);
  return b_.Dropout(y, s_.resid_dropout);
}

std::string DecoderGraph::Mlp(const std::string& h, const std::string& prefix) {
  const int64_t d = s_.hidden, f = s_.intermediate;
  std::string y;
  switch (s_.mlp) {
    case MlpKind::kGated: {
      // act_fn(gate_proj(x)) * up_proj(x): Python makes the activation before up_proj runs.
      const std::string act =
          Activation(w_, s_.act, b_.Linear(h, d, f, s_.mlp_bias, prefix + s_.names.gate));
      const std::string up = b_.Linear(h, d, f, s_.mlp_bias, prefix + s_.names.up);
      y = w_.Op("Mul", {act, up});
      y = b_.Linear(y, f, d, s_.mlp_bias, prefix + s_.names.down);
      break;
    }
    case MlpKind::kGatedFused: {
      const std::string gu = b_.Linear(h, d, 2 * f, s_.mlp_bias, prefix + s_.names.gate_up);
      const auto parts = w_.Node("Split", {gu, w_.Int64s({f, f})}, 2, {Attr("axis", int64_t{-1})});
      y = w_.Op("Mul", {parts[1], Activation(w_, s_.act, parts[0])});
      y = b_.Linear(y, f, d, s_.mlp_bias, prefix + s_.names.down);
      break;
    }
    case MlpKind::kPlain:
      y = Activation(w_, s_.act, b_.Linear(h, d, f, s_.mlp_bias, prefix + s_.names.fc1));
      y = b_.Linear(y, f, d, s_.mlp_bias, prefix + s_.names.fc2);
      break;
    case MlpKind::kMoe:
      return Moe(h, prefix);
  }
  return b_.Dropout(y, s_.resid_dropout);
}

std::string DecoderGraph::Moe(const std::string& h, const std::string& prefix) {
  const int64_t d = s_.hidden, f = s_.intermediate, e_count = s_.experts;
  const int64_t k = s_.experts_per_token;
  const std::string flat = w_.Op("Reshape", {h, w_.Int64s({-1, d})});  // [T, d]
  const std::string logits =
      w_.Op("MatMul", {flat, b_.Param(prefix + s_.names.router + ".weight", {d, e_count})});
  const std::string probs = w_.Op("Softmax", {logits}, {Attr("axis", int64_t{-1})});
  const auto top =
      w_.Node("TopK", {probs, w_.Int64s({k})}, 2,
              {Attr("axis", int64_t{-1}), Attr("largest", int64_t{1}), Attr("sorted", int64_t{1})});
  const std::string sum =
      w_.Op("ReduceSum", {top[0], w_.Int64s({-1})}, {Attr("keepdims", int64_t{1})});
  const std::string weights =
      w_.Op("Reshape", {w_.Op("Div", {top[0], sum}), w_.Int64s({-1, 1})});  // [T*k, 1]
  // Balanced routing: rows = ceil(T * k / experts) tokens per expert.
  const std::string tokens = b_.Element(w_.Op("Shape", {flat}), 0);
  const std::string rows =
      w_.Op("Div",
            {w_.Op("Add", {w_.Op("Mul", {tokens, w_.Int64Scalar(k)}), w_.Int64Scalar(e_count - 1)}),
             w_.Int64Scalar(e_count)});
  const std::string idx = w_.Op("Range", {w_.Int64Scalar(0), rows, w_.Int64Scalar(1)});
  const std::string idx2 = b_.Unsqueeze(idx, {1});
  onnx::TensorProto zero;
  zero.set_data_type(kFloat);
  zero.add_dims(1);
  zero.add_float_data(0.0f);
  std::string acc = w_.Op("ConstantOfShape", {w_.Op("Shape", {flat})}, {Attr("value", zero)});
  for (int64_t e = 0; e < e_count; ++e) {
    const std::string expert = prefix + s_.names.experts + "." + std::to_string(e) + ".";
    const std::string x = w_.Op("Gather", {flat, idx}, {Attr("axis", int64_t{0})});
    // act_fn(w1(x)) * w3(x), in Python's order as the gated MLP.
    const std::string act = Activation(w_, s_.act, b_.Linear(x, d, f, false, expert + "w1"));
    const std::string w3 = b_.Linear(x, d, f, false, expert + "w3");
    std::string y = w_.Op("Mul", {act, w3});
    y = b_.Linear(y, f, d, false, expert + "w2");
    y = w_.Op("Mul", {y, w_.Op("Gather", {weights, idx}, {Attr("axis", int64_t{0})})});
    acc = w_.Op("ScatterND", {acc, idx2, y}, {Attr("reduction", std::string("add"))});
  }
  return w_.Op("Reshape", {acc, w_.Op("Shape", {h})});
}

std::string DecoderGraph::Layer(const std::string& x, int64_t i) {
  const std::string prefix = At(s_.names.layer, i) + ".";
  w_.SetScope(At(s_.names.layer, i));
  const std::string h1 = Norm(x, prefix + s_.names.ln1, s_.hidden);
  const std::string a = SelfAttention(h1, i);
  HeldUntilHere(h1);  // the attention's argument
  w_.SetScope(At(s_.names.layer, i) + "/mlp");
  std::string y;
  switch (s_.block) {
    case BlockKind::kSequential: {
      const std::string x1 = w_.Op("Add", {x, a});
      const std::string h2 = Norm(x1, prefix + s_.names.ln2, s_.hidden);
      const std::string m = Mlp(h2, prefix);
      HeldUntilHere(h2);  // the MLP's argument
      y = w_.Op("Add", {x1, m});
      break;
    }
    case BlockKind::kParallelSharedNorm: {  // the norm's output is named until the sum
      const std::string m = Mlp(h1, prefix);
      HeldUntilHere(h1);
      y = w_.Op("Add", {w_.Op("Add", {a, m}), x});
      break;
    }
    case BlockKind::kParallelTwoNorms: {
      const std::string h2 = Norm(x, prefix + s_.names.ln2, s_.hidden);
      const std::string m = Mlp(h2, prefix);
      HeldUntilHere(h2);
      y = w_.Op("Add", {w_.Op("Add", {x, a}), m});
      break;
    }
  }
  HeldUntilHere(x);  // the model's loop names the layer's input until the layer returns
  return y;
}

std::string DecoderGraph::Head(const std::string& x) {
  w_.SetScope("lm_head");
  std::string h = o_.logits_last_only ? b_.LastPosition(x) : x;
  std::string logits;
  if (s_.tied) {
    logits = w_.Op("MatMul", {h, b_.Transpose(table_, {1, 0})});
  } else {
    logits = w_.Op("MatMul", {h, b_.Param(s_.names.lm_head + ".weight", {s_.hidden, s_.vocab})});
  }
  if (s_.lm_head_bias)
    logits = w_.Op("Add", {logits, b_.Param(s_.names.lm_head + ".bias", {s_.vocab})});
  return logits;
}

HfModel DecoderGraph::Build() {
  const bool decode = o_.phase == HfGraphOptions::kDecode;
  ids_ = w_.SymbolicInput("input_ids", kInt64, {kBatch, "seq"});
  if (decode) {
    for (int64_t i = 0; i < s_.layers; ++i) {
      for (const char* kind : {"key", "value"}) {
        w_.SymbolicInput("past_key_values." + std::to_string(i) + "." + kind, kFloat,
                         {kBatch, s_.kv_heads, "past", s_.head_dim});
      }
    }
  }
  w_.SetScope("model");
  dims_.seq = b_.Element(w_.Op("Shape", {ids_}), 1);
  dims_.total = dims_.seq;
  if (decode) {
    dims_.past = b_.Element(w_.Op("Shape", {std::string("past_key_values.0.key")}), 2);
    dims_.total = w_.Op("Add", {dims_.past, dims_.seq});
  }
  table_ = b_.Param(s_.names.embed, {s_.vocab, s_.hidden});
  const std::string embeds = w_.Op("Gather", {table_, ids_}, {Attr("axis", int64_t{0})});
  std::string x = embeds, position_embeds;
  if (s_.scale_embeddings) {
    x = w_.Op("Mul", {x, w_.FloatScalar(std::sqrt(static_cast<float>(s_.hidden)))});
  }
  const std::string positions = b_.Positions(dims_);
  if (s_.learned_positions > 0) {
    const std::string wpe = b_.Param(s_.names.positions, {s_.learned_positions, s_.hidden});
    position_embeds = w_.Op("Gather", {wpe, positions}, {Attr("axis", int64_t{0})});
    x = w_.Op("Add", {x, position_embeds});
  }
  x = b_.Dropout(x, s_.embd_dropout);
  if (s_.rotary_dim > 0) rotary_ = b_.Rotary(positions, s_.rotary_dim, s_.rope_theta);
  mask_ = b_.CausalMask(dims_);
  for (int64_t i = 0; i < s_.layers; ++i) x = Layer(x, i);
  w_.SetScope("model");
  x = Norm(x, s_.names.final_norm, s_.hidden);
  // The model's forward names its embeddings (inputs_embeds, GPT-2's position_embeds) until it
  // returns, after the final norm.
  HeldUntilHere(embeds);
  if (!position_embeds.empty()) HeldUntilHere(position_embeds);
  const std::string logits = w_.Rename(Head(x), "logits");
  const IoDim positions_out = o_.logits_last_only ? IoDim(int64_t{1}) : IoDim("seq");
  w_.SymbolicOutput(logits, kFloat, {kBatch, positions_out, s_.vocab});
  const IoDim cached = decode ? IoDim("past+seq") : IoDim("seq");
  for (const std::string& p : present_) {
    w_.SymbolicOutput(p, kFloat, {kBatch, s_.kv_heads, cached, s_.head_dim});
  }
  HfModel m = FinishModel(std::move(w_), o_);
  m.model_type = s_.model_type;
  m.architecture = s_.architecture;
  m.layers = s_.layers;
  m.hidden = s_.hidden;
  m.heads = s_.heads;
  m.kv_heads = s_.kv_heads;
  m.head_dim = s_.head_dim;
  m.vocab = s_.vocab;
  m.experts = s_.experts;
  m.experts_per_token = s_.experts_per_token;
  m.tied = s_.tied;
  m.notes = s_.notes;
  return m;
}

}  // namespace

Result<DecoderSpec> ReadDecoder(const ConfigReader& r) {
  const std::string& t = r.model_type();
  Result<DecoderSpec> s = DecoderSpec();
  if (t == "gpt2") {
    s = ReadGpt2(r);
  } else if (t == "gpt_neox") {
    s = ReadNeox(r);
  } else if (t == "phi") {
    s = ReadPhi(r);
  } else if (t == "falcon") {
    s = ReadFalcon(r);
  } else {
    s = ReadLlamaLike(r);  // llama, mistral, mixtral, qwen2, qwen3, gemma, phi3
  }
  if (!s.ok()) return s;
  s->model_type = t;
  MEMEST_RETURN_IF_ERROR(CheckBudget(r, *s));
  return s;
}

Result<HfModel> BuildDecoder(const DecoderSpec& s, const HfGraphOptions& o) {
  const std::string name = SafeName(o.name.empty() ? "hf_" + s.model_type : o.name);
  return DecoderGraph(s, o, name).Build();
}

}  // namespace memest::zoo::hf
