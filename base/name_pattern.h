// base/name_pattern.h -- a POSIX extended regular expression searched in names (grep -E), the
// one compiler behind Options::trainable / freeze: Validate() checks them with it and
// memory/trainable.cc matches with it.
//
// Policy: glibc's regcomp/regexec with REG_EXTENDED | REG_NOSUB. ERE has no backreferences and
// glibc matches it without backtracking, so no expression can make a search take exponential
// time (std::regex's ECMAScript engine can). Compile errors are InvalidArgument naming the option
// and the expression.
#ifndef MEMEST_BASE_NAME_PATTERN_H_
#define MEMEST_BASE_NAME_PATTERN_H_

#include <regex.h>

#include <memory>
#include <string>

#include "memest/status.h"

namespace memest::base {

class NamePattern {
 public:
  // The compiled `expr`, or nullptr when it is empty (no pattern). `option` names it in errors.
  // `with_match`: keep match positions, so that MatchedText() can say what matched.
  [[nodiscard]] static Result<std::unique_ptr<NamePattern>> Compile(const std::string& expr,
                                                                    const char* option,
                                                                    bool with_match = false);
  ~NamePattern() {
    if (compiled_) regfree(&re_);
  }
  NamePattern(const NamePattern&) = delete;
  NamePattern& operator=(const NamePattern&) = delete;

  // Whether the expression matches somewhere in `name` (re.search).
  bool Search(const std::string& name) const;
  // The leftmost-longest text the expression matches in `name`, or empty when it does not match
  // (compiled with_match only; otherwise always empty).
  std::string MatchedText(const std::string& name) const;

 private:
  NamePattern() = default;
  regex_t re_{};
  bool compiled_ = false;  // regfree only what regcomp built
  bool with_match_ = false;
};

}  // namespace memest::base

#endif  // MEMEST_BASE_NAME_PATTERN_H_
