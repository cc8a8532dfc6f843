// Stack profiles: the compiled-in table (base/stacks.json, embedded as
// memest::base::kStacksJson) and users' stack files (memest calibrate writes them).
//
// Policy:
//  - One schema for both (a table entry and a file's "stack" object are read by the same code);
//    the table is parsed once on first use (function-local static) and is immutable afterwards.
//    A stack looked up by a name the table has (and the default, the first) is parsed on its own,
//    once per process (each stack is also compiled in alone, base/embed_json.cmake), not the
//    whole table with its sources and calibration notes: a CLI call asks for one.
//  - The embedded table is memest's own data: a defect in it is kInternal (the unit tests parse
//    it). A user's file is input: a defect is kInvalidArgument naming the field; a missing file
//    is kNotFound. Nothing throws; files over kMaxStackFileBytes are refused unread.
//  - Values are checked for meaning, not only type: bytes below 64 GiB, convolution workspace
//    coefficients in [0, 64], bands (per backend) with low <= 0 <= high, coverage in [0, 1] and
//    held-out rows > 0.
#include "memest/stack.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/json_fields.h"

namespace memest::base {

extern const char kStacksJson[];
// Each stack of kStacksJson's "stacks" on its own, with its name (base/embed_json.cmake).
extern const int kStacksJsonCount;
extern const char* const kStacksJsonNames[];
extern const char* const kStacksJsonElements[];

namespace {

using nlohmann::json;

constexpr std::string_view kTableFormat = "memest-stacks/2";
constexpr std::string_view kFileFormat = "memest-stack/2";
// The format before the workspace followed the kind of convolution (memest/stack.h).
constexpr std::string_view kFileFormatV1 = "memest-stack/1";
constexpr uint64_t kMaxStackFileBytes = uint64_t{1} << 20;
constexpr uint64_t kMaxStackBytes = uint64_t{64} << 30;  // no context or library is this large
constexpr double kMaxConvWorkspace = 64.0;

const std::vector<std::string_view> kStackKeys = {"name",
                                                  "display_name",
                                                  "gpu",
                                                  "also_measured_on",
                                                  "software",
                                                  "lazy_loading",
                                                  "cuda_context",
                                                  "library_memory",
                                                  "conv_workspace",
                                                  "conv_workspace_pointwise",
                                                  "conv_weight_gradient_extra",
                                                  "rnn_workspace",
                                                  "bands",
                                                  "calibration"};
const std::vector<std::string_view> kStackKeysV1 = {
    "name",           "display_name",   "gpu",   "software",   "lazy_loading", "cuda_context",
    "library_memory", "conv_workspace", "bands", "calibration"};

// "also_measured_on": [{"gpu": NAME, "source": TEXT}, ...]: optional; each a known GPU profile,
// none the stack's own, none twice, and only on a stack bound to a GPU.
Result<std::vector<StackReplicate>> ReadReplicates(const JsonFields& f, const json& s,
                                                   const std::string& own_gpu,
                                                   const std::string& where) {
  std::vector<StackReplicate> out;
  auto it = s.find("also_measured_on");
  if (it == s.end()) return out;
  const std::string here = where + ".also_measured_on";
  if (!it->is_array() || it->size() > 64) return f.Error(here + ": not an array (at most 64)");
  if (own_gpu.empty() && !it->empty()) return f.Error(here + ": the stack names no gpu");
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string at = here + "[" + std::to_string(i) + "]";
    const json& r = (*it)[i];
    if (!r.is_object()) return f.Error(at + ": not an object");
    MEMEST_RETURN_IF_ERROR(f.CheckKeys(r, {"gpu", "source"}, at));
    StackReplicate rep;
    MEMEST_ASSIGN_OR_RETURN(rep.gpu, f.String(r, "gpu", at));
    rep.gpu = ToLowerAscii(rep.gpu);
    MEMEST_ASSIGN_OR_RETURN(rep.source, f.Source(r, "source", at));
    if (auto gpu = FindGpuProfile(rep.gpu); !gpu.ok()) {
      return f.Error(at + ".gpu: " + gpu.status().message());
    }
    if (rep.gpu == own_gpu) return f.Error(at + ": the stack's own gpu");
    for (const StackReplicate& earlier : out) {
      if (earlier.gpu == rep.gpu) return f.Error(at + ": '" + rep.gpu + "' named twice");
    }
    out.push_back(std::move(rep));
  }
  return out;
}

Result<StackCoefficient> ReadCoefficient(const JsonFields& f, const json& obj, const char* key,
                                         const std::string& where) {
  const std::string here = where + "." + key;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) return f.Error(here + ": missing or not an object");
  MEMEST_RETURN_IF_ERROR(f.CheckKeys(*it, {"value", "source", "calibrated"}, here));
  StackCoefficient c;
  MEMEST_ASSIGN_OR_RETURN(c.value, f.Number(*it, "value", here));
  MEMEST_ASSIGN_OR_RETURN(c.source, f.Source(*it, "source", here));
  MEMEST_ASSIGN_OR_RETURN(c.calibrated, f.Bool(*it, "calibrated", here));
  if (c.value < 0 || c.value > kMaxConvWorkspace) {
    return f.Error(here + ": 'value' must be in [0, 64]");
  }
  if (c.calibrated != (c.source.starts_with("measured: ") || c.source.starts_with("fitted: "))) {
    return f.Error(here +
                   ": calibrated=true exactly when the source starts with 'measured: ' or "
                   "'fitted: '");
  }
  return c;
}

