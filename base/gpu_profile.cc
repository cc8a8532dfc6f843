// GPU profiles: parsed once from the JSON compiled into the library (base/gpu_profiles.json,
// embedded by base/embed_json.cmake as memest::base::kGpuProfilesJson).
//
// Policy:
//  - The table is parsed on first use inside a function-local static (C++11 "magic statics":
//    thread-safe initialisation), and is immutable afterwards. There is no other mutable state.
//  - Nothing throws across the API. The JSON is parsed with exceptions disabled, and every field
//    is type-checked before it is read. If the embedded data were malformed (a memest bug, never
//    user input), GpuProfiles() returns an empty list and FindGpuProfile() returns kInternal with
//    the reason.
//  - A lookup by a name the table has parses that one profile (each is compiled in on its own as
//    well, base/embed_json.cmake), with the same checks, once per process (base::EmbeddedEntries,
//    shared with the stacks): a CLI call asks for one GPU, and the whole table (69 KB, mostly the
//    values' sources) cost it more instructions than ResNet-50's symbolic estimate. Any other name,
//    and every other function, reads the whole table.
//  - The data is validated strictly so that a typo in gpu_profiles.json fails loudly in the unit
//    tests: unknown keys, empty sources, calibrated values without a data file, usable > total,
//    duplicate names and unknown allocators are all errors. docs/gpu-profiles.md describes the
//    schema and the meaning of each value.

#include "memest/gpu_profile.h"

#include <cctype>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/json_fields.h"
#include "memest/status.h"

namespace memest::base {

extern const char kGpuProfilesJson[];
// Each profile of kGpuProfilesJson's "profiles" on its own, with its name (base/embed_json.cmake).
extern const int kGpuProfilesJsonCount;
extern const char* const kGpuProfilesJsonNames[];
extern const char* const kGpuProfilesJsonElements[];

// Internal: parses and validates a profile table. It has external linkage but no public header,
// so that tests/unit/gpu_profile_test.cc can feed it malformed text. Never throws (except
// std::bad_alloc).
Result<std::vector<GpuProfile>> ParseGpuProfilesJson(std::string_view text);

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "memest-gpu-profiles/1";

// Keys a profile object may carry; anything else is rejected (catches typos in the data).
const std::vector<std::string_view> kProfileKeys = {
    "name",         "display_name",  "sm_major",         "sm_minor",  "sm_source",
    "total_memory", "usable_memory", "cublas_workspace", "allocator", "mig"};
const std::vector<std::string_view> kMigKeys = {"parent", "profile"};
const std::vector<std::string_view> kTopLevelKeys = {"format", "about", "profiles"};

// The embedded table is memest's own data: a defect in it is an internal error.
const JsonFields kFields(ErrorCode::kInternal);

Result<GpuProfile> ParseProfile(const json& p, size_t index) {
  std::string where = "profiles[" + std::to_string(index) + "]";
  if (!p.is_object()) return Internal(where + ": not an object");
  MEMEST_RETURN_IF_ERROR(kFields.CheckKeys(p, kProfileKeys, where));
  GpuProfile g;
  MEMEST_ASSIGN_OR_RETURN(g.name, kFields.String(p, "name", where));
  if (g.name.empty() || g.name != ToLowerAscii(g.name)) {
    return Internal(where + ": name must be non-empty lower case");
  }
  where += " (" + g.name + ")";
  MEMEST_ASSIGN_OR_RETURN(g.display_name, kFields.String(p, "display_name", where));
  MEMEST_ASSIGN_OR_RETURN(g.sm_major, kFields.SmallInt(p, "sm_major", where));
  MEMEST_ASSIGN_OR_RETURN(g.sm_minor, kFields.SmallInt(p, "sm_minor", where));
  MEMEST_ASSIGN_OR_RETURN(g.sm_source, kFields.String(p, "sm_source", where));
  if (g.sm_source.empty()) return Internal(where + ": empty sm_source");
  MEMEST_ASSIGN_OR_RETURN(g.total_memory, kFields.Bytes(p, "total_memory", where));
  MEMEST_ASSIGN_OR_RETURN(g.usable_memory, kFields.Bytes(p, "usable_memory", where));
  MEMEST_ASSIGN_OR_RETURN(g.cublas_workspace, kFields.Bytes(p, "cublas_workspace", where));
  MEMEST_ASSIGN_OR_RETURN(g.allocator, kFields.String(p, "allocator", where));
  if (g.allocator != "native" && g.allocator != "cudaMallocAsync") {
    return Internal(where + ": allocator must be \"native\" or \"cudaMallocAsync\"");
  }
  if (const auto mig = p.find("mig"); mig != p.end()) {
    if (!mig->is_object()) return Internal(where + ": mig must be an object");
    MEMEST_RETURN_IF_ERROR(kFields.CheckKeys(*mig, kMigKeys, where + ".mig"));
    MEMEST_ASSIGN_OR_RETURN(g.mig_parent, kFields.String(*mig, "parent", where + ".mig"));
    MEMEST_ASSIGN_OR_RETURN(g.mig_profile, kFields.String(*mig, "profile", where + ".mig"));
    if (g.mig_parent.empty() || g.mig_profile.empty()) {
      return Internal(where + ": mig needs a parent profile and a MIG profile name");
    }
  }
  if (g.total_memory.bytes == 0) return Internal(where + ": total_memory must be > 0");
  if (g.usable_memory.bytes == 0 || g.usable_memory.bytes > g.total_memory.bytes) {
    return Internal(where + ": usable_memory must be in (0, total_memory]");
  }
  return g;
}

// The embedded profiles one by one, each checked as in the table when first looked up by name
// (a service asks for the same GPUs estimate after estimate).
const EmbeddedEntries<GpuProfile>& EmbeddedProfiles() {
  static const auto* const entries = new EmbeddedEntries<GpuProfile>(  // never destroyed
      kGpuProfilesJsonCount, kGpuProfilesJsonNames, kGpuProfilesJsonElements, &ParseProfile,
      "embedded gpu_profiles.json");
  return *entries;
}

const EmbeddedTable<GpuProfile>& GetTable() {
  static const auto* const table =
      MakeEmbeddedTable(ParseGpuProfilesJson(kGpuProfilesJson), "embedded gpu_profiles.json");
  return *table;
}

std::string KnownNames(const std::vector<GpuProfile>& profiles) {
  std::string names;
  for (const GpuProfile& p : profiles) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names.empty() ? "(none)" : names;
}

}  // namespace

