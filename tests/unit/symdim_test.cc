// Tests for core/symdim.{h,cc}: polynomial arithmetic over symbols, checked overflow, exact and
// floor division, opaque terms, sign proofs, evaluation and printing.
#include "core/symdim.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace memest::core {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

class SymDimTest : public ::testing::Test {
 protected:
  DimExpr Sym(const std::string& name) { return DimExpr::Atom(table_.Symbol(name)); }
  DimExpr A(std::optional<DimExpr> e) {
    EXPECT_TRUE(e.has_value());
    return e.value_or(DimExpr(-999));
  }
  // Evaluates `e` with the given symbol values.
  Result<int64_t> Eval(const DimExpr& e, std::map<std::string, int64_t> values) {
    std::vector<std::optional<int64_t>> by_atom(table_.size());
    for (const auto& [name, v] : values) {
      if (auto a = table_.FindSymbol(name)) by_atom[static_cast<size_t>(*a)] = v;
    }
    return e.Evaluate(table_.Evaluate(by_atom));
  }
  std::string Str(const DimExpr& e) { return e.ToString(&table_); }

  DimTable table_;
};

TEST_F(SymDimTest, ConstantsFold) {
  EXPECT_EQ(A(Add(2, 3)), DimExpr(5));
  EXPECT_EQ(A(Mul(4, -3)), DimExpr(-12));
  EXPECT_EQ(A(Sub(4, 10)), DimExpr(-6));
  EXPECT_TRUE(DimExpr(7).IsConstant());
  EXPECT_EQ(DimExpr(7).AsConstant(), 7);
  EXPECT_EQ(Str(DimExpr(-3)), "-3");
}

TEST_F(SymDimTest, PolynomialsAreCanonical) {
  const DimExpr b = Sym("batch"), s = Sym("seq");
  const DimExpr x = A(Mul(A(Mul(b, s)), 768));
  const DimExpr y = A(Mul(768, A(Mul(s, b))));
  EXPECT_EQ(x, y);
  EXPECT_FALSE(x.IsConstant());
  EXPECT_EQ(Str(x), "768*batch*seq");
  // (b + 1)(b - 1) = b^2 - 1
  const DimExpr p = A(Mul(A(Add(b, 1)), A(Sub(b, 1))));
  EXPECT_EQ(Str(p), "batch^2 - 1");
  // x - x = 0
  EXPECT_EQ(A(Sub(x, y)), DimExpr(0));
  EXPECT_EQ(Str(A(Sub(A(Mul(b, 2)), 3))), "2*batch - 3");
  EXPECT_EQ(b.AsAtom(), table_.FindSymbol("batch"));
  EXPECT_FALSE(x.AsAtom().has_value());
}

TEST_F(SymDimTest, OverflowIsAnErrorValue) {
  EXPECT_FALSE(Add(kMax, 1).has_value());
  EXPECT_FALSE(Sub(kMin, 1).has_value());
  EXPECT_FALSE(Mul(kMax, 2).has_value());
  EXPECT_FALSE(Neg(kMin).has_value());
  const DimExpr b = Sym("batch");
  EXPECT_FALSE(Mul(A(Mul(b, kMax)), 2).has_value());
  EXPECT_FALSE(Add(A(Mul(b, kMax)), b).has_value());
  // Degree cap: b^17.
  DimExpr p = b;
  for (size_t i = 1; i < DimExpr::kMaxDegree; ++i) p = A(Mul(p, b));
  EXPECT_FALSE(Mul(p, b).has_value());
  // Term cap: (b + s + ... ) squared past kMaxTerms.
  DimExpr sum(0);
  for (int i = 0; i < 12; ++i) sum = A(Add(sum, Sym("s" + std::to_string(i))));
  EXPECT_FALSE(Mul(sum, sum).has_value());
}

