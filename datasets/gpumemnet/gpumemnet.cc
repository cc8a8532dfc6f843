// datasets/gpumemnet/gpumemnet.cc -- see gpumemnet.h for the policy.
#include "datasets/gpumemnet/gpumemnet.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "base/sha256.h"
#include "datasets/zoo/graph_writer.h"
#include "datasets/zoo/layers.h"
#include "memest/measured_row.h"

namespace memest::gpumemnet {
namespace {

using zoo::GraphWriter;

// One CSV record (RFC 4180: quoted fields may hold commas and doubled quotes). Returns false at
// the end of input.
bool NextRecord(std::istream& in, std::vector<std::string>* fields) {
  fields->clear();
  std::string field;
  bool quoted = false, any = false;
  char ch;
  while (in.get(ch)) {
    any = true;
    if (quoted) {
      if (ch == '"') {
        if (in.peek() == '"') {
          in.get(ch);
          field.push_back('"');
        } else {
          quoted = false;
        }
      } else {
        field.push_back(ch);
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      fields->push_back(std::move(field));
      field.clear();
    } else if (ch == '\n') {
      break;
    } else if (ch != '\r') {
      field.push_back(ch);
    }
  }
  if (!any) return false;
  fields->push_back(std::move(field));
  return true;
}

Result<int64_t> ParseInt(const std::string& s, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || errno != 0 || *end != '\0')
    return InvalidModel(what + ": not an integer: '" + s + "'");
  return static_cast<int64_t>(v);
}

// "[('linear', 629, 792540), ('ReLU', 629, 0), ...]"
Result<std::vector<Layer>> ParseLayers(const std::string& s) {
  std::vector<Layer> layers;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
  };
  auto read_int = [&](int64_t* v) -> bool {
    skip_space();
    size_t j = i;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '-')) ++j;
    if (j == i) return false;
    *v = std::strtoll(s.substr(i, j - i).c_str(), nullptr, 10);
    i = j;
    return true;
  };
  if (s.empty() || s[0] != '[') return InvalidModel("layer list does not start with '['");
  i = 1;
  for (;;) {
    skip_space();
    if (i >= s.size()) return InvalidModel("layer list is not closed");
    if (s[i] == ']') break;
    if (s[i] != '(') return InvalidModel("layer list: expected '(' at offset " + std::to_string(i));
    ++i;
    skip_space();
    if (i >= s.size() || s[i] != '\'') return InvalidModel("layer list: expected a quoted type");
    const size_t close = s.find('\'', i + 1);
    if (close == std::string::npos) return InvalidModel("layer list: unterminated quote");
    Layer l;
    l.type = s.substr(i + 1, close - i - 1);
    i = close + 1;
    if (!read_int(&l.features) || !read_int(&l.params)) {
      return InvalidModel("layer list: bad numbers in layer '" + l.type + "'");
    }
    skip_space();
    if (i >= s.size() || s[i] != ')') return InvalidModel("layer list: expected ')'");
    ++i;
    layers.push_back(std::move(l));
  }
  return layers;
}

// "input:2346_output:197_depth:2_arch:pyramid_batch:996_act:relu_dropout:0.33_dropout:True_
// batchnorm:True.out": fields are "key:value" joined by '_'; a piece without ':' continues the
// previous value ("act:leaky_relu").
Status ParseFilename(Row* row) {
  std::string stem = row->filename;
  if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".out") == 0)
    stem.resize(stem.size() - 4);
  std::vector<std::pair<std::string, std::string>> kv;
  std::stringstream ss(stem);
  std::string piece;
  while (std::getline(ss, piece, '_')) {
    const size_t colon = piece.find(':');
    if (colon == std::string::npos) {
      if (kv.empty()) return InvalidModel("Filename '" + row->filename + "' is not key:value");
      kv.back().second += "_" + piece;
    } else {
      kv.emplace_back(piece.substr(0, colon), piece.substr(colon + 1));
    }
  }
  int dropout_seen = 0;
  for (const auto& [k, v] : kv) {
    const std::string what = "Filename '" + row->filename + "' " + k;
    if (k == "input") {
      MEMEST_ASSIGN_OR_RETURN(row->input, ParseInt(v, what));
    } else if (k == "output") {
      MEMEST_ASSIGN_OR_RETURN(row->output, ParseInt(v, what));
    } else if (k == "depth") {
      MEMEST_ASSIGN_OR_RETURN(row->depth, ParseInt(v, what));
    } else if (k == "batch") {
      MEMEST_ASSIGN_OR_RETURN(row->batch, ParseInt(v, what));
    } else if (k == "arch") {
      row->arch = v;
    } else if (k == "act") {
      row->act = v;
    } else if (k == "dropout" && dropout_seen++ == 0) {
      char* end = nullptr;
      row->dropout_rate = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') return InvalidModel(what + ": not a number: '" + v + "'");
    } else if (k == "dropout") {
      row->dropout = v == "True";
    } else if (k == "batchnorm") {
      row->batchnorm = v == "True";
    } else {
      return InvalidModel(what + ": unknown field");
    }
  }
  if (row->input <= 0 || row->output <= 0 || row->depth <= 0 || row->batch <= 0 ||
      row->arch.empty()) {
    return InvalidModel("Filename '" + row->filename + "' lacks input/output/depth/arch/batch");
  }
  return Status::Ok();
}

