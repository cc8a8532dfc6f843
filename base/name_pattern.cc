// base/name_pattern.cc -- see base/name_pattern.h.
#include "base/name_pattern.h"

namespace memest::base {

Result<std::unique_ptr<NamePattern>> NamePattern::Compile(const std::string& expr,
                                                          const char* option, bool with_match) {
  if (expr.empty()) return std::unique_ptr<NamePattern>();
  auto p = std::unique_ptr<NamePattern>(new NamePattern());
  const int rc =
      regcomp(&p->re_, expr.c_str(), with_match ? REG_EXTENDED : REG_EXTENDED | REG_NOSUB);
  if (rc != 0) {
    char why[256];
    regerror(rc, &p->re_, why, sizeof(why));
    return InvalidArgument(std::string(option) + " '" + expr +
                           "' is not a valid POSIX extended regular expression: " + why);
  }
  p->compiled_ = true;
  p->with_match_ = with_match;
  return p;
}

bool NamePattern::Search(const std::string& name) const {
  return regexec(&re_, name.c_str(), 0, nullptr, 0) == 0;
}

}  // namespace memest::base

namespace memest::base {

std::string NamePattern::MatchedText(const std::string& name) const {
  if (!with_match_) return "";
  regmatch_t m{};
  if (regexec(&re_, name.c_str(), 1, &m, 0) != 0 || m.rm_so < 0 || m.rm_eo < m.rm_so) return "";
  return name.substr(static_cast<size_t>(m.rm_so), static_cast<size_t>(m.rm_eo - m.rm_so));
}

}  // namespace memest::base
