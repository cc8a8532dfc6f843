// The allocator model's free list: the same best fit as a std::map (PyTorch's std::set) while
// it grows to hundreds of entries, shrinks to none and grows again.
#include "symbolic/free_list.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace memest::symbolic {
namespace {

// Entries enough to fill many of the list's bins several deep.
constexpr int kMany = 64;

// The list's best fit for `probe` is the map's lower_bound there: the same key and id, or none.
void ExpectLowerBoundAsMap(const FreeList& list, const std::map<FreeList::Key, int64_t>& reference,
                           FreeList::Key probe) {
  const auto want = reference.lower_bound(probe);
  const auto got = list.LowerBound(probe);
  ASSERT_EQ(got.has_value(), want != reference.end()) << probe.first << " " << probe.second;
  if (got) {
    ASSERT_EQ(got->first, want->first) << probe.first << " " << probe.second;
    ASSERT_EQ(got->second, want->second) << probe.first << " " << probe.second;
  }
}

// ForEach visits the list's entries in the map's order, with the same ids.
void ExpectForEachAsMap(const FreeList& list, const std::map<FreeList::Key, int64_t>& reference) {
  std::vector<std::pair<FreeList::Key, int64_t>> visited;
  list.ForEach([&](FreeList::Key key, int64_t id) { visited.emplace_back(key, id); });
  ASSERT_EQ(visited,
            (std::vector<std::pair<FreeList::Key, int64_t>>(reference.begin(), reference.end())));
}

// Best fit as the map's at `samples` of its keys drawn at random, and at the addresses just
// past and just before each.
void ExpectLowerBoundAsMapNearSampledKeys(const FreeList& list,
                                          const std::map<FreeList::Key, int64_t>& reference,
                                          std::mt19937_64& random, int samples) {
  for (int i = 0; i < samples && !reference.empty(); ++i) {
    const FreeList::Key k = std::next(reference.begin(), random() % reference.size())->first;
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, k));
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, {k.first, k.second + 1}));
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, {k.first, k.second - 1}));
  }
}

// Checks `list` against a std::map holding the same entries, at sizes between and beyond them.
void ExpectSameAsMap(const FreeList& list, const std::map<FreeList::Key, int64_t>& reference) {
  ASSERT_EQ(list.size(), reference.size());
  for (uint64_t size = 0; size <= 260 * 512; size += 256) {
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, {size, 0}));
  }
  // Every entry is found at its own key, and a key just past it finds the next one.
  for (const auto& [key, id] : reference) {
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, key));
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, {key.first, key.second + 1}));
  }
}

TEST(FreeListTest, BestFitIsTheSameAsAStdMapWhileItGrowsAndEmpties) {
  FreeList list;
  std::map<FreeList::Key, int64_t> reference;
  std::mt19937_64 random(7);
  int64_t id = 0;
  const int steps = 20 * kMany;
  // Grow to hundreds of entries (inserting two keys for each erased one), then shrink to nothing
  // (erasing two for each inserted), checking on the way up, at the top and on the way down.
  for (int step = 0; step < 2 * steps; ++step) {
    const bool growing = step < steps;
    const FreeList::Key key{512 * (1 + random() % 64), 2097152 * (random() % 4096)};
    if ((growing || step % 2 == 0) && reference.count(key) == 0) {
      list.Insert(key, id);
      reference.emplace(key, id++);
    }
    const int erases = growing ? (step % 2) : 2;
    for (int e = 0; e < erases && !reference.empty(); ++e) {
      const FreeList::Key gone = std::next(reference.begin(), random() % reference.size())->first;
      list.Erase(gone);
      reference.erase(gone);
    }
    if (step == 100 || step == steps || step == steps + steps / 2) {
      ExpectSameAsMap(list, reference);
    }
  }
  ExpectSameAsMap(list, reference);
  ASSERT_TRUE(reference.empty()) << "the shrinking half should empty the list";
  list.Insert({1024, 512}, 9);
  reference.emplace(FreeList::Key{1024, 512}, 9);
  ExpectSameAsMap(list, reference);
}