TEST_F(SymDimTest, ExactDivision) {
  const DimExpr b = Sym("batch"), s = Sym("seq");
  const DimExpr numel = A(Mul(A(Mul(b, s)), 768));
  EXPECT_EQ(A(DivExact(numel, 768)), A(Mul(b, s)));
  EXPECT_EQ(A(DivExact(numel, A(Mul(b, 768)))), s);
  EXPECT_EQ(A(DivExact(numel, A(Mul(b, s)))), DimExpr(768));
  // (b^2 - 1) / (b + 1) = b - 1: polynomial long division.
  const DimExpr p = A(Mul(A(Add(b, 1)), A(Sub(b, 1))));
  EXPECT_EQ(A(DivExact(p, A(Add(b, 1)))), A(Sub(b, 1)));
  EXPECT_FALSE(DivExact(p, A(Add(b, 2))).has_value());
  EXPECT_FALSE(DivExact(A(Add(b, 1)), 2).has_value());
  EXPECT_FALSE(DivExact(b, 0).has_value());
  EXPECT_FALSE(DivExact(kMin, -1).has_value());
  EXPECT_EQ(A(DivExact(12, -4)), DimExpr(-3));
}

TEST_F(SymDimTest, FloorCeilAndModSimplifyOrBecomeTerms) {
  const DimExpr h = Sym("h");
  EXPECT_EQ(table_.FloorDiv(7, 2), DimExpr(3));
  EXPECT_EQ(table_.FloorDiv(-7, 2), DimExpr(-4));
  EXPECT_EQ(table_.CeilDiv(7, 2), DimExpr(4));
  EXPECT_EQ(table_.Mod(-7, 3), DimExpr(2));
  // floor((4h + 6) / 2) = 2h + 3 exactly.
  EXPECT_EQ(table_.FloorDiv(A(Add(A(Mul(h, 4)), 6)), 2), A(Add(A(Mul(h, 2)), 3)));
  // floor((3h + 5) / 2) = h + 2 + floor((h + 1) / 2): one opaque term, interned.
  const DimExpr f = table_.FloorDiv(A(Add(A(Mul(h, 3)), 5)), 2);
  EXPECT_FALSE(f.IsConstant());
  EXPECT_EQ(f, table_.FloorDiv(A(Add(A(Mul(h, 3)), 5)), 2));
  for (int64_t v : {0, 1, 2, 7, 224}) {
    EXPECT_EQ(*Eval(f, {{"h", v}}), (3 * v + 5) / 2) << v;
    EXPECT_EQ(*Eval(table_.CeilDiv(h, 4), {{"h", v}}), (v + 3) / 4) << v;
    EXPECT_EQ(*Eval(table_.Mod(A(Add(h, 5)), 3), {{"h", v}}), (v + 5) % 3) << v;
  }
  EXPECT_EQ(table_.Mod(A(Mul(h, 6)), 3), DimExpr(0));
  // Division by zero never crashes: an unknown.
  EXPECT_FALSE(Eval(table_.FloorDiv(h, 0), {{"h", 3}}).ok());
}