// One backend's band, {"low", "high", "coverage", "rows", "source"}, measured on rows > 0.
Result<ResidualBand> ReadBand(const JsonFields& f, const json& b_json, const std::string& here) {
  if (!b_json.is_object()) return f.Error(here + ": not an object");
  MEMEST_RETURN_IF_ERROR(f.CheckKeys(b_json, {"low", "high", "coverage", "rows", "source"}, here));
  ResidualBand b;
  MEMEST_ASSIGN_OR_RETURN(b.low, f.Number(b_json, "low", here));
  MEMEST_ASSIGN_OR_RETURN(b.high, f.Number(b_json, "high", here));
  MEMEST_ASSIGN_OR_RETURN(b.coverage, f.Number(b_json, "coverage", here));
  auto rows = b_json.find("rows");
  if (rows == b_json.end() || !rows->is_number_unsigned() || rows->get<uint64_t>() < 1 ||
      rows->get<uint64_t>() > 100000000) {
    return f.Error(here + ": 'rows' must be a positive integer (the held-out rows measured)");
  }
  b.rows = static_cast<int>(rows->get<uint64_t>());
  MEMEST_ASSIGN_OR_RETURN(b.source, f.Source(b_json, "source", here));
  if (!(b.low <= 0 && b.low > -1 && b.high >= 0 && b.high <= 10)) {
    return f.Error(here + ": need -1 < low <= 0 <= high <= 10");
  }
  if (b.coverage < 0 || b.coverage > 1) return f.Error(here + ": 'coverage' must be in [0, 1]");
  return b;
}

// {"<backend>": band, ...}; {} when nothing measured the stack.
Result<std::map<std::string, ResidualBand>> ReadBands(const JsonFields& f, const json& obj,
                                                      const std::string& where) {
  const std::string here = where + ".bands";
  auto it = obj.find("bands");
  if (it == obj.end() || !it->is_object()) return f.Error(here + ": missing or not an object");
  std::map<std::string, ResidualBand> out;
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    if (kv.key() != "analytical" && kv.key() != "symbolic") {
      return f.Error(here + ": '" + kv.key() +
                     "' is not a backend a band can be measured for "
                     "(analytical, symbolic)");
    }
    MEMEST_ASSIGN_OR_RETURN(out[kv.key()], ReadBand(f, *kv, here + "." + kv.key()));
  }
  return out;
}

