// base/json_fields.h -- strict readers for the fields of memest's own JSON data files (GPU
// profiles, stacks): every key type-checked, unknown keys rejected, every number with a source.
//
// Each reader returns a Status with the caller's `code` (kInternal for data compiled into the
// library, a memest bug; kInvalidArgument for a user's file) and a message that names the field
// by its path ("profiles[2] (a100-40gb).cuda_context: 'bytes' must be ..."). Nothing throws.
#ifndef MEMEST_BASE_JSON_FIELDS_H_
#define MEMEST_BASE_JSON_FIELDS_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memest/estimate.h"
#include "memest/gpu_profile.h"
#include "memest/status.h"

namespace memest::base {

class JsonFields {
 public:
  explicit JsonFields(ErrorCode code) : code_(code) {}

  Status Error(const std::string& message) const { return Status(code_, message); }
  // Every key of `obj` is one of `allowed`.
  Status CheckKeys(const nlohmann::json& obj, const std::vector<std::string_view>& allowed,
                   const std::string& where) const;
  Result<std::string> String(const nlohmann::json& obj, const char* key,
                             const std::string& where) const;
  // A non-empty string.
  Result<std::string> Source(const nlohmann::json& obj, const char* key,
                             const std::string& where) const;
  Result<int> SmallInt(const nlohmann::json& obj, const char* key, const std::string& where) const;
  Result<bool> Bool(const nlohmann::json& obj, const char* key, const std::string& where) const;
  // A finite number.
  Result<double> Number(const nlohmann::json& obj, const char* key, const std::string& where) const;
  // {"bytes": N, "source": "...", "calibrated": bool}: a non-empty source; calibrated exactly
  // when the source starts with "measured: " (or, for a stack fitted by `memest calibrate`,
  // "fitted: ").
  Result<ProfileValue> Bytes(const nlohmann::json& obj, const char* key,
                             const std::string& where) const;

 private:
  ErrorCode code_;
};

std::string ToLowerAscii(std::string_view s);

// A byte value with its provenance, as the data files write it: {"bytes", "source", "calibrated"}
// (the writer of JsonFields::Bytes).
nlohmann::json BytesJson(const ProfileValue& value);

// Diagnostics as every memest JSON document writes them: an array of {"severity" ("warning" or
// "info"), "code", "message", "node", "op_type"}, in that key order.
nlohmann::ordered_json DiagnosticsJson(const std::vector<Diagnostic>& diagnostics);

// A list parsed once from JSON compiled into the library (the GPU and stack profile tables):
// its rows, or why they could not be parsed (rows then empty). Callers keep it in a
// function-local static, so it is built on first use and immutable afterwards.
template <typename Row>
struct EmbeddedTable {
  Status status;
  std::vector<Row> rows;
};

// The table from the result of parsing it; `what` names the table in the error.
template <typename Row>
const EmbeddedTable<Row>* MakeEmbeddedTable(Result<std::vector<Row>> parsed, const char* what) {
  auto* t = new EmbeddedTable<Row>();  // never destroyed: safe to use during static destruction
  if (parsed.ok()) {
    t->rows = std::move(parsed).value();
  } else {
    t->status = parsed.status().WithContext(what);
  }
  return t;
}

}  // namespace memest::base

#endif  // MEMEST_BASE_JSON_FIELDS_H_
