// Sizes as curves in a searched value (base/size_curves.h): lines through two traces, parabolas
// through three, flat sizes, the origin, and the sizes and values they refuse.
#include "base/size_curves.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace memest::base {
namespace {

// A size that is a polynomial of the value: its curve gives it back exactly at every value.
TEST(SizeCurvesTest, LinesAndParabolasGivePolynomialSizesBackExactly) {
  const auto line = [](int64_t v) { return static_cast<uint64_t>(4096 + 3072 * v); };
  const auto square = [](int64_t v) { return static_cast<uint64_t>(512 + 48 * v + 8 * v * v); };
  const int64_t two[] = {3, 40};
  const int64_t three[] = {64, 200, 512};
  auto lines = SizeCurves::Over(two);
  auto parabolas = SizeCurves::Over(three);
  ASSERT_TRUE(lines && parabolas);
  const uint64_t l[] = {line(3), line(40)};
  const uint64_t q[] = {square(64), square(200), square(512)};
  ASSERT_TRUE(lines->Add(l));
  ASSERT_TRUE(parabolas->Add(q));
  for (int64_t v : std::vector<int64_t>{1, 2, 17, 41, 333, 100000, SizeCurves::kMostValue}) {
    EXPECT_EQ(lines->Bytes(0, v), line(v)) << v;
    EXPECT_EQ(parabolas->Bytes(0, v), square(v)) << v;
  }
  EXPECT_DOUBLE_EQ(lines->Growth(0, 10), 3072.0);
  EXPECT_DOUBLE_EQ(parabolas->Growth(0, 10), 48.0 + 16.0 * 10);
}

// Traced far apart, a parabola's arithmetic needs 128 bits ((v1 - v0)(v2 - v1)(v2 - v0) is past
// 2^63); traced close, 64 suffice. Either way the curve is the polynomial, read rounded down where
// its coefficients are not whole numbers.
TEST(SizeCurvesTest, AParabolaIsTheSameInEitherArithmetic) {
  const auto line = [](int64_t v) { return static_cast<uint64_t>(4096 + 3072 * v); };
  const auto sixteenth = [](int64_t v) { return static_cast<uint64_t>(v * (v + 1) / 16); };
  // Values where v (v + 1) / 16 is whole: the traced sizes are on the polynomial.
  const int64_t far[] = {16, int64_t{1} << 23, SizeCurves::kMostValue};
  const int64_t near[] = {16, 31, 48};
  for (const auto& at : {std::span<const int64_t>(far), std::span<const int64_t>(near)}) {
    auto c = SizeCurves::Over(at);
    ASSERT_TRUE(c.has_value());
    const uint64_t l[] = {line(at[0]), line(at[1]), line(at[2])};
    const uint64_t q[] = {sixteenth(at[0]), sixteenth(at[1]), sixteenth(at[2])};
    ASSERT_TRUE(c->Add(l));
    ASSERT_TRUE(c->Add(q));
    for (int64_t v : std::vector<int64_t>{1, 3, 4, 1000, 4097, SizeCurves::kMostValue - 1}) {
      EXPECT_EQ(c->Bytes(0, v), line(v)) << at[1] << " " << v;
      EXPECT_EQ(c->Bytes(1, v), sixteenth(v)) << at[1] << " " << v;
    }
    EXPECT_DOUBLE_EQ(c->Growth(0, 10), 3072.0) << at[1];
    EXPECT_NEAR(c->Growth(1, 10), 21.0 / 16, 1e-9) << at[1];
  }
}

// The same size at every traced value is the same size everywhere, through two traces or three.
TEST(SizeCurvesTest, AFlatSizeStaysFlat) {
  const int64_t two[] = {1, 9};
  const int64_t three[] = {2, 5, 11};
  auto lines = SizeCurves::Over(two);
  auto parabolas = SizeCurves::Over(three);
  ASSERT_TRUE(lines && parabolas);
  const uint64_t zero[] = {0, 0, 0};
  const uint64_t flat[] = {123456789, 123456789, 123456789};
  ASSERT_TRUE(lines->Add(std::span(zero).first(2)));
  ASSERT_TRUE(lines->Add(std::span(flat).first(2)));
  ASSERT_TRUE(parabolas->Add(zero));
  ASSERT_TRUE(parabolas->Add(flat));
  for (int64_t v : std::vector<int64_t>{0, 1, 3, 1000, SizeCurves::kMostValue}) {
    EXPECT_EQ(lines->Bytes(0, v), 0u) << v;
    EXPECT_EQ(lines->Bytes(1, v), 123456789u) << v;
    EXPECT_EQ(parabolas->Bytes(0, v), 0u) << v;
    EXPECT_EQ(parabolas->Bytes(1, v), 123456789u) << v;
  }
  EXPECT_DOUBLE_EQ(parabolas->Growth(1, 7), 0.0);
}

// Through the origin: a size proportional to the value (or its square) from one (or two) traces.
TEST(SizeCurvesTest, ThroughTheOriginOneTraceGivesAProportionalSize) {
  const int64_t at[] = {0, 6};
  auto c = SizeCurves::Over(at);
  ASSERT_TRUE(c.has_value());
  const uint64_t s[] = {0, 6 * 1000};
  ASSERT_TRUE(c->Add(s));
  EXPECT_EQ(c->Bytes(0, 1), 1000u);
  EXPECT_EQ(c->Bytes(0, 5000), 5000000u);
}

// A size that is no integer polynomial is read rounded down; a steep one in 128 bits, where the
// 64-bit form could overflow, and saturated past 2^64.
TEST(SizeCurvesTest, ARationalCurveIsReadRoundedDown) {
  const int64_t at[] = {1, 4};
  auto c = SizeCurves::Over(at);
  ASSERT_TRUE(c.has_value());
  const uint64_t s[] = {10, 20};  // 10 + 10/3 (v - 1)
  ASSERT_TRUE(c->Add(s));
  EXPECT_EQ(c->Bytes(0, 2), 13u);
  EXPECT_EQ(c->Bytes(0, 7), 30u);
  // A slope past the 64-bit form's bound, and not an integer: read over the denominator.
  const uint64_t big[] = {1, (uint64_t{1} << 45) + 3};
  ASSERT_TRUE(c->Add(big));
  EXPECT_EQ(c->Bytes(1, 4), (uint64_t{1} << 45) + 3);
  EXPECT_EQ(c->Bytes(1, 2), 1 + ((uint64_t{1} << 45) + 2) / 3);  // rounded down
  EXPECT_EQ(c->Bytes(1, SizeCurves::kMostValue), UINT64_MAX);
}

// Sizes added again (a step's layers and iterations repeat theirs) share the curve of their first
// Add: one curve per distinct sizes, however many are added and in whatever order, each size read
// back as its own curve's -- past the first table's 32 curves, so the table grows on the way.
TEST(SizeCurvesTest, EqualSizesShareOneCurveAndReadAsTheirOwn) {
  const int64_t at[] = {2, 7, 30};
  auto c = SizeCurves::Over(at);
  ASSERT_TRUE(c.has_value());
  // Size k of 300 distinct ones: 512 (k + 1) v + 64 k v^2, flat for every tenth.
  const auto size = [](uint64_t k, int64_t v) {
    const auto x = static_cast<uint64_t>(v);
    return k % 10 == 0 ? 4096 * (k + 1) : 512 * (k + 1) * x + 64 * k * x * x;
  };
  std::vector<uint64_t> added;  // which distinct size each Add was
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t j = 0; j < 300; ++j) {
      const uint64_t k = round == 1 ? 299 - j : j;  // the second round backwards
      const uint64_t s[] = {size(k, at[0]), size(k, at[1]), size(k, at[2])};
      ASSERT_TRUE(c->Add(s));
      added.push_back(k);
    }
  }
  EXPECT_EQ(c->size(), 900u);
  EXPECT_EQ(c->distinct(), 300u);
  for (size_t j = 0; j < added.size(); ++j) {
    EXPECT_EQ(c->DistinctOf(j), c->DistinctOf(added[j])) << j;  // the first round's k is size k
    for (int64_t v : {1, 30, 1000}) {
      ASSERT_EQ(c->Bytes(j, v), size(added[j], v)) << j << " " << v;
      ASSERT_EQ(c->DistinctBytes(c->DistinctOf(j), v), size(added[j], v)) << j << " " << v;
    }
  }
}

