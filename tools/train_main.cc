// tools/train_main.cc -- memest-train: trains the learned backend's MLP ensemble and writes its
// weights file (docs/learned.md).
//
//   memest-train --gpumemnet [--rows FILE.jsonl ...] --out learned/weights.json --seed 1
//
// Steps: read the measured rows (GPUMemNet's 6,000 MLP rows rebuilt as ONNX by
// datasets/gpumemnet/, plus any --rows files); compute each row's features (learned/features.h);
// split by group, never by row: the --holdout rule (default arch=gradual) picks the test rows;
// each ensemble member validates on its own random 20 % of the remaining groups; train
// (learned/mlp.h); calibrate the interval margins on out-of-group predictions; evaluate on the
// held-out rows; write the weights with the identity of the training data and the metrics.
// Deterministic for a seed. Exit codes: 0 ok, 2 usage, 3 data error, 4 internal.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "datasets/gpumemnet/gpumemnet.h"
#include "learned/features.h"
#include "learned/learned.h"
#include "learned/mlp.h"
#include "memest/memest.h"
#include "tools/eval/evaluate.h"
#include "tools/eval/metrics.h"
#include "tools/eval/rows.h"
#include "tools/train_device.h"

namespace memest {
namespace {

namespace fs = std::filesystem;
using learned::Features;

constexpr double kValidationShare = 0.2;  // of the non-test groups, per member

struct Sample {
  std::string id;     // row id (measured-row schema), or model path + config when absent
  std::string model;  // "gpumemnet:<index>" or a file path
  std::map<std::string, std::string> attrs;  // source, arch, act, depth, step, family, name
  std::string group;                         // validation/test unit
  Options options;
  Features features;
  uint64_t measured = 0;  // device bytes
  bool test = false;
};

// One holdout clause: key=value, or key=lo-hi for numeric attributes.
struct Clause {
  std::string key, value;
  std::optional<std::pair<int64_t, int64_t>> range;
};

Result<Clause> ParseClause(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return InvalidArgument("--holdout expects KEY=VALUE or KEY=LO-HI, got '" + text + "'");
  }
  Clause c{text.substr(0, eq), text.substr(eq + 1), std::nullopt};
  const size_t dash = c.value.find('-');
  if (dash != std::string::npos && dash > 0) {
    try {
      size_t a = 0, b = 0;
      const int64_t lo = std::stoll(c.value.substr(0, dash), &a);
      const int64_t hi = std::stoll(c.value.substr(dash + 1), &b);
      if (a == dash && b == c.value.size() - dash - 1) c.range = std::make_pair(lo, hi);
    } catch (const std::exception&) {
    }
  }
  return c;
}

bool Matches(const Clause& c, const Sample& s) {
  auto it = s.attrs.find(c.key);
  if (it == s.attrs.end()) return false;
  if (!c.range) return it->second == c.value;
  try {
    const int64_t v = std::stoll(it->second);
    return v >= c.range->first && v <= c.range->second;
  } catch (const std::exception&) {
    return false;
  }
}

Result<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Mib(uint64_t bytes) {
  return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / 1048576.0);
}

std::string Pct(std::optional<double> v) {
  return v ? fmt::format("{:.1f} %", 100.0 * *v) : std::string("-");
}

nlohmann::json StatsJson(const eval::ErrorStats& s) {
  auto opt = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"n", s.n},
          {"median", opt(s.median)},
          {"mean", opt(s.mean)},
          {"p90", opt(s.p90)},
          {"max", opt(s.max)},
          {"under", opt(s.under)},
          {"within10", opt(s.within10)},
          {"bin1", opt(s.bin1)},
          {"bin8", opt(s.bin8)}};
}

// Nearest-rank quantile q in (0, 1] of `v` (0 when empty).
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  k = std::clamp<size_t>(k, 1, v.size());
  return v[k - 1];
}

struct Args {
  bool gpumemnet = false;
  std::string gpumemnet_dir;
  std::vector<std::string> rows;
  std::string out;
  uint64_t seed = 1;
  int members = 5;
  std::vector<std::string> holdout;
  std::string root = ".";
  std::string report;
  learned::TrainConfig config;
};

