// base::NumberDistinct: items numbered by equality, in order of their first item (base/distinct.h).
#include "base/distinct.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace memest::base {
namespace {

TEST(DistinctTest, EqualItemsShareANumberInOrderOfTheFirst) {
  const std::vector<int> items = {7, 3, 7, 9, 3, 3, -1, 9};
  const Distinct d = NumberDistinct(
      items.size(), [&](size_t i) { return items[i] >= 0; },
      [&](size_t i) { return static_cast<uint64_t>(items[i]); },
      [&](size_t a, size_t b) { return items[a] == items[b]; });
  EXPECT_EQ(d.number, (std::vector<uint32_t>{0, 1, 0, 2, 1, 1, Distinct::kNone, 2}));
  EXPECT_EQ(d.first, (std::vector<uint32_t>{0, 1, 3}));
}

TEST(DistinctTest, AHashOnlyChoosesWhatIsCompared) {
  // Every item hashes alike (and the table grows several times): `same` alone decides.
  std::vector<int> items;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 500; ++i) items.push_back(i);
  }
  const Distinct d = NumberDistinct(
      items.size(), [](size_t) { return true; }, [](size_t) { return uint64_t{42}; },
      [&](size_t a, size_t b) { return items[a] == items[b]; });
  ASSERT_EQ(d.first.size(), 500u);
  for (size_t i = 0; i < 500; ++i) {
    EXPECT_EQ(d.number[i], i);
    EXPECT_EQ(d.number[500 + i], i);
  }
}

}  // namespace
}  // namespace memest::base
