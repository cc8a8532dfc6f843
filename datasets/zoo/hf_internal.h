// datasets/zoo/hf_internal.h -- shared pieces of the Hugging Face config builders (hf.h):
// reading config fields with named errors, the per-family specifications the readers fill, and
// the graph helpers every family uses. Not a public header: only datasets/zoo/hf*.cc include it.
//
// Policy (config fields):
//  * A field is read under its name and the aliases transformers' attribute_map gives it
//    (GPT-2's n_embd for hidden_size, ...); null counts as absent. A required field that is
//    absent is "<source>: missing '<field>' (<model_type>)".
//  * Integers must be JSON integers (or floats with an integral value) within the bounds the
//    reader names; anything else is "<source>: '<field>' = <value> <what is wrong> (<type>)".
//  * Defaults are transformers' defaults for that model_type's config class.
#ifndef MEMEST_DATASETS_ZOO_HF_INTERNAL_H_
#define MEMEST_DATASETS_ZOO_HF_INTERNAL_H_

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/hf.h"
#include "memest/status.h"

namespace memest::zoo::hf {

// Bounds on what a config may ask for: far above every published model, low enough that every
// count below fits 64 bits and a graph stays a few MB.
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxHidden = int64_t{1} << 17;        // 131,072
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 20;  // 1,048,576
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;         // 16,777,216
inline constexpr int64_t kMaxHeads = 4096;
inline constexpr int64_t kMaxHeadDim = 4096;
inline constexpr int64_t kMaxExperts = 1024;
inline constexpr int64_t kMaxExpertBlocks = int64_t{1} << 16;  // experts x layers (graph size)
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;     // learned position tables
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 40;
inline constexpr int64_t kMaxParameters = int64_t{10'000'000'000'000};  // 10 T

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, std::string source, std::string model_type)
      : j_(config), source_(std::move(source)), type_(std::move(model_type)) {}

  // A required integer in [min, max] under the first present of `keys`.
  [[nodiscard]] Result<int64_t> Int(std::initializer_list<const char*> keys, int64_t min,
                                    int64_t max) const;
  // The same, `fallback` when every key is absent.
  [[nodiscard]] Result<int64_t> IntOr(std::initializer_list<const char*> keys, int64_t fallback,
                                      int64_t min, int64_t max) const;
  [[nodiscard]] Result<double> NumberOr(std::initializer_list<const char*> keys, double fallback,
                                        double min, double max) const;
  [[nodiscard]] Result<bool> BoolOr(std::initializer_list<const char*> keys, bool fallback) const;
  [[nodiscard]] Result<std::string> StringOr(std::initializer_list<const char*> keys,
                                             const std::string& fallback) const;
  bool Has(const char* key) const;
  // "<source>: '<key>' <what> (<model_type>)".
  Status Error(const std::string& key, const std::string& what) const;
  // "<source>: <what> (<model_type>)".
  Status Plain(const std::string& what) const;
  const std::string& model_type() const { return type_; }
  const nlohmann::json& json() const { return j_; }

 private:
  // The first key of `keys` present and not null, or nullptr.
  const nlohmann::json* Find(std::initializer_list<const char*> keys, std::string* key) const;
  Result<int64_t> AsInt(const nlohmann::json& v, const std::string& key, int64_t min,
                        int64_t max) const;

  const nlohmann::json& j_;
  std::string source_;
  std::string type_;
};

// A Hugging Face activation name (hidden_act, hidden_activation, activation_function) as a
// layers.h Activation() name; InvalidModel naming `field` for one this builder does not write.
[[nodiscard]] Result<std::string> MapActivation(const ConfigReader& r, const std::string& field,
                                                const std::string& hf_name);

// ---------------------------------------------------------------------------------------------
// Decoder-only language models (hf_decoder.cc).

enum class NormKind { kRms, kRmsPlusOne, kLayerNorm };
enum class QkvLayout { kSeparate, kFused, kNeox };
enum class MlpKind { kGated, kGatedFused, kPlain, kMoe };
enum class BlockKind { kSequential, kParallelSharedNorm, kParallelTwoNorms };

