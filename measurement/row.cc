// measurement/row.cc -- measured rows (see row.h and docs/measured-row-schema.md).
#include "measurement/row.h"

#include <unistd.h>

#include <array>
#include <ctime>
#include <nlohmann/json.hpp>

#include "base/sha256.h"

#ifndef MEMEST_GIT_COMMIT
#define MEMEST_GIT_COMMIT "unknown"
#endif

namespace memest::measurement {
namespace {

using Json = nlohmann::json;

Json OrNull(const std::optional<uint64_t>& v) { return v ? Json(*v) : Json(nullptr); }
Json OrNull(const std::optional<std::string>& v) { return v ? Json(*v) : Json(nullptr); }

Json PeaksJson(const Peaks& p) {
  return Json{{"tensor", OrNull(p.tensor)},
              {"allocated", OrNull(p.allocated)},
              {"reserved", OrNull(p.reserved)},
              {"device", OrNull(p.device)}};
}

Json PhaseJson(const PhaseStats& s) { return s.ran ? PeaksJson(s.peaks) : Json(nullptr); }

Json ConfigObject(const RowRequest& r) { return Json::parse(MeasuredConfigJson(ConfigOf(r))); }

std::string NowUtc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

std::string HostName() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) return "unknown";
  return buf.data();
}

bool IsUint(const Json& j) {
  return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
}

}  // namespace

MeasuredConfig ConfigOf(const RowRequest& request) {
  return MeasuredConfig{request.options, request.dims, request.iterations};
}

std::string ConfigJson(const RowRequest& request) { return MeasuredConfigJson(ConfigOf(request)); }

std::string RowId(const RowRequest& request) {
  return MeasuredRowId(ConfigOf(request), request.model_sha256);
}

std::string GitCommit() { return MEMEST_GIT_COMMIT; }

std::string MakeRow(const RowRequest& r, const Measurement* m, const std::string& error,
                    const DeviceInfo& device) {
  const DeviceInfo& d = m != nullptr ? m->device : device;
  Json row;
  row["schema"] = kMeasuredRowSchema;
  row["id"] = RowId(r);
  row["model"] = Json{{"path", r.model_path},
                      {"sha256", r.model_sha256},
                      {"name", r.model_name},
                      {"family", r.family.empty() ? Json(nullptr) : Json(r.family)}};
  row["config"] = ConfigObject(r);
  row["device"] = Json{{"kind", d.kind},
                       {"name", d.name},
                       {"total_memory", OrNull(d.total_memory)},
                       {"capability", OrNull(d.capability)},
                       {"driver", OrNull(d.driver)},
                       {"cuda", OrNull(d.cuda)},
                       {"torch", d.torch}};
  row["provenance"] = Json{{"tool", r.tool},
                           {"git_commit", GitCommit()},
                           {"time_utc", NowUtc()},
                           {"host", HostName()},
                           {"source", "memest harness"}};
  row["used_for"] = Json::array();
  Json run{{"seed", r.seed}, {"optimizer_impl", r.optimizer_impl}};
  if (m == nullptr) {
    row["status"] = "error";
    row["error"] = error.empty() ? std::string("unknown error") : error;
    row["peaks"] = PeaksJson(Peaks{});
    row["context_bytes"] = nullptr;
    row["phases"] = Json{{"forward", nullptr}, {"backward", nullptr}, {"step", nullptr}};
    row["iterations"] = Json::array();
    row["run"] = run;
    return row.dump();
  }
  row["status"] = m->status;
  row["error"] = m->status == "ok" ? Json(nullptr) : Json(m->error);
  row["peaks"] = PeaksJson(m->peaks);
  row["context_bytes"] = OrNull(m->context_bytes);
  row["context_after_bytes"] = OrNull(m->context_after_bytes);
  Json phases{{"forward", nullptr}, {"backward", nullptr}, {"step", nullptr}};
  Json iterations = Json::array();
  if (!m->iterations.empty()) {
    const IterationStats& steady = m->iterations.back();
    phases = Json{{"forward", PhaseJson(steady.forward)},
                  {"backward", PhaseJson(steady.backward)},
                  {"step", PhaseJson(steady.step)}};
    for (const IterationStats* it : {&m->iterations.front(), &m->iterations.back()}) {
      Json j = PeaksJson(it->peaks);
      j["iteration"] = it->iteration;
      iterations.push_back(j);
      if (m->iterations.size() == 1) break;
    }
  }
  row["phases"] = phases;
  row["iterations"] = iterations;
  row["peak"] = Json{
      {"iteration", m->peak_iteration}, {"phase", ToString(m->peak_phase)}, {"node", m->peak_node}};
  if (m->device.kind == "cpu") {
    const PeakAttribution& a = m->at_peak;
    row["attribution"] = Json{{"weights", a.weights},
                              {"gradients", a.gradients},
                              {"optimizer_state", a.optimizer_state},
                              {"saved_activations", a.saved_activations},
                              {"transient", a.transient},
                              {"unaccounted", a.unaccounted}};
  }
  run["seconds"] = m->seconds;
  run["parameter_bytes"] = m->parameter_bytes;
  run["buffer_bytes"] = m->buffer_bytes;
  run["input_bytes"] = m->input_bytes;
  run["gradient_bytes"] = m->gradient_bytes;
  run["optimizer_state_bytes"] = m->optimizer_state_bytes;
  row["run"] = run;
  return row.dump();
}

