// api/json.cc -- memest/json.h: options and estimates as JSON (docs/json-schema.md).
//
// Policy: reading is strict. Every key of an object is looked up in a table of known keys; an
// unknown key, a value of the wrong JSON type, an integer out of range or an unknown enum
// spelling is InvalidArgument naming the key path ("parallel.tp"), so that a typo in a
// scheduler's request is an error, never a default silently used.
#include "memest/json.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>

#include "base/json_fields.h"

namespace memest {
namespace {

using Json = nlohmann::ordered_json;

// A setter for one key: reads `v` (at `path`) into the options, or says why not.
using Setter = std::function<Status(const Json& v, const std::string& path, Options* o)>;

Status TypeError(const std::string& path, const char* expected) {
  return InvalidArgument("options JSON: '" + path + "' must be " + expected);
}

template <typename T>
Setter Int(T Options::*field) {
  return [field](const Json& v, const std::string& path, Options* o) -> Status {
    if (!v.is_number_integer()) return TypeError(path, "an integer");
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return TypeError(path, "an integer below 2^63");
    }
    o->*field = static_cast<T>(v.get<int64_t>());
    return Status::Ok();
  };
}

// A member of a nested struct: `get` returns the struct inside Options.
template <typename S, typename T>
Setter NestedNumber(S Options::*outer, T S::*field) {
  return [outer, field](const Json& v, const std::string& path, Options* o) -> Status {
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return TypeError(path, "true or false");
      (o->*outer).*field = v.get<bool>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) return TypeError(path, "a number");
      (o->*outer).*field = v.get<double>();
    } else if constexpr (std::is_unsigned_v<T>) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > std::numeric_limits<T>::max()) {
        return TypeError(path, "an integer >= 0 in range");
      }
      (o->*outer).*field = static_cast<T>(v.get<uint64_t>());
    } else {
      if (!v.is_number_integer() ||
          (v.is_number_unsigned() &&
           v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
        return TypeError(path, "an integer in range");
      }
      (o->*outer).*field = static_cast<T>(v.get<int64_t>());
    }
    return Status::Ok();
  };
}

// An optional member of a nested struct: null unsets it; otherwise an integer >= 0 (unsigned T)
// or any number (floating-point T), whose range Validate() checks.
template <typename S, typename T>
Setter NestedOptional(S Options::*outer, std::optional<T> S::*field) {
  static_assert(std::is_floating_point_v<T> || std::is_unsigned_v<T>);
  return [outer, field](const Json& v, const std::string& path, Options* o) -> Status {
    if (v.is_null()) {
      ((o->*outer).*field).reset();
      return Status::Ok();
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) return TypeError(path, "a number or null");
    } else if (!v.is_number_unsigned() || v.get<uint64_t>() > std::numeric_limits<T>::max()) {
      return TypeError(path, "an integer >= 0 or null");
    }
    (o->*outer).*field = v.get<T>();
    return Status::Ok();
  };
}

template <typename T>
Setter Flag(T Options::*field) {
  return [field](const Json& v, const std::string& path, Options* o) -> Status {
    if (!v.is_boolean()) return TypeError(path, "true or false");
    o->*field = v.get<bool>();
    return Status::Ok();
  };
}

Setter Text(std::string Options::*field) {
  return [field](const Json& v, const std::string& path, Options* o) -> Status {
    if (!v.is_string()) return TypeError(path, "a string");
    o->*field = v.get<std::string>();
    return Status::Ok();
  };
}

template <typename E, typename Parse>
Setter Enum(E Options::*field, Parse parse) {
  return [field, parse](const Json& v, const std::string& path, Options* o) -> Status {
    if (!v.is_string()) return TypeError(path, "a string");
    Result<E> e = parse(v.get<std::string>());
    if (!e.ok()) return e.status().WithContext("options JSON: '" + path + "'");
    o->*field = *e;
    return Status::Ok();
  };
}

using Table = std::map<std::string, Setter, std::less<>>;

Status ReadObject(const Json& j, const std::string& prefix, const Table& table, Options* o) {
  if (!j.is_object()) return TypeError(prefix.empty() ? "the options" : prefix, "an object");
  for (const auto& [key, value] : j.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    const auto it = table.find(key);
    if (it == table.end()) return InvalidArgument("options JSON: unknown key '" + path + "'");
    MEMEST_RETURN_IF_ERROR(it->second(value, path, o));
  }
  return Status::Ok();
}