// Replace = Erase + Insert, whether the new key lands in the same size bin (near the old one, as a
// split or merged block's does) or in another (far from it).
TEST(FreeListTest, ReplaceIsEraseThenInsertWithinAndAcrossBins) {
  FreeList list;
  std::map<FreeList::Key, int64_t> reference;
  std::mt19937_64 random(11);
  int64_t id = 0;
  auto fresh_key = [&](uint64_t size) {
    FreeList::Key key{size, 2097152 * (random() % 65536)};
    while (reference.count(key) > 0) key.second += 512;
    return key;
  };
  for (int i = 0; i < 8 * kMany; ++i) {
    const FreeList::Key key = fresh_key(512 * (1 + random() % 256));
    list.Insert(key, id);
    reference.emplace(key, id++);
  }
  for (int step = 0; step < 4000; ++step) {
    const FreeList::Key old_key = std::next(reference.begin(), random() % reference.size())->first;
    reference.erase(old_key);
    // Half near the old size (a split or a merge), half anywhere.
    const uint64_t near = std::max<uint64_t>(512, old_key.first + 512 * (random() % 9) - 2048);
    const FreeList::Key new_key = fresh_key(step % 2 == 0 ? near : 512 * (1 + random() % 256));
    list.Replace(old_key, new_key, id);
    reference.emplace(new_key, id++);
    if (step % 500 == 0) ExpectSameAsMap(list, reference);
  }
  ExpectSameAsMap(list, reference);
  // An absent old key: the new one is inserted all the same.
  const FreeList::Key absent{512, 1}, added = fresh_key(1024);
  list.Replace(absent, added, id);
  reference.emplace(added, id);
  ExpectSameAsMap(list, reference);
}

// The allocator's pattern -- find the best fit, then take that entry (erase it, or replace it by
// a split's remainder) -- and the same after the list changed between the search and the take,
// so that the position the search remembered names another entry or none.
TEST(FreeListTest, TakingTheBestFitAfterTheListChangedTakesThatEntry) {
  FreeList list;
  std::map<FreeList::Key, int64_t> reference;
  std::mt19937_64 random(13);
  int64_t id = 0;
  auto insert_fresh = [&] {
    FreeList::Key key{512 * (1 + random() % 128), 2097152 * (random() % 65536)};
    while (reference.count(key) > 0) key.second += 512;
    list.Insert(key, id);
    reference.emplace(key, id++);
  };
  for (int i = 0; i < 3 * kMany; ++i) insert_fresh();
  for (int step = 0; step < 3000; ++step) {
    const auto found = list.LowerBound({512 * (1 + random() % 128), 0});
    if (!found) {
      insert_fresh();
      continue;
    }
    const FreeList::Key taken = found->first;
    if (step % 3 == 1) {
      insert_fresh();  // entries before the found one move
    } else if (step % 3 == 2 && reference.size() > 1) {
      const auto other = reference.begin()->first == taken ? std::prev(reference.end())->first
                                                           : reference.begin()->first;
      list.Erase(other);
      reference.erase(other);
    }
    reference.erase(taken);
    if (step % 2 == 0) {
      list.Erase(taken);
    } else {
      const FreeList::Key rest{std::max<uint64_t>(512, taken.first - 512), taken.second + 512};
      if (reference.count(rest) == 0) {
        list.Replace(taken, rest, id);
        reference.emplace(rest, id++);
      } else {
        list.Erase(taken);
      }
    }
    if (reference.size() < size_t{kMany}) insert_fresh();
    if (step % 500 == 0) ExpectSameAsMap(list, reference);
  }
  ExpectSameAsMap(list, reference);
}

