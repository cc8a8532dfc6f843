// tools/eval/heldout.cc -- see heldout.h.
#include "tools/eval/heldout.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "base/sha256.h"

namespace memest::eval {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::string_view kGpumemnetPrefix = "gpumemnet:";

bool IsGpumemnet(const MeasuredRow& row) { return row.model_path.starts_with(kGpumemnetPrefix); }

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// The trainer's id of a row (tools/train_main.cc): the row id, else "<model path>@<line>".
std::string SampleId(const MeasuredRow& row) {
  return row.id.empty() ? row.model_path + "@" + std::to_string(row.line) : row.id;
}

std::string Num(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

}  // namespace

bool UsedBy(const MeasuredRow& row, const std::string& backend) {
  for (const std::string& tag : row.used_for) {
    if (!tag.starts_with("train:")) return true;  // calibration etc.: every backend
    const std::string_view target = std::string_view(tag).substr(6);
    if (target == backend) return true;
    if (target.starts_with(backend) && target.size() > backend.size() &&
        target[backend.size()] == '-') {
      return true;
    }
  }
  return false;
}

bool MatchesClause(const std::string& clause, const RowAttrs& attrs) {
  const size_t eq = clause.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  const std::string key = clause.substr(0, eq), value = clause.substr(eq + 1);
  auto it = attrs.find(key);
  if (it == attrs.end()) return false;
  const size_t dash = value.find('-', 1);
  int64_t lo = 0, hi = 0, v = 0;
  if (dash != std::string::npos && ParseInt(std::string_view(value).substr(0, dash), &lo) &&
      ParseInt(std::string_view(value).substr(dash + 1), &hi)) {
    return ParseInt(it->second, &v) && v >= lo && v <= hi;
  }
  return it->second == value;
}

RowAttrs AttrsOf(const MeasuredRow& row, const std::map<int, RowAttrs>& gpumemnet) {
  RowAttrs a;
  a["family"] = row.family;
  a["name"] = row.model_name;
  if (IsGpumemnet(row)) {
    a["source"] = "gpumemnet";
    int64_t index = -1;
    if (ParseInt(std::string_view(row.model_path).substr(kGpumemnetPrefix.size()), &index)) {
      auto it = gpumemnet.find(static_cast<int>(index));
      if (it != gpumemnet.end()) {
        for (const auto& [k, v] : it->second) a[k] = v;
      }
    }
  } else {
    a["source"] = fs::path(row.source).filename().string();
  }
  return a;
}

TrainingMarks MarkLearnedTrainingRows(std::string_view weights_json,
                                      const std::vector<RowAttrs>& attrs,
                                      std::vector<MeasuredRow>* rows) {
  TrainingMarks marks;
  if (weights_json.empty()) {
    marks.note = "learned: no weights are shipped, so no row is marked as its training data";
    return marks;
  }
  const Json w = Json::parse(weights_json, nullptr, false);
  const Json* data = nullptr;
  if (w.is_object() && w.contains("training") && w["training"].is_object() &&
      w["training"].contains("data") && w["training"]["data"].is_object()) {
    data = &w["training"]["data"];
  }
  if (data == nullptr || !data->contains("inputs") || !(*data)["inputs"].is_array()) {
    marks.note =
        "learned: the weights do not say what they were trained on; no row is marked (its "
        "numbers may include its own training rows)";
    return marks;
  }
  bool uses_gpumemnet = false;
  std::set<std::string> input_files;
  for (const Json& in : (*data)["inputs"]) {
    if (!in.is_object() || !in.contains("file") || !in["file"].is_string()) continue;
    const std::string file = in["file"].get<std::string>();
    const std::string name = fs::path(file).filename().string();
    if (name == "mlp_data_step1.csv" || name == "mlp_data_step2.csv") {
      uses_gpumemnet = true;
    } else {
      input_files.insert(name);
    }
  }
  std::vector<std::string> clauses;
  bool have_clauses = false;
  const Json& training = w["training"];
  if (training.contains("split") && training["split"].is_object() &&
      training["split"].contains("holdout") && training["split"]["holdout"].is_array()) {
    for (const Json& c : training["split"]["holdout"]) {
      if (c.is_string()) clauses.push_back(c.get<std::string>());
    }
    have_clauses = !clauses.empty();
  }

  std::vector<std::string> ids;
  for (size_t i = 0; i < rows->size(); ++i) {
    MeasuredRow& row = (*rows)[i];
    if (row.status != RowStatus::kOk || !row.peaks.device) continue;
    const bool candidate =
        IsGpumemnet(row) ? uses_gpumemnet
                         : row.device_kind == "cuda" &&
                               input_files.count(fs::path(row.source).filename().string()) > 0;
    if (!candidate) continue;
    const RowAttrs& a = attrs[i];
    if (std::any_of(clauses.begin(), clauses.end(),
                    [&](const std::string& c) { return MatchesClause(c, a); })) {
      continue;  // a test row of the trainer
    }
    if (std::find(row.used_for.begin(), row.used_for.end(), kLearnedTrainTag) ==
        row.used_for.end()) {
      row.used_for.push_back(kLearnedTrainTag);
    }
    ids.push_back(SampleId(row));
    ++marks.marked;
  }
  marks.applied = true;
  std::sort(ids.begin(), ids.end());
  std::string joined;
  for (const std::string& id : ids) joined += id + "\n";
  const std::string expected = data->value("train_row_ids_sha256", std::string());
  const int64_t expected_rows = data->value("train_rows", int64_t{-1});
  marks.verified = !expected.empty() && base::Sha256Hex(joined) == expected;
  std::string rule;
  for (const std::string& c : clauses) rule += (rule.empty() ? "" : ", ") + ("`" + c + "`");
  marks.note =
      Num(marks.marked) + " rows marked `" + kLearnedTrainTag +
      "`: the learned backend's training rows, re-derived from learned/weights.json (" +
      (have_clauses ? "its test rows are those matching " + rule
                    : "no holdout rule recorded: every candidate row is marked") +
      "); " +
      (marks.verified
           ? "their ids hash to the weights' train_row_ids_sha256 (verified)"
           : "their ids do NOT hash to the weights' train_row_ids_sha256 (the input lacks some "
             "training rows, or holds others: " +
                 Num(expected_rows) + " expected)");
  return marks;
}

}  // namespace memest::eval
