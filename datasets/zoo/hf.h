// datasets/zoo/hf.h -- weightless ONNX graphs from a Hugging Face `config.json`.
//
// Contract:
//  * BuildHfModel(config, options) writes the graph of the module Hugging Face `transformers`
//    builds from the config: decoder-only language models (llama, mistral, mixtral, qwen2,
//    qwen3, gemma, phi, phi3, gpt2, gpt_neox, falcon) as *ForCausalLM, encoders (bert,
//    roberta) as BertModel/RobertaModel with the pooler, and t5 as T5ForConditionalGeneration
//    (docs/hf-config.md says what each graph holds and what it leaves out).
//  * The graph follows GraphWriter's rules (graph_writer.h): opset 17, every parameter a
//    weightless EXTERNAL float initializer named as in the model's state_dict
//    ("model.layers.0.self_attn.q_proj.weight"), no other float initializer of more than one
//    element (rotary tables, masks and position ids are computed in the graph), so memest's
//    parameter count (core/loader.cc) is `sum(p.numel() for p in model.parameters())`, tied
//    weights once: a tied head reads the embedding initializer through a Transpose.
//  * Dynamic dims: input_ids [batch, seq] (int64); t5 adds decoder_input_ids [batch, tgt_seq];
//    the decode phase adds past_key_values.{i}.key/value [batch, kv_heads, past, head_dim].
//    Names follow Hugging Face optimum's ONNX export (present.{i}.key, past_key_values.{i}.value).
//  * Phases (decoders only; encoders and t5 have kTrain only): kTrain writes the training forward
//    (Dropout where the config's rate is above 0) with logits [batch, seq, vocab] as the first
//    output; kPrefill and kDecode write the inference forward with the KV cache: logits, then
//    present.{i}.key / present.{i}.value per layer ([batch, kv_heads, seq, head_dim]; in decode
//    the past concatenated with the new keys, [batch, kv_heads, past+seq, head_dim]).
//    logits_last_only computes the LM head on the last position only ([batch, 1, vocab]).
//  * Errors are values: InvalidModel naming the config field ("config.json: missing
//    'num_attention_heads' (llama)"), the unknown architecture with the supported list, values
//    that are not positive or do not fit together, and sizes past the bounds of hf.cc (each
//    named with its limit). Never throws.
// Thread safety: free functions without shared state.
#ifndef MEMEST_DATASETS_ZOO_HF_H_
#define MEMEST_DATASETS_ZOO_HF_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "memest/status.h"

namespace memest::zoo {

struct HfGraphOptions {
  enum Phase { kTrain, kPrefill, kDecode };
  Phase phase = kTrain;
  // The LM head on the last position only (what a serving engine computes in prefill).
  bool logits_last_only = false;
  // The graph name and the stem of the (never written) weights file; empty: "hf_<model_type>".
  // Characters other than [A-Za-z0-9._-] become '_'.
  std::string name;
  // How errors name the config ("config.json: missing ..."); the CLIs pass the file's path.
  std::string source = "config.json";
};

const char* PhaseName(HfGraphOptions::Phase phase);  // "train" | "prefill" | "decode"
[[nodiscard]] Result<HfGraphOptions::Phase> ParsePhase(std::string_view name);

// The supported `model_type` values, and the `architectures` classes recognised for them.
const std::vector<std::string>& HfModelTypes();

struct HfModel {
  onnx::ModelProto model;
  std::string model_type;    // "llama", "bert", ...
  std::string architecture;  // the module the graph is: "LlamaForCausalLM", "BertModel", ...
  // Elements of the graph's parameter initializers (each once): what memest counts and what
  // model.num_parameters() reports.
  int64_t parameters = 0;
  int64_t layers = 0;  // transformer blocks (t5: encoder + decoder)
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  int64_t experts = 0;  // 0: dense
  int64_t experts_per_token = 0;
  bool tied = false;  // the LM head (or t5's) reads the token embedding
  HfGraphOptions::Phase phase = HfGraphOptions::kTrain;
  // What the config asks for that the graph does not model (sliding window, ...), one line each.
  std::vector<std::string> notes;
};

// The graph of `config` (a parsed config.json object).
[[nodiscard]] Result<HfModel> BuildHfModel(const nlohmann::json& config,
                                           const HfGraphOptions& options);

// Reads `path` (a regular file of at most 4 MiB) as a JSON object. NotFound for a missing or
// unreadable file, InvalidModel for text that is not a JSON object (with the parser's position).
[[nodiscard]] Result<nlohmann::json> LoadHfConfig(const std::string& path);

// "LlamaForCausalLM (llama): 32 layers, hidden 4096, 32 heads (32 kv, head_dim 128), vocab
// 32000, untied head, 6,738,415,616 parameters, phase train".
std::string DescribeHfModel(const HfModel& m);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_HF_H_