const Table& FitTable() {
  static const Table t = {
      {"on",
       [](const Json& v, const std::string& path, Options* o) -> Status {
         if (!v.is_string()) return TypeError(path, "a string");
         Result<FitOn> f = ParseFitOn(v.get<std::string>());
         if (!f.ok()) return f.status().WithContext("options JSON: '" + path + "'");
         o->fit.on = *f;
         return Status::Ok();
       }},
      {"margin_fraction", NestedNumber(&Options::fit, &FitPolicy::margin_fraction)},
      {"margin_bytes", NestedNumber(&Options::fit, &FitPolicy::margin_bytes)},
  };
  return t;
}

const Table& AllocatorTable() {
  static const Table t = {
      {"expandable_segments",
       NestedNumber(&Options::allocator, &AllocatorSettings::expandable_segments)},
      {"max_split_size", NestedOptional(&Options::allocator, &AllocatorSettings::max_split_size)},
      {"roundup_power2_divisions",
       NestedNumber(&Options::allocator, &AllocatorSettings::roundup_power2_divisions)},
      {"memory_fraction", NestedOptional(&Options::allocator, &AllocatorSettings::memory_fraction)},
  };
  return t;
}

const Table& ParallelTable() {
  using P = Parallelism;
  static const Table t = {
      {"world_size", NestedNumber(&Options::parallel, &P::world_size)},
      {"dp", NestedNumber(&Options::parallel, &P::dp)},
      {"tp", NestedNumber(&Options::parallel, &P::tp)},
      {"pp", NestedNumber(&Options::parallel, &P::pp)},
      {"sharding",
       [](const Json& v, const std::string& path, Options* o) -> Status {
         if (!v.is_string()) return TypeError(path, "a string");
         Result<Sharding> s = ParseSharding(v.get<std::string>());
         if (!s.ok()) return s.status().WithContext("options JSON: '" + path + "'");
         o->parallel.sharding = *s;
         return Status::Ok();
       }},
      {"sequence_parallel", NestedNumber(&Options::parallel, &P::sequence_parallel)},
      {"fsdp_unit",
       [](const Json& v, const std::string& path, Options* o) -> Status {
         if (!v.is_string()) return TypeError(path, "a string");
         o->parallel.fsdp_unit = v.get<std::string>();
         return Status::Ok();
       }},
      {"offload_optimizer", NestedNumber(&Options::parallel, &P::offload_optimizer)},
      {"offload_params", NestedNumber(&Options::parallel, &P::offload_params)},
      {"bucket_cap_mb", NestedNumber(&Options::parallel, &P::bucket_cap_mb)},
      {"gradient_as_bucket_view", NestedNumber(&Options::parallel, &P::gradient_as_bucket_view)},
      {"nccl_buffsize", NestedNumber(&Options::parallel, &P::nccl_buffsize)},
      {"nccl_channels", NestedNumber(&Options::parallel, &P::nccl_channels)},
      {"gpus_per_node", NestedNumber(&Options::parallel, &P::gpus_per_node)},
  };
  return t;
}

const Table& OptionsTable() {
  static const Table t = {
      {"mode", Enum(&Options::mode, ParseMode)},
      {"batch",
       [](const Json& v, const std::string& path, Options* o) -> Status {
         if (v.is_null()) {
           o->batch.reset();
           return Status::Ok();
         }
         if (!v.is_number_integer()) return TypeError(path, "an integer or null");
         o->batch = v.get<int64_t>();
         return Status::Ok();
       }},
      {"dims",
       [](const Json& v, const std::string& path, Options* o) -> Status {
         if (!v.is_object()) return TypeError(path, "an object of integers");
         for (const auto& [name, value] : v.items()) {
           if (!value.is_number_integer()) return TypeError(path + "." + name, "an integer");
           o->dims[name] = value.get<int64_t>();
         }
         return Status::Ok();
       }},
      {"optimizer", Enum(&Options::optimizer, ParseOptimizer)},
      {"optimizer_impl", Enum(&Options::optimizer_impl, ParseOptimizerImpl)},
      {"weight_decay",
       [](const Json& v, const std::string& path, Options* o) -> Status {
         if (!v.is_number()) return TypeError(path, "a number");
         o->weight_decay = v.get<double>();
         return Status::Ok();
       }},
      {"micro_batches", Int(&Options::micro_batches)},
      {"checkpoint_segments", Int(&Options::checkpoint_segments)},
      {"checkpoint_blocks", Flag(&Options::checkpoint_blocks)},
      {"outputs_held", Flag(&Options::outputs_held)},
      {"precision", Enum(&Options::precision, ParsePrecision)},
      {"loss", Enum(&Options::loss, ParseLoss)},
      {"gpu", Text(&Options::gpu)},
      {"stack", Text(&Options::stack)},
      {"attention", Enum(&Options::attention, ParseAttention)},
      {"trainable", Text(&Options::trainable)},
      {"freeze", Text(&Options::freeze)},
      {"weight_dtype", Enum(&Options::weight_dtype, ParseWeightDtype)},
      {"kv_cache_dtype", Enum(&Options::kv_cache_dtype, ParseKvCacheDtype)},
      {"paged_kv_cache", Flag(&Options::paged_kv_cache)},
      {"fused_kernels", Flag(&Options::fused_kernels)},
      {"inplace_relu", Flag(&Options::inplace_relu)},
      {"library_workspaces", Flag(&Options::library_workspaces)},
      {"allow_unknown_shapes", Flag(&Options::allow_unknown_shapes)},
      {"fit", [](const Json& v, const std::string& path,
                 Options* o) { return ReadObject(v, path, FitTable(), o); }},
      {"allocator", [](const Json& v, const std::string& path,
                       Options* o) { return ReadObject(v, path, AllocatorTable(), o); }},
      {"parallel", [](const Json& v, const std::string& path,
                      Options* o) { return ReadObject(v, path, ParallelTable(), o); }},
      // Read after every other key (ReadRunTimeGpu): they depend on "gpu".
      {"gpu_profile", [](const Json&, const std::string&, Options*) { return Status::Ok(); }},
      {"capacity", [](const Json&, const std::string&, Options*) { return Status::Ok(); }},
  };
  return t;
}