// Sizes from a byte to a petabyte, not only multiples of 512, and many at the edges of the
// list's size bins (powers of two and 512 bytes either side): every search lands where a
// std::map's does, and ForEach visits the entries in the map's order.
TEST(FreeListTest, BestFitIsTheSameAsAStdMapAtEverySizeBinEdge) {
  FreeList list;
  std::map<FreeList::Key, int64_t> reference;
  std::mt19937_64 random(17);
  std::vector<uint64_t> sizes;
  for (int bit = 0; bit < 50; ++bit) {
    for (const int64_t delta : {-512, -1, 0, 1, 511, 512}) {
      const int64_t size = (int64_t{1} << bit) + delta;
      if (size > 0) sizes.push_back(static_cast<uint64_t>(size));
    }
  }
  for (int i = 0; i < 400; ++i) sizes.push_back((random() >> 14) >> (random() % 50));
  int64_t id = 0;
  for (const uint64_t size : sizes) {
    const FreeList::Key key{size, 2097152 * (random() % 8)};
    if (reference.count(key) > 0) continue;
    list.Insert(key, id);
    reference.emplace(key, id++);
  }
  auto expect_same = [&] {
    ASSERT_EQ(list.size(), reference.size());
    for (const uint64_t size : sizes) {
      for (const FreeList::Key& key :
           {FreeList::Key{size - 1, 0}, FreeList::Key{size, 0},
            FreeList::Key{size, 2097152 * 3 + 1}, FreeList::Key{size + 1, 0}}) {
        ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, key));
      }
    }
    ASSERT_NO_FATAL_FAILURE(ExpectForEachAsMap(list, reference));
  };
  expect_same();
  for (auto it = reference.begin(); it != reference.end();) {  // every other entry goes
    list.Erase(it->first);
    it = reference.erase(it);
    if (it != reference.end()) ++it;
  }
  expect_same();
}

// Inserts, erases (of present and absent keys, some past every bin the list has made), replaces
// and best-fit takes interleaved, at sizes at the edges of the bins inside each power of two and
// up to 2^64 - 1, where one bin holds many sizes: the same answers as a std::map throughout.
TEST(FreeListTest, MixedOperationsAtAnySizeMatchAStdMap) {
  FreeList list;
  std::map<FreeList::Key, int64_t> reference;
  std::mt19937_64 random(19);
  auto any_size = [&]() -> uint64_t {
    const int bit = 9 + static_cast<int>(random() % 55);  // 2^9 .. 2^63
    const uint64_t edge = (uint64_t{1} << bit) + (random() % 64) * (uint64_t{1} << (bit - 6));
    switch (random() % 4) {
      case 0:
        return edge;  // a bin's first size
      case 1:
        return edge - 1;  // the bin before's last
      case 2:
        return random() | (uint64_t{1} << 63) | 1;  // up to 2^64 - 1
      default:
        return edge + 512 * (random() % 4);
    }
  };
  int64_t id = 0;
  auto check = [&] {
    ASSERT_EQ(list.size(), reference.size());
    for (const auto& [key, i] : reference) {
      for (const FreeList::Key& probe :
           {key, FreeList::Key{key.first, 0}, FreeList::Key{key.first, key.second + 1},
            FreeList::Key{key.first - 1, ~uint64_t{0}}}) {
        ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, probe));
      }
    }
  };
  for (int step = 0; step < 6000; ++step) {
    const uint64_t op = random() % 8;
    if (op < 3 || reference.empty()) {
      const FreeList::Key key{any_size(), 2097152 * (random() % 16)};
      if (reference.count(key) == 0) {
        list.Insert(key, id);
        reference.emplace(key, id++);
      }
    } else if (op == 3) {  // an absent key, often beyond every bin made so far
      const FreeList::Key key{any_size(), 2097152 * 16 + 1};
      list.Erase(key);
    } else if (op == 4) {
      const FreeList::Key gone = std::next(reference.begin(), random() % reference.size())->first;
      list.Erase(gone);
      reference.erase(gone);
    } else if (op == 5) {
      const FreeList::Key old_key =
          std::next(reference.begin(), random() % reference.size())->first;
      const FreeList::Key new_key{any_size(), 2097152 * (random() % 16) + 512};
      if (reference.count(new_key) == 0) {
        list.Replace(old_key, new_key, id);
        reference.erase(old_key);
        reference.emplace(new_key, id++);
      }
    } else {  // the allocator's take: the best fit, then that entry erased or replaced
      const auto found = list.LowerBound({any_size(), 0});
      if (!found) continue;
      const FreeList::Key taken = found->first;
      reference.erase(taken);
      const FreeList::Key rest{taken.first / 2, taken.second + 1};
      if (op == 6 || reference.count(rest) > 0) {
        list.Erase(taken);
      } else {
        list.Replace(taken, rest, id);
        reference.emplace(rest, id++);
      }
    }
    if (step % 600 == 0) check();
  }
  check();
  ASSERT_NO_FATAL_FAILURE(ExpectForEachAsMap(list, reference));
  // A moved-from list is empty; the list it moved into answers as before.
  FreeList moved = std::move(list);
  EXPECT_EQ(list.size(), 0u);  // NOLINT(bugprone-use-after-move): what a move leaves is the test
  EXPECT_FALSE(list.LowerBound({0, 0}).has_value());  // NOLINT(bugprone-use-after-move)
  ASSERT_EQ(moved.size(), reference.size());
  if (!reference.empty()) {
    EXPECT_EQ(moved.LowerBound({0, 0})->second, reference.begin()->second);
  }
}