class Trainer {
 public:
  explicit Trainer(Args args) : args_(std::move(args)) {}
  int Run();

 private:
  Status LoadGpumemnet();
  Status LoadRowsFile(const std::string& path);
  Status AddSample(Sample s, const Model& model);
  void Split();
  std::vector<learned::MemberSplit> MemberSplits() const;
  nlohmann::json Evaluate(const learned::Network& net);
  nlohmann::json Bundled(const learned::Network& net);
  int CheckArgs(std::vector<std::string>* rules);
  int LoadData();
  learned::Dataset MakeDataset() const;
  void SetDomainAndMargins(const std::vector<learned::MemberSplit>& splits,
                           learned::Network* net) const;
  void LogMembers(const learned::Network& net, const std::vector<learned::MemberSplit>& splits);
  nlohmann::json Checks(const learned::Network& net) const;
  std::string Command() const;
  std::string RowIdsHash(const std::vector<int>& rows) const;
  nlohmann::json TrainingJson(const std::vector<std::string>& rules, double secs_features,
                              double secs_train) const;

  Args args_;
  std::vector<Sample> samples_;
  nlohmann::json inputs_ = nlohmann::json::array();  // files and their sha256
  std::map<int, std::string> gpumemnet_bytes_;
  std::vector<Clause> clauses_;
  std::vector<std::string> group_names_;  // sorted distinct groups of non-test rows
  std::vector<int> pool_, test_;          // sample indices
  std::ostringstream log_;
};

Status Trainer::AddSample(Sample s, const Model& model) {
  auto features = learned::ComputeFeatures(model, s.options);
  if (!features.ok()) return features.status().WithContext(s.model);
  s.features = std::move(features).value();
  samples_.push_back(std::move(s));
  return Status::Ok();
}

Status Trainer::LoadGpumemnet() {
  MEMEST_ASSIGN_OR_RETURN(eval::GpumemnetData data,
                          eval::LoadGpumemnet(args_.gpumemnet_dir, args_.root));
  MEMEST_ASSIGN_OR_RETURN(std::vector<gpumemnet::Row> csv_rows, gpumemnet::ReadAll(data.dir));
  for (const char* file : gpumemnet::kCsvFiles) {
    MEMEST_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(data.dir + "/" + file));
    inputs_.push_back({{"file", std::string("gpumemnet/") + file},
                       {"sha256", base::Sha256Hex(bytes)},
                       {"bytes", bytes.size()}});
  }
  int skipped = 0;
  for (const eval::MeasuredRow& row : data.rows) {
    const int index = std::stoi(row.model_path.substr(std::string("gpumemnet:").size()));
    const gpumemnet::Row& r = csv_rows[static_cast<size_t>(index)];
    if (row.status != eval::RowStatus::kOk || !row.peaks.device) {
      ++skipped;
      continue;
    }
    Sample s;
    s.id = row.id;
    s.model = row.model_path;
    s.measured = *row.peaks.device;
    s.options = row.options;
    MEMEST_ASSIGN_OR_RETURN(const GpuProfile gpu, FindGpuProfileForDevice(row.device_name));
    s.options.gpu = gpu.name;
    s.attrs = {{"source", "gpumemnet"},
               {"family", "gpumemnet"},
               {"name", row.model_name},
               {"arch", r.arch},
               {"act", r.act},
               {"depth", std::to_string(r.depth)},
               {"step", std::to_string(index < gpumemnet::kRowsPerFile ? 1 : 2)},
               {"index", std::to_string(index)}};
    s.group = "gpumemnet/step" + s.attrs["step"] + "/" + r.arch + "/" + r.act + "/depth" +
              s.attrs["depth"];
    const std::string& bytes = data.bytes.at(index);
    MEMEST_ASSIGN_OR_RETURN(auto model, LoadModelFromBytes(bytes, "/", row.model_path));
    MEMEST_RETURN_IF_ERROR(AddSample(std::move(s), *model));
    if (samples_.size() % 1000 == 0) {
      std::cerr << "memest-train: features of " << samples_.size() << " rows\n";
    }
  }
  gpumemnet_bytes_ = std::move(data.bytes);
  log_ << "GPUMemNet: " << data.rows.size() << " rows from " << data.dir << ", " << skipped
       << " skipped (status not ok: the known step-1 one-output issue)\n";
  return Status::Ok();
}

