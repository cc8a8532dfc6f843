// base/distinct.h -- items numbered by equality: equal items share a number, numbered in order of
// their first item. What binding and the analytical search use to do once per distinct thing what
// they did per item: the values' distinct symbolic shapes (core/symbolic_shapes.h ShapeProgram),
// the analytical step's terms alike (analytical/step_terms.h StepCurve) -- thousands to millions
// of items of which a few dozen are distinct.
//
// Policy: an open-addressed table of each number's first item and its hash, probed linearly and
// grown twice over at half full. `same` decides between items of one hash: a hash only chooses
// what is compared, so two items share a number exactly when `same` says so (`same` must be an
// equivalence, and equal items must hash alike).
#ifndef MEMEST_BASE_DISTINCT_H_
#define MEMEST_BASE_DISTINCT_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace memest::base {

struct Distinct {
  static constexpr uint32_t kNone = ~uint32_t{0};
  std::vector<uint32_t> number;  // per item; kNone for an item `take` left out
  std::vector<uint32_t> first;   // per number: its first item
};

// Numbers items 0 .. count-1 (fewer than 2^32) that take(i) admits, by hash(i) (a uint64_t) and
// same(a, b).
template <typename Take, typename Hash, typename Same>
[[nodiscard]] Distinct NumberDistinct(size_t count, const Take& take, const Hash& hash,
                                      const Same& same) {
  struct Slot {
    uint64_t hash = 0;
    uint32_t item = Distinct::kNone;
  };
  Distinct d;
  d.number.assign(count, Distinct::kNone);
  std::vector<Slot> slots(64);
  for (size_t i = 0; i < count; ++i) {
    if (!take(i)) continue;
    const uint64_t h = hash(i);
    size_t s = h & (slots.size() - 1);
    while (slots[s].item != Distinct::kNone &&
           (slots[s].hash != h || !same(static_cast<size_t>(slots[s].item), i))) {
      s = (s + 1) & (slots.size() - 1);
    }
    if (slots[s].item != Distinct::kNone) {
      d.number[i] = d.number[slots[s].item];
      continue;
    }
    d.number[i] = static_cast<uint32_t>(d.first.size());
    d.first.push_back(static_cast<uint32_t>(i));
    slots[s] = {h, static_cast<uint32_t>(i)};
    if (2 * d.first.size() < slots.size()) continue;
    std::vector<Slot> grown(2 * slots.size());
    for (const Slot& old : slots) {
      if (old.item == Distinct::kNone) continue;
      size_t g = old.hash & (grown.size() - 1);
      while (grown[g].item != Distinct::kNone) g = (g + 1) & (grown.size() - 1);
      grown[g] = old;
    }
    slots = std::move(grown);
  }
  return d;
}

}  // namespace memest::base

#endif  // MEMEST_BASE_DISTINCT_H_
