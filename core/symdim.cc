// core/symdim.cc -- see core/symdim.h for the policy.
#include "core/symdim.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace memest::core {
namespace {

constexpr int kMaxPrintDepth = 6;

std::optional<int64_t> AddS(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<int64_t> MulS(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
// Floor division and Python-style modulo; nullopt for b == 0 or INT64_MIN / -1.
std::optional<int64_t> FloorDivS(int64_t a, int64_t b) {
  if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1)) return std::nullopt;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
std::optional<int64_t> ModS(int64_t a, int64_t b) {
  if (b == 0) return std::nullopt;
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Graded order: higher degree first, then (same degree) the lexicographically smaller sorted
// multiset of atom ids. A monomial order, so long division terminates.
bool LeadsOver(const std::vector<AtomId>& a, const std::vector<AtomId>& b) {
  if (a.size() != b.size()) return a.size() > b.size();
  return a < b;
}

// `small` is a sub-multiset of `big` (both sorted); `rest` gets big minus small.
bool DividesMonomial(const std::vector<AtomId>& small, const std::vector<AtomId>& big,
                     std::vector<AtomId>* rest) {
  rest->clear();
  size_t i = 0;
  for (AtomId x : big) {
    if (i < small.size() && small[i] == x) {
      ++i;
    } else if (i < small.size() && small[i] < x) {
      return false;
    } else {
      rest->push_back(x);
    }
  }
  return i == small.size();
}

std::string CoefTimes(int64_t coef, const std::string& mono, bool first) {
  std::string s;
  if (!first) s += coef < 0 ? " - " : " + ";
  const uint64_t mag =
      coef < 0 ? uint64_t{0} - static_cast<uint64_t>(coef) : static_cast<uint64_t>(coef);
  if (first && coef < 0) s += "-";
  if (mag != 1) s += std::to_string(mag) + "*";
  return s + mono;
}

std::string ExprString(const DimExpr& e, const DimTable* table, int depth);

std::string AtomString(AtomId id, const DimTable* table, int depth) {
  if (table == nullptr || id < 0 || static_cast<size_t>(id) >= table->size()) {
    return "a" + std::to_string(id);
  }
  const AtomDef& d = table->atom(id);
  if (d.kind == AtomKind::kSymbol) return d.name;
  if (d.kind == AtomKind::kUnknown) return "?" + d.name;
  if (depth >= kMaxPrintDepth) return "(...)";
  const std::string a = ExprString(d.a, table, depth + 1);
  const std::string b = ExprString(d.b, table, depth + 1);
  switch (d.kind) {
    case AtomKind::kFloorDiv:
      return "floor((" + a + ")/(" + b + "))";
    case AtomKind::kExactDiv:
      return "((" + a + ")/(" + b + "))";
    case AtomKind::kMod:
      return "((" + a + ") mod (" + b + "))";
    case AtomKind::kMin:
      return "min(" + a + ", " + b + ")";
    case AtomKind::kMax:
      return "max(" + a + ", " + b + ")";
    case AtomKind::kBroadcast:
      return "broadcast(" + a + ", " + b + ")";
    default:
      return "?";
  }
}

std::string ExprString(const DimExpr& e, const DimTable* table, int depth) {
  if (e.IsConstant()) return std::to_string(e.constant_term());
  std::string s;
  bool first = true;
  for (const DimExpr::Term& t : e.terms()) {
    std::string mono;
    for (size_t i = 0; i < t.monomial.size();) {
      size_t j = i;
      while (j < t.monomial.size() && t.monomial[j] == t.monomial[i]) ++j;
      if (!mono.empty()) mono += "*";
      mono += AtomString(t.monomial[i], table, depth);
      if (j - i > 1) mono += "^" + std::to_string(j - i);
      i = j;
    }
    s += CoefTimes(t.coef, mono, first);
    first = false;
  }
  if (e.constant_term() != 0) {
    const int64_t c = e.constant_term();
    s += c < 0 ? " - " : " + ";
    s += c < 0 ? std::to_string(uint64_t{0} - static_cast<uint64_t>(c)) : std::to_string(c);
  }
  return s;
}

}  // namespace

// -------------------------------------------------------------------------------------------
// DimExpr

const std::vector<DimExpr::Term>& DimExpr::NoTerms() {
  static const auto* empty = new std::vector<Term>();
  return *empty;
}

void DimExpr::SetTerms(std::vector<Term> terms) {
  if (terms.empty()) {
    terms_.reset();
  } else {
    terms_ = std::make_shared<const std::vector<Term>>(std::move(terms));
  }
}

DimExpr DimExpr::Atom(AtomId id) {
  DimExpr e;
  e.SetTerms({Term{{id}, 1}});
  return e;
}

std::optional<AtomId> DimExpr::AsAtom() const {
  const std::vector<Term>& t = terms();
  if (constant_ != 0 || t.size() != 1 || t[0].coef != 1 || t[0].monomial.size() != 1) {
    return std::nullopt;
  }
  return t[0].monomial[0];
}

std::optional<DimExpr> DimExpr::FromTerms(std::vector<Term> terms, int64_t constant) {
  std::sort(terms.begin(), terms.end(),
            [](const Term& a, const Term& b) { return a.monomial < b.monomial; });
  DimExpr e;
  e.constant_ = constant;
  std::vector<Term> out;
  out.reserve(terms.size());
  for (Term& t : terms) {
    if (t.coef == 0) continue;
    if (t.monomial.empty()) {
      auto c = AddS(e.constant_, t.coef);
      if (!c) return std::nullopt;
      e.constant_ = *c;
      continue;
    }
    if (t.monomial.size() > kMaxDegree) return std::nullopt;
    if (!out.empty() && out.back().monomial == t.monomial) {
      auto c = AddS(out.back().coef, t.coef);
      if (!c) return std::nullopt;
      out.back().coef = *c;
      if (*c == 0) out.pop_back();
      continue;
    }
    out.push_back(std::move(t));
  }
  if (out.size() > kMaxTerms) return std::nullopt;
  e.SetTerms(std::move(out));
  return e;
}

std::optional<DimExpr> Add(const DimExpr& a, const DimExpr& b) {
  if (b.IsConstant() && a.IsConstant()) {
    auto c = AddS(a.constant_, b.constant_);
    if (!c) return std::nullopt;
    return DimExpr(*c);
  }
  std::vector<DimExpr::Term> terms;
  if (b.IsConstant() || a.IsConstant()) {  // only the constant changes
    const DimExpr& poly = b.IsConstant() ? a : b;
    auto c = AddS(a.constant_, b.constant_);
    if (!c) return std::nullopt;
    DimExpr r = poly;
    r.constant_ = *c;
    return r;
  }
  terms.reserve(a.terms().size() + b.terms().size());
  terms.insert(terms.end(), a.terms().begin(), a.terms().end());
  terms.insert(terms.end(), b.terms().begin(), b.terms().end());
  auto c = AddS(a.constant_, b.constant_);
  if (!c) return std::nullopt;
  return DimExpr::FromTerms(std::move(terms), *c);
}

std::optional<DimExpr> Neg(const DimExpr& a) {
  DimExpr r;
  auto c = MulS(a.constant_, -1);
  if (!c) return std::nullopt;
  r.constant_ = *c;
  std::vector<DimExpr::Term> terms = a.terms();
  for (auto& t : terms) {
    auto m = MulS(t.coef, -1);
    if (!m) return std::nullopt;
    t.coef = *m;
  }
  r.SetTerms(std::move(terms));
  return r;
}

std::optional<DimExpr> Sub(const DimExpr& a, const DimExpr& b) {
  if (a.IsConstant() && b.IsConstant()) {
    int64_t r;
    if (__builtin_sub_overflow(a.constant_, b.constant_, &r)) return std::nullopt;
    return DimExpr(r);
  }
  auto nb = Neg(b);
  if (!nb) return std::nullopt;
  return Add(a, *nb);
}

std::optional<DimExpr> Mul(const DimExpr& a, const DimExpr& b) {
  if (a.IsConstant() && b.IsConstant()) {
    auto c = MulS(a.constant_, b.constant_);
    if (!c) return std::nullopt;
    return DimExpr(*c);
  }
  if (a.IsConstant() && (a.constant_ == 1 || a.constant_ == 0)) return a.constant_ ? b : a;
  if (b.IsConstant() && (b.constant_ == 1 || b.constant_ == 0)) return b.constant_ ? a : b;
  // Treat each constant as a term with an empty monomial.
  auto expand = [](const DimExpr& e) {
    std::vector<DimExpr::Term> t = e.terms();
    if (e.constant_ != 0) t.push_back(DimExpr::Term{{}, e.constant_});
    return t;
  };
  const std::vector<DimExpr::Term> ta = expand(a), tb = expand(b);
  if (ta.size() * tb.size() > 4 * DimExpr::kMaxTerms * DimExpr::kMaxTerms) return std::nullopt;
  std::vector<DimExpr::Term> out;
  out.reserve(ta.size() * tb.size());
  for (const auto& x : ta) {
    for (const auto& y : tb) {
      auto c = MulS(x.coef, y.coef);
      if (!c) return std::nullopt;
      DimExpr::Term t;
      t.coef = *c;
      t.monomial.resize(x.monomial.size() + y.monomial.size());
      std::merge(x.monomial.begin(), x.monomial.end(), y.monomial.begin(), y.monomial.end(),
                 t.monomial.begin());
      out.push_back(std::move(t));
    }
  }
  return DimExpr::FromTerms(std::move(out), 0);
}

std::optional<DimExpr> DivExact(const DimExpr& a, const DimExpr& b) {
  if (b.IsConstant()) {
    const int64_t c = b.constant_;
    if (c == 0) return std::nullopt;
    auto div = [c](int64_t x) -> std::optional<int64_t> {
      if (c == -1 && x == std::numeric_limits<int64_t>::min()) return std::nullopt;
      if (x % c != 0) return std::nullopt;
      return x / c;
    };
    if (c == 1) return a;
    DimExpr r;
    auto k = div(a.constant_);
    if (!k) return std::nullopt;
    r.constant_ = *k;
    std::vector<DimExpr::Term> terms = a.terms();
    for (auto& t : terms) {
      auto q = div(t.coef);
      if (!q) return std::nullopt;
      t.coef = *q;
    }
    r.SetTerms(std::move(terms));
    return r;
  }
  // Polynomial long division under the graded order; the remainder must vanish.
  auto lead = [](const DimExpr& e) -> DimExpr::Term {
    if (e.IsConstant()) return DimExpr::Term{{}, e.constant_};
    const DimExpr::Term* best = &e.terms()[0];
    for (const auto& t : e.terms()) {
      if (LeadsOver(t.monomial, best->monomial)) best = &t;
    }
    return *best;
  };
  const DimExpr::Term lb = lead(b);
  DimExpr q;
  DimExpr r = a;
  std::vector<AtomId> rest;
  for (size_t iter = 0; iter < 4 * DimExpr::kMaxTerms; ++iter) {
    if (r.IsConstant() && r.constant_ == 0) return q;
    const DimExpr::Term lr = lead(r);
    if (!DividesMonomial(lb.monomial, lr.monomial, &rest)) return std::nullopt;
    if (lr.coef % lb.coef != 0) return std::nullopt;
    if (lb.coef == -1 && lr.coef == std::numeric_limits<int64_t>::min()) return std::nullopt;
    auto t = DimExpr::FromTerms({DimExpr::Term{rest, lr.coef / lb.coef}}, 0);
    if (!t) return std::nullopt;
    auto nq = Add(q, *t);
    auto tb = Mul(*t, b);
    if (!nq || !tb) return std::nullopt;
    auto nr = Sub(r, *tb);
    if (!nr) return std::nullopt;
    q = std::move(*nq);
    r = std::move(*nr);
  }
  return std::nullopt;
}

Result<int64_t> DimExpr::Evaluate(const AtomValues& atoms) const {
  int64_t acc = constant_;
  for (const Term& t : terms()) {
    int64_t prod = t.coef;
    for (AtomId id : t.monomial) {
      const auto i = static_cast<size_t>(id);
      if (id < 0 || i >= atoms.state.size())
        return Internal("dim expression names an unknown atom");
      switch (atoms.state[i]) {
        case AtomValues::kOk:
          break;
        case AtomValues::kUnbound:
          return UnboundDim("no value for " + atoms.why[i]);
        case AtomValues::kOverflow:
          return Overflow("dim arithmetic overflows 64 bits");
        case AtomValues::kInvalid:
          return InvalidModel(atoms.why[i]);
      }
      auto m = MulS(prod, atoms.value[i]);
      if (!m) return Overflow("dim arithmetic overflows 64 bits");
      prod = *m;
    }
    auto s = AddS(acc, prod);
    if (!s) return Overflow("dim arithmetic overflows 64 bits");
    acc = *s;
  }
  return acc;
}

std::string DimExpr::ToString(const DimTable* table) const { return ExprString(*this, table, 0); }

// -------------------------------------------------------------------------------------------
// DimTable

AtomId DimTable::Symbol(const std::string& name) {
  auto [it, inserted] = symbols_.emplace(name, static_cast<AtomId>(atoms_.size()));
  if (inserted) {
    AtomDef d;
    d.kind = AtomKind::kSymbol;
    d.name = name;
    atoms_.push_back(std::move(d));
  }
  return it->second;
}

std::optional<AtomId> DimTable::FindSymbol(const std::string& name) const {
  auto it = symbols_.find(name);
  if (it == symbols_.end()) return std::nullopt;
  return it->second;
}

AtomId DimTable::Fresh(std::string label, bool data_dependent, bool non_negative) {
  AtomDef d;
  d.kind = AtomKind::kUnknown;
  d.name = std::move(label);
  d.data_dependent = data_dependent;
  d.non_negative = non_negative;
  atoms_.push_back(std::move(d));
  return static_cast<AtomId>(atoms_.size() - 1);
}

DimExpr DimTable::GiveUp(const char* what) { return FreshExpr(what, false, false); }

bool DimTable::NonNegative(const DimExpr& e) const {
  if (e.constant_term() < 0) return false;
  for (const auto& t : e.terms()) {
    if (t.coef < 0) return false;
    for (AtomId id : t.monomial) {
      if (!atom(id).non_negative) return false;
    }
  }
  return true;
}

std::optional<bool> DimTable::Equal(const DimExpr& a, const DimExpr& b) const {
  if (a == b) return true;
  auto d = Sub(a, b);
  if (!d) return std::nullopt;
  if (d->IsConstant()) return d->constant_term() == 0;
  auto d1 = Sub(*d, 1);
  if (d1 && NonNegative(*d1)) return false;  // a - b >= 1
  auto nd = Neg(*d);
  auto nd1 = nd ? Sub(*nd, 1) : std::nullopt;
  if (nd1 && NonNegative(*nd1)) return false;  // b - a >= 1
  return std::nullopt;
}

std::optional<bool> DimTable::Less(const DimExpr& a, const DimExpr& b) const {
  auto d = Sub(b, a);
  if (!d) return std::nullopt;
  if (d->IsConstant()) return d->constant_term() > 0;
  auto d1 = Sub(*d, 1);
  if (d1 && NonNegative(*d1)) return true;  // b - a >= 1
  auto nd = Neg(*d);
  if (nd && NonNegative(*nd)) return false;  // a - b >= 0
  return std::nullopt;
}

DimExpr DimTable::Intern(AtomKind kind, const DimExpr& a, const DimExpr& b) {
  auto key = std::make_tuple(kind, a, b);
  auto it = opaque_.find(key);
  if (it != opaque_.end()) return DimExpr::Atom(it->second);
  AtomDef d;
  d.kind = kind;
  d.a = a;
  d.b = b;
  auto positive = [&](const DimExpr& e) {
    auto m = Sub(e, 1);
    return m && NonNegative(*m);
  };
  switch (kind) {
    case AtomKind::kFloorDiv:
    case AtomKind::kExactDiv:
      d.non_negative = NonNegative(a) && positive(b);
      break;
    case AtomKind::kMod:
      d.non_negative = positive(b);
      break;
    case AtomKind::kMin:
    case AtomKind::kBroadcast:
      d.non_negative = NonNegative(a) && NonNegative(b);
      break;
    case AtomKind::kMax:
      d.non_negative = NonNegative(a) || NonNegative(b);
      break;
    default:
      d.non_negative = false;
      break;
  }
  const auto id = static_cast<AtomId>(atoms_.size());
  atoms_.push_back(std::move(d));
  opaque_.emplace(std::move(key), id);
  return DimExpr::Atom(id);
}

DimExpr DimTable::FloorDiv(const DimExpr& a, const DimExpr& b) {
  if (b.IsConstant() && b.constant_term() == 0) return GiveUp("division by zero");
  if (a.IsConstant() && b.IsConstant()) {
    auto q = FloorDivS(a.constant_term(), b.constant_term());
    return q ? DimExpr(*q) : GiveUp("overflow");
  }
  if (auto q = DivExact(a, b)) return *q;
  if (b.IsConstant() && b.constant_term() > 0) {
    // floor((c*q + r)/c) = q + floor(r/c) for integer-valued q: keep only the remainders inside.
    const int64_t c = b.constant_term();
    std::vector<DimExpr::Term> whole, rest;
    for (const auto& t : a.terms()) {
      const int64_t m = *ModS(t.coef, c);
      const int64_t w = (t.coef - m) / c;
      if (w != 0) whole.push_back(DimExpr::Term{t.monomial, w});
      if (m != 0) rest.push_back(DimExpr::Term{t.monomial, m});
    }
    const int64_t km = *ModS(a.constant_term(), c);
    const int64_t kw = *FloorDivS(a.constant_term(), c);
    auto w = DimExpr::FromTerms(std::move(whole), kw);
    auto r = DimExpr::FromTerms(std::move(rest), km);
    if (!w || !r) return GiveUp("overflow");
    if (r->IsConstant()) return *w;  // 0 <= km < c: floor(km / c) == 0
    auto sum = Add(*w, Intern(AtomKind::kFloorDiv, *r, b));
    return sum ? *sum : GiveUp("overflow");
  }
  return Intern(AtomKind::kFloorDiv, a, b);
}

DimExpr DimTable::CeilDiv(const DimExpr& a, const DimExpr& b) {
  auto na = Neg(a);
  if (!na) return GiveUp("overflow");
  auto f = Neg(FloorDiv(*na, b));
  return f ? *f : GiveUp("overflow");
}

DimExpr DimTable::ExactDiv(const DimExpr& a, const DimExpr& b) {
  if (auto q = DivExact(a, b)) return *q;
  if (a.IsConstant() && b.IsConstant()) return GiveUp("inexact division");
  return Intern(AtomKind::kExactDiv, a, b);
}

DimExpr DimTable::Mod(const DimExpr& a, const DimExpr& b) {
  if (b.IsConstant() && b.constant_term() == 0) return GiveUp("modulo by zero");
  if (a.IsConstant() && b.IsConstant()) return *ModS(a.constant_term(), b.constant_term());
  if (DivExact(a, b)) return DimExpr(0);
  if (b.IsConstant()) {
    const int64_t c = b.constant_term();
    std::vector<DimExpr::Term> rest;
    for (const auto& t : a.terms()) {
      const int64_t m = *ModS(t.coef, c);
      if (m != 0) rest.push_back(DimExpr::Term{t.monomial, m});
    }
    auto r = DimExpr::FromTerms(std::move(rest), *ModS(a.constant_term(), c));
    if (!r) return GiveUp("overflow");
    if (r->IsConstant()) return r->constant_term();
    return Intern(AtomKind::kMod, *r, b);
  }
  return Intern(AtomKind::kMod, a, b);
}

DimExpr DimTable::Min(const DimExpr& a, const DimExpr& b) {
  if (a == b) return a;
  if (a.IsConstant() && b.IsConstant()) return std::min(a.constant_term(), b.constant_term());
  if (b.IsConstant() && b.constant_term() >= kHugeDim) return a;
  if (a.IsConstant() && a.constant_term() >= kHugeDim) return b;
  if (auto lt = Less(a, b)) return *lt ? a : b;
  if (auto d = Sub(b, a); d && NonNegative(*d)) return a;
  return a < b ? Intern(AtomKind::kMin, a, b) : Intern(AtomKind::kMin, b, a);
}

DimExpr DimTable::Max(const DimExpr& a, const DimExpr& b) {
  if (a == b) return a;
  if (a.IsConstant() && b.IsConstant()) return std::max(a.constant_term(), b.constant_term());
  if (b.IsConstant() && b.constant_term() <= -kHugeDim) return a;
  if (a.IsConstant() && a.constant_term() <= -kHugeDim) return b;
  if (auto lt = Less(a, b)) return *lt ? b : a;
  if (auto d = Sub(b, a); d && NonNegative(*d)) return b;
  return a < b ? Intern(AtomKind::kMax, a, b) : Intern(AtomKind::kMax, b, a);
}

std::optional<DimExpr> DimTable::Broadcast(const DimExpr& a, const DimExpr& b) {
  if (a == b) return a;
  if (a == DimExpr(1)) return b;
  if (b == DimExpr(1)) return a;
  if (a.IsConstant() && b.IsConstant()) return std::nullopt;
  // A constant other than 1 against a symbolic dim: the symbolic one must be 1 or equal to it
  // in any model that runs, and either way the result is the constant. Binding checks it.
  if (a.IsConstant() || b.IsConstant()) {
    const DimExpr& c = a.IsConstant() ? a : b;
    const DimExpr& sym = a.IsConstant() ? b : a;
    if (assumed_.emplace(sym, c.constant_term()).second) {
      assumptions_.push_back({sym, c.constant_term(), site_});
    }
    return c;
  }
  return a < b ? Intern(AtomKind::kBroadcast, a, b) : Intern(AtomKind::kBroadcast, b, a);
}

std::optional<DimTable::Broken> DimTable::CheckAssumptions(const AtomValues& values) const {
  for (const Assumption& a : assumptions_) {
    auto v = a.dim.Evaluate(values);
    if (v.ok() && *v != 1 && *v != a.value) return Broken{&a, *v};
  }
  return std::nullopt;
}

std::string DimTable::Broken::Describe(const DimTable& table) const {
  return "a dim that is " + std::to_string(actual) + " here (" + assumption->dim.ToString(&table) +
         ") does not broadcast against " + std::to_string(assumption->value);
}

AtomValues DimTable::Evaluate(std::span<const std::optional<int64_t>> symbol_values) const {
  AtomValues v;
  const size_t n = atoms_.size();
  v.value.assign(n, 0);
  v.state.assign(n, AtomValues::kOk);
  v.why.resize(n);
  auto fail = [&](size_t i, AtomValues::State s, std::string why) {
    v.state[i] = s;
    v.why[i] = std::move(why);
  };
  for (size_t i = 0; i < n; ++i) {
    const AtomDef& d = atoms_[i];
    if (d.kind == AtomKind::kSymbol) {
      if (i < symbol_values.size() && symbol_values[i]) {
        v.value[i] = *symbol_values[i];
      } else {
        fail(i, AtomValues::kUnbound, "dim '" + d.name + "'");
      }
      continue;
    }
    if (d.kind == AtomKind::kUnknown) {
      fail(i, AtomValues::kUnbound,
           (d.data_dependent ? "data-dependent size " : "unknown size ") + d.name);
      continue;
    }
    auto a = d.a.Evaluate(v);
    auto b = a.ok() ? d.b.Evaluate(v) : a;
    if (!a.ok() || !b.ok()) {
      const Status& s = !a.ok() ? a.status() : b.status();
      fail(i,
           s.code() == ErrorCode::kOverflow     ? AtomValues::kOverflow
           : s.code() == ErrorCode::kUnboundDim ? AtomValues::kUnbound
                                                : AtomValues::kInvalid,
           s.message());
      continue;
    }
    const int64_t x = *a, y = *b;
    std::optional<int64_t> r;
    switch (d.kind) {
      case AtomKind::kFloorDiv:
        if (y == 0) {
          fail(i, AtomValues::kInvalid, "division by zero in " + AtomName(static_cast<AtomId>(i)));
          continue;
        }
        r = FloorDivS(x, y);
        break;
      case AtomKind::kExactDiv:
        if (y == 0 || x % y != 0) {
          fail(i, AtomValues::kInvalid,
               std::to_string(x) + " is not divisible by " + std::to_string(y) + " in " +
                   AtomName(static_cast<AtomId>(i)));
          continue;
        }
        r = FloorDivS(x, y);
        break;
      case AtomKind::kMod:
        if (y == 0) {
          fail(i, AtomValues::kInvalid, "modulo by zero in " + AtomName(static_cast<AtomId>(i)));
          continue;
        }
        r = ModS(x, y);
        break;
      case AtomKind::kMin:
        r = std::min(x, y);
        break;
      case AtomKind::kMax:
        r = std::max(x, y);
        break;
      case AtomKind::kBroadcast:
        if (x == y || y == 1) {
          r = x;
        } else if (x == 1) {
          r = y;
        } else {
          fail(i, AtomValues::kInvalid,
               "dims " + std::to_string(x) + " and " + std::to_string(y) + " do not broadcast");
          continue;
        }
        break;
      default:
        break;
    }
    if (!r) {
      fail(i, AtomValues::kOverflow, "overflow");
      continue;
    }
    v.value[i] = *r;
  }
  return v;
}

std::string DimTable::AtomName(AtomId id) const { return AtomString(id, this, 0); }

}  // namespace memest::core
