#include "obs/trace_analysis.h"

#include <algorithm>

namespace loom::obs {
namespace {

struct Window {
  double begin, end;
};

std::vector<Window> step_windows(const RankTrace& r) {
  std::vector<Window> w;
  for (const TraceSpan& s : r.spans)
    if (s.kind == SpanKind::step && s.track == kComputeTrack && !s.instant) w.push_back({s.begin_us, s.end_us});
  std::sort(w.begin(), w.end(), [](const Window& a, const Window& b) { return a.begin < b.begin; });
  if (w.size() > 1) w.erase(w.begin());  // warm-up
  if (w.empty() && !r.spans.empty()) {
    Window all{r.spans.front().begin_us, r.spans.front().end_us};
    for (const TraceSpan& s : r.spans) all.begin = std::min(all.begin, s.begin_us), all.end = std::max(all.end, s.end_us);
    w.push_back(all);
  }
  return w;
}

// Exclusive (self) time of each compute-track span: its length less its
// direct children's.
std::vector<double> self_times(const std::vector<const TraceSpan*>& spans) {
  std::vector<double> self(spans.size());
  std::vector<size_t> stack;
  for (size_t i = 0; i < spans.size(); i++) {
    const TraceSpan& s = *spans[i];
    while (!stack.empty() && spans[stack.back()]->end_us <= s.begin_us) stack.pop_back();
    self[i] = s.duration_us();
    if (!stack.empty()) {
      const TraceSpan& parent = *spans[stack.back()];
      self[stack.back()] -= std::min(s.end_us, parent.end_us) - s.begin_us;
    }
    stack.push_back(i);
  }
  for (double& x : self) x = std::max(0.0, x);
  return self;
}

int window_of(const std::vector<Window>& w, double t) {
  for (size_t i = 0; i < w.size(); i++)
    if (t >= w[i].begin && t < w[i].end) return int(i);
  return -1;
}

RankBreakdown analyze_rank(const RankTrace& r) {
  RankBreakdown b;
  b.rank = r.rank, b.dp = r.dp, b.tp = r.tp, b.pp = r.pp;
  std::vector<Window> windows = step_windows(r);
  b.steps = int(windows.size());
  if (windows.empty()) return b;
  std::vector<const TraceSpan*> compute;
  for (const TraceSpan& s : r.spans)
    if (!s.instant && s.track == kComputeTrack) compute.push_back(&s);
  std::stable_sort(compute.begin(), compute.end(), [](const TraceSpan* a, const TraceSpan* c) {
    return a->begin_us != c->begin_us ? a->begin_us < c->begin_us : a->end_us > c->end_us;
  });
  std::vector<double> self = self_times(compute);
  double total = 0;
  for (const Window& w : windows) total += w.end - w.begin;
  for (size_t i = 0; i < compute.size(); i++) {
    const TraceSpan& s = *compute[i];
    if (window_of(windows, s.begin_us) < 0) continue;
    if (s.kind == SpanKind::step) b.untracked_us += self[i];
    else b.self_us[size_t(s.kind)] += self[i];
    if ((s.kind == SpanKind::comm || s.kind == SpanKind::wait) && s.group != CommGroup::none)
      b.exposed_comm_us[comm_group_name(s.group)] += self[i];
  }
  for (const TraceSpan& s : r.spans)
    if (!s.instant && s.track != kComputeTrack && s.kind == SpanKind::comm && window_of(windows, s.begin_us) >= 0)
      b.async_comm_us[s.group == CommGroup::none ? "other" : comm_group_name(s.group)] += s.duration_us();
  double n = double(b.steps);
  b.step_us = total / n;
  for (double& x : b.self_us) x /= n;
  b.untracked_us /= n;
  for (auto& [g, v] : b.exposed_comm_us) v /= n;
  for (auto& [g, v] : b.async_comm_us) v /= n;
  return b;
}

}  // namespace

TraceBreakdown analyze_trace(const std::vector<RankTrace>& ranks) {
  TraceBreakdown t;
  int stages = 0;
  for (const RankTrace& r : ranks) {
    t.ranks.push_back(analyze_rank(r));
    stages = std::max(stages, r.pp + 1);
  }
  std::vector<double> bubble(stages, 0), compute(stages, 0);
  std::vector<int> members(stages, 0);
  std::map<std::string, double> exposed, async, wait;
  int measured = 0;
  for (const RankBreakdown& b : t.ranks) {
    if (b.steps == 0) continue;
    measured++;
    t.step_s += b.step_us * 1e-6;
    members[b.pp]++;
    bubble[b.pp] += b.step_us > 0 ? b.self(SpanKind::bubble) / b.step_us : 0;
    compute[b.pp] += (b.self(SpanKind::forward) + b.self(SpanKind::backward) + b.self(SpanKind::backward_weight)) * 1e-6;
    for (const auto& [g, v] : b.exposed_comm_us) exposed[g] += v * 1e-6;
    for (const auto& [g, v] : b.async_comm_us) async[g] += v;
  }
  // Overlap: of a group's communication, the share nothing waited on.
  for (const RankBreakdown& b : t.ranks)
    for (const auto& [g, v] : b.exposed_comm_us) wait[g] += v;
  if (measured == 0) return t;
  t.step_s /= measured;
  for (int s = 0; s < stages; s++)
    if (members[s]) {
      t.bubble_fraction_per_stage.push_back(bubble[s] / members[s]);
      t.compute_s_per_stage.push_back(compute[s] / members[s]);
    }
  for (auto& [g, v] : exposed) t.exposed_comm_s[g] = v / measured;
  for (const auto& [g, a] : async) {
    double w = wait.count(g) ? wait[g] : 0;
    // waits plus blocking calls are the exposed part; async time beyond them was hidden
    t.overlap[g] = std::clamp(1.0 - w / std::max(a, w), 0.0, 1.0);
  }
  return t;
}

void fill_summary_from_trace(const TraceBreakdown& t, RunSummary& s) {
  if (s.bubble_fraction_per_stage.empty()) s.bubble_fraction_per_stage = t.bubble_fraction_per_stage;
  if (s.compute_s_per_stage.empty()) s.compute_s_per_stage = t.compute_s_per_stage;
  if (s.exposed_comm_s.empty()) s.exposed_comm_s = t.exposed_comm_s;
  if (s.overlap.empty()) s.overlap = t.overlap;
  if (!std::isfinite(s.measured_step_s) && t.step_s > 0) s.measured_step_s = t.step_s;
}

}  // namespace loom::obs
