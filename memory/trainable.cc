// memory/trainable.cc -- see memory/trainable.h for the policy.
#include "memory/trainable.h"

#include <regex.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>

namespace memest::memory {
namespace {

// A compiled POSIX extended expression, freed with the object.
class Pattern {
 public:
  static Result<std::unique_ptr<Pattern>> Compile(const std::string& expr, const char* option) {
    if (expr.empty()) return std::unique_ptr<Pattern>();
    auto p = std::unique_ptr<Pattern>(new Pattern());
    const int rc = regcomp(&p->re_, expr.c_str(), REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char why[256];
      regerror(rc, &p->re_, why, sizeof(why));
      return InvalidArgument(std::string(option) + " '" + expr +
                             "' is not a valid POSIX extended regular expression: " + why);
    }
    p->compiled_ = true;
    return p;
  }
  ~Pattern() {
    if (compiled_) regfree(&re_);
  }
  bool Search(const std::string& name) const {
    return regexec(&re_, name.c_str(), 0, nullptr, 0) == 0;
  }

 private:
  Pattern() = default;
  regex_t re_{};
  bool compiled_ = false;
};

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
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<Pattern> keep,
                          Pattern::Compile(o.trainable, "trainable"));
  MEMEST_ASSIGN_OR_RETURN(std::unique_ptr<Pattern> drop, Pattern::Compile(o.freeze, "freeze"));
  TrainableSet s;
  s.trainable.assign(g.values.size(), false);
  int kept = 0, dropped = 0;
  std::string examples;  // a few parameter names, for the error below
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    if (!v.trainable) continue;
    if (s.parameters < 3) examples += (examples.empty() ? "'" : ", '") + v.name + "'";
    bool trains = true;
    if (v.name.size() <= kMaxMatchedName) {
      if (keep && !keep->Search(v.name)) trains = false;
      if (drop && drop->Search(v.name)) trains = false;
      kept += keep && keep->Search(v.name) ? 1 : 0;
      dropped += drop && drop->Search(v.name) ? 1 : 0;
    }
    s.trainable[i] = trains;
    ++s.parameters;
    s.parameter_elements += Elements(v);
    if (trains) {
      ++s.trained;
      s.trained_elements += Elements(v);
    }
  }
  // An expression that matches no parameter name is a typo or a wrong model, never a no-op.
  for (const auto& [option, expr, matches] :
       {std::tuple{"trainable", &o.trainable, kept}, std::tuple{"freeze", &o.freeze, dropped}}) {
    if (expr->empty() || matches > 0) continue;
    return InvalidArgument(std::string(option) + " '" + *expr + "' matches no parameter name (" +
                           std::to_string(s.parameters) + " parameters, named like " +
                           (examples.empty() ? std::string("(none)") : examples) + ")");
  }
  return s;
}

}  // namespace memest::memory