Result<std::map<std::string, std::string>> ReadSoftware(const JsonFields& f, const json& obj,
                                                        const std::string& where) {
  auto it = obj.find("software");
  if (it == obj.end() || !it->is_object()) {
    return f.Error(where + ".software: missing or not an object");
  }
  std::map<std::string, std::string> out;
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    if (!kv->is_string()) return f.Error(where + ".software." + kv.key() + ": not a string");
    out[kv.key()] = kv->get<std::string>();
  }
  return out;
}

// A memest-stack/1 coefficient (value x max(input, output) bytes of every convolution) as the two
// of memest-stack/2: exact when it is 0; otherwise refused (memest/stack.h).
Result<StackCoefficient> ConvWorkspaceFromV1(const JsonFields& f, const StackCoefficient& c,
                                             const std::string& where) {
  if (c.value != 0) {
    return f.Error(where + ".conv_workspace: a " + std::string(kFileFormatV1) +
                   " file sizes every convolution's workspace as value x the larger of its input "
                   "and output bytes; " +
                   std::string(kFileFormat) +
                   " sizes spatial and pointwise/depthwise convolutions apart, by input + output "
                   "+ weight bytes (docs/stacks.md). A non-zero old value has no exact "
                   "equivalent: run `memest calibrate` on the same rows again");
  }
  StackCoefficient out = c;
  out.source += " (read from a " + std::string(kFileFormatV1) +
                " file: 0 for every convolution, so 0 for each kind)";
  return out;
}

// `v1`: a memest-stack/1 file's stack (one conv_workspace coefficient).
Result<StackProfile> ReadStack(const JsonFields& f, const json& s, const std::string& at,
                               bool v1 = false) {
  std::string where = at;
  if (!s.is_object()) return f.Error(where + ": not an object");
  MEMEST_RETURN_IF_ERROR(f.CheckKeys(s, v1 ? kStackKeysV1 : kStackKeys, where));
  StackProfile st;
  MEMEST_ASSIGN_OR_RETURN(st.name, f.String(s, "name", where));
  if (st.name.empty() || st.name != ToLowerAscii(st.name) || st.name.size() > 64) {
    return f.Error(where + ": name must be non-empty lower case, at most 64 characters");
  }
  where += " (" + st.name + ")";
  MEMEST_ASSIGN_OR_RETURN(st.display_name, f.String(s, "display_name", where));
  MEMEST_ASSIGN_OR_RETURN(st.gpu, f.String(s, "gpu", where));
  st.gpu = ToLowerAscii(st.gpu);
  MEMEST_ASSIGN_OR_RETURN(st.software, ReadSoftware(f, s, where));
  MEMEST_ASSIGN_OR_RETURN(st.lazy_loading, f.Bool(s, "lazy_loading", where));
  MEMEST_ASSIGN_OR_RETURN(st.cuda_context, f.Bytes(s, "cuda_context", where));
  MEMEST_ASSIGN_OR_RETURN(st.library_memory, f.Bytes(s, "library_memory", where));
  for (const ProfileValue* v : {&st.cuda_context, &st.library_memory}) {
    if (v->bytes > kMaxStackBytes) return f.Error(where + ": a byte value above 64 GiB");
  }
  MEMEST_ASSIGN_OR_RETURN(st.conv_workspace, ReadCoefficient(f, s, "conv_workspace", where));
  if (v1) {
    MEMEST_ASSIGN_OR_RETURN(st.conv_workspace, ConvWorkspaceFromV1(f, st.conv_workspace, where));
    st.conv_workspace_pointwise = st.conv_workspace;
  } else {
    MEMEST_ASSIGN_OR_RETURN(st.conv_workspace_pointwise,
                            ReadCoefficient(f, s, "conv_workspace_pointwise", where));
  }
  if (s.contains("conv_weight_gradient_extra")) {  // optional: absent in files before 2026-12-08
    MEMEST_ASSIGN_OR_RETURN(st.conv_weight_gradient_extra,
                            f.Bytes(s, "conv_weight_gradient_extra", where));
    if (st.conv_weight_gradient_extra.bytes > kMaxStackBytes) {
      return f.Error(where + ": a byte value above 64 GiB");
    }
  } else {
    st.conv_weight_gradient_extra = {
        0, "absent from the stack file: 0, no call takes more than the rule", false};
  }
  if (s.contains("rnn_workspace")) {  // optional: files written before it was measured lack it
    MEMEST_ASSIGN_OR_RETURN(st.rnn_workspace, ReadCoefficient(f, s, "rnn_workspace", where));
  } else {
    st.rnn_workspace = {0, "not in the stack file: no recurrent-layer workspace", false};
  }
  MEMEST_ASSIGN_OR_RETURN(st.bands, ReadBands(f, s, where));
  if (auto c = s.find("calibration"); c != s.end()) {
    if (!c->is_object()) return f.Error(where + ".calibration: not an object");
    st.calibration_json = c->dump();
  }
  if (!st.gpu.empty()) {
    if (auto gpu = FindGpuProfile(st.gpu); !gpu.ok()) {
      return f.Error(where + ".gpu: " + gpu.status().message());
    }
  }
  if (!v1) {
    MEMEST_ASSIGN_OR_RETURN(st.also_measured_on, ReadReplicates(f, s, st.gpu, where));
  }
  return st;
}