Status Trainer::LoadRowsFile(const std::string& path) {
  MEMEST_ASSIGN_OR_RETURN(std::string text, ReadFileBytes(path));
  inputs_.push_back({{"file", path}, {"sha256", base::Sha256Hex(text)}, {"bytes", text.size()}});
  MEMEST_ASSIGN_OR_RETURN(std::vector<eval::MeasuredRow> rows, ParseMeasuredRows(text, path));
  int used = 0, skipped = 0;
  for (const eval::MeasuredRow& row : rows) {
    if (row.status != eval::RowStatus::kOk || !row.peaks.device || row.device_kind != "cuda") {
      ++skipped;
      continue;
    }
    Sample s;
    s.model = row.model_path;
    s.measured = *row.peaks.device;
    s.options = row.options;
    MEMEST_ASSIGN_OR_RETURN(const GpuProfile gpu, FindGpuProfileForDevice(row.device_name));
    s.options.gpu = gpu.name;
    s.id = row.id.empty() ? row.model_path + "@" + std::to_string(row.line) : row.id;
    s.attrs = {{"source", fs::path(path).filename().string()},
               {"family", row.family},
               {"name", row.model_name}};
    s.group = row.family + "/" + row.model_name;
    std::shared_ptr<const Model> model;
    if (row.model_path.rfind("gpumemnet:", 0) == 0) {
      const int index = std::stoi(row.model_path.substr(10));
      auto it = gpumemnet_bytes_.find(index);
      if (it == gpumemnet_bytes_.end()) {
        return InvalidArgument(path + ":" + std::to_string(row.line) + ": " + row.model_path +
                               " needs --gpumemnet");
      }
      MEMEST_ASSIGN_OR_RETURN(model, LoadModelFromBytes(it->second, "/", row.model_path));
    } else {
      fs::path p(row.model_path);
      if (!p.is_absolute()) {
        const fs::path from_root = fs::path(args_.root) / p;
        p = fs::exists(from_root) ? from_root : fs::path(path).parent_path() / p;
      }
      MEMEST_ASSIGN_OR_RETURN(model, LoadModel(p.string()));
    }
    MEMEST_RETURN_IF_ERROR(AddSample(std::move(s), *model));
    ++used;
  }
  log_ << path << ": " << used << " rows used, " << skipped
       << " skipped (not ok / no device peak)\n";
  return Status::Ok();
}

void Trainer::Split() {
  std::set<std::string> groups;
  for (size_t i = 0; i < samples_.size(); ++i) {
    Sample& s = samples_[i];
    s.test = std::any_of(clauses_.begin(), clauses_.end(),
                         [&](const Clause& c) { return Matches(c, s); });
    (s.test ? test_ : pool_).push_back(static_cast<int>(i));
    if (!s.test) groups.insert(s.group);
  }
  group_names_.assign(groups.begin(), groups.end());
}

std::vector<learned::MemberSplit> Trainer::MemberSplits() const {
  const size_t n_val = std::max<size_t>(
      1,
      static_cast<size_t>(std::ceil(kValidationShare * static_cast<double>(group_names_.size()))));
  return learned::GroupMemberSplits(
      pool_, [&](int i) -> const std::string& { return samples_[static_cast<size_t>(i)].group; },
      group_names_, std::min(n_val, group_names_.size() - 1), args_.members, args_.seed);
}

