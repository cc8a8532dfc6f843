// datasets/zoo/sampling.cc -- Rng, seed mixing, and the JSON form of every configuration.
#include <algorithm>

#include "datasets/zoo/families.h"

namespace memest::zoo {

int64_t Rng::Int(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(gen_() % span);
}

int64_t Rng::LogInt(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  int lo_bit = 0, hi_bit = 0;
  while ((int64_t{2} << lo_bit) <= lo) ++lo_bit;
  while ((int64_t{2} << hi_bit) <= hi) ++hi_bit;
  const int octave = static_cast<int>(Int(lo_bit, hi_bit));
  const int64_t a = std::max(lo, int64_t{1} << octave);
  const int64_t b = std::min(hi, (int64_t{2} << octave) - 1);
  return Int(a, b);
}

uint64_t MixSeed(uint64_t seed, uint64_t family, uint64_t index) {
  auto splitmix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(splitmix(seed) ^ family) ^ index);
}

nlohmann::json ToJson(const MlpConfig& c) {
  return {{"arch", c.arch},
          {"input", c.input},
          {"output", c.output},
          {"hidden", c.hidden},
          {"activation", c.activation},
          {"batchnorm", c.batchnorm},
          {"dropout_percent", c.dropout_percent}};
}

nlohmann::json ToJson(const CnnConfig& c) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : c.stages) {
    nlohmann::json j = {{"blocks", s.blocks}, {"channels", s.channels}, {"stride", s.stride}};
    if (c.arch == "mobilenet" || c.arch == "efficientnet") {
      j["expand"] = s.expand;
      j["kernel"] = s.kernel;
      j["se"] = s.se;
    }
    stages.push_back(std::move(j));
  }
  nlohmann::json j = {{"arch", c.arch},
                      {"resolution", c.resolution},
                      {"num_classes", c.num_classes},
                      {"stem_channels", c.stem_channels},
                      {"stages", std::move(stages)},
                      {"activation", c.activation},
                      {"dropout_percent", c.dropout_percent}};
  if (c.arch == "resnet") j["block"] = c.block;
  if (c.arch == "vgg") {
    j["batchnorm"] = c.batchnorm;
    j["head_hidden"] = c.head_hidden;
  }
  if (c.head_channels > 0) j["head_channels"] = c.head_channels;
  return j;
}

nlohmann::json ToJson(const TransformerConfig& c) {
  nlohmann::json j = {{"arch", c.arch},       {"layers", c.layers},
                      {"d_model", c.d_model}, {"heads", c.heads},
                      {"ffn", c.ffn},         {"seq", c.seq},
                      {"vocab", c.vocab},     {"norm", c.norm},
                      {"gelu", c.gelu},       {"dropout_percent", c.dropout_percent}};
  if (c.arch == "encoder") j["num_classes"] = c.num_classes;
  if (c.arch == "decoder") j["tied"] = c.tied;
  return j;
}

nlohmann::json ToJson(const RnnConfig& c) {
  return {{"arch", c.arch},
          {"layers", c.layers},
          {"hidden", c.hidden},
          {"bidirectional", c.bidirectional},
          {"seq", c.seq},
          {"vocab", c.vocab},
          {"input", c.input},
          {"num_classes", c.num_classes},
          {"dropout_percent", c.dropout_percent}};
}

}  // namespace memest::zoo