Json BreakdownJson(const Breakdown& b) {
  return Json{{"weights", b.weights},
              {"gradients", b.gradients},
              {"optimizer_state", b.optimizer_state},
              {"saved_activations", b.saved_activations},
              {"transient", b.transient},
              {"allocator_overhead", b.allocator_overhead},
              {"cached_free", b.cached_free},
              {"cuda_context", b.cuda_context},
              {"library_memory", b.library_memory},
              {"unaccounted", b.unaccounted},
              {"collective_buffers", b.collective_buffers},
              {"nccl_buffers", b.nccl_buffers}};
}

}  // namespace

// The GPU given at run time (memest/gpu_profile.h): "gpu_profile", one profile object in the
// built-in table's format, and "capacity", bytes replacing the chosen profile's memory.
Status ReadRunTimeGpu(const Json& j, Options* o) {
  if (const auto it = j.find("gpu_profile"); it != j.end()) {
    if (!it->is_object()) return TypeError("gpu_profile", "an object (one GPU profile)");
    const Json doc = {{"format", "memest-gpu-profiles/1"},
                      {"about", "one profile given in the options"},
                      {"profiles", Json::array({*it})}};
    Result<std::vector<GpuProfile>> p = ParseGpuProfiles(doc.dump());
    if (!p.ok()) return p.status().WithContext("options JSON: 'gpu_profile'");
    o->custom_gpu = std::make_shared<const GpuProfile>(p->front());
    o->gpu = p->front().name;
  }
  if (const auto it = j.find("capacity"); it != j.end()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() == 0) {
      return TypeError("capacity", "an integer number of bytes above 0");
    }
    MEMEST_ASSIGN_OR_RETURN(GpuProfile base, ResolveGpuProfile(*o));
    o->custom_gpu = std::make_shared<const GpuProfile>(WithCapacity(base, it->get<uint64_t>()));
  }
  return Status::Ok();
}

Result<Options> OptionsFromJson(std::string_view text) {
  Options o;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return o;
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("options JSON: not valid JSON");
  MEMEST_RETURN_IF_ERROR(ReadObject(j, "", OptionsTable(), &o));
  MEMEST_RETURN_IF_ERROR(ReadRunTimeGpu(j, &o));
  MEMEST_RETURN_IF_ERROR(Validate(o));
  return o;
}