Result<std::vector<GpuProfile>> ParseGpuProfilesJson(std::string_view text) {
  // allow_exceptions=false: a syntax error yields a "discarded" value instead of throwing.
  const json doc =
      json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Internal("not valid JSON");
  if (!doc.is_object()) return Internal("top level must be an object");
  MEMEST_RETURN_IF_ERROR(kFields.CheckKeys(doc, kTopLevelKeys, "top level"));
  MEMEST_ASSIGN_OR_RETURN(std::string format, kFields.String(doc, "format", "top level"));
  if (format != kFormat) {
    return Internal("format is '" + format + "', expected '" + std::string(kFormat) + "'");
  }
  auto list = doc.find("profiles");
  if (list == doc.end() || !list->is_array() || list->empty()) {
    return Internal("'profiles' must be a non-empty array");
  }
  std::vector<GpuProfile> profiles;
  profiles.reserve(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    MEMEST_ASSIGN_OR_RETURN(GpuProfile p, ParseProfile((*list)[i], i));
    for (const GpuProfile& earlier : profiles) {
      if (earlier.name == p.name) return Internal("duplicate profile name '" + p.name + "'");
    }
    profiles.push_back(std::move(p));
  }
  return profiles;
}

}  // namespace memest::base

namespace memest {

const std::vector<GpuProfile>& GpuProfiles() { return base::GetTable().rows; }

namespace {

// Whether `word` occurs in `text` with no letter or digit on either side.
bool HasWord(std::string_view text, std::string_view word) {
  for (size_t pos = text.find(word); pos != std::string_view::npos;
       pos = text.find(word, pos + 1)) {
    const size_t end = pos + word.size();
    const bool left = pos == 0 || !std::isalnum(static_cast<unsigned char>(text[pos - 1]));
    const bool right = end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end]));
    if (left && right) return true;
  }
  return false;
}

