// memory/trainable.cc -- see memory/trainable.h for the policy.
#include "memory/trainable.h"

#include <memory>
#include <string>
#include <tuple>

#include "base/name_pattern.h"

namespace memest::memory {
namespace {

uint64_t Elements(const core::Value& v) {
  uint64_t n = 1;
  for (const core::Dim& d : v.dims) {
    if (!d.known() || d.value < 0 ||
        __builtin_mul_overflow(n, static_cast<uint64_t>(d.value), &n)) {
      return 0;
    }
  }
  return n;
}

}  // namespace

Result<TrainableSet> SelectTrainable(const core::Graph& g, const Options& o) {
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<base::NamePattern> keep,
                          base::NamePattern::Compile(o.trainable, "trainable"));
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<base::NamePattern> drop,
                          base::NamePattern::Compile(o.freeze, "freeze"));
  TrainableSet s;
  s.trainable.assign(g.values.size(), false);
  int kept = 0, dropped = 0;
  std::vector<size_t> first;  // the first few parameters, named in the error below
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    if (!v.trainable) continue;
    if (first.size() < 3) first.push_back(i);
    bool trains = true;
    if (v.name.size() <= kMaxMatchedName) {
      const bool keep_hit = keep && keep->Search(v.name);
      const bool drop_hit = drop && drop->Search(v.name);
      trains = (!keep || keep_hit) && !drop_hit;
      kept += keep_hit ? 1 : 0;
      dropped += drop_hit ? 1 : 0;
    }
    s.trainable[i] = trains;
    ++s.parameters;
    const uint64_t elements = Elements(v);
    s.parameter_elements += elements;
    if (trains) {
      ++s.trained;
      s.trained_elements += elements;
    }
  }
  // An expression that matches no parameter name is a typo or a wrong model, never a no-op.
  for (const auto& [option, expr, matches] :
       {std::tuple{"trainable", &o.trainable, kept}, std::tuple{"freeze", &o.freeze, dropped}}) {
    if (expr->empty() || matches > 0) continue;
    std::string examples;
    for (size_t i : first) examples += (examples.empty() ? "'" : ", '") + g.values[i].name + "'";
    return InvalidArgument(std::string(option) + " '" + *expr + "' matches no parameter name (" +
                           std::to_string(s.parameters) + " parameters, named like " +
                           (examples.empty() ? std::string("(none)") : examples) + ")");
  }
  return s;
}

}  // namespace memest::memory
