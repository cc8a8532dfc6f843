// symbolic/timeline_writer.h -- writes a simulated timeline for people and programs.
//
// Formats: JSON ("memest.timeline/1": every event with the allocator state after it), CSV (one row
// per event), SVG (allocated and reserved bytes over events, phase bands, iteration separators and
// the peak marked), HTML (the SVG plus a summary). Large timelines are downsampled in the picture
// only (the maximum of each bucket is kept, so peaks survive); JSON/CSV keep every event.
#ifndef MEMEST_SYMBOLIC_TIMELINE_WRITER_H_
#define MEMEST_SYMBOLIC_TIMELINE_WRITER_H_

#include <string>
#include <string_view>

#include "memest/status.h"
#include "memest/timeline.h"
#include "symbolic/timeline.h"

namespace memest::symbolic {

// The text of a simulation in one of memest/timeline.h's formats (the public API renders and
// writes through this).
std::string RenderTimeline(const Simulation& sim, TimelineFormat format, std::string_view title);

}  // namespace memest::symbolic

#endif  // MEMEST_SYMBOLIC_TIMELINE_WRITER_H_