Result<json> ParseJson(const JsonFields& f, std::string_view text, const std::string& where) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return f.Error(where + ": not valid JSON");
  if (!doc.is_object()) return f.Error(where + ": top level must be an object");
  return doc;
}

Result<std::vector<StackProfile>> ParseTable(std::string_view text) {
  const JsonFields f(ErrorCode::kInternal);
  MEMEST_ASSIGN_OR_RETURN(json doc, ParseJson(f, text, "stacks.json"));
  MEMEST_RETURN_IF_ERROR(f.CheckKeys(doc, {"format", "about", "stacks"}, "top level"));
  MEMEST_ASSIGN_OR_RETURN(std::string format, f.String(doc, "format", "top level"));
  if (format != kTableFormat) return f.Error("format is '" + format + "'");
  auto list = doc.find("stacks");
  if (list == doc.end() || !list->is_array() || list->empty()) {
    return f.Error("'stacks' must be a non-empty array");
  }
  std::vector<StackProfile> out;
  for (size_t i = 0; i < list->size(); ++i) {
    MEMEST_ASSIGN_OR_RETURN(StackProfile s,
                            ReadStack(f, (*list)[i], "stacks[" + std::to_string(i) + "]"));
    for (const StackProfile& earlier : out) {
      if (earlier.name == s.name) return f.Error("duplicate stack name '" + s.name + "'");
    }
    out.push_back(std::move(s));
  }
  if (!out.front().gpu.empty()) return f.Error("the first stack (the default) must be for any GPU");
  return out;
}

// The embedded stacks one by one, each read as ParseTable reads it (errors name it
// stacks[index]) when first looked up. The table's own checks -- the first stack for any GPU, no
// name twice -- are ParseTable's, which the unit tests run.
const EmbeddedEntries<StackProfile>& EmbeddedStacks() {
  static const auto* const entries = new EmbeddedEntries<StackProfile>(  // never destroyed
      kStacksJsonCount, kStacksJsonNames, kStacksJsonElements,
      [](const json& s, size_t index) {
        return ReadStack(JsonFields(ErrorCode::kInternal), s,
                         "stacks[" + std::to_string(index) + "]", /*v1=*/false);
      },
      "embedded stacks.json");
  return *entries;
}

const EmbeddedTable<StackProfile>& GetTable() {
  static const auto* const table =
      MakeEmbeddedTable(ParseTable(kStacksJson), "embedded stacks.json");
  return *table;
}

}  // namespace
}  // namespace memest::base

