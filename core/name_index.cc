// core/name_index.cc -- see name_index.h.
#include "core/name_index.h"

#include <cstring>

namespace memest::core {
namespace {

// The 128-bit product of a and b, its halves folded together by xor: one multiply that spreads
// every input bit over the result (the "mum" step of wyhash, github.com/wangyi-fudan/wyhash).
uint64_t Mix(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

// Odd 64-bit constants with about half their bits set (wyhash's default secret).
constexpr uint64_t kK0 = 0xa0761d6478bd642full;
constexpr uint64_t kK1 = 0xe7037ed1a0b428dbull;

}  // namespace

uint32_t NameIndex::Hash(std::string_view name) {
  // Eight bytes at a time, the length mixed in first so that the tail's reading is
  // unambiguous. libstdc++'s std::hash (murmur2, byte-wise tail) spent about 66 instructions on a
  // typical tensor name; this spends about half of that (callgrind). Names are not adversarial
  // input to defend against more than std::hash did: neither is seeded.
  const char* p = name.data();
  size_t n = name.size();
  uint64_t h = Mix(n ^ kK0, kK1);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = Mix(h ^ w, kK1);
  }
  if (n > 0) {
    // The last 1-7 bytes without a variable-length copy (a call to memcpy): two overlapping
    // 4-byte reads, or the first, middle and last byte. For a given n either covers every byte.
    uint64_t w;
    if (n >= 4) {
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + n - 4, 4);
      w = (uint64_t{lo} << 32) | hi;
    } else {
      const auto byte = [p](size_t i) { return uint64_t{static_cast<unsigned char>(p[i])}; };
      w = (byte(0) << 16) | (byte(n >> 1) << 8) | byte(n - 1);
    }
    h = Mix(h ^ w, kK0);
  }
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