TEST_F(SymDimTest, ExactDivTermFailsWhenNotDivisibleAtEvaluation) {
  const DimExpr b = Sym("b"), s = Sym("s");
  const DimExpr q = table_.ExactDiv(A(Mul(b, 6)), s);
  EXPECT_EQ(*Eval(q, {{"b", 4}, {"s", 8}}), 3);
  auto bad = Eval(q, {{"b", 1}, {"s", 4}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidModel);
}

TEST_F(SymDimTest, MinMaxAndBroadcastDecideWhenProvable) {
  const DimExpr s = Sym("seq");
  EXPECT_EQ(table_.Min(s, A(Add(s, 1))), s);
  EXPECT_EQ(table_.Max(s, A(Add(s, 1))), A(Add(s, 1)));
  EXPECT_EQ(table_.Min(0, s), DimExpr(0));  // dims are >= 0
  EXPECT_EQ(table_.Min(s, kMax), s);        // "to the end"
  const DimExpr m = table_.Min(s, 5);       // not provable: a term
  EXPECT_FALSE(m.IsConstant());
  EXPECT_EQ(*Eval(m, {{"seq", 3}}), 3);
  EXPECT_EQ(*Eval(m, {{"seq", 9}}), 5);
  EXPECT_EQ(table_.Broadcast(s, 1), s);
  EXPECT_EQ(table_.Broadcast(1, s), s);
  EXPECT_EQ(table_.Broadcast(s, 8), DimExpr(8));
  EXPECT_FALSE(table_.Broadcast(3, 4).has_value());
  const DimExpr t = Sym("t");
  const DimExpr bt = *table_.Broadcast(s, t);
  EXPECT_EQ(*Eval(bt, {{"seq", 1}, {"t", 6}}), 6);
  EXPECT_EQ(*Eval(bt, {{"seq", 6}, {"t", 6}}), 6);
  EXPECT_EQ(Eval(bt, {{"seq", 2}, {"t", 6}}).status().code(), ErrorCode::kInvalidModel);
}

TEST_F(SymDimTest, SignAndOrderProofs) {
  const DimExpr b = Sym("batch");
  EXPECT_TRUE(table_.NonNegative(A(Add(A(Mul(b, 3)), 1))));
  EXPECT_FALSE(table_.NonNegative(A(Sub(b, 1))));
  EXPECT_EQ(table_.Equal(b, -1), false);  // batch + 1 >= 1
  EXPECT_EQ(table_.Equal(b, b), true);
  EXPECT_EQ(table_.Equal(b, 4), std::nullopt);
  EXPECT_EQ(table_.Less(b, A(Add(b, 1))), true);
  EXPECT_EQ(table_.Less(A(Add(b, 1)), b), false);
  EXPECT_EQ(table_.Less(b, 3), std::nullopt);
  const DimExpr u = table_.FreshExpr("x", false, /*non_negative=*/false);
  EXPECT_FALSE(table_.NonNegative(u));
}

TEST_F(SymDimTest, EvaluationIsCheckedAndNamesWhatIsMissing) {
  const DimExpr b = Sym("batch"), s = Sym("seq");
  const DimExpr e = A(Add(A(Mul(A(Mul(b, s)), 2)), 1));
  EXPECT_EQ(*Eval(e, {{"batch", 8}, {"seq", 128}}), 2 * 8 * 128 + 1);
  auto unbound = Eval(e, {{"batch", 8}});
  ASSERT_FALSE(unbound.ok());
  EXPECT_EQ(unbound.status().code(), ErrorCode::kUnboundDim);
  EXPECT_NE(unbound.status().message().find("seq"), std::string::npos);
  auto overflow = Eval(e, {{"batch", int64_t{1} << 40}, {"seq", int64_t{1} << 40}});
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), ErrorCode::kOverflow);
  const DimExpr dd = table_.FreshExpr("NonZero_3:nonzero", /*data_dependent=*/true);
  auto unknown = Eval(A(Mul(dd, 4)), {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("NonZero_3"), std::string::npos);
  // An opaque term over an overflowing operand reports the overflow.
  const DimExpr f = table_.FloorDiv(A(Mul(b, b)), 3);
  EXPECT_EQ(Eval(f, {{"batch", int64_t{1} << 33}}).status().code(), ErrorCode::kOverflow);
}

TEST_F(SymDimTest, PrintingIsReadable) {
  const DimExpr b = Sym("batch");
  EXPECT_EQ(Str(b), "batch");
  EXPECT_EQ(Str(A(Sub(1, b))), "-batch + 1");
  EXPECT_EQ(Str(table_.FloorDiv(A(Add(b, 1)), 2)), "floor((batch + 1)/(2))");
  EXPECT_EQ(Str(DimExpr::Atom(table_.Fresh("n", true))), "?n");
  EXPECT_EQ(b.ToString(), "a0");  // without a table
}

}  // namespace
}  // namespace memest::core
