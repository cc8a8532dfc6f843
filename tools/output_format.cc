#include "tools/output_format.h"

#include <string>

namespace memest::output {

Result<Format> ParseFormat(std::string_view s, std::initializer_list<Format> accepted) {
  std::string names;
  for (Format f : accepted) {
    if (s == ToString(f) || (f == Format::kMd && s == "markdown")) return f;
    names += (names.empty() ? "" : ", ") + std::string(ToString(f));
  }
  return InvalidArgument("unknown output format '" + std::string(s) + "' (expected " + names + ")");
}

const char* ToString(Format f) {
  switch (f) {
    case Format::kTable:
      return "table";
    case Format::kJson:
      return "json";
    case Format::kCsv:
      return "csv";
    case Format::kMd:
      return "md";
  }
  return "table";
}

}  // namespace memest::output
