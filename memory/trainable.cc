// memory/trainable.cc -- see memory/trainable.h for the policy.
#include "memory/trainable.h"

#include <optional>
#include <regex>
#include <string>

namespace memest::memory {
namespace {

Result<std::optional<std::regex>> Compile(const std::string& expr, const char* option) {
  if (expr.empty()) return std::optional<std::regex>();
  try {
    return std::optional<std::regex>(
        std::regex(expr, std::regex::ECMAScript | std::regex::optimize));
  } catch (const std::regex_error& e) {
    return InvalidArgument(std::string(option) + " '" + expr +
                           "' is not a valid regular expression: " + e.what());
  }
}

bool Search(const std::optional<std::regex>& re, const std::string& name) {
  try {
    return std::regex_search(name, *re);
  } catch (const std::regex_error&) {  // complexity or stack limits of the engine
    return false;
  }
}

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
  MEMEST_ASSIGN_OR_RETURN(auto keep, Compile(o.trainable, "trainable"));
  MEMEST_ASSIGN_OR_RETURN(auto drop, Compile(o.freeze, "freeze"));
  TrainableSet s;
  s.trainable.assign(g.values.size(), false);
  for (size_t i = 0; i < g.values.size(); ++i) {
    const core::Value& v = g.values[i];
    if (!v.trainable) continue;
    bool trains = true;
    if (v.name.size() <= kMaxMatchedName) {
      if (keep && !Search(keep, v.name)) trains = false;
      if (drop && Search(drop, v.name)) trains = false;
    }
    s.trainable[i] = trains;
    ++s.parameters;
    s.parameter_elements += Elements(v);
    if (trains) {
      ++s.trained;
      s.trained_elements += Elements(v);
    }
  }
  return s;
}

}  // namespace memest::memory
