// base/json_fields.h -- strict readers for the fields of memest's own JSON data files (GPU
// profiles, stacks): every key type-checked, unknown keys rejected, every number with a source.
//
// Each reader returns a Status with the caller's `code` (kInternal for data compiled into the
// library, a memest bug; kInvalidArgument for a user's file) and a message that names the field
// by its path ("profiles[2] (a100-40gb).cuda_context: 'bytes' must be ..."). Nothing throws.
#ifndef MEMEST_BASE_JSON_FIELDS_H_
#define MEMEST_BASE_JSON_FIELDS_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
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

// The same table's entries also compiled in one by one (base/embed_json.cmake SPLIT: a count,
// each entry's name and its JSON text), so that a lookup by name parses that entry alone: on first
// use, once per process (a call_once per entry: safe from any thread), with `parse`, the checks
// the whole table's parse gives each entry. Callers keep it in a never-destroyed function-local
// static. The checks of the table as a whole (no name twice, ...) stay the table's.
template <typename Row>
class EmbeddedEntries {
 public:
  using Parse = Result<Row> (*)(const nlohmann::json& entry, size_t index);

  EmbeddedEntries(int count, const char* const* names, const char* const* texts, Parse parse,
                  const char* what)
      : count_(static_cast<size_t>(count)),
        names_(names),
        texts_(texts),
        parse_(parse),
        what_(what),
        slots_(std::make_unique<Slot[]>(count_)) {}

  // Entry `index` (< the count) parsed.
  const Result<Row>& At(size_t index) const {
    Slot& slot = slots_[index];
    std::call_once(slot.once, [&] {
      const std::string_view text = texts_[index];
      const nlohmann::json entry = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                                         /*allow_exceptions=*/false);
      slot.row = entry.is_discarded()
                     ? Result<Row>(Internal(std::string(what_) + ": entry " +
                                            std::to_string(index) + " is not valid JSON"))
                     : parse_(entry, index);
    });
    return *slot.row;
  }
  // The entry named `name` exactly (the tables' names are lower case), parsed; nullptr when none
  // is.
  const Result<Row>* Find(std::string_view name) const {
    for (size_t i = 0; i < count_; ++i) {
      if (name == names_[i]) return &At(i);
    }
    return nullptr;
  }

 private:
  struct Slot {
    std::once_flag once;
    std::optional<Result<Row>> row;
  };
  const size_t count_;
  const char* const* const names_;
  const char* const* const texts_;
  const Parse parse_;
  const char* const what_;
  const std::unique_ptr<Slot[]> slots_;
};

}  // namespace memest::base

#endif  // MEMEST_BASE_JSON_FIELDS_H_
