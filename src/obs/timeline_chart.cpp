#include "obs/timeline_chart.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/check.h"
#include "obs/line_chart.h"
#include "obs/svg.h"

namespace loom::obs {
namespace {

struct Window {
  double begin = INFINITY, end = -INFINITY;
};

// The step to draw and its window across ranks.
Window choose_window(const std::vector<RankTrace>& ranks, int* step) {
  std::map<int, int> ranks_with_step;  // step -> how many ranks finished it
  for (const RankTrace& r : ranks) {
    std::set<int> seen;
    for (const TraceSpan& s : r.spans)
      if (s.kind == SpanKind::step && !s.instant && s.index >= 0) seen.insert(s.index);
    for (int k : seen) ranks_with_step[k]++;
  }
  *step = -1;
  for (const auto& [k, n] : ranks_with_step)
    if (n == int(ranks.size())) *step = k;
  Window w;
  for (const RankTrace& r : ranks)
    for (const TraceSpan& s : r.spans)
      if (*step < 0 || (s.kind == SpanKind::step && s.index == *step))
        w.begin = std::min(w.begin, s.begin_us), w.end = std::max(w.end, s.end_us);
  return w;
}

}  // namespace

const char* span_kind_color(SpanKind k) {
  switch (k) {
    case SpanKind::forward: return "#4e79a7";
    case SpanKind::backward: return "#59a14f";
    case SpanKind::backward_weight: return "#b5d99c";
    case SpanKind::comm: return "#f28e2b";
    case SpanKind::wait: return "#e15759";
    case SpanKind::bubble: return "#bab0ac";
    case SpanKind::optimizer: return "#b07aa1";
    case SpanKind::data: return "#9c755f";
    case SpanKind::step: return "#f4f4f4";
    case SpanKind::other: return "#d4d4d4";
  }
  return "#d4d4d4";
}

TimelineChart render_timeline(const std::vector<RankTrace>& ranks) {
  TimelineChart out;
  Window w = choose_window(ranks, &out.step);
  const double left = 150, right = 20, top = 40, row_h = 26, comm_h = 8, gap = 10, legend_h = 40;
  const double width = 960, pw = width - left - right;
  const double height = top + double(ranks.size()) * (row_h + comm_h + gap) + 40 + legend_h;
  Svg svg(width, height);
  if (!(w.begin < w.end)) {
    svg.text(width / 2, 60, "no spans in the trace", Svg::Anchor::middle, 14, 0, "#888");
    out.svg = svg.str();
    return out;
  }
  out.window_ms = (w.end - w.begin) * 1e-3;
  svg.text(width / 2, 22,
           out.step >= 0 ? strprintf("Timeline of step %d (%.1f ms, %zu ranks)", out.step, out.window_ms, ranks.size())
                         : strprintf("Timeline (%.1f ms, %zu ranks)", out.window_ms, ranks.size()),
           Svg::Anchor::middle, 15);
  auto px = [&](double us) { return left + (std::clamp(us, w.begin, w.end) - w.begin) / (w.end - w.begin) * pw; };

  for (size_t i = 0; i < ranks.size(); i++) {
    const RankTrace& r = ranks[i];
    double y = top + double(i) * (row_h + comm_h + gap);
    svg.text(left - 8, y + row_h * 0.65, strprintf("rank %d (dp %d tp %d pp %d)", r.rank, r.dp, r.tp, r.pp),
             Svg::Anchor::end, 11);
    svg.rect(left, y, pw, row_h, "#fafafa", "", "#ddd");
    svg.begin_group(strprintf("class=\"rank\" data-rank=\"%d\"", r.rank));
    std::vector<const TraceSpan*> spans;
    for (const TraceSpan& s : r.spans)
      if (!s.instant && s.kind != SpanKind::step && s.end_us > w.begin && s.begin_us < w.end) spans.push_back(&s);
    // parents first, so nested spans are drawn over them
    std::stable_sort(spans.begin(), spans.end(), [](const TraceSpan* a, const TraceSpan* b) {
      return a->begin_us != b->begin_us ? a->begin_us < b->begin_us : a->end_us > b->end_us;
    });
    for (const TraceSpan* s : spans) {
      bool async = s->track != kComputeTrack;
      double x0 = px(s->begin_us), x1 = px(s->end_us);
      std::string tip = strprintf("%s [%s%s%s] %.3f ms", s->name.c_str(), span_kind_name(s->kind),
                                  s->group != CommGroup::none ? " " : "", comm_group_name(s->group),
                                  s->duration_us() * 1e-3);
      if (s->index >= 0) tip += strprintf(" (micro-batch %d)", s->index);
      svg.rect(x0, async ? y + row_h + 1 : y, std::max(x1 - x0, 0.5), async ? comm_h : row_h,
               span_kind_color(s->kind), tip, "white");
      if (!async && x1 - x0 > 22 && s->index >= 0 && (s->kind == SpanKind::forward || s->kind == SpanKind::backward ||
                                                     s->kind == SpanKind::backward_weight))
        svg.text((x0 + x1) / 2, y + row_h * 0.65, strprintf("%c%d", s->kind == SpanKind::forward ? 'F' : s->kind == SpanKind::backward ? 'B' : 'W', s->index),
                 Svg::Anchor::middle, 10, 0, "white");
    }
    svg.end_group();
  }

  double axis_y = top + double(ranks.size()) * (row_h + comm_h + gap);
  svg.line(left, axis_y, left + pw, axis_y, "#444");
  std::vector<double> ticks = nice_ticks(0, out.window_ms, 8);
  for (double t : ticks) {
    if (t > out.window_ms * 1.0001) continue;
    double x = left + t / out.window_ms * pw;
    svg.line(x, axis_y, x, axis_y + 5, "#444");
    svg.text(x, axis_y + 18, tick_label(t, ticks.size() > 1 ? ticks[1] - ticks[0] : 1), Svg::Anchor::middle, 11);
  }
  svg.text(left + pw / 2, axis_y + 34, "time in the step (ms)", Svg::Anchor::middle, 12);

  double lx = left, ly = height - 14;
  for (SpanKind k : {SpanKind::forward, SpanKind::backward, SpanKind::backward_weight, SpanKind::comm,
                     SpanKind::wait, SpanKind::bubble, SpanKind::optimizer, SpanKind::data}) {
    svg.rect(lx, ly - 10, 12, 12, span_kind_color(k));
    svg.text(lx + 16, ly, span_kind_name(k), Svg::Anchor::start, 11);
    lx += k == SpanKind::backward_weight ? 125 : 95;
  }
  out.svg = svg.str();
  return out;
}

}  // namespace loom::obs