// CSV activation type -> zoo activation name ("" when not a hidden activation).
std::string ActivationOf(const std::string& type) {
  static const auto* kMap =
      new std::map<std::string, std::string>{{"ReLU", "relu"},         {"LeakyReLU", "leaky_relu"},
                                             {"PReLU", "prelu"},       {"ELU", "elu"},
                                             {"SELU", "selu"},         {"Tanh", "tanh"},
                                             {"Softplus", "softplus"}, {"SiLU", "silu"},
                                             {"Mish", "mish"},         {"GELU", "gelu"},
                                             {"Identity", "identity"}, {"Sigmoid", "sigmoid"}};
  auto it = kMap->find(type);
  return it == kMap->end() ? "" : it->second;
}

// Filename act -> CSV type of the hidden activation.
std::string HiddenTypeOf(const std::string& act) {
  static const auto* kMap =
      new std::map<std::string, std::string>{{"relu", "ReLU"},         {"leaky_relu", "LeakyReLU"},
                                             {"prelu", "PReLU"},       {"elu", "ELU"},
                                             {"selu", "SELU"},         {"tanh", "Tanh"},
                                             {"softplus", "Softplus"}, {"swish", "SiLU"},
                                             {"mish", "Mish"},         {"gelu", "GELU"},
                                             {"identity", "Identity"}};
  auto it = kMap->find(act);
  return it == kMap->end() ? "" : it->second;
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

Result<std::vector<Row>> ReadCsv(const std::string& path, int step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + path + "'");
  const std::string base = path.substr(path.find_last_of('/') + 1);
  std::vector<std::string> header, fields;
  if (!NextRecord(in, &header)) return InvalidModel(path + ": empty file");
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* need : {"Filename", "Activations-Params", "Total Parameters", "Batch Size",
                           "Max GPU Memory (MiB)"}) {
    if (!col.count(need)) return InvalidModel(path + ": no column '" + std::string(need) + "'");
  }
  std::vector<Row> rows;
  while (NextRecord(in, &fields)) {
    if (fields.size() == 1 && fields[0].empty()) continue;  // trailing newline
    const int n = static_cast<int>(rows.size()) + 1;
    const std::string where = base + " row " + std::to_string(n);
    if (fields.size() != header.size()) {
      return InvalidModel(where + ": " + std::to_string(fields.size()) + " fields, header has " +
                          std::to_string(header.size()));
    }
    Row r;
    r.index = (step - 1) * kRowsPerFile + n - 1;
    r.csv_file = base;
    r.csv_row = n;
    r.filename = fields[col["Filename"]];
    Status st = ParseFilename(&r);
    if (!st.ok()) return st.WithContext(where);
    auto layers = ParseLayers(fields[col["Activations-Params"]]);
    if (!layers.ok()) return layers.status().WithContext(where);
    r.layers = std::move(layers).value();
    MEMEST_ASSIGN_OR_RETURN(r.total_parameters,
                            ParseInt(fields[col["Total Parameters"]], where + " Total Parameters"));
    MEMEST_ASSIGN_OR_RETURN(r.max_memory_mib, ParseInt(fields[col["Max GPU Memory (MiB)"]],
                                                       where + " Max GPU Memory (MiB)"));
    MEMEST_ASSIGN_OR_RETURN(int64_t batch,
                            ParseInt(fields[col["Batch Size"]], where + " Batch Size"));
    if (batch != r.batch) {
      return InvalidModel(where + ": Batch Size " + std::to_string(batch) +
                          " differs from the Filename's batch " + std::to_string(r.batch));
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

Result<std::vector<Row>> ReadAll(const std::string& dir) {
  std::vector<Row> all;
  for (int step = 1; step <= 2; ++step) {
    MEMEST_ASSIGN_OR_RETURN(auto rows, ReadCsv(dir + "/" + kCsvFiles[step - 1], step));
    if (rows.size() != static_cast<size_t>(kRowsPerFile)) {
      return InvalidModel(std::string(kCsvFiles[step - 1]) + ": expected " +
                          std::to_string(kRowsPerFile) + " rows, found " +
                          std::to_string(rows.size()));
    }
    for (auto& r : rows) all.push_back(std::move(r));
  }
  return all;
}

Result<std::string> FindDataDir(const std::vector<std::string>& candidates) {
  for (const auto& dir : candidates) {
    if (FileExists(dir + "/" + kCsvFiles[0]) && FileExists(dir + "/" + kCsvFiles[1])) return dir;
  }
  std::string tried;
  for (const auto& dir : candidates) tried += (tried.empty() ? "" : ", ") + dir;
  return NotFound("GPUMemNet CSVs (mlp_data_step1.csv, mlp_data_step2.csv) not found in: " + tried);
}

Result<Rebuilt> Rebuild(const Row& row) {
  const std::string where = row.csv_file + " row " + std::to_string(row.csv_row);
  auto bad = [&](const std::string& msg) { return InvalidModel(where + ": " + msg); };
  const bool step2 = row.index >= kRowsPerFile;
  char name[32];
  std::snprintf(name, sizeof(name), "gpumemnet_%04d", row.index);
  GraphWriter w(name);
  std::string x = w.Input("input", zoo::kFloat, {zoo::kBatch, row.input});
  if (step2) {
    w.SetScope("flatten");
    x = w.Op("Reshape", {x, w.Int64s({0, row.input})});
  }
  const std::string hidden_type = step2 ? HiddenTypeOf(row.act) : "ReLU";
  if (hidden_type.empty()) return bad("unknown activation '" + row.act + "' in the Filename");
  const float ratio = static_cast<float>(row.dropout_rate);
  int64_t in = row.input, linears = 0, bns = 0, dropouts = 0, prelus = 0, csv_sum = 0;
  Rebuilt out;
  for (size_t i = 0; i < row.layers.size(); ++i) {
    const Layer& l = row.layers[i];
    const bool last = i + 1 == row.layers.size();
    const std::string scope = "model." + std::to_string(i);
    w.SetScope(scope);
    csv_sum += l.params;
    if (l.type == "linear") {
      if (l.params != in * l.features + l.features) {
        return bad("Linear(" + std::to_string(in) + ", " + std::to_string(l.features) + ") has " +
                   std::to_string(l.params) + " parameters in the CSV");
      }
      x = zoo::Linear2d(w, x, in, l.features);
      in = l.features;
      ++linears;
    } else if (l.type == "batch_normalization") {
      if (l.features != in || l.params != 2 * in)
        return bad("BatchNorm1d does not match its input");
      x = zoo::BatchNorm(w, x, in);
      ++bns;
    } else if (l.type == "dropout") {
      if (!row.dropout) return bad("Dropout layer but the Filename says dropout:False");
      x = zoo::Dropout(w, x, ratio);
      ++dropouts;
    } else if (l.type == "Softmax") {
      if (!last) return bad("Softmax before the last layer");
      x = w.Op("Softmax", {x}, {zoo::Attr("axis", int64_t{1})});
    } else if (const std::string act = ActivationOf(l.type); !act.empty()) {
      if (l.params != 0) return bad(l.type + " with parameters in the CSV");
      if (!last && l.type != hidden_type) {
        return bad("hidden activation " + l.type + " but the Filename says act:" + row.act);
      }
      if (last && l.type != "Sigmoid" && l.type != "Identity") {
        return bad("output activation " + l.type);
      }
      x = zoo::Activation(w, act, x);
      prelus += act == "prelu";
    } else {
      return bad("unknown layer type '" + l.type + "'");
    }
  }
  const int64_t extra_linear = row.arch == "bottleneck" ? 1 : 0;
  if (linears != row.depth + 1 + extra_linear) {
    return bad(std::to_string(linears) + " Linear layers for depth " + std::to_string(row.depth) +
               " (" + row.arch + ")");
  }
  if (in != row.output) return bad("last Linear width differs from the Filename's output");
  if ((bns > 0) != (step2 && row.batchnorm)) return bad("BatchNorm layers disagree with Filename");
  if ((dropouts > 0) != (step2 && row.dropout)) return bad("Dropout layers disagree with Filename");
  if (csv_sum != row.total_parameters) return bad("layer parameters do not sum to the total");
  w.SetScope("");
  x = w.Rename(x, "output");
  w.Output(x, zoo::kFloat, {zoo::kBatch, row.output});
  out.torch_parameters = w.parameter_elements();
  out.model = std::move(w).Finish();
  out.bytes = zoo::SerializeModel(out.model);
  out.sha256 = base::Sha256Hex(out.bytes);
  out.batch = row.batch;
  out.measured_mib = row.max_memory_mib;
  out.csv_parameters = row.total_parameters;
  out.prelu_layers = prelus;
  return out;
}

// The run every GPUMemNet row records: a training step of Adam in fp32 at the row's batch; the
// script trained for 60 s, an iteration count it did not record.
MeasuredConfig ConfigOf(const Rebuilt& rebuilt) {
  MeasuredConfig c;
  c.options.mode = Mode::kTrain;
  c.options.batch = rebuilt.batch;
  c.options.optimizer = Optimizer::kAdam;
  c.options.weight_decay = 0.0;
  c.options.precision = Precision::kFp32;
  c.options.loss = Loss::kAuto;
  c.iterations = std::nullopt;
  return c;
}

std::string KnownIssue(const Row& row) {
  if (row.index < kRowsPerFile && row.output == 1) {
    return "GPUMemNet step-1 script: BCEWithLogitsLoss got int64 labels [N] for outputs [N, 1] "
           "and raised at the first loss; the peak covers weights and one forward pass, not a "
           "training step";
  }
  return "";
}

nlohmann::json MeasuredRow(const Row& row, const Rebuilt& rebuilt) {
  using nlohmann::json;
  const MeasuredConfig config = ConfigOf(rebuilt);
  std::string stem = row.filename;
  if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".out") == 0)
    stem.resize(stem.size() - 4);
  json j;
  j["schema"] = kMeasuredRowSchema;
  j["id"] = MeasuredRowId(config, rebuilt.sha256);
  j["model"] = {{"path", "gpumemnet:" + std::to_string(row.index)},
                {"sha256", rebuilt.sha256},
                {"name", stem},
                {"family", "gpumemnet"}};
  j["config"] = json::parse(MeasuredConfigJson(config));
  j["device"] = {{"kind", "cuda"},      {"name", kDevice},   {"total_memory", nullptr},
                 {"capability", "8.0"}, {"driver", nullptr}, {"cuda", nullptr},
                 {"torch", nullptr}};
  j["provenance"] = {{"tool", "GPUMemNet"},
                     {"git_commit", nullptr},
                     {"time_utc", nullptr},
                     {"host", nullptr},
                     {"source", std::string(kCitation) + "; " + row.csv_file + " data row " +
                                    std::to_string(row.csv_row)}};
  const std::string issue = KnownIssue(row);
  j["status"] = issue.empty() ? "ok" : "error";
  j["error"] = issue.empty() ? json(nullptr) : json(issue);
  j["peaks"] = {{"tensor", nullptr},
                {"allocated", nullptr},
                {"reserved", nullptr},
                {"device", row.max_memory_mib * int64_t{1048576}}};
  j["context_bytes"] = nullptr;
  j["phases"] = nullptr;
  j["iterations"] = nullptr;
  j["used_for"] = json::array();
  return j;
}

}  // namespace memest::gpumemnet