nlohmann::json Trainer::Evaluate(const learned::Network& net) {
  struct Set {
    std::vector<eval::Pair> learned, symbolic, analytical, high;
    int covered = 0;
  };
  std::map<std::string, Set> sets;  // "test", "pool"
  std::map<std::string, Set> test_by_group;
  std::vector<std::pair<double, const Sample*>> worst;  // test rows by absolute relative error
  for (const Sample& s : samples_) {
    const Estimate e = learned::EstimateFromFeatures(net, s.features);
    if (s.test) worst.emplace_back(eval::AbsRelativeError({e.peak_device, s.measured}), &s);
    Set& set = sets[s.test ? "test" : "train"];
    set.learned.push_back({e.peak_device, s.measured});
    set.symbolic.push_back({s.features.symbolic.peak_device, s.measured});
    set.analytical.push_back({s.features.analytical.peak_device, s.measured});
    set.high.push_back({*e.device_high, s.measured});
    set.covered += *e.device_low <= s.measured && s.measured <= *e.device_high;
    if (s.test) {
      auto it = s.attrs.find("act");
      test_by_group[it == s.attrs.end() ? s.group : it->second].learned.push_back(
          {e.peak_device, s.measured});
    }
  }
  nlohmann::json out = nlohmann::json::object();
  for (auto& [name, set] : sets) {
    const eval::ErrorStats l = eval::Summarize(set.learned);
    nlohmann::json j = StatsJson(l);
    j["interval_coverage"] = set.learned.empty() ? 0.0
                                                 : static_cast<double>(set.covered) /
                                                       static_cast<double>(set.learned.size());
    j["device_high"] = StatsJson(eval::Summarize(set.high));
    j["symbolic"] = StatsJson(eval::Summarize(set.symbolic));
    j["analytical"] = StatsJson(eval::Summarize(set.analytical));
    out[name] = j;
    auto get = [&](const char* backend, const char* key) -> std::optional<double> {
      const nlohmann::json& v = j[backend][key];
      return v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
    };
    log_ << fmt::format(
        "{:<5} n={:<5} learned: median {} P90 {} max {} under {} bin1 {} | interval coverage {}, "
        "device_high under {} median {}\n"
        "{:<13} symbolic: median {} under {} bin1 {} | analytical: median {} under {} bin1 {}\n",
        name, l.n, Pct(l.median), Pct(l.p90), Pct(l.max), Pct(l.under), Pct(l.bin1),
        Pct(j["interval_coverage"].get<double>()), Pct(get("device_high", "under")),
        Pct(get("device_high", "median")), "", Pct(get("symbolic", "median")),
        Pct(get("symbolic", "under")), Pct(get("symbolic", "bin1")),
        Pct(get("analytical", "median")), Pct(get("analytical", "under")),
        Pct(get("analytical", "bin1")));
  }
  nlohmann::json by_group = nlohmann::json::object();
  for (auto& [name, set] : test_by_group) {
    const eval::ErrorStats l = eval::Summarize(set.learned);
    by_group[name] = StatsJson(l);
    log_ << fmt::format("  test {:<12} n={:<4} median {} P90 {} under {} bin1 {}\n", name, l.n,
                        Pct(l.median), Pct(l.p90), Pct(l.under), Pct(l.bin1));
  }
  out["test_by_activation"] = by_group;
  std::stable_sort(worst.begin(), worst.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; k < worst.size() && k < 5; ++k) {
    const Sample& s = *worst[k].second;
    log_ << fmt::format("  worst test row {}: {} {} measured {}, error {}\n", k + 1, s.model,
                        s.attrs.count("name") ? s.attrs.at("name") : "", Mib(s.measured),
                        Pct(worst[k].first));
  }
  return out;
}

