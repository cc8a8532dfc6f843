// api/timeline.cc -- see memest/timeline.h: the symbolic simulation (symbolic/symbolic.h) rendered
// by symbolic/timeline_writer.h.
#include "memest/timeline.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "symbolic/symbolic.h"
#include "symbolic/timeline_writer.h"

namespace memest {

Result<TimelineFormat> TimelineFormatFor(std::string_view path) {
  auto ends = [&](std::string_view ext) {
    return path.size() >= ext.size() && path.substr(path.size() - ext.size()) == ext;
  };
  if (ends(".json")) return TimelineFormat::kJson;
  if (ends(".csv")) return TimelineFormat::kCsv;
  if (ends(".svg")) return TimelineFormat::kSvg;
  if (ends(".html") || ends(".htm")) return TimelineFormat::kHtml;
  return InvalidArgument("timeline file '" + std::string(path) +
                         "' must end in .json, .csv, .svg or .html");
}

Result<std::string> RenderTimeline(const Model& model, const Options& options,
                                   TimelineFormat format, std::string_view title) {
  MEMEST_ASSIGN_OR_RETURN(symbolic::Simulation sim,
                          symbolic::SimulateModel(model, options, /*record_events=*/true));
  return symbolic::RenderTimeline(sim, format, title);
}

Status WriteTimeline(const Model& model, const Options& options, const std::string& path,
                     std::string_view title) {
  MEMEST_ASSIGN_OR_RETURN(const TimelineFormat format, TimelineFormatFor(path));
  MEMEST_ASSIGN_OR_RETURN(const std::string text, RenderTimeline(model, options, format, title));
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    return InvalidArgument("cannot write timeline file '" + path + "': " + std::strerror(errno));
  }
  out << text;
  out.flush();
  if (!out) {
    const int err = errno;
    return InvalidArgument("error writing timeline file '" + path + "'" +
                           (err != 0 ? std::string(": ") + std::strerror(err) : ""));
  }
  return Status::Ok();
}

}  // namespace memest
