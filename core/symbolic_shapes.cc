// core/symbolic_shapes.cc -- see core/symbolic_shapes.h.
#include "core/symbolic_shapes.h"

#include <cstdint>
#include <utility>

#include "base/distinct.h"
#include "core/graph.h"

namespace memest::core {

Status EvaluateDimsInto(const std::vector<DimExpr>& dims, const AtomValues& atoms,
                        std::span<int64_t> out) {
  for (size_t i = 0; i < dims.size() && i < out.size(); ++i) {
    MEMEST_ASSIGN_OR_RETURN(int64_t v, dims[i].Evaluate(atoms));
    if (v < 0) return InvalidModel("negative dim " + std::to_string(v));
    out[i] = v;
  }
  return Status::Ok();
}

namespace {

// What makes two shapes the same (ShapeProgram's policy): per dim, its constant and the address
// of its terms (one shared vector for every constant).
bool SameExpressions(const std::vector<DimExpr>& a, const std::vector<DimExpr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].constant_term() != b[i].constant_term() || &a[i].terms() != &b[i].terms()) {
      return false;
    }
  }
  return true;
}

uint64_t HashExpressions(const std::vector<DimExpr>& dims) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ dims.size();
  for (const DimExpr& d : dims) {
    for (const uint64_t part : {static_cast<uint64_t>(d.constant_term()),
                                static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&d.terms()))}) {
      h ^= part + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
    }
  }
  return h ^ (h >> 29);
}

}  // namespace

ShapeProgram ShapeProgram::Compile(const std::vector<SymTensor>& types) {
  base::Distinct d = base::NumberDistinct(
      types.size(), [&](size_t id) { return types[id].shape.has_value(); },
      [&](size_t id) { return HashExpressions(*types[id].shape); },
      [&](size_t a, size_t b) { return SameExpressions(*types[a].shape, *types[b].shape); });
  ShapeProgram p;
  p.shape_of_ = std::move(d.number);
  p.shapes_ = d.first.size();
  return p;
}

Result<std::vector<int64_t>> EvaluateDims(const std::vector<DimExpr>& dims,
                                          const AtomValues& atoms) {
  std::vector<int64_t> out(dims.size());
  MEMEST_RETURN_IF_ERROR(EvaluateDimsInto(dims, atoms, out));
  return out;
}

Result<ConcreteShapes> EvaluateShapes(const Graph& graph, const SymbolicShapes& symbolic,
                                      const std::map<std::string, int64_t>& symbols) {
  std::vector<std::optional<int64_t>> by_atom(symbolic.table.size());
  for (const auto& [name, value] : symbols) {
    if (auto a = symbolic.table.FindSymbol(name)) by_atom[static_cast<size_t>(*a)] = value;
  }
  const AtomValues atoms = symbolic.table.Evaluate(by_atom);
  ConcreteShapes out;
  const size_t n = symbolic.types.size();
  out.dtypes.assign(n, 0);
  out.shapes.assign(n, std::nullopt);
  for (size_t i = 0; i < n; ++i) {
    const SymTensor& t = symbolic.types[i];
    out.dtypes[i] = t.dtype;
    if (!t.shape) continue;
    auto dims = EvaluateDims(*t.shape, atoms);
    if (dims.ok()) {
      out.shapes[i] = std::move(dims).value();
    } else if (dims.status().code() == ErrorCode::kOverflow) {
      const std::string name = i < graph.values.size() ? graph.values[i].name : "?";
      return Overflow("tensor '" + name + "': " + dims.status().message());
    }
  }
  return out;
}

}  // namespace memest::core