nlohmann::json Trainer::Bundled(const learned::Network& net) {
  nlohmann::json out = nlohmann::json::array();
  const fs::path dir = fs::path(args_.root) / "datasets" / "models";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".onnx") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  const auto estimator = learned::MakeLearnedEstimatorWith(net);
  const auto symbolic = MakeEstimator("symbolic");
  for (const fs::path& f : files) {
    auto model = LoadModel(f.string());
    if (!model.ok()) continue;
    for (int64_t batch : {1, 32, 256}) {
      Options o;
      o.batch = batch;
      o.gpu = "a100-40gb";
      auto e = estimator->Run(**model, o);
      if (!e.ok()) {
        log_ << fmt::format("  {} batch {}: {}\n", f.filename().string(), batch,
                            e.status().ToString());
        continue;
      }
      bool extrapolating = false;
      for (const Diagnostic& d : e->diagnostics) extrapolating |= d.code == "extrapolating";
      const auto sym_e = (*symbolic)->Run(**model, o);
      const uint64_t sym = sym_e.ok() ? sym_e->peak_device : 0;
      out.push_back({{"model", f.filename().string()},
                     {"batch", batch},
                     {"gpu", o.gpu},
                     {"peak_device", e->peak_device},
                     {"device_low", *e->device_low},
                     {"device_high", *e->device_high},
                     {"symbolic_peak_device", sym},
                     {"extrapolating", extrapolating}});
      log_ << fmt::format("  {:<22} batch {:>3}: learned {} [{} .. {}], symbolic {}{}\n",
                          f.filename().string(), batch, Mib(e->peak_device), Mib(*e->device_low),
                          Mib(*e->device_high), Mib(sym), extrapolating ? " (extrapolating)" : "");
    }
  }
  return out;
}

// --holdout clauses (arch=gradual unless given; "none" for no test rows) into clauses_, and the
// numeric arguments checked. 0, or the exit code after saying why.
int Trainer::CheckArgs(std::vector<std::string>* rules) {
  if (!args_.gpumemnet && args_.rows.empty()) {
    std::cerr << "memest-train: no data: pass --gpumemnet and/or --rows FILE.jsonl\n";
    return 2;
  }
  *rules = args_.holdout.empty() ? std::vector<std::string>{"arch=gradual"} : args_.holdout;
  if (rules->size() == 1 && (*rules)[0] == "none") rules->clear();
  for (const std::string& r : *rules) {
    auto c = ParseClause(r);
    if (!c.ok()) {
      std::cerr << "memest-train: " << c.status().message() << "\n";
      return 2;
    }
    clauses_.push_back(*c);
  }
  if (args_.members < 1 || args_.config.hidden < 1) {
    std::cerr << "memest-train: --members and --hidden must be >= 1\n";
    return 2;
  }
  return 0;
}

// Every row's features (GPUMemNet, --rows files), split into the training pool and the held-out
// test rows. 0, or the exit code after saying why.
int Trainer::LoadData() {
  if (args_.gpumemnet) {
    if (Status st = LoadGpumemnet(); !st.ok()) {
      std::cerr << "memest-train: " << st.ToString() << "\n";
      return 3;
    }
  }
  for (const std::string& path : args_.rows) {
    if (Status st = LoadRowsFile(path); !st.ok()) {
      std::cerr << "memest-train: " << st.ToString() << "\n";
      return 3;
    }
  }
  Split();
  if (pool_.empty() || group_names_.size() < 2) {
    std::cerr << "memest-train: need at least two groups of training rows\n";
    return 3;
  }
  return 0;
}

// Features and log(measured bytes) of every sample, as the trainer reads them.
learned::Dataset Trainer::MakeDataset() const {
  const size_t nf = learned::FeatureSpecs().size();
  learned::Dataset data;
  data.x.resize(static_cast<Eigen::Index>(samples_.size()), static_cast<Eigen::Index>(nf));
  data.y.resize(static_cast<Eigen::Index>(samples_.size()));
  for (size_t i = 0; i < samples_.size(); ++i) {
    for (size_t k = 0; k < nf; ++k) {
      data.x(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) =
          samples_[i].features.values[k];
    }
    data.y(static_cast<Eigen::Index>(i)) = std::log(static_cast<double>(samples_[i].measured));
  }
  return data;
}