// Values out of order or out of range, sizes that fall or are too large: no curves.
TEST(SizeCurvesTest, RefusesWhatItsArithmeticDoesNotCover) {
  const int64_t unordered[] = {5, 5};
  const int64_t negative[] = {-1, 4};
  const int64_t too_far[] = {1, SizeCurves::kMostValue + 1};
  const int64_t four[] = {1, 2, 3, 4};
  const int64_t one[] = {1};
  EXPECT_FALSE(SizeCurves::Over(unordered).has_value());
  EXPECT_FALSE(SizeCurves::Over(negative).has_value());
  EXPECT_FALSE(SizeCurves::Over(too_far).has_value());
  EXPECT_FALSE(SizeCurves::Over(four).has_value());
  EXPECT_FALSE(SizeCurves::Over(one).has_value());
  const int64_t at[] = {1, 2};
  auto c = SizeCurves::Over(at);
  ASSERT_TRUE(c.has_value());
  const uint64_t falling[] = {100, 99};
  const uint64_t too_large[] = {1, SizeCurves::kMostBytes};
  const uint64_t three[] = {1, 2, 3};
  EXPECT_FALSE(c->Add(falling));
  EXPECT_FALSE(c->Add(too_large));
  EXPECT_FALSE(c->Add(three));
  EXPECT_EQ(c->size(), 0u);
}

}  // namespace
}  // namespace memest::base
