// core/name_index.cc -- see name_index.h.
#include "core/name_index.h"

#include <functional>

namespace memest::core {

uint32_t NameIndex::Hash(std::string_view name) {
  const uint64_t h = std::hash<std::string_view>()(name);
  return static_cast<uint32_t>(h ^ (h >> 32));
}

std::string_view NameIndex::KeyOf(const Slot& s) const {
  return s.key_size <= kInlineKey ? std::string_view(s.key, s.key_size)
                                  : std::string_view(keys_).substr(s.key_offset, s.key_size);
}

void NameIndex::Reserve(size_t names) {
  size_t slots = 16;
  while (slots < names * 2) slots *= 2;
  if (slots > slots_.size()) Rehash(slots);
}

size_t NameIndex::Probe(std::string_view name, uint32_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return i;
    if (s.hash == hash && s.key_size == name.size() && KeyOf(s) == name) return i;
  }
}

void NameIndex::Rehash(size_t slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot());
  const size_t mask = slots - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

std::pair<int, bool> NameIndex::Insert(std::string_view name, int id) {
  if ((size_ + 1) * 2 > slots_.size()) Rehash(slots_.empty() ? 16 : slots_.size() * 2);
  const uint32_t hash = Hash(name);
  Slot& s = slots_[Probe(name, hash)];
  if (s.id >= 0) return {s.id, false};
  s.hash = hash;
  s.id = id;
  s.key_size = static_cast<uint32_t>(name.size());
  if (name.size() <= kInlineKey) {
    name.copy(s.key, name.size());
  } else {
    s.key_offset = static_cast<uint32_t>(keys_.size());
    keys_.append(name);
  }
  ++size_;
  return {id, true};
}

void NameIndex::Prefetch(std::string_view name) const {
  // A table of up to 1 MiB stays in the caches: the second hash would only cost time.
  if (slots_.size() * sizeof(Slot) <= (size_t{1} << 20)) return;
  __builtin_prefetch(&slots_[Hash(name) & (slots_.size() - 1)]);
}

int NameIndex::Find(std::string_view name) const {
  if (slots_.empty()) return -1;
  return slots_[Probe(name, Hash(name))].id;
}

}  // namespace memest::core