// The training domain (op types of the training rows) and the interval margins from
// out-of-group predictions: for each pool row, the members that validated on it; the margins
// are the 95th percentiles of how far the truth fell outside their [min, max].
void Trainer::SetDomainAndMargins(const std::vector<learned::MemberSplit>& splits,
                                  learned::Network* net) const {
  std::set<std::string> ops;
  for (int i : pool_) {
    for (const std::string& op : samples_[static_cast<size_t>(i)].features.facts.op_types) {
      ops.insert(op);
    }
  }
  net->known_ops.assign(ops.begin(), ops.end());
  std::vector<double> below, above;
  std::vector<std::vector<bool>> in_val(splits.size(), std::vector<bool>(samples_.size(), false));
  for (size_t m = 0; m < splits.size(); ++m) {
    for (int i : splits[m].validation) in_val[m][static_cast<size_t>(i)] = true;
  }
  for (int i : pool_) {
    const Sample& s = samples_[static_cast<size_t>(i)];
    double lo = INFINITY, hi = -INFINITY;
    for (size_t m = 0; m < splits.size(); ++m) {
      if (!in_val[m][static_cast<size_t>(i)]) continue;
      const double l = net->PredictMember(m, s.features.values);
      lo = std::min(lo, l);
      hi = std::max(hi, l);
    }
    if (!std::isfinite(lo)) continue;
    const double y = std::log(static_cast<double>(s.measured));
    below.push_back(std::max(0.0, lo - y));
    above.push_back(std::max(0.0, y - hi));
  }
  net->margin_below = Quantile(below, 0.95);
  net->margin_above = Quantile(above, 0.95);
}

void Trainer::LogMembers(const learned::Network& net,
                         const std::vector<learned::MemberSplit>& splits) {
  for (size_t m = 0; m < net.members.size(); ++m) {
    const learned::Member& mem = net.members[m];
    log_ << fmt::format(
        "member {}: seed {}, {} train / {} validation rows, {} epochs (best {}), standardized MSE "
        "train {:.5f} validation {:.5f}\n",
        m, mem.seed, splits[m].train.size(), splits[m].validation.size(), mem.epochs,
        mem.best_epoch, mem.train_loss, mem.validation_loss);
  }
  log_ << fmt::format("interval margins (log): below {:.4f}, above {:.4f}\n", net.margin_below,
                      net.margin_above);
}

// Recorded predictions: three held-out rows (first, middle, last), reproduced bit for bit by
// tests/unit/learned_test.cc.
nlohmann::json Trainer::Checks(const learned::Network& net) const {
  nlohmann::json checks = nlohmann::json::array();
  const std::vector<int>& check_from = test_.empty() ? pool_ : test_;
  for (size_t k : {size_t{0}, check_from.size() / 2, check_from.size() - 1}) {
    const Sample& s = samples_[static_cast<size_t>(check_from[k])];
    const Estimate e = learned::EstimateFromFeatures(net, s.features);
    checks.push_back({{"model", s.model},
                      {"batch", s.options.batch.value_or(0)},
                      {"gpu", s.options.gpu},
                      {"member_logs", net.Predict(s.features.values)},
                      {"peak_device", e.peak_device},
                      {"device_low", *e.device_low},
                      {"device_high", *e.device_high},
                      {"measured", s.measured}});
  }
  return checks;
}

// The command line that reproduces this training (defaults left out).
std::string Trainer::Command() const {
  std::string command = "memest-train";
  if (args_.gpumemnet) command += " --gpumemnet";
  for (const std::string& r : args_.rows) command += " --rows " + r;
  for (const std::string& r : args_.holdout) command += " --holdout " + r;
  command += " --out " + args_.out + " --seed " + std::to_string(args_.seed);
  const learned::TrainConfig& c = args_.config;
  const learned::TrainConfig defaults;
  if (args_.members != 5) command += " --members " + std::to_string(args_.members);
  if (c.hidden != defaults.hidden) command += " --hidden " + std::to_string(c.hidden);
  if (c.max_epochs != defaults.max_epochs) command += " --epochs " + std::to_string(c.max_epochs);
  if (c.patience != defaults.patience) command += " --patience " + std::to_string(c.patience);
  if (c.learning_rate != defaults.learning_rate) {
    command += fmt::format(" --learning-rate {}", c.learning_rate);
  }
  if (c.batch_size != defaults.batch_size) {
    command += " --batch-size " + std::to_string(c.batch_size);
  }
  if (c.weight_decay != defaults.weight_decay) {
    command += fmt::format(" --weight-decay {}", c.weight_decay);
  }
  return command;
}

