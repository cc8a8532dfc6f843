// base/measured_row.cc -- see memest/measured_row.h.
#include "memest/measured_row.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "base/sha256.h"

namespace memest {
namespace {

using Json = nlohmann::json;

// Errors of one row carry "<source>:<line>: <field>: <problem>".
class RowContext {
 public:
  RowContext(const std::string& source, int line) : where_(source + ":" + std::to_string(line)) {}
  Status Bad(const std::string& field, const std::string& problem) const {
    return InvalidArgument(where_ + ": " + (field.empty() ? "" : field + ": ") + problem);
  }

 private:
  std::string where_;
};

std::string TypeName(const Json& j) { return j.type_name(); }

// Looks up `key` in object `j`; nullptr when absent.
const Json* Find(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

Result<const Json*> RequireObject(const Json& parent, const char* key, const std::string& field,
                                  const RowContext& ctx) {
  const Json* j = Find(parent, key);
  if (j == nullptr) return ctx.Bad(field, "missing");
  if (!j->is_object()) return ctx.Bad(field, "expected an object, got " + TypeName(*j));
  return j;
}

// A string field. Absent or null: `fallback` when not required, else an error.
Result<std::string> GetString(const Json& parent, const char* key, const std::string& field,
                              const RowContext& ctx, bool required,
                              const std::string& fallback = "") {
  const Json* j = Find(parent, key);
  if (j == nullptr || j->is_null()) {
    if (required) return ctx.Bad(field, j == nullptr ? "missing" : "must not be null");
    return fallback;
  }
  if (!j->is_string()) return ctx.Bad(field, "expected a string, got " + TypeName(*j));
  return j->get<std::string>();
}

// A non-negative integer (bytes, counts) or null.
Result<std::optional<uint64_t>> GetBytes(const Json& parent, const char* key,
                                         const std::string& field, const RowContext& ctx) {
  const Json* j = Find(parent, key);
  if (j == nullptr || j->is_null()) return std::optional<uint64_t>();
  if (j->is_number_unsigned()) return std::optional<uint64_t>(j->get<uint64_t>());
  if (j->is_number_integer()) {
    return ctx.Bad(field, "expected a non-negative integer, got " + j->dump());
  }
  return ctx.Bad(
      field, "expected an integer number of bytes or null, got " + TypeName(*j) + " " + j->dump());
}

template <typename E>
Status GetEnum(const Json& parent, const char* key, const std::string& field, const RowContext& ctx,
               Result<E> (*parse)(std::string_view), E* out) {
  MEMEST_ASSIGN_OR_RETURN(std::string s, GetString(parent, key, field, ctx, false));
  if (s.empty()) return Status::Ok();  // absent or null: keep the default
  Result<E> value = parse(s);
  if (!value.ok()) return ctx.Bad(field, value.status().message());
  *out = *value;
  return Status::Ok();
}

Status ParseConfig(const Json& config, const RowContext& ctx, Options* o) {
  {
    const Json* mode = Find(config, "mode");
    if (mode == nullptr || mode->is_null()) return ctx.Bad("config.mode", "missing");
  }
  MEMEST_RETURN_IF_ERROR(GetEnum<Mode>(config, "mode", "config.mode", ctx, &ParseMode, &o->mode));
  if (const Json* b = Find(config, "batch"); b != nullptr && !b->is_null()) {
    if (!b->is_number_integer() || b->get<int64_t>() < 1) {
      return ctx.Bad("config.batch", "expected an integer >= 1 or null, got " + b->dump());
    }
    o->batch = b->get<int64_t>();
  }
  if (const Json* d = Find(config, "dims"); d != nullptr && !d->is_null()) {
    if (!d->is_object()) return ctx.Bad("config.dims", "expected an object, got " + TypeName(*d));
    for (const auto& [name, value] : d->items()) {
      if (!value.is_number_integer() || value.get<int64_t>() < 0) {
        return ctx.Bad("config.dims." + name, "expected an integer >= 0, got " + value.dump());
      }
      o->dims[name] = value.get<int64_t>();
    }
  }
  MEMEST_RETURN_IF_ERROR(GetEnum<Optimizer>(config, "optimizer", "config.optimizer", ctx,
                                            &ParseOptimizer, &o->optimizer));
  if (const Json* wd = Find(config, "weight_decay"); wd != nullptr && !wd->is_null()) {
    if (!wd->is_number() || wd->get<double>() < 0) {
      return ctx.Bad("config.weight_decay", "expected a number >= 0, got " + wd->dump());
    }
    o->weight_decay = wd->get<double>();
  }
  MEMEST_RETURN_IF_ERROR(GetEnum<Precision>(config, "precision", "config.precision", ctx,
                                            &ParsePrecision, &o->precision));
  MEMEST_RETURN_IF_ERROR(GetEnum<Loss>(config, "loss", "config.loss", ctx, &ParseLoss, &o->loss));
  if (const Json* c = Find(config, "checkpoint_segments"); c != nullptr && !c->is_null()) {
    if (!c->is_number_integer() || c->get<int64_t>() < 0) {
      return ctx.Bad("config.checkpoint_segments", "expected an integer >= 0, got " + c->dump());
    }
    o->checkpoint_segments = c->get<int64_t>();
  }
  if (const Json* c = Find(config, "checkpoint_blocks"); c != nullptr && !c->is_null()) {
    if (!c->is_boolean()) return ctx.Bad("config.checkpoint_blocks", "expected true or false");
    o->checkpoint_blocks = c->get<bool>();
  }
  return Status::Ok();
}

// The `config` object (the writer's side of ParseConfig above).
Json ConfigObject(const MeasuredConfig& c) {
  const Options& o = c.options;
  const bool train = o.mode == Mode::kTrain;
  Json dims = Json::object();
  for (const auto& [name, value] : c.dims) dims[name] = value;
  Json j{{"mode", ToString(o.mode)},
         {"batch", o.batch ? Json(*o.batch) : Json(nullptr)},
         {"dims", dims},
         {"optimizer", train ? Json(ToString(o.optimizer)) : Json(nullptr)},
         {"weight_decay", train ? Json(o.weight_decay) : Json(nullptr)},
         {"precision", ToString(o.precision)},
         {"loss", ToString(o.loss)},
         {"iterations", c.iterations ? Json(*c.iterations) : Json(nullptr)}};
  // Written only when used, so that the ids of rows without checkpointing stay as they were.
  if (train && o.checkpoint_segments > 1) j["checkpoint_segments"] = o.checkpoint_segments;
  if (train && o.checkpoint_blocks) j["checkpoint_blocks"] = true;
  return j;
}

}  // namespace

const char* ToString(TruthLevel level) {
  switch (level) {
    case TruthLevel::kTensor:
      return "tensor";
    case TruthLevel::kAllocated:
      return "allocated";
    case TruthLevel::kReserved:
      return "reserved";
    case TruthLevel::kDevice:
      return "device";
  }
  return "?";
}

const char* ToString(RowStatus status) {
  switch (status) {
    case RowStatus::kOk:
      return "ok";
    case RowStatus::kOom:
      return "oom";
    case RowStatus::kError:
      return "error";
  }
  return "?";
}

std::optional<uint64_t> MeasuredPeaks::Get(TruthLevel level) const {
  switch (level) {
    case TruthLevel::kTensor:
      return tensor;
    case TruthLevel::kAllocated:
      return allocated;
    case TruthLevel::kReserved:
      return reserved;
    case TruthLevel::kDevice:
      return device;
  }
  return std::nullopt;
}

Result<MeasuredRow> ParseMeasuredRow(std::string_view text, const std::string& source, int line) {
  const RowContext ctx(source, line);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return ctx.Bad("", std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) return ctx.Bad("", "expected a JSON object, got " + TypeName(j));

  MeasuredRow row;
  row.source = source;
  row.line = line;
  MEMEST_ASSIGN_OR_RETURN(std::string schema, GetString(j, "schema", "schema", ctx, true));
  if (schema != kMeasuredRowSchema) {
    return ctx.Bad("schema",
                   "expected \"" + std::string(kMeasuredRowSchema) + "\", got \"" + schema + "\"");
  }
  MEMEST_ASSIGN_OR_RETURN(row.id, GetString(j, "id", "id", ctx, false));

  MEMEST_ASSIGN_OR_RETURN(const Json* model, RequireObject(j, "model", "model", ctx));
  MEMEST_ASSIGN_OR_RETURN(row.model_path, GetString(*model, "path", "model.path", ctx, true));
  if (row.model_path.empty()) return ctx.Bad("model.path", "empty");
  MEMEST_ASSIGN_OR_RETURN(row.model_sha256,
                          GetString(*model, "sha256", "model.sha256", ctx, false));
  MEMEST_ASSIGN_OR_RETURN(row.model_name, GetString(*model, "name", "model.name", ctx, false));
  MEMEST_ASSIGN_OR_RETURN(row.family,
                          GetString(*model, "family", "model.family", ctx, false, "unknown"));
  if (row.family.empty()) row.family = "unknown";

  MEMEST_ASSIGN_OR_RETURN(const Json* config, RequireObject(j, "config", "config", ctx));
  MEMEST_RETURN_IF_ERROR(ParseConfig(*config, ctx, &row.options));
  // The optimizer implementation the harness ran (run.optimizer_impl, "foreach" or
  // "single-tensor"): estimates are made with the same one. Absent: the default (foreach).
  if (const Json* run = Find(j, "run"); run != nullptr && run->is_object()) {
    MEMEST_RETURN_IF_ERROR(GetEnum<OptimizerImpl>(*run, "optimizer_impl", "run.optimizer_impl", ctx,
                                                  &ParseOptimizerImpl,
                                                  &row.options.optimizer_impl));
  }

  MEMEST_ASSIGN_OR_RETURN(const Json* device, RequireObject(j, "device", "device", ctx));
  MEMEST_ASSIGN_OR_RETURN(row.device_kind, GetString(*device, "kind", "device.kind", ctx, true));
  if (row.device_kind != "cpu" && row.device_kind != "cuda") {
    return ctx.Bad("device.kind", "expected cpu|cuda, got \"" + row.device_kind + "\"");
  }
  MEMEST_ASSIGN_OR_RETURN(row.device_name, GetString(*device, "name", "device.name", ctx, false));
  MEMEST_ASSIGN_OR_RETURN(row.device_total_memory,
                          GetBytes(*device, "total_memory", "device.total_memory", ctx));

  MEMEST_ASSIGN_OR_RETURN(std::string status, GetString(j, "status", "status", ctx, true));
  if (status == "ok") {
    row.status = RowStatus::kOk;
  } else if (status == "oom") {
    row.status = RowStatus::kOom;
  } else if (status == "error") {
    row.status = RowStatus::kError;
  } else {
    return ctx.Bad("status", "expected ok|oom|error, got \"" + status + "\"");
  }
  MEMEST_ASSIGN_OR_RETURN(row.error, GetString(j, "error", "error", ctx, false));

  const Json* peaks = Find(j, "peaks");
  if (peaks == nullptr) return ctx.Bad("peaks", "missing");
  if (!peaks->is_null()) {
    if (!peaks->is_object()) return ctx.Bad("peaks", "expected an object, got " + TypeName(*peaks));
    MEMEST_ASSIGN_OR_RETURN(row.peaks.tensor, GetBytes(*peaks, "tensor", "peaks.tensor", ctx));
    MEMEST_ASSIGN_OR_RETURN(row.peaks.allocated,
                            GetBytes(*peaks, "allocated", "peaks.allocated", ctx));
    MEMEST_ASSIGN_OR_RETURN(row.peaks.reserved,
                            GetBytes(*peaks, "reserved", "peaks.reserved", ctx));
    MEMEST_ASSIGN_OR_RETURN(row.peaks.device, GetBytes(*peaks, "device", "peaks.device", ctx));
  }
  if (row.status == RowStatus::kOk && !row.peaks.tensor && !row.peaks.allocated &&
      !row.peaks.reserved && !row.peaks.device) {
    return ctx.Bad("peaks", "status is ok but no peak was measured");
  }

  if (const Json* used = Find(j, "used_for"); used != nullptr && !used->is_null()) {
    if (!used->is_array()) return ctx.Bad("used_for", "expected an array, got " + TypeName(*used));
    for (const Json& tag : *used) {
      if (!tag.is_string()) return ctx.Bad("used_for", "expected strings, got " + tag.dump());
      row.used_for.push_back(tag.get<std::string>());
    }
  }
  return row;
}

Result<std::vector<MeasuredRow>> ParseMeasuredRows(std::string_view text,
                                                   const std::string& source) {
  std::vector<MeasuredRow> rows;
  int line = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view body = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (!body.empty() && body.back() == '\r') body.remove_suffix(1);
    if (body.find_first_not_of(" \t") == std::string_view::npos) continue;
    MEMEST_ASSIGN_OR_RETURN(MeasuredRow row, ParseMeasuredRow(body, source, line));
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::vector<MeasuredRow>> ReadMeasuredRows(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open rows file '" + path + "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return NotFound("cannot read rows file '" + path + "'");
  return ParseMeasuredRows(buffer.str(), path);
}

std::string MeasuredConfigJson(const MeasuredConfig& config) { return ConfigObject(config).dump(); }

std::string MeasuredRowId(const MeasuredConfig& config, const std::string& model_sha256) {
  // nlohmann::json objects keep keys sorted and dump() writes no spaces: canonical text.
  const Json key{{"config", ConfigObject(config)}, {"model_sha256", model_sha256}};
  return base::Sha256Hex(key.dump());
}
}  // namespace memest