// The family profile for a whole GPU the table has no display name for ("" for none).
std::string FamilyProfile(std::string_view name) {
  const auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (has("h200")) return "h200-141gb";
  if (has("h100")) return "h100-80gb";
  if (has("a100")) return has("80gb") || has("80 gb") ? "a100-80gb" : "a100-40gb";
  if (HasWord(name, "l4")) return "l4-24gb";
  if (has("4090")) return "rtx4090-24gb";
  return "";
}

}  // namespace

Result<GpuProfile> FindGpuProfileForDevice(std::string_view device_name) {
  const std::string name = base::ToLowerAscii(device_name);
  for (const GpuProfile& p : GpuProfiles()) {
    if (base::ToLowerAscii(p.display_name) == name) return p;
  }
  // A slice has a fraction of its GPU's memory: never answer with the whole GPU.
  const std::string family = HasWord(name, "mig") ? "" : FamilyProfile(name);
  if (!family.empty()) {
    if (Result<GpuProfile> p = FindGpuProfile(family); p.ok()) return p;
  }
  return NotFound("no GPU profile for device '" + std::string(device_name) +
                  "' (give one with --gpu-file or a capacity with --capacity)");
}

Result<GpuProfile> FindGpuProfile(std::string_view name) {
  if (const auto* profile = base::EmbeddedProfiles().Find(base::ToLowerAscii(name))) {
    return *profile;
  }
  // Not a name the table has: its error, if it has one, else the names it has.
  const auto& table = base::GetTable();
  if (!table.status.ok()) return table.status;
  return NotFound("unknown GPU profile '" + std::string(name) +
                  "'; known profiles: " + base::KnownNames(table.rows));
}

}  // namespace memest

namespace memest {

Result<std::vector<GpuProfile>> ParseGpuProfiles(std::string_view json) {
  Result<std::vector<GpuProfile>> r = base::ParseGpuProfilesJson(json);
  if (!r.ok()) return InvalidArgument("GPU profiles: " + r.status().message());
  return r;
}

Result<std::vector<GpuProfile>> LoadGpuProfiles(const std::string& path) {
  constexpr std::streamoff kMaxBytes = 1 << 20;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return NotFound("GPU profile file '" + path + "' cannot be read");
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxBytes) {
    return InvalidArgument("GPU profile file '" + path + "' is larger than 1 MiB");
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), size);
  Result<std::vector<GpuProfile>> r = ParseGpuProfiles(text);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

std::string GpuProfilesToJson(const std::vector<GpuProfile>& profiles) {
  using nlohmann::json;
  json list = json::array();
  for (const GpuProfile& g : profiles) {
    json p = {{"name", g.name},
              {"display_name", g.display_name},
              {"sm_major", g.sm_major},
              {"sm_minor", g.sm_minor},
              {"sm_source", g.sm_source},
              {"total_memory", base::BytesJson(g.total_memory)},
              {"usable_memory", base::BytesJson(g.usable_memory)},
              {"cublas_workspace", base::BytesJson(g.cublas_workspace)},
              {"allocator", g.allocator}};
    if (g.is_mig()) p["mig"] = {{"parent", g.mig_parent}, {"profile", g.mig_profile}};
    list.push_back(std::move(p));
  }
  const json doc = {{"format", "memest-gpu-profiles/1"}, {"profiles", list}};
  return doc.dump(2, ' ', false, json::error_handler_t::replace);
}

GpuProfile WithCapacity(GpuProfile p, uint64_t bytes) {
  const std::string source = "given: a capacity of " + std::to_string(bytes) +
                             " bytes imposed on profile '" + p.name + "' (was " +
                             std::to_string(p.usable_memory.bytes) + ")";
  p.total_memory = {bytes, source, false};
  p.usable_memory = {bytes, source, false};
  return p;
}

}  // namespace memest