// SHA-256 of the sorted ids of `rows`: the identity of the training (or test) data.
std::string Trainer::RowIdsHash(const std::vector<int>& rows) const {
  std::vector<std::string> ids;
  for (int i : rows) ids.push_back(samples_[static_cast<size_t>(i)].id);
  std::sort(ids.begin(), ids.end());
  std::string joined;
  for (const std::string& id : ids) joined += id + "\n";
  return base::Sha256Hex(joined);
}

// The weights file's "training" object: command, data identity, split and configuration.
nlohmann::json Trainer::TrainingJson(const std::vector<std::string>& rules, double secs_features,
                                     double secs_train) const {
  nlohmann::json holdout = nlohmann::json::array();
  for (const std::string& r : rules) holdout.push_back(r);
  const learned::TrainConfig& c = args_.config;
  return {{"command", Command()},
          {"seed", args_.seed},
          {"data",
           {{"inputs", inputs_},
            {"rows", samples_.size()},
            {"train_rows", pool_.size()},
            {"test_rows", test_.size()},
            {"train_row_ids_sha256", RowIdsHash(pool_)},
            {"test_row_ids_sha256", RowIdsHash(test_)},
            {"gpumemnet_citation", args_.gpumemnet ? gpumemnet::kCitation : ""}}},
          {"split",
           {{"holdout", holdout},
            {"validation_unit",
             "group: GPUMemNet (step, arch, activation, depth); other rows (family, model name)"},
            {"groups_train", group_names_.size()},
            {"validation_share_of_groups", kValidationShare}}},
          {"config",
           {{"members", args_.members},
            {"hidden", c.hidden},
            {"batch_size", c.batch_size},
            {"learning_rate", c.learning_rate},
            {"weight_decay", c.weight_decay},
            {"max_epochs", c.max_epochs},
            {"patience", c.patience}}},
          {"seconds", {{"features", secs_features}, {"training", secs_train}}}};
}

// The weights file: one top-level key per line (ASCII only: learned/CMakeLists.txt embeds it).
std::string WeightsText(const nlohmann::json& doc) {
  static const char* kOrder[] = {"format",       "about",          "features",  "target",
                                 "architecture", "interval",       "known_ops", "training",
                                 "metrics",      "bundled_models", "checks",    "members"};
  std::string text = "{\n";
  for (size_t k = 0; k < std::size(kOrder); ++k) {
    text += nlohmann::json(kOrder[k]).dump() + ": " + doc[kOrder[k]].dump(-1, ' ', true);
    text += k + 1 < std::size(kOrder) ? ",\n" : "\n";
  }
  text += "}\n";
  return text;
}

int Trainer::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> rules;
  if (int code = CheckArgs(&rules); code != 0) return code;
  if (int code = LoadData(); code != 0) return code;
  const auto t_features = std::chrono::steady_clock::now();

  std::vector<bool> monotone;
  for (const learned::FeatureSpec& s : learned::FeatureSpecs()) monotone.push_back(s.monotone);
  const std::vector<learned::MemberSplit> splits = MemberSplits();
  args_.config.seed = args_.seed;
  auto trained =
      learned::Train(MakeDataset(), splits, pool_, learned::FeatureNames(), monotone, args_.config);
  if (!trained.ok()) {
    std::cerr << "memest-train: " << trained.status().ToString() << "\n";
    return 4;
  }
  learned::Network net = std::move(trained).value();
  const auto t_train = std::chrono::steady_clock::now();
  SetDomainAndMargins(splits, &net);
  LogMembers(net, splits);
  const nlohmann::json metrics = Evaluate(net);
  log_ << "bundled models (no truth; a100-40gb profile, train, Adam, fp32):\n";
  const nlohmann::json bundled = Bundled(net);

  nlohmann::json doc = learned::ToJson(net);
  doc["format"] = "memest-learned/1";
  doc["about"] =
      "Weights of memest's learned backend (learned/learned.h), written by memest-train "
      "(docs/learned.md). Trained on GPUMemNet's MLP measurements (CC BY 4.0, see training.data).";
  const double secs_features = std::chrono::duration<double>(t_features - t0).count();
  const double secs_train = std::chrono::duration<double>(t_train - t_features).count();
  doc["training"] = TrainingJson(rules, secs_features, secs_train);
  doc["metrics"] = metrics;
  doc["bundled_models"] = bundled;
  doc["checks"] = Checks(net);
  const std::string text = WeightsText(doc);
  // The file must load back to the same network (the backend's own parser).
  auto reparsed = learned::ParseWeights(text);
  if (!reparsed.ok()) {
    std::cerr << "memest-train: written weights do not parse: " << reparsed.status().ToString()
              << "\n";
    return 4;
  }
  {
    std::ofstream out(args_.out, std::ios::binary);
    out << text;
    if (!out) {
      std::cerr << "memest-train: cannot write '" << args_.out << "'\n";
      return 3;
    }
  }
  const double secs_all =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_ << fmt::format(
      "rows: {} ({} train, {} test), features {:.1f} s, training {:.1f} s, total {:.1f} s\n",
      samples_.size(), pool_.size(), test_.size(), secs_features, secs_train, secs_all);
  log_ << "wrote " << args_.out << " (" << text.size() << " bytes)\n";
  std::cout << log_.str();
  if (!args_.report.empty()) {
    std::ofstream rep(args_.report);
    rep << log_.str();
  }
  return 0;
}

}  // namespace
}  // namespace memest