TEST(FreeListTest, ErasingAnAbsentKeyChangesNothing) {
  FreeList list;
  list.Insert({1024, 0}, 3);
  list.Erase({1024, 512});
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list.LowerBound({1, 0})->second, 3);
}

// A list cleared (CachingAllocatorModel::Reset) is empty and, its bins kept, answers later
// inserts, erases and best-fit searches as a new list does.
TEST(FreeListTest, AClearedListAnswersAsANewOne) {
  FreeList list;
  std::mt19937_64 random(5);
  for (int64_t id = 0; id < 500; ++id) {
    list.Insert({512 * (1 + random() % (uint64_t{1} << 30)), 512 * static_cast<uint64_t>(id)}, id);
  }
  list.Clear();
  EXPECT_EQ(list.size(), 0u);
  EXPECT_FALSE(list.LowerBound({0, 0}).has_value());
  int visited = 0;
  list.ForEach([&](FreeList::Key, int64_t) { ++visited; });
  EXPECT_EQ(visited, 0);
  std::map<FreeList::Key, int64_t> reference;
  for (int64_t id = 0; id < 2000; ++id) {
    const FreeList::Key key{512 * (1 + random() % (uint64_t{1} << 30)), 512 * (random() % 64)};
    if (random() % 3 == 0 && !reference.empty()) {
      const FreeList::Key gone = std::next(reference.begin(), random() % reference.size())->first;
      list.Erase(gone);
      reference.erase(gone);
    } else if (reference.count(key) == 0) {
      list.Insert(key, id);
      reference.emplace(key, id);
    }
    const FreeList::Key probe{512 * (1 + random() % (uint64_t{1} << 30)), 0};
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, probe));
  }
  EXPECT_EQ(list.size(), reference.size());
}