namespace memest {

const std::vector<StackProfile>& StackProfiles() { return base::GetTable().rows; }

Result<StackProfile> FindStackProfile(std::string_view name) {
  if (const auto* stack = base::EmbeddedStacks().Find(base::ToLowerAscii(name))) return *stack;
  // Not a name the table has: its error, if it has one, else the names it has.
  const auto& table = base::GetTable();
  if (!table.status.ok()) return table.status;
  std::string known;
  for (const StackProfile& s : table.rows) known += (known.empty() ? "" : ", ") + s.name;
  return NotFound("unknown stack '" + std::string(name) + "'; known stacks: " + known +
                  " (or a file written by memest calibrate: --stack-file)");
}

Result<StackProfile> ResolveStack(std::string_view name) {
  if (!name.empty()) return FindStackProfile(name);
  return base::EmbeddedStacks().At(0);  // the default (StackTest parses the table: it checks it)
}

Result<StackProfile> ParseStackProfile(std::string_view json_text, const std::string& where) {
  const base::JsonFields f(ErrorCode::kInvalidArgument);
  MEMEST_ASSIGN_OR_RETURN(nlohmann::json doc, base::ParseJson(f, json_text, where));
  MEMEST_RETURN_IF_ERROR(f.CheckKeys(doc, {"format", "stack"}, where));
  MEMEST_ASSIGN_OR_RETURN(std::string format, f.String(doc, "format", where));
  const bool v1 = format == base::kFileFormatV1;
  if (format != base::kFileFormat && !v1) {
    return f.Error(where + ": format is '" + format + "', expected '" +
                   std::string(base::kFileFormat) + "'");
  }
  auto s = doc.find("stack");
  if (s == doc.end()) return f.Error(where + ": no 'stack' object");
  return base::ReadStack(f, *s, where + ": stack", v1);
}

Result<StackProfile> LoadStackProfile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound("stack file '" + path + "' not found");
  if (!S_ISREG(st.st_mode)) return InvalidArgument("'" + path + "' is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > base::kMaxStackFileBytes) {
    return InvalidArgument("'" + path + "' is larger than 1 MiB: not a stack file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("stack file '" + path + "' cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseStackProfile(text.str(), path);
}

namespace {

nlohmann::json CoefficientJson(const StackCoefficient& c) {
  return {{"value", c.value}, {"source", c.source}, {"calibrated", c.calibrated}};
}

}  // namespace

std::string StackProfileToJson(const StackProfile& s) {
  using nlohmann::json;
  json bands = json::object();
  for (const auto& [backend, b] : s.bands) {
    bands[backend] = {{"low", b.low},
                      {"high", b.high},
                      {"coverage", b.coverage},
                      {"rows", b.rows},
                      {"source", b.source}};
  }
  json software = json::object();
  for (const auto& [k, v] : s.software) software[k] = v;
  json replicates = json::array();
  for (const StackReplicate& r : s.also_measured_on) {
    replicates.push_back({{"gpu", r.gpu}, {"source", r.source}});
  }
  json stack = {{"name", s.name},
                {"display_name", s.display_name},
                {"gpu", s.gpu},
                {"software", software},
                {"lazy_loading", s.lazy_loading},
                {"cuda_context", base::BytesJson(s.cuda_context)},
                {"library_memory", base::BytesJson(s.library_memory)},
                {"conv_workspace", CoefficientJson(s.conv_workspace)},
                {"conv_workspace_pointwise", CoefficientJson(s.conv_workspace_pointwise)},
                {"conv_weight_gradient_extra", base::BytesJson(s.conv_weight_gradient_extra)},
                {"rnn_workspace", CoefficientJson(s.rnn_workspace)},
                {"bands", bands}};
  if (!replicates.empty()) stack["also_measured_on"] = replicates;
  if (!s.calibration_json.empty()) {
    json c = json::parse(s.calibration_json, nullptr, /*allow_exceptions=*/false);
    if (!c.is_discarded()) stack["calibration"] = c;
  }
  json doc = {{"format", base::kFileFormat}, {"stack", stack}};
  return doc.dump(2) + "\n";
}

}  // namespace memest