std::string OptionsToJson(const Options& o) {
  Json dims = Json::object();
  for (const auto& [name, value] : o.dims) dims[name] = value;
  Json alloc = {{"expandable_segments", o.allocator.expandable_segments},
                {"max_split_size", nullptr},
                {"roundup_power2_divisions", o.allocator.roundup_power2_divisions}};
  if (o.allocator.max_split_size) alloc["max_split_size"] = *o.allocator.max_split_size;
  alloc["memory_fraction"] = nullptr;
  if (o.allocator.memory_fraction) alloc["memory_fraction"] = *o.allocator.memory_fraction;
  Json j = {{"mode", ToString(o.mode)},
            {"batch", nullptr},
            {"dims", dims},
            {"optimizer", ToString(o.optimizer)},
            {"optimizer_impl", ToString(o.optimizer_impl)},
            {"weight_decay", o.weight_decay},
            {"micro_batches", o.micro_batches},
            {"checkpoint_segments", o.checkpoint_segments},
            {"checkpoint_blocks", o.checkpoint_blocks},
            {"outputs_held", o.outputs_held},
            {"precision", ToString(o.precision)},
            {"loss", ToString(o.loss)},
            {"gpu", o.gpu},
            {"stack", o.stack},
            {"attention", ToString(o.attention)},
            {"trainable", o.trainable},
            {"freeze", o.freeze},
            {"weight_dtype", ToString(o.weight_dtype)},
            {"kv_cache_dtype", ToString(o.kv_cache_dtype)},
            {"paged_kv_cache", o.paged_kv_cache},
            {"fused_kernels", o.fused_kernels},
            {"inplace_relu", o.inplace_relu},
            {"library_workspaces", o.library_workspaces},
            {"allow_unknown_shapes", o.allow_unknown_shapes},
            {"fit",
             {{"on", ToString(o.fit.on)},
              {"margin_fraction", o.fit.margin_fraction},
              {"margin_bytes", o.fit.margin_bytes}}},
            {"allocator", alloc}};
  if (o.batch) j["batch"] = *o.batch;
  if (o.custom_gpu) j["capacity"] = o.custom_gpu->usable_memory.bytes;
  if (o.prefill) {  // what it says, not its model: OptionsFromJson cannot read one back
    j["prefill"] = {{"seq_dim", o.prefill->seq_dim},
                    {"past_dim", o.prefill->past_dim},
                    {"cache_emptied", o.prefill->cache_emptied}};
  }
  if (o.parallel.enabled()) {
    const Parallelism& p = o.parallel;
    j["parallel"] = {{"world_size", p.world_size},
                     {"dp", p.DataParallel()},
                     {"tp", p.tp},
                     {"pp", p.pp},
                     {"sharding", ToString(p.sharding)},
                     {"sequence_parallel", p.sequence_parallel},
                     {"fsdp_unit", p.fsdp_unit},
                     {"offload_optimizer", p.offload_optimizer},
                     {"offload_params", p.offload_params},
                     {"bucket_cap_mb", p.bucket_cap_mb},
                     {"gradient_as_bucket_view", p.gradient_as_bucket_view},
                     {"nccl_buffsize", p.nccl_buffsize},
                     {"nccl_channels", p.nccl_channels},
                     {"gpus_per_node", p.gpus_per_node}};
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string EstimateToJson(const Estimate& e, const Fit* fit) {
  Json j = {{"backend", e.backend}};
  j["peak"] = {
      {"allocated", e.peak_allocated}, {"reserved", e.peak_reserved}, {"device", e.peak_device}};
  j["breakdown"] = BreakdownJson(e.breakdown);
  j["peak_phase"] = ToString(e.peak_phase);
  j["peak_node"] = e.peak_node;
  if (e.device_low || e.device_high) {
    Json interval = {{"low", nullptr}, {"high", nullptr}};
    if (e.device_low) interval["low"] = *e.device_low;
    if (e.device_high) interval["high"] = *e.device_high;
    j["interval"] = interval;
  } else {
    j["interval"] = nullptr;
  }
  if (!e.ranks.empty()) {
    Json ranks = Json::array();
    for (const RankPeak& rk : e.ranks) {
      ranks.push_back({{"first_rank", rk.first_rank},
                       {"last_rank", rk.last_rank},
                       {"stage", rk.stage},
                       {"blocks", rk.layers},
                       {"in_flight", rk.in_flight},
                       {"peak_device", rk.peak_device},
                       {"breakdown", BreakdownJson(rk.breakdown)},
                       {"peak_phase", ToString(rk.peak_phase)},
                       {"peak_node", rk.peak_node},
                       {"host_bytes", rk.host_bytes},
                       {"note", rk.note}});
    }
    j["ranks"] = ranks;
    j["host_bytes"] = e.host_bytes;
  }
  if (!e.phases.empty()) {
    Json phases = Json::array();
    for (const PhasePeak& p : e.phases) {
      phases.push_back({{"phase", ToString(p.phase)},
                        {"peak",
                         {{"allocated", p.peak_allocated},
                          {"reserved", p.peak_reserved},
                          {"device", p.peak_device}}},
                        {"breakdown", BreakdownJson(p.breakdown)}});
    }
    j["phases"] = phases;
  }
  j["diagnostics"] = base::DiagnosticsJson(e.diagnostics);
  if (fit != nullptr) {
    j["fit"] = {{"fits", fit->fits},
                {"capacity", fit->capacity},
                {"headroom", fit->headroom},
                {"judged", fit->judged},
                {"on", fit->on_upper ? "upper" : "point"},
                {"margin", fit->margin}};
    if (fit->reserved_limit > 0) j["fit"]["reserved_limit"] = fit->reserved_limit;
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace memest
