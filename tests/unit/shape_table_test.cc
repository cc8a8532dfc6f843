// core::ShapeTable: every value's dims in one pool (core/shape_table.h).
#include "core/shape_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace memest::core {
namespace {

std::vector<int64_t> ToVector(Dims d) { return {d.begin(), d.end()}; }

// A lookup's operator* gives the span itself, not a reference into the temporary the lookup
// returns: `for (int64_t d : *table[id])` stays valid (a range-for keeps no temporary alive
// through operator*; with std::optional's that was a stack-use-after-scope).
static_assert(!std::is_reference_v<decltype(*std::declval<MaybeDims>())>);
static_assert(std::is_same_v<decltype(*std::declval<const MaybeDims&>()), Dims>);

TEST(ShapeTableTest, ValuesStartUnknownAndKeepWhatIsSet) {
  ShapeTable t;
  t.Reset(3);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_FALSE(t[0].has_value());
  t.Set(0, std::vector<int64_t>{2, 3});
  const std::span<int64_t> room = t.Emplace(2, 1);
  room[0] = 7;
  EXPECT_EQ(ToVector(*t[0]), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(t[1].has_value());
  EXPECT_EQ(ToVector(*t[2]), (std::vector<int64_t>{7}));
  std::vector<int64_t> seen;
  for (int64_t d : *t[0]) seen.push_back(d);  // on the temporary the lookup returns
  EXPECT_EQ(seen, (std::vector<int64_t>{2, 3}));
}

TEST(ShapeTableTest, AScalarIsKnownWithNoDimsAndForgetMakesAValueUnknown) {
  ShapeTable t;
  t.Reset(2);
  t.Set(0, Dims());
  ASSERT_TRUE(t[0].has_value());
  EXPECT_TRUE(t[0]->empty());
  (void)t.Emplace(1, 2);
  t.Forget(1);
  EXPECT_FALSE(t[1].has_value());
  t.Add(std::nullopt);
  t.Add(Dims(std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(t.size(), 4u);
  EXPECT_FALSE(t[2].has_value());
  EXPECT_EQ(ToVector(*t[3]), (std::vector<int64_t>{4, 5, 6}));
}

TEST(ShapeTableTest, AnAliasReadsTheDimsOfItsValueAndKeepsThem) {
  ShapeTable t;
  t.Reset(3);
  t.Set(0, std::vector<int64_t>{4, 5});
  t.Alias(2, 0);
  EXPECT_EQ(ToVector(*t[2]), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(t[2]->data(), t[0]->data());  // the same place in the pool
  t.Set(0, std::vector<int64_t>{6});      // set again: the alias keeps what it read
  EXPECT_EQ(ToVector(*t[0]), (std::vector<int64_t>{6}));
  EXPECT_EQ(ToVector(*t[2]), (std::vector<int64_t>{4, 5}));
  t.Forget(0);
  EXPECT_EQ(ToVector(*t[2]), (std::vector<int64_t>{4, 5}));
  EXPECT_FALSE(t[1].has_value());
}

TEST(ShapeTableTest, FindTakesAnyIdAndKnowsOnlyTheTablesOwn) {
  ShapeTable t;
  t.Reset(1);
  t.Set(0, std::vector<int64_t>{8});
  EXPECT_EQ(ToVector(*t.Find(0)), (std::vector<int64_t>{8}));
  EXPECT_FALSE(t.Find(-1).has_value());  // no value (an omitted input)
  EXPECT_FALSE(t.Find(1).has_value());   // past the table
}

TEST(ShapeTableTest, ResetForgetsEverything) {
  ShapeTable t;
  t.Reset(1);
  t.Set(0, std::vector<int64_t>{1});
  t.Reset(2);
  EXPECT_FALSE(t[0].has_value());
  EXPECT_FALSE(t[1].has_value());
}

}  // namespace
}  // namespace memest::core