// Thousands of free blocks of a few sizes in a few bins (cached segments of one size each, as a
// step's large tensors leave them: the 10k-node chain's --max-batch near batch 57,344 holds about
// 5,000): the same answers as a std::map throughout -- while the bins grow, once emptied, as they
// fill again and after Clear.
TEST(FreeListTest, ABinOfThousandsOfEntriesMatchesAStdMap) {
  FreeList list;
  std::map<FreeList::Key, int64_t> reference;
  std::mt19937_64 random(23);
  constexpr uint64_t kMiB = 1 << 20;
  // 64-66 MiB: three bins of the large sizes (each a 64th of the power of two from 64 MiB: 1 MiB)
  // of about a thousand entries each at the top, and a best fit may cross from one into the next.
  auto key = [&] {
    const uint64_t size = 64 * kMiB + (random() % 5) * (kMiB / 2);
    return FreeList::Key{size, 2 * kMiB * (random() % 100000)};
  };
  int64_t id = 0;
  auto check = [&] {
    ASSERT_EQ(list.size(), reference.size());
    for (uint64_t size = 63 * kMiB; size <= 67 * kMiB; size += kMiB / 4) {
      ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(list, reference, {size, 0}));
    }
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMapNearSampledKeys(list, reference, random, 200));
    ASSERT_NO_FATAL_FAILURE(ExpectForEachAsMap(list, reference));
  };
  // Grow to about 3,000 entries, with erases, replaces and best-fit takes on the way; then empty.
  for (int round = 0; round < 2; ++round) {
    for (int step = 0; step < 4000; ++step) {
      const uint64_t op = random() % 6;
      if (op < 4 || reference.empty()) {
        const FreeList::Key k = key();
        if (reference.count(k) == 0) {
          list.Insert(k, id);
          reference.emplace(k, id++);
        }
      } else if (op == 4) {
        const FreeList::Key gone = std::next(reference.begin(), random() % reference.size())->first;
        list.Erase(gone);
        reference.erase(gone);
      } else {  // the allocator's take: the best fit, erased or its remainder put back
        const auto found = list.LowerBound({64 * kMiB + (random() % 5) * (kMiB / 2), 0});
        if (!found) continue;
        reference.erase(found->first);
        const FreeList::Key rest{found->first.first - kMiB / 2, found->first.second + 1};
        if (random() % 2 == 0 || reference.count(rest) > 0) {
          list.Erase(found->first);
        } else {
          list.Replace(found->first, rest, id);
          reference.emplace(rest, id++);
        }
      }
      if (step % 500 == 0) {
        ASSERT_NO_FATAL_FAILURE(check());
      }
    }
    ASSERT_NO_FATAL_FAILURE(check());
    ASSERT_GT(reference.size(), 1000u);
    while (!reference.empty()) {
      const FreeList::Key gone = std::next(reference.begin(), random() % reference.size())->first;
      list.Erase(gone);
      reference.erase(gone);
      if (reference.size() % 700 == 0) {
        ASSERT_NO_FATAL_FAILURE(check());
      }
    }
    EXPECT_FALSE(list.LowerBound({0, 0}).has_value());
    list.Erase({64 * kMiB, 0});  // absent, from an emptied bin
    EXPECT_EQ(list.size(), 0u);
  }
  // Cleared, the bin is an array again and answers as a new list does.
  for (int i = 0; i < 600; ++i) {
    const FreeList::Key k = key();
    if (reference.count(k) == 0) {
      list.Insert(k, id);
      reference.emplace(k, id++);
    }
  }
  list.Clear();
  reference.clear();
  ASSERT_NO_FATAL_FAILURE(check());
  for (int i = 0; i < 100; ++i) {
    const FreeList::Key k = key();
    if (reference.count(k) == 0) {
      list.Insert(k, id);
      reference.emplace(k, id++);
    }
  }
  ASSERT_NO_FATAL_FAILURE(check());
}

