// core/symdim.h -- symbolic dimensions: integer expressions over named symbols.
//
// Shapes are inferred once per model, at load time, as expressions over the model's symbolic
// dims (`batch`, `seq`, ...). An estimate at a given batch only evaluates them.
//
// Policy:
//  * A DimExpr is a polynomial with int64 coefficients over atoms. An atom is a named symbol (a
//    dim of a data input), a fresh unknown (a data-dependent size such as NonZero's count, or a
//    size a rule could not work out), or an opaque term that a polynomial cannot express:
//    floor(a/b), exact a/b, a mod b, min, max and broadcast(a, b). Atoms live in a DimTable,
//    interned: the same opaque term built twice is the same atom.
//  * The form is canonical (terms sorted by monomial, no zero coefficient; a monomial is a
//    sorted multiset of atom ids), so two polynomials are equal exactly when they are the same
//    polynomial: `batch*seq*768 == 768*seq*batch`.
//  * All arithmetic is checked: a coefficient that overflows 64 bits, or a polynomial past the
//    caps (kMaxTerms terms, kMaxDegree factors per monomial: hostile graphs can square a shape
//    value over and over), makes the operation fail (nullopt), never undefined behaviour. The
//    DimTable's opaque builders turn such a failure into a fresh unknown atom instead.
//  * Opaque builders simplify whenever the operands allow it: constants fold, a division that is
//    exact as polynomials is done exactly, min/max/broadcast decide when the sign of a - b can be
//    proven. Sign proofs assume every symbol and unknown size is >= 0 (they are dims).
//  * min(a, c) with a constant c >= kHugeDim is a: exporters write INT64_MAX for "to the end", and
//    no dim reaches 2^62 without every byte count overflowing first.
//  * Evaluation binds symbols to values (DimTable::Evaluate, once per estimate), then evaluates
//    each expression with checked arithmetic. Errors are values: Overflow, UnboundDim (a symbol
//    without a value, or a data-dependent size), InvalidModel (division by zero, a division that
//    must be exact and is not, dims that do not broadcast).
//
// Thread safety: DimExpr is a plain value. A DimTable is built by one thread (the loader) and is
// immutable afterwards; its const methods may then be called from many threads.
#ifndef MEMEST_CORE_SYMDIM_H_
#define MEMEST_CORE_SYMDIM_H_

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "memest/status.h"

namespace memest::core {

using AtomId = int32_t;

class DimTable;
struct AtomValues;

class DimExpr {
 public:
  static constexpr size_t kMaxTerms = 32;
  static constexpr size_t kMaxDegree = 16;

  struct Term {
    std::vector<AtomId> monomial;  // sorted, non-empty
    int64_t coef = 0;              // != 0
    auto operator<=>(const Term&) const = default;
  };

  DimExpr() = default;                  // 0
  DimExpr(int64_t c) : constant_(c) {}  // NOLINT(google-explicit-constructor)
  static DimExpr Atom(AtomId id);

  bool IsConstant() const { return terms_ == nullptr; }
  // The value when constant.
  std::optional<int64_t> AsConstant() const {
    return terms_ == nullptr ? std::optional<int64_t>(constant_) : std::nullopt;
  }
  int64_t constant_term() const { return constant_; }
  const std::vector<Term>& terms() const { return terms_ ? *terms_ : NoTerms(); }
  // The atom when the expression is exactly one atom (coefficient 1, no constant).
  std::optional<AtomId> AsAtom() const;

  std::strong_ordering operator<=>(const DimExpr& o) const {
    if (auto c = constant_ <=> o.constant_; c != 0) return c;
    if (terms_ == o.terms_) return std::strong_ordering::equal;
    return terms() <=> o.terms();
  }
  bool operator==(const DimExpr& o) const {
    return constant_ == o.constant_ && (terms_ == o.terms_ || terms() == o.terms());
  }

  // Checked evaluation with every atom's value (DimTable::Evaluate).
  Result<int64_t> Evaluate(const AtomValues& atoms) const;

  // "2*batch*seq + 1"; atoms are named through `table` ("a<id>" without one).
  std::string ToString(const DimTable* table = nullptr) const;

  // Polynomial arithmetic; nullopt on overflow or past the caps.
  friend std::optional<DimExpr> Add(const DimExpr& a, const DimExpr& b);
  friend std::optional<DimExpr> Sub(const DimExpr& a, const DimExpr& b);
  friend std::optional<DimExpr> Mul(const DimExpr& a, const DimExpr& b);
  friend std::optional<DimExpr> Neg(const DimExpr& a);
  // a / b when the quotient is a polynomial with integer coefficients (polynomial long division
  // with no remainder); nullopt otherwise or when b == 0.
  friend std::optional<DimExpr> DivExact(const DimExpr& a, const DimExpr& b);

 private:
  friend class DimTable;
  static std::optional<DimExpr> FromTerms(std::vector<Term> terms, int64_t constant);
  static const std::vector<Term>& NoTerms();
  void SetTerms(std::vector<Term> terms);

