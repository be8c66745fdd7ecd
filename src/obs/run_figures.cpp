#include "obs/run_figures.h"

#include <algorithm>

namespace loom::obs {

double median_of(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return kUnknown;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

RunFigures compute_figures(const RunData& run) {
  RunFigures f;
  // Steady state: leave out the first step (allocation, warm caches) when there are others.
  size_t first = run.steps.size() > 1 ? 1 : 0;
  std::vector<double> step_s, tps, mfu, parts[5];
  for (size_t i = first; i < run.steps.size(); i++) {
    const StepMetrics& m = run.steps[i];
    step_s.push_back(std::isfinite(m.step_time_s) ? m.step_time_s : (m.time.total() > 0 ? m.time.total() : kUnknown));
    tps.push_back(m.tokens_per_s);
    mfu.push_back(m.mfu);
    const double* p[5] = {&m.time.compute, &m.time.comm_exposed, &m.time.bubble, &m.time.optimizer, &m.time.data};
    for (int k = 0; k < 5; k++) parts[k].push_back(*p[k]);
  }
  for (const StepMetrics& m : run.steps)
    for (int64_t b : m.peak_mem_bytes)
      if (!std::isfinite(f.peak_mem_bytes) || double(b) > f.peak_mem_bytes) f.peak_mem_bytes = double(b);
  f.steps_measured = int(run.steps.size() - first);
  f.step_s = median_of(step_s);
  f.tokens_per_s = median_of(tps);
  f.mfu = median_of(mfu);
  double* split[5] = {&f.split.compute, &f.split.comm_exposed, &f.split.bubble, &f.split.optimizer, &f.split.data};
  for (int k = 0; k < 5; k++) *split[k] = run.steps.empty() ? 0 : median_of(parts[k]);

  const RunSummary* s = run.summary ? &*run.summary : nullptr;
  if (s) {
    if (!std::isfinite(f.step_s)) f.step_s = s->measured_step_s;
    if (!std::isfinite(f.tokens_per_s)) f.tokens_per_s = s->tokens_per_s;
    if (!std::isfinite(f.mfu)) f.mfu = s->mfu;
    if (!std::isfinite(f.peak_mem_bytes)) f.peak_mem_bytes = s->measured_mem_bytes;
  }
  f.has_trace = !run.trace.empty();
  if (f.has_trace) {
    f.trace = analyze_trace(run.trace);
    if (!std::isfinite(f.step_s) && f.trace.step_s > 0) f.step_s = f.trace.step_s;
  }

  // Per stage and per group: the trainer's own summary, else the trace, else rank 0's split.
  if (s && !s->bubble_fraction_per_stage.empty()) {
    f.bubble_per_stage = s->bubble_fraction_per_stage, f.bubble_source = "summary.json";
  } else if (f.has_trace && !f.trace.bubble_fraction_per_stage.empty()) {
    f.bubble_per_stage = f.trace.bubble_fraction_per_stage, f.bubble_source = "trace.json";
  } else if (f.steps_measured > 0 && f.step_s > 0) {
    f.bubble_per_stage = {f.split.bubble / f.step_s}, f.bubble_source = "metrics.jsonl (rank 0)";
  }
  if (s && !s->compute_s_per_stage.empty()) {
    f.compute_s_per_stage = s->compute_s_per_stage, f.compute_source = "summary.json";
  } else if (f.has_trace && !f.trace.compute_s_per_stage.empty()) {
    f.compute_s_per_stage = f.trace.compute_s_per_stage, f.compute_source = "trace.json";
  }
  if (s && !s->exposed_comm_s.empty()) {
    f.exposed_comm_s = s->exposed_comm_s, f.comm_source = "summary.json";
    f.waited_for_slower_s = s->waited_for_slower_s;
  } else if (f.has_trace && !f.trace.exposed_comm_s.empty()) {
    f.exposed_comm_s = f.trace.exposed_comm_s, f.comm_source = "trace.json";
  }
  if (!f.exposed_comm_s.empty() && f.step_s > 0) {
    double total = 0;
    for (const auto& [g, v] : f.exposed_comm_s) total += std::isfinite(v) ? v : 0;
    double slower = 0;
    for (const auto& [g, v] : f.waited_for_slower_s) slower += std::isfinite(v) ? v : 0;
    slower = std::min(slower, total);
    f.exposed_comm_share = (total - slower) / f.step_s;
    f.waited_for_slower_share = slower / f.step_s;
  } else if (f.steps_measured > 0 && f.step_s > 0) {
    f.exposed_comm_share = f.split.comm_exposed / f.step_s;
    if (f.comm_source.empty()) f.comm_source = "metrics.jsonl (rank 0)";
  }
  f.overlap = s && !s->overlap.empty() ? s->overlap : f.has_trace ? f.trace.overlap : std::map<std::string, double>{};
  return f;
}

}  // namespace loom::obs
