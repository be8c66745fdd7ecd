// The pipeline timeline of one step as SVG: one row per rank (its compute
// track, with its async communication in a thin row beneath), a box per span
// coloured by kind (forward, backward, communication, wait, bubble,
// optimizer, data), a time axis in milliseconds and a legend.
#pragma once

#include <string>
#include <vector>

#include "obs/trace_span.h"

namespace loom::obs {

struct TimelineChart {
  std::string svg;
  int step = -1;          // the step drawn; -1 when the trace has no step spans (all of it is drawn)
  double window_ms = 0;   // its length
};

// Draws the last step every rank finished (a settled one, not the warm-up).
TimelineChart render_timeline(const std::vector<RankTrace>& ranks);

// Colour of each kind, shared with the report's legend.
const char* span_kind_color(SpanKind k);

}  // namespace loom::obs
