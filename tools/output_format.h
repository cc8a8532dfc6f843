// tools/output_format.h -- the output formats of memest's command-line tools, named once.
//
// memest writes a table, JSON, CSV or Markdown (-o); memest-eval writes Markdown, CSV or JSON
// (--format). Each tool passes the formats it accepts; the names and the error are the same.
#ifndef MEMEST_TOOLS_OUTPUT_FORMAT_H_
#define MEMEST_TOOLS_OUTPUT_FORMAT_H_

#include <initializer_list>
#include <string_view>

#include "memest/status.h"

namespace memest::output {

enum class Format { kTable, kJson, kCsv, kMd };

// "table", "json", "csv", "md" (also "markdown"), case-sensitive, when `accepted` holds it;
// otherwise InvalidArgument naming the accepted ones.
Result<Format> ParseFormat(std::string_view s, std::initializer_list<Format> accepted);
const char* ToString(Format f);

}  // namespace memest::output

#endif  // MEMEST_TOOLS_OUTPUT_FORMAT_H_