  int64_t constant_ = 0;
  // Canonical: sorted by monomial, coef != 0; null when constant. Immutable and shared, so
  // copying a dim (shapes pass through most ops unchanged) allocates nothing.
  std::shared_ptr<const std::vector<Term>> terms_;
};

std::optional<DimExpr> Add(const DimExpr& a, const DimExpr& b);
std::optional<DimExpr> Sub(const DimExpr& a, const DimExpr& b);
std::optional<DimExpr> Mul(const DimExpr& a, const DimExpr& b);
std::optional<DimExpr> Neg(const DimExpr& a);
std::optional<DimExpr> DivExact(const DimExpr& a, const DimExpr& b);

// Per atom id: its value for one set of bindings, or why it has none.
struct AtomValues {
  enum State : uint8_t { kOk, kUnbound, kOverflow, kInvalid };
  std::vector<int64_t> value;
  std::vector<State> state;
  std::vector<std::string> why;  // for kUnbound/kInvalid: which symbol or term (short)
};

enum class AtomKind : uint8_t {
  kSymbol,     // a named dim of a data input, bound at estimate time
  kUnknown,    // fresh: a data-dependent size, or one a rule could not work out
  kFloorDiv,   // floor(a / b)
  kExactDiv,   // a / b, which must divide exactly (Reshape's -1)
  kMod,        // a mod b, sign of b (ONNX Mod, Python %)
  kMin,        // min(a, b)
  kMax,        // max(a, b)
  kBroadcast,  // a if b == 1, b if a == 1, a if a == b, else invalid
};

struct AtomDef {
  AtomKind kind = AtomKind::kSymbol;
  std::string name;             // symbol name, or a label for unknowns
  bool data_dependent = false;  // kUnknown: depends on tensor contents (no shape pass can know)
  bool non_negative = true;     // kUnknown: known to be >= 0 (a size)
  DimExpr a, b;                 // operands of opaque terms
};

class DimTable {
 public:
  // Values at or above this are "unbounded" for min(): see the policy above.
  static constexpr int64_t kHugeDim = int64_t{1} << 62;

  // The symbol named `name` (interned).
  AtomId Symbol(const std::string& name);
  std::optional<AtomId> FindSymbol(const std::string& name) const;
  // A fresh unknown, equal to nothing but itself.
  AtomId Fresh(std::string label, bool data_dependent, bool non_negative = true);
  DimExpr FreshExpr(std::string label, bool data_dependent, bool non_negative = true) {
    return DimExpr::Atom(Fresh(std::move(label), data_dependent, non_negative));
  }

  // Opaque builders (see the policy): they simplify when they can, else intern an atom. They
  // never fail; an impossible operation (division by zero, overflow) gives a fresh unknown.
  DimExpr FloorDiv(const DimExpr& a, const DimExpr& b);
  DimExpr CeilDiv(const DimExpr& a, const DimExpr& b);  // for b > 0
  DimExpr ExactDiv(const DimExpr& a, const DimExpr& b);
  DimExpr Mod(const DimExpr& a, const DimExpr& b);
  DimExpr Min(const DimExpr& a, const DimExpr& b);
  DimExpr Max(const DimExpr& a, const DimExpr& b);
  // nullopt when the dims provably do not broadcast (two different constants, neither 1).
  // A symbolic dim against a constant c != 1 gives c, assuming the symbolic one is 1 or c: the
  // assumption is recorded (CheckAssumptions) under the current site.
  std::optional<DimExpr> Broadcast(const DimExpr& a, const DimExpr& b);

  // What the builders assumed, for binding to check: `dim` is 1 or `value`. `site` is the
  // caller's tag for where it was assumed (the shape pass sets the node index with set_site
  // before running a rule; -1 when none was set).
  struct Assumption {
    DimExpr dim;
    int64_t value = 0;
    int64_t site = -1;
  };
  void set_site(int64_t site) { site_ = site; }
  // The first assumption `values` break, with the dim's value there; nullopt when none is.
  struct Broken {
    const Assumption* assumption = nullptr;
    int64_t actual = 0;
    std::string Describe(const DimTable& table) const;  // "a dim that is 256 here (seq) ..."
  };
  std::optional<Broken> CheckAssumptions(const AtomValues& values) const;

  // Sign and order facts (provable with symbols >= 0); nullopt when not provable either way.
  bool NonNegative(const DimExpr& e) const;
  std::optional<bool> Equal(const DimExpr& a, const DimExpr& b) const;
  std::optional<bool> Less(const DimExpr& a, const DimExpr& b) const;

  size_t size() const { return atoms_.size(); }
  const AtomDef& atom(AtomId id) const { return atoms_[static_cast<size_t>(id)]; }

  // Every atom's value, with `symbol_values` giving symbols by atom id (absent or nullopt:
  // unbound). Opaque atoms are evaluated in id order (their operands are older atoms).
  AtomValues Evaluate(std::span<const std::optional<int64_t>> symbol_values) const;

  std::string AtomName(AtomId id) const;

 private:
  DimExpr Intern(AtomKind kind, const DimExpr& a, const DimExpr& b);
  DimExpr GiveUp(const char* what);

  std::vector<AtomDef> atoms_;
  std::map<std::string, AtomId> symbols_;
  std::map<std::tuple<AtomKind, DimExpr, DimExpr>, AtomId> opaque_;
  int64_t site_ = -1;
  std::vector<Assumption> assumptions_;
  std::set<std::pair<DimExpr, int64_t>> assumed_;  // dedupe: the first site is kept
};

}  // namespace memest::core

#endif  // MEMEST_CORE_SYMDIM_H_
