// memest/timeline.h -- one simulated step as a timeline: every allocation and free the symbolic
// backend replays through its caching-allocator model, for people (SVG, HTML) and programs
// (JSON "memest.timeline/1", CSV). `memest --timeline FILE` writes one.
//
// The timeline is always the symbolic backend's (the only one that simulates events); under
// pipeline parallelism it is one rank of the stage with the highest device peak.
#ifndef MEMEST_TIMELINE_H_
#define MEMEST_TIMELINE_H_

#include <string>
#include <string_view>

#include "memest/model.h"
#include "memest/options.h"
#include "memest/status.h"

namespace memest {

enum class TimelineFormat { kJson, kCsv, kSvg, kHtml };

// The format a file name's extension names (.json, .csv, .svg, .html/.htm); InvalidArgument
// naming the accepted extensions otherwise.
[[nodiscard]] Result<TimelineFormat> TimelineFormatFor(std::string_view path);

// Simulates one step of `model` under `options` and renders it, titled `title`.
[[nodiscard]] Result<std::string> RenderTimeline(const Model& model, const Options& options,
                                                 TimelineFormat format, std::string_view title);

// The same, written to `path` in the format its extension names. A file that cannot be written
// is InvalidArgument naming the path and the system's reason.
[[nodiscard]] Status WriteTimeline(const Model& model, const Options& options,
                                   const std::string& path, std::string_view title);

}  // namespace memest

#endif  // MEMEST_TIMELINE_H_
