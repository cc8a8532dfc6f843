// datasets/zoo/hf.cc -- BuildHfModel (hf.h): which family a config is, and the dispatch to the
// family builders (hf_decoder.cc, hf_encoder.cc, hf_t5.cc).
//
// Policy:
//  * The family comes from `model_type` (what AutoConfig reads); without it, from the first
//    class of `architectures` this builder knows. An unknown model_type, or architectures with no
//    known class and no model_type, is InvalidModel listing the supported ones.
//  * The graph is the family's causal-LM module (or base model for bert/roberta, the
//    conditional-generation model for t5) whatever head `architectures` names; a different
//    class is reported in HfModel::notes.
#include "datasets/zoo/hf.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "datasets/zoo/hf_internal.h"

namespace memest::zoo {
namespace {

struct Family {
  const char* model_type;
  std::vector<const char*> classes;  // the first is the one the graph is
};

const std::vector<Family>& Families() {
  static const auto* families = new std::vector<Family>{
      {"llama", {"LlamaForCausalLM"}},
      {"mistral", {"MistralForCausalLM"}},
      {"mixtral", {"MixtralForCausalLM"}},
      {"qwen2", {"Qwen2ForCausalLM"}},
      {"qwen3", {"Qwen3ForCausalLM"}},
      {"gemma", {"GemmaForCausalLM"}},
      {"phi", {"PhiForCausalLM"}},
      {"phi3", {"Phi3ForCausalLM"}},
      {"gpt2", {"GPT2LMHeadModel", "GPT2Model"}},
      {"gpt_neox", {"GPTNeoXForCausalLM"}},
      {"falcon", {"FalconForCausalLM", "RWForCausalLM"}},
      {"bert",
       {"BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"}},
      {"roberta", {"RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification"}},
      {"t5", {"T5ForConditionalGeneration", "T5Model"}},
  };
  return *families;
}

// Older spellings of a supported model_type.
std::string Canonical(const std::string& model_type) {
  if (model_type == "RefinedWebModel" || model_type == "RefinedWeb") return "falcon";
  return model_type;
}

const Family* FindType(const std::string& model_type) {
  for (const Family& f : Families()) {
    if (model_type == f.model_type) return &f;
  }
  return nullptr;
}

const Family* FindClass(const std::string& cls) {
  for (const Family& f : Families()) {
    for (const char* c : f.classes) {
      if (cls == c) return &f;
    }
  }
  return nullptr;
}

std::string Supported() {
  std::string s;
  for (const Family& f : Families()) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
  return s;
}

std::string SupportedClasses() {
  std::string s;
  for (const Family& f : Families()) {
    for (const char* c : f.classes) s += (s.empty() ? "" : ", ") + std::string(c);
  }
  return s;
}

// The family of `config`, and the `architectures` entries (for the note on a different head).
Result<const Family*> Detect(const nlohmann::json& config, const std::string& source,
                             std::vector<std::string>* classes) {
  auto arch = config.find("architectures");
  if (arch != config.end() && !arch->is_null()) {
    if (!arch->is_array()) {
      return InvalidModel(source + ": 'architectures' must be a list of class names");
    }
    for (const auto& c : *arch) {
      if (!c.is_string()) {
        return InvalidModel(source + ": 'architectures' must be a list of class names");
      }
      classes->push_back(c.get<std::string>());
    }
  }
  auto type = config.find("model_type");
  if (type != config.end() && !type->is_null()) {
    if (!type->is_string()) return InvalidModel(source + ": 'model_type' must be a string");
    const std::string t = Canonical(type->get<std::string>());
    if (const Family* f = FindType(t)) return f;
    return InvalidModel(source + ": unsupported model_type '" + type->get<std::string>() +
                        "' (supported: " + Supported() + ")");
  }
  for (const std::string& c : *classes) {
    if (const Family* f = FindClass(c)) return f;
  }
  if (classes->empty()) {
    return InvalidModel(source +
                        ": missing 'model_type' (and 'architectures'); supported: " + Supported());
  }
  return InvalidModel(source + ": unknown architecture '" + classes->front() +
                      "' and no 'model_type' (supported: " + SupportedClasses() + ")");
}

std::string WithCommas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace

const char* PhaseName(HfGraphOptions::Phase phase) {
  switch (phase) {
    case HfGraphOptions::kTrain:
      return "train";
    case HfGraphOptions::kPrefill:
      return "prefill";
    case HfGraphOptions::kDecode:
      return "decode";
  }
  return "?";
}

Result<HfGraphOptions::Phase> ParsePhase(std::string_view name) {
  for (auto p : {HfGraphOptions::kTrain, HfGraphOptions::kPrefill, HfGraphOptions::kDecode}) {
    if (name == PhaseName(p)) return p;
  }
  return InvalidArgument("unknown phase '" + std::string(name) +
                         "' (expected train, prefill or decode)");
}

const std::vector<std::string>& HfModelTypes() {
  static const auto* types = [] {
    auto* v = new std::vector<std::string>();
    for (const Family& f : Families()) v->push_back(f.model_type);
    return v;
  }();
  return *types;
}

Result<HfModel> BuildHfModel(const nlohmann::json& config, const HfGraphOptions& options) {
  if (!config.is_object()) return InvalidModel(options.source + ": not a JSON object");
  std::vector<std::string> classes;
  MEMEST_ASSIGN_OR_RETURN(const Family* family, Detect(config, options.source, &classes));
  const std::string type = family->model_type;
  const hf::ConfigReader reader(config, options.source, type);
  Result<HfModel> built = InvalidModel("no builder");
  if (type == "bert" || type == "roberta") {
    MEMEST_ASSIGN_OR_RETURN(const hf::EncoderSpec spec, hf::ReadEncoder(reader));
    built = hf::BuildEncoder(spec, options);
  } else if (type == "t5") {
    MEMEST_ASSIGN_OR_RETURN(const hf::T5Spec spec, hf::ReadT5(reader));
    built = hf::BuildT5(spec, options);
  } else {
    MEMEST_ASSIGN_OR_RETURN(const hf::DecoderSpec spec, hf::ReadDecoder(reader));
    built = hf::BuildDecoder(spec, options);
  }
  if (!built.ok()) return built;
  if (!classes.empty() && classes.front() != built->architecture) {
    built->notes.push_back(
        "'architectures' names " + classes.front() + "; the graph is " + built->architecture +
        (family == FindClass(classes.front()) ? " (task heads are not modelled)" : ""));
  }
  return built;
}

Result<nlohmann::json> LoadHfConfig(const std::string& path) {
  constexpr off_t kMaxBytes = off_t{4} << 20;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound(path + ": no such file");
  if (!S_ISREG(st.st_mode)) return InvalidModel(path + ": not a regular file");
  if (st.st_size > kMaxBytes) {
    return InvalidModel(path + ": " + std::to_string(st.st_size) +
                        " bytes; a config.json is at most 4 MiB here");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return InvalidModel(path + ": not JSON: " + e.what());
  }
  if (!j.is_object()) return InvalidModel(path + ": not a JSON object");
  return j;
}

std::string DescribeHfModel(const HfModel& m) {
  std::ostringstream s;
  s << m.architecture << " (" << m.model_type << "): " << m.layers << " layers, hidden " << m.hidden
    << ", " << m.heads << " heads (" << m.kv_heads << " kv, head_dim " << m.head_dim << "), vocab "
    << m.vocab;
  if (m.experts > 0) s << ", " << m.experts << " experts (top " << m.experts_per_token << ")";
  const bool head = m.model_type != "bert" && m.model_type != "roberta";
  if (head) s << ", " << (m.tied ? "tied" : "untied") << " head";
  s << ", " << WithCommas(m.parameters) << " parameters, phase " << PhaseName(m.phase);
  return s.str();
}

}  // namespace memest::zoo