// One bin of thousands of entries of one size (64 MiB; some 66 MiB entries, two bins up, as best
// fit's fallback), which the list chunks once inserts and erases anywhere in it move hundreds of
// entries each: the same answers as a std::map while the bin grows to thousands, while best fit
// takes its smallest entries, while erases, absent keys' too, and inserts land anywhere in it, as
// it drains to none from both ends and within (its chunks merging and it becoming an array
// again), in a copy and a moved list, and after Clear.
TEST(FreeListTest, OneBinOfThousandsOfOneSizeMatchesAStdMap) {
  FreeList list;
  std::map<FreeList::Key, int64_t> reference;
  std::mt19937_64 random(41);
  constexpr uint64_t kMiB = 1 << 20;
  auto key = [&] {
    const uint64_t size = random() % 16 == 0 ? 66 * kMiB : 64 * kMiB;
    return FreeList::Key{size, 2 * kMiB * (random() % 1000000)};
  };
  int64_t id = 0;
  auto insert = [&](FreeList::Key k) {
    if (reference.count(k) > 0) return;
    list.Insert(k, id);
    reference.emplace(k, id++);
  };
  auto erase_any = [&] {
    const FreeList::Key gone = std::next(reference.begin(), random() % reference.size())->first;
    list.Erase(gone);
    reference.erase(gone);
  };
  auto check = [&](const FreeList& l) {
    ASSERT_EQ(l.size(), reference.size());
    for (uint64_t size :
         {63 * kMiB, 64 * kMiB, 64 * kMiB + 1, 65 * kMiB, 66 * kMiB, 66 * kMiB + 1}) {
      ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMap(l, reference, {size, 0}));
    }
    ASSERT_NO_FATAL_FAILURE(ExpectLowerBoundAsMapNearSampledKeys(l, reference, random, 100));
    ASSERT_NO_FATAL_FAILURE(ExpectForEachAsMap(l, reference));
  };
  for (int round = 0; round < 2; ++round) {
    // Grow to over 5,000 entries: mostly inserts, with erases anywhere and best-fit takes.
    for (int step = 0; step < 11000; ++step) {
      const uint64_t op = random() % 9;
      if (op < 6 || reference.empty()) {
        insert(key());
      } else if (op == 6) {
        erase_any();
      } else if (op == 7) {  // an absent key next to one present
        const FreeList::Key k = std::next(reference.begin(), random() % reference.size())->first;
        const FreeList::Key absent{k.first, k.second + 1};
        list.Erase(absent);
        ASSERT_EQ(list.size(), reference.size());
      } else {  // the allocator's take of a 64 MiB block: erased, or a remainder put back
        const auto found = list.LowerBound({64 * kMiB, 0});
        ASSERT_TRUE(found.has_value());
        reference.erase(found->first);
        const FreeList::Key rest{found->first.first - kMiB / 2, found->first.second + kMiB};
        if (random() % 2 == 0 || reference.count(rest) > 0) {
          list.Erase(found->first);
        } else {
          list.Replace(found->first, rest, id);
          reference.emplace(rest, id++);
        }
      }
      if (step % 1000 == 0) {
        ASSERT_NO_FATAL_FAILURE(check(list));
      }
    }
    ASSERT_GT(reference.size(), 5000u);
    ASSERT_NO_FATAL_FAILURE(check(list));
    FreeList copy = list;
    const std::map<FreeList::Key, int64_t> copied = reference;
    ASSERT_NO_FATAL_FAILURE(check(copy));
    // Drain: the largest entry erased, best fit's taken (the bin's smallest) and one anywhere, in
    // turn: the bin empties from both ends and within.
    while (!reference.empty()) {
      if (reference.size() % 3 == 0) {
        const FreeList::Key gone = reference.rbegin()->first;
        list.Erase(gone);
        reference.erase(gone);
      } else if (reference.size() % 3 == 1) {
        const auto found = list.LowerBound({64 * kMiB, 0});
        const FreeList::Key gone = found ? found->first : reference.begin()->first;
        list.Erase(gone);
        reference.erase(gone);
      } else {
        erase_any();
      }
      if (reference.size() % 400 == 0 || reference.size() < 40) {
        ASSERT_NO_FATAL_FAILURE(check(list));
      }
    }
    EXPECT_FALSE(list.LowerBound({0, 0}).has_value());
    // The copy still holds what the list held then, and moves whole.
    const FreeList moved = std::move(copy);
    EXPECT_EQ(copy.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
    ASSERT_NO_FATAL_FAILURE(ExpectForEachAsMap(moved, copied));
    EXPECT_EQ(moved.LowerBound({64 * kMiB, 0})->first, copied.lower_bound({64 * kMiB, 0})->first);
    if (round == 0) {
      for (int i = 0; i < 3000; ++i) insert(key());
      list.Clear();
      reference.clear();
      ASSERT_NO_FATAL_FAILURE(check(list));
    }
  }
}

}  // namespace
}  // namespace memest::symbolic