// state_dict names of one decoder family; "{i}" stands for the layer index.
struct DecoderNames {
  std::string embed, positions, layer, final_norm, lm_head;
  std::string q, k, v, qkv, o, ln1, ln2, gate, up, gate_up, down, fc1, fc2, router, experts;
  std::string q_norm, k_norm;
  bool norm_bias = false;  // LayerNorm: weight and bias
};

struct DecoderSpec {
  std::string model_type;
  std::string architecture;
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t intermediate = 0;
  NormKind norm = NormKind::kRms;
  double norm_eps = 1e-5;
  QkvLayout qkv = QkvLayout::kSeparate;
  bool qkv_bias = false, o_bias = false, mlp_bias = false, lm_head_bias = false;
  bool qk_layernorm = false;  // phi: LayerNorm(head_dim) on q and k
  bool qk_rmsnorm = false;    // qwen3: RMSNorm(head_dim) on q and k per head (separate q/k/v)
  // kv_heads < heads, and the family's attention broadcasts k/v over the query heads in its
  // matmuls (and passes them to SDPA unrepeated, without enable_gqa) instead of repeat_kv:
  // falcon's multi-query attention (modeling_falcon.py, FalconAttention.forward).
  bool broadcast_kv = false;
  MlpKind mlp = MlpKind::kGated;
  std::string act = "silu";  // layers.h Activation() name
  BlockKind block = BlockKind::kSequential;
  int64_t rotary_dim = 0;  // 0: no rotary embedding
  double rope_theta = 10000.0;
  int64_t learned_positions = 0;  // > 0: rows of a learned position table (gpt2)
  bool scale_embeddings = false;  // gemma: embeddings * sqrt(hidden)
  bool tied = false;
  int64_t experts = 0, experts_per_token = 0;
  float embd_dropout = 0, attn_dropout = 0, resid_dropout = 0;
  DecoderNames names;
  std::vector<std::string> notes;
};

[[nodiscard]] Result<DecoderSpec> ReadDecoder(const ConfigReader& r);
[[nodiscard]] Result<HfModel> BuildDecoder(const DecoderSpec& s, const HfGraphOptions& o);

// ---------------------------------------------------------------------------------------------
// BERT / RoBERTa encoders (hf_encoder.cc).

struct EncoderSpec {
  std::string model_type;
  std::string architecture;  // BertModel | RobertaModel
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0;
  int64_t positions = 0, type_vocab = 0;
  int64_t position_offset = 0;  // roberta: padding_idx + 1
  std::string act = "gelu";
  double norm_eps = 1e-12;
  float hidden_dropout = 0, attn_dropout = 0;
  std::vector<std::string> notes;
};

[[nodiscard]] Result<EncoderSpec> ReadEncoder(const ConfigReader& r);
[[nodiscard]] Result<HfModel> BuildEncoder(const EncoderSpec& s, const HfGraphOptions& o);

// ---------------------------------------------------------------------------------------------
// T5 (hf_t5.cc).

struct T5Spec {
  int64_t vocab = 0, d_model = 0, d_kv = 0, heads = 0, d_ff = 0;
  int64_t encoder_layers = 0, decoder_layers = 0;
  int64_t buckets = 32, max_distance = 128;
  double norm_eps = 1e-6;
  float dropout = 0;
  std::string act = "relu";
  bool gated = false;
  bool tied = true;
  std::vector<std::string> notes;
};

[[nodiscard]] Result<T5Spec> ReadT5(const ConfigReader& r);
[[nodiscard]] Result<HfModel> BuildT5(const T5Spec& s, const HfGraphOptions& o);

// ---------------------------------------------------------------------------------------------
// Graph helpers (hf_graph.cc), on a GraphWriter.

// int64 scalars (rank 0) the graph computes from its inputs' shapes.
struct Dims {
  std::string seq;    // query positions: input_ids' dim 1
  std::string past;   // cached positions (decode), else empty
  std::string total;  // past + seq (== seq without a cache)
};

class Builder {
 public:
  explicit Builder(GraphWriter& w, bool training) : w_(w), training_(training) {}