std::string RowIdOf(const std::string& line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) return "";
  return j["id"].get<std::string>();
}

namespace {

enum class FieldType { kString, kStringOrNull, kUint, kUintOrNull, kNumberOrNull, kObject, kArray };

bool HasType(const Json& v, FieldType type) {
  switch (type) {
    case FieldType::kString:
      return v.is_string();
    case FieldType::kStringOrNull:
      return v.is_string() || v.is_null();
    case FieldType::kUint:
      return IsUint(v);
    case FieldType::kUintOrNull:
      return v.is_null() || IsUint(v);
    case FieldType::kNumberOrNull:
      return v.is_null() || v.is_number();
    case FieldType::kObject:
      return v.is_object();
    case FieldType::kArray:
      return v.is_array();
  }
  return false;
}

// InvalidArgument naming `where` + `key` when `obj` lacks the key or its value has another type.
Status Check(const Json& obj, const std::string& where, const char* key, FieldType type) {
  if (!obj.contains(key)) return InvalidArgument("missing " + where + key);
  const Json& v = obj[key];
  if (!HasType(v, type)) return InvalidArgument(where + key + " has the wrong type: " + v.dump());
  return Status::Ok();
}

Status CheckPeaks(const Json& p, const std::string& where) {
  for (const char* k : {"tensor", "allocated", "reserved", "device"}) {
    MEMEST_RETURN_IF_ERROR(Check(p, where, k, FieldType::kUintOrNull));
  }
  return Status::Ok();
}

using FieldType::kArray;
using FieldType::kNumberOrNull;
using FieldType::kObject;
using FieldType::kString;
using FieldType::kStringOrNull;
using FieldType::kUint;
using FieldType::kUintOrNull;

Status CheckModelAndConfig(const Json& j) {
  MEMEST_RETURN_IF_ERROR(Check(j, "", "model", kObject));
  for (const char* k : {"path", "sha256", "name"})
    MEMEST_RETURN_IF_ERROR(Check(j["model"], "model.", k, kString));
  MEMEST_RETURN_IF_ERROR(Check(j["model"], "model.", "family", kStringOrNull));
  MEMEST_RETURN_IF_ERROR(Check(j, "", "config", kObject));
  const Json& c = j["config"];
  MEMEST_RETURN_IF_ERROR(Check(c, "config.", "mode", kString));
  if (c["mode"] != "train" && c["mode"] != "infer") return InvalidArgument("config.mode");
  MEMEST_RETURN_IF_ERROR(Check(c, "config.", "batch", kUintOrNull));
  MEMEST_RETURN_IF_ERROR(Check(c, "config.", "dims", kObject));
  MEMEST_RETURN_IF_ERROR(Check(c, "config.", "optimizer", kStringOrNull));
  MEMEST_RETURN_IF_ERROR(Check(c, "config.", "weight_decay", kNumberOrNull));
  MEMEST_RETURN_IF_ERROR(Check(c, "config.", "precision", kString));
  MEMEST_RETURN_IF_ERROR(Check(c, "config.", "loss", kString));
  return Check(c, "config.", "iterations", kUint);
}

Status CheckDeviceAndProvenance(const Json& j) {
  MEMEST_RETURN_IF_ERROR(Check(j, "", "device", kObject));
  const Json& d = j["device"];
  MEMEST_RETURN_IF_ERROR(Check(d, "device.", "kind", kString));
  if (d["kind"] != "cpu" && d["kind"] != "cuda") return InvalidArgument("device.kind");
  MEMEST_RETURN_IF_ERROR(Check(d, "device.", "name", kString));
  MEMEST_RETURN_IF_ERROR(Check(d, "device.", "total_memory", kUintOrNull));
  for (const char* k : {"capability", "driver", "cuda"})
    MEMEST_RETURN_IF_ERROR(Check(d, "device.", k, kStringOrNull));
  MEMEST_RETURN_IF_ERROR(Check(d, "device.", "torch", kString));
  MEMEST_RETURN_IF_ERROR(Check(j, "", "provenance", kObject));
  for (const char* k : {"tool", "git_commit", "time_utc", "host", "source"}) {
    MEMEST_RETURN_IF_ERROR(Check(j["provenance"], "provenance.", k, kString));
  }
  return Status::Ok();
}

// The status, its error, the peaks (an ok row has a tensor or allocated one), the context, the
// phases' and the iterations' peaks, and used_for.
Status CheckOutcome(const Json& j) {
  MEMEST_RETURN_IF_ERROR(Check(j, "", "status", kString));
  const std::string status = j["status"];
  if (status != "ok" && status != "oom" && status != "error")
    return InvalidArgument("status " + status);
  MEMEST_RETURN_IF_ERROR(Check(j, "", "error", kStringOrNull));
  if (status != "ok" && !j["error"].is_string())
    return InvalidArgument("error missing for status " + status);
  MEMEST_RETURN_IF_ERROR(Check(j, "", "peaks", kObject));
  MEMEST_RETURN_IF_ERROR(CheckPeaks(j["peaks"], "peaks."));
  if (status == "ok" && j["peaks"]["tensor"].is_null() && j["peaks"]["allocated"].is_null()) {
    return InvalidArgument("an ok row without a tensor or allocated peak");
  }
  MEMEST_RETURN_IF_ERROR(Check(j, "", "context_bytes", kUintOrNull));
  MEMEST_RETURN_IF_ERROR(Check(j, "", "phases", kObject));
  for (const char* k : {"forward", "backward", "step"}) {
    if (!j["phases"].contains(k)) return InvalidArgument(std::string("missing phases.") + k);
    const Json& p = j["phases"][k];
    if (!p.is_null()) {
      if (!p.is_object()) return InvalidArgument(std::string("phases.") + k);
      MEMEST_RETURN_IF_ERROR(CheckPeaks(p, std::string("phases.") + k + "."));
    }
  }
  MEMEST_RETURN_IF_ERROR(Check(j, "", "iterations", kArray));
  for (const Json& it : j["iterations"]) {
    if (!it.is_object()) return InvalidArgument("iterations[] entry is not an object");
    MEMEST_RETURN_IF_ERROR(Check(it, "iterations[].", "iteration", kUint));
    MEMEST_RETURN_IF_ERROR(CheckPeaks(it, "iterations[]."));
  }
  return Check(j, "", "used_for", kArray);
}

}  // namespace

Status ValidateRow(const std::string& line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("not a JSON object");
  MEMEST_RETURN_IF_ERROR(Check(j, "", "schema", kString));
  if (j["schema"] != kMeasuredRowSchema) {
    return InvalidArgument("schema is not " + std::string(kMeasuredRowSchema));
  }
  MEMEST_RETURN_IF_ERROR(Check(j, "", "id", kString));
  if (j["id"].get<std::string>().size() != 64) return InvalidArgument("id is not a sha256");
  MEMEST_RETURN_IF_ERROR(CheckModelAndConfig(j));
  MEMEST_RETURN_IF_ERROR(CheckDeviceAndProvenance(j));
  return CheckOutcome(j);
}

}  // namespace memest::measurement
