// Line charts for report: x/y axes with "nice" ticks (1, 2, 5 x 10^k),
// axis labels, a title and a legend. Points whose y is not finite break the
// line (a NaN loss shows as a gap, not a dive to zero).
#pragma once

#include <string>
#include <vector>

namespace loom::obs {

struct ChartSeries {
  std::string name;  // legend text and the polyline's data-series
  std::vector<double> x, y;
  std::string color;  // empty: picked from a palette
};

struct LineChart {
  std::string title, x_label, y_label;
  double width = 720, height = 400;
  bool log_y = false;        // for values spanning decades (loss scale)
  bool y_from_zero = false;  // rates: start the axis at 0 so a small wobble looks small
};

// The SVG document. An empty chart (no finite points) still renders, with a note.
std::string render_line_chart(const LineChart& chart, const std::vector<ChartSeries>& series);

// Tick positions covering [lo, hi] with about `target` steps of 1, 2 or 5 x 10^k.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// Tick label with as many decimals as the tick spacing `step` needs:
// (12000, 2000) -> "12k", (40050, 50) -> "40.05k", (0.00031, 0.0001) -> "3.1e-04".
std::string tick_label(double v, double step);

}  // namespace loom::obs
