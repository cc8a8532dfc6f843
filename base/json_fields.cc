// base/json_fields.cc -- see base/json_fields.h.
#include "base/json_fields.h"

#include <cctype>
#include <cmath>
#include <cstdint>

namespace memest::base {

using nlohmann::json;

nlohmann::json BytesJson(const ProfileValue& v) {
  return {{"bytes", v.bytes}, {"source", v.source}, {"calibrated", v.calibrated}};
}

nlohmann::ordered_json DiagnosticsJson(const std::vector<Diagnostic>& diagnostics) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Diagnostic& d : diagnostics) {
    out.push_back({{"severity", d.severity == Severity::kWarning ? "warning" : "info"},
                   {"code", d.code},
                   {"message", d.message},
                   {"node", d.node},
                   {"op_type", d.op_type}});
  }
  return out;
}

std::string ToLowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Status JsonFields::CheckKeys(const json& obj, const std::vector<std::string_view>& allowed,
                             const std::string& where) const {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (std::string_view a : allowed) known = known || it.key() == a;
    if (!known) return Error(where + ": unknown key '" + it.key() + "'");
  }
  return Status::Ok();
}

Result<std::string> JsonFields::String(const json& obj, const char* key,
                                       const std::string& where) const {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    return Error(where + ": '" + key + "' must be a string");
  }
  return it->get_ref<const std::string&>();
}

Result<std::string> JsonFields::Source(const json& obj, const char* key,
                                       const std::string& where) const {
  MEMEST_ASSIGN_OR_RETURN(std::string s, String(obj, key, where));
  if (s.empty()) return Error(where + ": empty '" + key + "' (no number without a source)");
  return s;
}

Result<int> JsonFields::SmallInt(const json& obj, const char* key, const std::string& where) const {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_unsigned() || it->get<uint64_t>() > 1000) {
    return Error(where + ": '" + key + "' must be an integer in [0, 1000]");
  }
  return static_cast<int>(it->get<uint64_t>());
}

Result<bool> JsonFields::Bool(const json& obj, const char* key, const std::string& where) const {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_boolean()) {
    return Error(where + ": '" + key + "' must be a boolean");
  }
  return it->get<bool>();
}

Result<double> JsonFields::Number(const json& obj, const char* key,
                                  const std::string& where) const {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number() || !std::isfinite(it->get<double>())) {
    return Error(where + ": '" + key + "' must be a finite number");
  }
  return it->get<double>();
}

Result<ProfileValue> JsonFields::Bytes(const json& obj, const char* key,
                                       const std::string& where) const {
  const std::string here = where + "." + key;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) return Error(here + ": missing or not an object");
  MEMEST_RETURN_IF_ERROR(CheckKeys(*it, {"bytes", "source", "calibrated"}, here));
  ProfileValue v;
  auto bytes = it->find("bytes");
  if (bytes == it->end() || !bytes->is_number_unsigned()) {
    return Error(here + ": 'bytes' must be a non-negative integer");
  }
  v.bytes = bytes->get<uint64_t>();
  MEMEST_ASSIGN_OR_RETURN(v.source, Source(*it, "source", here));
  MEMEST_ASSIGN_OR_RETURN(v.calibrated, Bool(*it, "calibrated", here));
  const bool says_measured = v.source.starts_with("measured: ") || v.source.starts_with("fitted: ");
  if (v.calibrated != says_measured) {
    return Error(here +
                 ": calibrated=true exactly when the source starts with 'measured: ' or "
                 "'fitted: '");
  }
  return v;
}

}  // namespace memest::base
