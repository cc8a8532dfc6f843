// tools/eval/evaluate.cc -- see evaluate.h.
#include "tools/eval/evaluate.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "base/sha256.h"
#include "datasets/gpumemnet/gpumemnet.h"

namespace memest::eval {
namespace {

namespace fs = std::filesystem;

constexpr char kGpumemnetPrefix[] = "gpumemnet:";

// "gpumemnet:<index>" -> index; nullopt for other paths; error for a malformed index.
Result<std::optional<int>> GpumemnetIndex(const std::string& path) {
  const std::string prefix = kGpumemnetPrefix;
  if (path.compare(0, prefix.size(), prefix) != 0) return std::optional<int>();
  const std::string digits = path.substr(prefix.size());
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument("model.path '" + path + "': expected gpumemnet:<row index>");
  }
  return std::optional<int>(std::stoi(digits));
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open model '" + path + "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

uint64_t PredictedAt(const Estimate& e, Level level) {
  switch (level) {
    case Level::kTensor:
    case Level::kAllocated:
      return e.peak_allocated;
    case Level::kReserved:
      return e.peak_reserved;
    case Level::kDevice:
      return e.peak_device;
  }
  return 0;
}

Result<GpumemnetData> LoadGpumemnet(const std::string& data_dir, const std::string& root) {
  std::vector<std::string> candidates;
  if (!data_dir.empty()) {
    candidates.push_back(data_dir);
  } else {
    candidates = {root + "/datasets/gpumemnet"};
  }
  GpumemnetData data;
  MEMEST_ASSIGN_OR_RETURN(data.dir, gpumemnet::FindDataDir(candidates));
  MEMEST_ASSIGN_OR_RETURN(auto csv_rows, gpumemnet::ReadAll(data.dir));
  data.rows.reserve(csv_rows.size());
  for (const gpumemnet::Row& r : csv_rows) {
    MEMEST_ASSIGN_OR_RETURN(gpumemnet::Rebuilt rebuilt, gpumemnet::Rebuild(r));
    const std::string text = gpumemnet::MeasuredRow(r, rebuilt).dump();
    MEMEST_ASSIGN_OR_RETURN(MeasuredRow row, ParseMeasuredRow(text, "gpumemnet", r.index + 1));
    data.rows.push_back(std::move(row));
    data.bytes.emplace(r.index, std::move(rebuilt.bytes));
    data.attrs[r.index] = {{"arch", r.arch},
                           {"act", r.act},
                           {"depth", std::to_string(r.depth)},
                           {"step", r.index < gpumemnet::kRowsPerFile ? "1" : "2"},
                           {"index", std::to_string(r.index)}};
  }
  return data;
}

std::string DefaultCpuProfile() { return FindGpuProfile("cpu").ok() ? "cpu" : "a100-40gb"; }

std::vector<BackendInfo> DropUnavailable(Evaluation* ev) {
  std::vector<BackendInfo> dropped;
  std::vector<size_t> keep;
  for (size_t b = 0; b < ev->backends.size(); ++b) {
    int64_t asked = 0, unavailable = 0;
    std::string reason;
    for (const RowOutcome& o : ev->outcomes) {
      if (!o.setup.ok()) continue;
      ++asked;
      const Status& st = o.predictions[b].status;
      if (st.code() == ErrorCode::kUnavailable) {
        if (unavailable++ == 0) reason = st.message();
      }
    }
    if (asked > 0 && unavailable == asked) {
      dropped.push_back({ev->backends[b], "", false, reason});
    } else {
      keep.push_back(b);
    }
  }
  if (dropped.empty()) return dropped;
  std::vector<std::string> names;
  for (size_t b : keep) names.push_back(ev->backends[b]);
  ev->backends = std::move(names);
  for (RowOutcome& o : ev->outcomes) {
    if (!o.setup.ok()) continue;
    std::vector<Prediction> kept;
    for (size_t b : keep) kept.push_back(std::move(o.predictions[b]));
    o.predictions = std::move(kept);
  }
  return dropped;
}

Result<std::unique_ptr<Evaluator>> Evaluator::Create(EvalConfig config) {
  if (config.cpu_profile.empty()) config.cpu_profile = DefaultCpuProfile();
  std::unique_ptr<Evaluator> e(new Evaluator(std::move(config)));
  for (const std::string& name : e->config_.backends) {
    MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<Estimator> est, MakeEstimator(name));
    e->estimators_.push_back(std::move(est));
  }
  if (!FindGpuProfile(e->config_.cpu_profile).ok()) {
    return InvalidArgument("unknown CPU-row profile '" + e->config_.cpu_profile + "'");
  }
  return e;
}

void Evaluator::AddGpumemnetBytes(std::map<int, std::string> bytes) {
  for (auto& [index, b] : bytes) gpumemnet_bytes_[index] = std::move(b);
}

Result<std::string> Evaluator::GpumemnetBytes(int index) {
  auto it = gpumemnet_bytes_.find(index);
  if (it == gpumemnet_bytes_.end() && !gpumemnet_loaded_) {
    gpumemnet_loaded_ = true;
    MEMEST_ASSIGN_OR_RETURN(GpumemnetData data, LoadGpumemnet(config_.gpumemnet_dir, config_.root));
    for (auto& [i, b] : data.bytes) gpumemnet_bytes_.try_emplace(i, std::move(b));
    it = gpumemnet_bytes_.find(index);
  }
  if (it == gpumemnet_bytes_.end()) {
    return NotFound("GPUMemNet row " + std::to_string(index) + " does not exist (0..5999)");
  }
  return it->second;
}

Result<std::shared_ptr<const Model>> Evaluator::ResolveModel(const MeasuredRow& row) {
  MEMEST_ASSIGN_OR_RETURN(std::optional<int> gmn, GpumemnetIndex(row.model_path));
  auto check_sha = [&](const std::string& actual) -> Status {
    if (row.model_sha256.empty() || config_.allow_sha_mismatch || actual == row.model_sha256) {
      return Status::Ok();
    }
    return InvalidArgument("model '" + row.model_path + "' has sha256 " + actual.substr(0, 12) +
                           "..., the row was measured on " + row.model_sha256.substr(0, 12) +
                           "... (a different model)");
  };
  if (gmn) {
    MEMEST_ASSIGN_OR_RETURN(std::string bytes, GpumemnetBytes(*gmn));
    MEMEST_RETURN_IF_ERROR(check_sha(base::Sha256Hex(bytes)));
    return LoadModelFromBytes(bytes, "/", row.model_path);
  }

  std::vector<fs::path> tries;
  const fs::path p(row.model_path);
  if (p.is_absolute()) {
    tries.push_back(p);
  } else {
    tries.push_back(fs::path(config_.root) / p);
    if (!row.source.empty()) tries.push_back(fs::path(row.source).parent_path() / p);
  }
  std::string resolved;
  std::error_code ec;
  for (const fs::path& t : tries) {
    if (fs::is_regular_file(t, ec)) {
      resolved = t.lexically_normal().string();
      break;
    }
  }
  if (resolved.empty()) {
    std::string tried;
    for (const fs::path& t : tries) tried += (tried.empty() ? "" : ", ") + t.string();
    return NotFound("model '" + row.model_path + "' not found (tried " + tried + ")");
  }
  auto it = file_models_.find(resolved);
  if (it == file_models_.end()) {
    FileModel fm;
    Result<std::string> bytes = ReadFile(resolved);
    if (!bytes.ok()) {
      fm.status = bytes.status();
    } else {
      fm.sha256 = base::Sha256Hex(*bytes);
      auto model = LoadModelFromBytes(*bytes, fs::path(resolved).parent_path().string(), resolved);
      if (model.ok()) {
        fm.model = *model;
      } else {
        fm.status = model.status();
      }
    }
    it = file_models_.emplace(resolved, std::move(fm)).first;
  }
  if (!it->second.status.ok()) return it->second.status;
  MEMEST_RETURN_IF_ERROR(check_sha(it->second.sha256));
  return it->second.model;
}

RowOutcome Evaluator::EvaluateRow(const MeasuredRow& row) {
  RowOutcome out;
  if (row.device_kind == "cuda") {
    Result<GpuProfile> profile = FindGpuProfileForDevice(row.device_name);
    if (!profile.ok()) {
      out.setup = profile.status();
      return out;
    }
    out.profile = profile->name;
    out.capacity = profile->usable_memory.bytes;
  } else {
    out.profile = config_.cpu_profile;
  }
  if (!out.capacity && row.device_kind == "cuda" && row.device_total_memory) {
    out.capacity = row.device_total_memory;
  }
  Result<std::shared_ptr<const Model>> model = ResolveModel(row);
  if (!model.ok()) {
    out.setup = model.status();
    return out;
  }
  Options options = row.options;
  options.gpu = out.profile;
  if (row.device_kind == "cuda") {
    auto stack = config_.gpu_stacks.find(out.profile);
    if (stack == config_.gpu_stacks.end()) stack = config_.gpu_stacks.find("");
    if (stack != config_.gpu_stacks.end()) options.stack = stack->second;
  }
  // CPU rows: tensor bytes without GPU library workspaces (the harness runs none).
  options.library_workspaces = row.device_kind == "cuda";
  // memest-measure executes the ONNX graph op by op, so its rows are compared with the chains
  // as written; GPUMemNet's rows are PyTorch modules (fused kernels, ops/fusion.h).
  options.fused_kernels = row.model_path.rfind("gpumemnet:", 0) == 0;
  options.inplace_relu = options.fused_kernels;  // the harness runs each op out of place
  for (const auto& est : estimators_) {
    Prediction p;
    const auto start = std::chrono::steady_clock::now();
    Result<Estimate> e = est->Run(**model, options);
    const auto stop = std::chrono::steady_clock::now();
    p.micros = std::chrono::duration<double, std::micro>(stop - start).count();
    if (e.ok()) {
      p.estimate = std::move(e).value();
      if (out.capacity) p.fits = p.estimate.peak_device <= *out.capacity;
    } else {
      p.status = e.status();
    }
    out.predictions.push_back(std::move(p));
  }
  return out;
}

Evaluation Evaluator::EvaluateAll(std::vector<MeasuredRow> rows,
                                  const std::function<void(size_t, size_t)>& progress) {
  Evaluation ev;
  ev.backends = config_.backends;
  ev.outcomes.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ev.outcomes.push_back(EvaluateRow(rows[i]));
    if (progress) progress(i + 1, rows.size());
  }
  ev.rows = std::move(rows);
  return ev;
}

}  // namespace memest::eval
