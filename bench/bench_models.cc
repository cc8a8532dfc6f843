// bench/bench_models.cc -- see bench_models.h.
#include "bench/bench_models.h"

#include <onnx/onnx_pb.h>

#include <fstream>
#include <map>
#include <sstream>

#include "base/dtype.h"
#include "datasets/zoo/chain.h"
#include "datasets/zoo/families.h"
#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/shapes.h"

namespace memest::bench {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A GPT-style decoder of 70.3 B parameters: 80 layers, d_model 8192, 64 heads, FFN 36864,
// vocabulary 32000, sequence 4096, untied head (datasets/zoo: weightless, concrete dims).
std::string Gpt70b() {
  zoo::TransformerConfig c;
  c.arch = "decoder";
  c.layers = 80;
  c.d_model = 8192;
  c.heads = 64;
  c.ffn = 36864;
  c.seq = 4096;
  c.vocab = 32000;
  return zoo::BuildTransformer(c, "gpt70b").model.SerializeAsString();
}

std::string HfBytes(const std::string& file, zoo::HfGraphOptions::Phase phase) {
  auto m = BuildHf(file, phase);
  return m.ok() ? zoo::SerializeModel(m->model) : std::string();
}

// Blocks of 4 nodes (datasets/zoo/chain.h) for "chain10k", "chain100k", "chain1m"; 0 otherwise.
int ChainBlocks(const std::string& name) {
  if (name == "chain10k") return 2'500;
  if (name == "chain100k") return 25'000;
  if (name == "chain1m") return 250'000;
  return 0;
}

// The model in `bytes` with every initializer that holds no data in the file (the bundled
// exports point their large ones at external data they do not ship) given its full payload
// (zeros): as raw_data, as an exporter writes a model that keeps its weights in the file, or, when
// `typed`, a float tensor's in float_data, as onnx.helper.make_tensor writes it by default.
std::string WithWeights(const std::string& bytes, bool typed) {
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) return {};
  for (onnx::TensorProto& t : *m.mutable_graph()->mutable_initializer()) {
    const bool holds_data = !t.raw_data().empty() || t.float_data_size() > 0 ||
                            t.int32_data_size() > 0 || t.int64_data_size() > 0 ||
                            t.double_data_size() > 0 || t.uint64_data_size() > 0 ||
                            t.string_data_size() > 0;
    if (holds_data) continue;
    t.clear_external_data();
    t.clear_data_location();
    uint64_t numel = 1;
    for (const int64_t d : t.dims()) numel *= static_cast<uint64_t>(d);
    if (typed && t.data_type() == onnx::TensorProto::FLOAT) {
      t.mutable_float_data()->Resize(static_cast<int>(numel), 0.0f);
    } else {
      t.set_raw_data(std::string(numel * base::DTypeSize(t.data_type()), '\0'));
    }
  }
  return m.SerializeAsString();
}

}  // namespace

std::string ModelPath(const std::string& name) {
  const std::string root = std::string(MEMEST_SOURCE_DIR) + "/datasets/";
  return name.rfind("real/", 0) == 0 ? root + name + ".onnx" : root + "models/" + name + ".onnx";
}

Result<zoo::HfModel> BuildHf(const std::string& file, zoo::HfGraphOptions::Phase phase) {
  static auto* configs = new std::map<std::string, nlohmann::json>();
  auto it = configs->find(file);
  if (it == configs->end()) {
    auto j = zoo::LoadHfConfig(std::string(MEMEST_SOURCE_DIR) + "/tests/data/hf/" + file + ".json");
    if (!j.ok()) return j.status();
    it = configs->emplace(file, *j).first;
  }
  zoo::HfGraphOptions o;
  o.phase = phase;
  o.logits_last_only = phase != zoo::HfGraphOptions::kTrain;
  o.name = file;
  return zoo::BuildHfModel(it->second, o);
}

std::string BuildModelBytes(const std::string& name) {
  if (const int blocks = ChainBlocks(name); blocks > 0) return zoo::ChainModel(blocks);
  if (name == "gpt70b") return Gpt70b();
  if (name.rfind("shape:", 0) == 0) {  // "shape:<kind>:<width>"
    const size_t colon = name.find(':', 6);
    if (colon == std::string::npos) return {};
    return zoo::ShapeModel(name.substr(6, colon - 6), std::stoi(name.substr(colon + 1)));
  }
  if (name.rfind("weighted:", 0) == 0) return WithWeights(BuildModelBytes(name.substr(9)), false);
  if (name.rfind("typed:", 0) == 0) return WithWeights(BuildModelBytes(name.substr(6)), true);
  if (name.rfind("hf:", 0) == 0) return HfBytes(name.substr(3), zoo::HfGraphOptions::kTrain);
  if (name.rfind("hf-prefill:", 0) == 0) {
    return HfBytes(name.substr(11), zoo::HfGraphOptions::kPrefill);
  }
  if (name.rfind("hf-decode:", 0) == 0) {
    return HfBytes(name.substr(10), zoo::HfGraphOptions::kDecode);
  }
  return ReadFile(ModelPath(name));
}

const std::string& ModelBytes(const std::string& name) {
  static auto* cache = new std::map<std::string, std::string>();
  auto it = cache->find(name);
  if (it == cache->end()) it = cache->emplace(name, BuildModelBytes(name)).first;
  return it->second;
}

}  // namespace memest::bench
