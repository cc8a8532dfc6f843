// datasets/zoo/families.h -- the four model families: configurations, seeded sampling, builders.
//
// Policy:
//  * A configuration fully determines the graph: Build*(config, name) is a pure function of its
//    arguments (same config and name -> byte-identical serialization).
//  * Sample*(rng) draws a configuration with Rng (std::mt19937_64 plus integer-only mappings,
//    never <random> distributions, whose output differs across standard libraries, and never
//    floating-point math on the draws). Samples that exceed a family's parameter cap are redrawn
//    from the same stream, so sampling stays deterministic.
//  * Every dim except the batch is concrete: sequence lengths, resolutions and vocabularies are
//    part of the configuration.
//  * Graphs are training-form (BatchNormalization training_mode=1, Dropout with mask output) at
//    opset 17, as torch.onnx.export(..., training=TRAINING, do_constant_folding=False) writes them
//    (layers.h lists the conventions).
#ifndef MEMEST_DATASETS_ZOO_FAMILIES_H_
#define MEMEST_DATASETS_ZOO_FAMILIES_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace memest::zoo {

// Seeded integer sampling with mappings that are identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t Next() { return gen_(); }
  // Uniform in [lo, hi] (modulo mapping; the tiny bias is irrelevant here).
  int64_t Int(int64_t lo, int64_t hi);
  // Roughly log-uniform in [lo, hi]: a uniform octave, then uniform inside it.
  int64_t LogInt(int64_t lo, int64_t hi);
  bool Percent(int p) { return Int(0, 99) < p; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int64_t>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 gen_;
};

// Size range of sampled configurations. kFull covers GPUMemNet's space and beyond (models up to
// hundreds of millions of parameters); kTiny draws models small enough for CPU tests (well under
// a million parameters, short sequences, 32x32 images).
enum class Scale { kFull, kTiny };

// Mixes a user seed with a family id and a model index into one 64-bit seed (splitmix64).
uint64_t MixSeed(uint64_t seed, uint64_t family, uint64_t index);

// A built model and what describes it.
struct BuiltModel {
  onnx::ModelProto model;
  int64_t parameters = 0;  // PyTorch-style: elements of trainable weights (BN stats excluded)
  std::vector<int64_t> input_dims;  // kBatch for the batch dim
  std::string input_dtype;          // "float32" or "int64"
};

// --- MLP -------------------------------------------------------------------------------------
struct MlpConfig {
  std::string arch = "pyramid";  // pyramid | uniform | bottleneck | gradual | diamond
  int64_t input = 784;
  int64_t output = 10;
  std::vector<int64_t> hidden;  // widths of the hidden Linear layers
  std::string activation = "relu";
  bool batchnorm = false;
  int dropout_percent = 0;  // 0 = no Dropout layers
};
MlpConfig SampleMlp(Rng& rng, Scale scale = Scale::kFull);
BuiltModel BuildMlp(const MlpConfig& c, const std::string& name);
nlohmann::json ToJson(const MlpConfig& c);

// --- CNN -------------------------------------------------------------------------------------
struct CnnStage {
  int64_t blocks = 1;     // convs (vgg) or blocks (others) in the stage
  int64_t channels = 64;  // output channels
  int64_t stride = 1;     // first block's stride (vgg: pooling after the stage instead)
  int64_t expand = 1;     // inverted-residual expansion ratio (mobilenet/efficientnet)
  int64_t kernel = 3;     // depthwise kernel (mobilenet/efficientnet)
  bool se = false;        // squeeze-excite (mobilenet/efficientnet)
};
struct CnnConfig {
  std::string arch = "resnet";  // vgg | resnet | mobilenet | efficientnet
  int64_t resolution = 224;
  int64_t num_classes = 1000;
  int64_t stem_channels = 64;
  std::vector<CnnStage> stages;
  std::string block = "basic";  // resnet: basic | bottleneck
  std::string activation = "relu";
  bool batchnorm = true;      // vgg only (others always use BN)
  int64_t head_channels = 0;  // mobilenet/efficientnet: 1x1 conv before pooling
  int64_t head_hidden = 0;    // vgg: hidden width of the 3-layer classifier (0 = GAP + FC)
  int dropout_percent = 0;
};
CnnConfig SampleCnn(Rng& rng, Scale scale = Scale::kFull);
BuiltModel BuildCnn(const CnnConfig& c, const std::string& name);
nlohmann::json ToJson(const CnnConfig& c);

// --- Transformer -----------------------------------------------------------------------------
struct TransformerConfig {
  std::string arch = "decoder";  // encoder (BERT-like, classification) | decoder (GPT-like, LM)
  int64_t layers = 4;
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t ffn = 1024;
  int64_t seq = 128;
  int64_t vocab = 8192;
  int64_t num_classes = 2;    // encoder only
  std::string norm = "pre";   // pre | post
  std::string gelu = "gelu";  // gelu (erf) | gelu_tanh
  bool tied = false;          // decoder: LM head shares the token embedding
  int dropout_percent = 10;
};
TransformerConfig SampleTransformer(Rng& rng, Scale scale = Scale::kFull);
BuiltModel BuildTransformer(const TransformerConfig& c, const std::string& name);
nlohmann::json ToJson(const TransformerConfig& c);

// --- RNN -------------------------------------------------------------------------------------
struct RnnConfig {
  std::string arch = "lstm";  // lstm | gru
  int64_t layers = 1;
  int64_t hidden = 256;
  bool bidirectional = false;
  int64_t seq = 64;
  int64_t vocab = 0;    // > 0: int64 token input through an embedding of width `input`
  int64_t input = 128;  // feature width (or embedding width)
  int64_t num_classes = 10;
  int dropout_percent = 0;  // between stacked layers
};
RnnConfig SampleRnn(Rng& rng, Scale scale = Scale::kFull);
BuiltModel BuildRnn(const RnnConfig& c, const std::string& name);
nlohmann::json ToJson(const RnnConfig& c);

}  // namespace memest::zoo

#endif  // MEMEST_DATASETS_ZOO_FAMILIES_H_