int main(int argc, char** argv) {
  memest::Args args;
  CLI::App app{"memest-train: trains the learned backend's MLP ensemble (docs/learned.md)"};
  app.add_flag("--gpumemnet", args.gpumemnet, "train on GPUMemNet's 6,000 MLP rows");
  app.add_option("--gpumemnet-dir", args.gpumemnet_dir,
                 "folder of the GPUMemNet CSVs (default: <root>/datasets/gpumemnet)");
  app.add_option("--rows", args.rows, "measured rows (docs/measured-row-schema.md), repeatable");
  app.add_option("--out", args.out, "weights file to write (required unless --device-truth)");
  bool device_truth = false;
  memest::DeviceTrainArgs device;
  app.add_flag("--device-truth", device_truth,
               "leave-one-family-out evaluation of a residual over the symbolic backend under a "
               "calibrated stack, on the timm A100, H200 and GPUMemNet device rows "
               "(tools/train_device.h); writes no weights");
  app.add_option("--gpumemnet-stride", device.gpumemnet_stride,
                 "with --device-truth: every Nth GPUMemNet row joins the training rows (default "
                 "10; 0: none)");
  app.add_option("--predictions", device.predictions,
                 "with --device-truth: write the held-out predictions per row (CSV)");
  app.add_option("--weight-decay", args.config.weight_decay, "L2 on weights (default 1e-4)");
  app.add_option("--seed", args.seed, "seed (initialization, shuffling, validation groups)");
  app.add_option("--members", args.members, "ensemble members (default 5)");
  app.add_option("--hidden", args.config.hidden, "hidden units per member (default 16)");
  app.add_option("--epochs", args.config.max_epochs, "maximum epochs (default 300)");
  app.add_option("--learning-rate", args.config.learning_rate, "Adam step size (default 3e-3)");
  app.add_option("--batch-size", args.config.batch_size, "minibatch rows (default 64)");
  app.add_option("--patience", args.config.patience,
                 "early-stopping patience in epochs (default 30)");
  app.add_option("--holdout", args.holdout,
                 "test rows: KEY=VALUE or KEY=LO-HI over arch, act, depth, step, family, name, "
                 "source (repeatable, OR); default arch=gradual; 'none' for no test set");
  app.add_option("--root", args.root, "repository root (default .)");
  app.add_option("--report", args.report, "also write the report to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (device_truth) {
    device.root = args.root;
    device.report = args.report;
    device.seed = args.seed;
    device.members = args.members;
    device.config = args.config;
    return memest::RunDeviceTraining(device);
  }
  if (args.out.empty()) {
    std::cerr << "memest-train: --out is required\n";
    return 2;
  }
  return memest::Trainer(std::move(args)).Run();
}