  // A parameter named `name` exactly (the scope is not prepended).
  std::string Param(const std::string& name, const std::vector<int64_t>& dims);
  // nn.Linear as MatMul with a [in, out] weight `name`.weight (+ `name`.bias).
  std::string Linear(const std::string& x, int64_t in, int64_t out, bool bias,
                     const std::string& name);
  // LayerNormalization-17 with `name`.weight and `name`.bias.
  std::string LayerNorm(const std::string& x, int64_t features, double eps,
                        const std::string& name);
  // RMSNorm as transformers writes it, in fp32: x * 1/sqrt(mean(x^2) + eps) * w (plus_one: the
  // weight applied as 1 + w, gemma).
  std::string RmsNorm(const std::string& x, int64_t features, double eps, const std::string& name,
                      bool plus_one);
  // Dropout in training form when training and ratio > 0; else x.
  std::string Dropout(const std::string& x, float ratio);
  std::string Unsqueeze(const std::string& x, const std::vector<int64_t>& axes);
  std::string Transpose(const std::string& x, const std::vector<int64_t>& perm);
  // Element `index` of a 1-D int64 tensor, as a scalar.
  std::string Element(const std::string& shape, int64_t index);
  // [b, s, n*hd] -> [b, n, s, hd].
  std::string SplitHeads(const std::string& x, int64_t n, int64_t hd);
  // [b, n, s, hd] -> [b, s, n*hd].
  std::string MergeHeads(const std::string& x, int64_t n, int64_t hd);
  // repeat_kv: [b, kv, t, hd] -> [b, kv*rep, t, hd] (unsqueeze, expand, reshape).
  std::string RepeatKv(const std::string& x, int64_t kv, int64_t rep, int64_t hd);
  // Bool [seq, total], true where query i may not see key j (j > past + i).
  std::string CausalMask(const Dims& d);
  // int64 [seq]: past, ..., total - 1.
  std::string Positions(const Dims& d);
  // cos and sin [seq, rotary_dim] of positions, computed in the graph (no table initializer).
  std::pair<std::string, std::string> Rotary(const std::string& positions, int64_t rotary_dim,
                                             double theta);
  // q * cos + rotate_half(q) * sin on the first rotary_dim of head_dim features.
  std::string ApplyRotary(const std::string& x, const std::pair<std::string, std::string>& cs,
                          int64_t rotary_dim, int64_t head_dim);
  // Eager attention over [b, nh, s, hd] queries and [b, kv, t, hd] keys/values: repeat_kv
  // (unless broadcast_kv: the matmuls broadcast one k/v head over the query heads),
  // MatMul(q, k^T), * scale (when not 1), + bias, Where(mask, -inf), Softmax, Dropout, MatMul(v);
  // returns [b, s, nh*hd].
  std::string Attention(const std::string& q, const std::string& k, const std::string& v,
                        int64_t heads, int64_t kv_heads, int64_t head_dim, float scale,
                        const std::string& bias, const std::string& mask, float dropout,
                        bool broadcast_kv = false);
  // The last position of [b, s, h]: [b, 1, h].
  std::string LastPosition(const std::string& x);

 private:
  GraphWriter& w_;
  bool training_;
};

// `name` as a graph name and weights-file stem: characters other than [A-Za-z0-9._-] become '_'.
std::string SafeName(const std::string& name);

// Sums checked against kMaxParameters; the first element past a bound is an error naming it.
class ParamBudget {
 public:
  explicit ParamBudget(const ConfigReader& r) : r_(r) {}
  // Adds count * a * b (* c), each factor already bounded; `what` names the tensor.
  Status Add(const std::string& what, int64_t count, int64_t a, int64_t b = 1);
  int64_t total() const { return total_; }

 private:
  const ConfigReader& r_;
  int64_t total_ = 0;
};

// HfModel facts common to every family, and the model moved out of the writer, which is done.
HfModel FinishModel(GraphWriter&& w, const HfGraphOptions& o);

}  // namespace memest::zoo::hf

#endif  // MEMEST_DATASETS_ZOO_HF_INTERNAL_H_
