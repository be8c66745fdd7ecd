#include "obs/line_chart.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "obs/svg.h"

namespace loom::obs {
namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi == lo) {
    double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  double raw = (hi - lo) / std::max(target, 1);
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag * (raw / mag < 1.5 ? 1 : raw / mag < 3 ? 2 : raw / mag < 7 ? 5 : 10);
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t <= hi + step * 0.999; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

std::string tick_label(double v, double step) {
  double a = std::fabs(v);
  if (a == 0) return "0";
  if (a < 0.01 && step < 0.01) return strprintf("%.1e", v);
  double unit = 1;
  const char* suffix = "";
  if (a >= 1e9) unit = 1e9, suffix = "G";
  else if (a >= 1e6) unit = 1e6, suffix = "M";
  else if (a >= 1e4) unit = 1e3, suffix = "k";
  double scaled = step > 0 ? step / unit : 1;
  int decimals = std::clamp(int(std::ceil(-std::log10(scaled) - 1e-9)), 0, 6);
  return strprintf("%.*f%s", decimals, v / unit, suffix);
}

std::string render_line_chart(const LineChart& c, const std::vector<ChartSeries>& series) {
  const double left = 70, right = 20, top = 36, bottom = 52;
  const double pw = c.width - left - right, ph = c.height - top - bottom;
  auto ty = [&](double v) { return c.log_y ? (v > 0 ? std::log10(v) : NAN) : v; };

  Range xr, yr;
  for (const ChartSeries& s : series)
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); i++)
      if (std::isfinite(ty(s.y[i]))) xr.add(s.x[i]), yr.add(ty(s.y[i]));
  if (c.y_from_zero && !c.log_y && !yr.empty()) yr.add(0);

  Svg svg(c.width, c.height);
  svg.text(c.width / 2, 22, c.title, Svg::Anchor::middle, 15);
  svg.text(left + pw / 2, c.height - 10, c.x_label, Svg::Anchor::middle, 12);
  svg.text(16, top + ph / 2, c.y_label, Svg::Anchor::middle, 12, -90);
  svg.rect(left, top, pw, ph, "none", "", "#888");
  if (xr.empty()) {
    svg.text(left + pw / 2, top + ph / 2, "no data", Svg::Anchor::middle, 14, 0, "#888");
    return svg.str();
  }
  std::vector<double> xt = nice_ticks(xr.lo, xr.hi), yt = nice_ticks(yr.lo, yr.hi);
  double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  if (c.log_y) {  // whole decades only
    y0 = std::floor(yr.lo), y1 = std::max(std::ceil(yr.hi), y0 + 1);
    yt.clear();
    for (double d = y0; d <= y1; d++) yt.push_back(d);
  }
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0 == 0 ? 1 : x1 - x0) * pw; };
  auto py = [&](double y) { return top + ph - (y - y0) / (y1 - y0 == 0 ? 1 : y1 - y0) * ph; };

  for (double t : xt) {
    svg.line(px(t), top, px(t), top + ph, "#eee");
    svg.line(px(t), top + ph, px(t), top + ph + 5, "#444");
    svg.text(px(t), top + ph + 18, tick_label(t, xt.size() > 1 ? xt[1] - xt[0] : 1), Svg::Anchor::middle, 11);
  }
  for (double t : yt) {
    svg.line(left, py(t), left + pw, py(t), "#eee");
    svg.line(left - 5, py(t), left, py(t), "#444");
    double step = yt.size() > 1 ? yt[1] - yt[0] : 1;
    std::string label = c.log_y ? tick_label(std::pow(10, t), std::pow(10, t)) : tick_label(t, step);
    svg.text(left - 8, py(t) + 4, label, Svg::Anchor::end, 11);
  }

  for (size_t k = 0; k < series.size(); k++) {
    const ChartSeries& s = series[k];
    std::string color = s.color.empty() ? kPalette[k % 6] : s.color;
    std::vector<std::pair<double, double>> run;
    svg.begin_group("class=\"series\" data-name=\"" + Svg::escape(s.name) + "\"");
    for (size_t i = 0; i <= std::min(s.x.size(), s.y.size()); i++) {
      bool ok = i < std::min(s.x.size(), s.y.size()) && std::isfinite(ty(s.y[i])) && std::isfinite(s.x[i]);
      if (ok) run.emplace_back(px(s.x[i]), py(ty(s.y[i])));
      if (!ok && !run.empty()) {
        if (run.size() == 1) svg.rect(run[0].first - 1.5, run[0].second - 1.5, 3, 3, color);
        svg.polyline(run, color, 1.6, s.name);
        run.clear();
      }
    }
    svg.end_group();
    // legend, top right
    double ly = top + 14 + 16 * double(k);
    svg.line(left + pw - 150, ly - 4, left + pw - 130, ly - 4, color, 2.5);
    svg.text(left + pw - 124, ly, s.name, Svg::Anchor::start, 11);
  }
  return svg.str();
}

}  // namespace loom::obs
