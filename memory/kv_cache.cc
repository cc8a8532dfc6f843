#include "memory/kv_cache.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "base/checked.h"
#include "base/dtype.h"

namespace memest::memory {
namespace {

// "<prefix><digits>.key" or "<prefix><digits>.value".
bool IsCacheName(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0) return false;
  name.remove_prefix(digits);
  return name == ".key" || name == ".value";
}

uint64_t ElementBytes(const core::BoundGraph& b, int id, const Options& o) {
  switch (o.kv_cache_dtype) {
    case KvCacheDtype::kFp16:
    case KvCacheDtype::kBf16:
      return 2;
    case KvCacheDtype::kFp8:
    case KvCacheDtype::kInt8:
      return 1;
    case KvCacheDtype::kAuto:
      break;
  }
  const uint64_t size = base::DTypeSize(b.dtypes[static_cast<size_t>(id)]);
  return o.precision == Precision::kFp32 ? size : std::min<uint64_t>(size, 2);
}

}  // namespace

Result<KvCache> KvCache::Make(const core::BoundGraph& b, const Options& o) {
  const core::Graph& g = *b.graph;
  KvCache kv;
  std::vector<int> past, present;
  for (int id : g.data_inputs) {
    if (IsCacheName(g.value(id).name, "past_key_values.")) past.push_back(id);
  }
  for (int id : g.outputs) {
    if (id >= 0 && IsCacheName(g.value(id).name, "present.")) present.push_back(id);
  }
  kv.values_ = past;
  kv.values_.insert(kv.values_.end(), present.begin(), present.end());
  kv.reads_past_ = !past.empty();
  if (!past.empty()) {
    kv.released_.assign(g.values.size(), false);
    for (int id : past) kv.released_[static_cast<size_t>(id)] = true;
  }
  const bool asked = o.kv_cache_dtype != KvCacheDtype::kAuto || o.paged_kv_cache;
  if (asked && kv.values_.empty()) {
    return InvalidArgument(
        std::string(o.paged_kv_cache ? "a paged KV cache" : "--kv-cache-dtype ") +
        (o.paged_kv_cache ? "" : ToString(o.kv_cache_dtype)) +
        ": the graph has no KV cache (graph inputs past_key_values.<i>.key/value or outputs "
        "present.<i>.key/value)");
  }
  const std::vector<int>& per_token = present.empty() ? past : present;
  kv.layers_ = static_cast<int>(per_token.size() / 2);
  for (int id : per_token) {
    const auto& shape = b.shapes[static_cast<size_t>(id)];
    if (!shape || shape->size() != 4) {
      return InvalidModel("KV cache tensor '" + g.value(id).name +
                          "' is not [batch, kv_heads, tokens, head_dim]");
    }
    const uint64_t row =
        base::SatMul(static_cast<uint64_t>((*shape)[1]), static_cast<uint64_t>((*shape)[3]));
    kv.bytes_per_token_ =
        base::SatAdd(kv.bytes_per_token_, base::SatMul(row, ElementBytes(b, id, o)));
  }
  kv.paged_ = o.paged_kv_cache;
  if (!asked) return kv;
  kv.stored_.assign(g.values.size(), std::nullopt);
  for (int id : kv.values_) {
    const uint64_t numel = b.Numel(id).value_or(0);
    kv.stored_[static_cast<size_t>(id)] =
        o.paged_kv_cache ? 0 : base::SatMul(numel, ElementBytes(b, id, o));
  }
  return kv;
}

std::string PastNameOf(std::string_view present) {
  constexpr std::string_view kPresent = "present.";
  if (!IsCacheName(present, kPresent)) return "";
  return "past_key_values." + std::string(present.substr(kPresent.size()));
}

std::vector<int> KeptOutputs(const core::Graph& g, const KvCache& kv) {
  std::vector<int> kept;
  for (int id : g.outputs) {
    const bool pooled =
        kv.paged() && std::find(kv.values().begin(), kv.values().end(), id) != kv.values().end();
    if (id >= 0 && !pooled) kept.push_back(id);
  }
  return kept;
}

}  // namespace memest::memory
