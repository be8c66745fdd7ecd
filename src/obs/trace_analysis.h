// Where each rank's time went, read off its timeline: exclusive time per
// span kind on the compute track, exposed and overlapped communication per
// group, and the per-stage figures report and diagnose print.
//
// Windows are the "step" spans (the first step is left out as warm-up when
// there are more); a trace with no step spans is one window from its first
// span to its last. Figures are per step.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "obs/run_records.h"
#include "obs/trace_span.h"

namespace loom::obs {

struct RankBreakdown {
  int rank = 0, dp = 0, tp = 0, pp = 0;
  int steps = 0;                                 // windows measured
  double step_us = 0;                            // mean window length
  std::array<double, kSpanKindCount> self_us{};  // exclusive time per kind, per step (compute track)
  double untracked_us = 0;                       // in the window, inside no span but the step's
  std::map<std::string, double> exposed_comm_us;  // group -> blocking comm + waits on the compute track
  std::map<std::string, double> async_comm_us;    // group -> communication on other tracks
  double self(SpanKind k) const { return self_us[size_t(k)]; }
};

struct TraceBreakdown {
  std::vector<RankBreakdown> ranks;
  std::vector<double> bubble_fraction_per_stage;  // mean over the stage's ranks
  std::vector<double> compute_s_per_stage;        // forward + backward seconds per step
  std::map<std::string, double> exposed_comm_s;   // per step, mean over ranks
  std::map<std::string, double> overlap;          // share of each group's communication hidden
  double step_s = 0;                              // mean over ranks
};

TraceBreakdown analyze_trace(const std::vector<RankTrace>& ranks);

// Fills the summary's per-stage and per-group fields from the trace (those
// the trainer did not set already).
void fill_summary_from_trace(const TraceBreakdown& t, RunSummary& summary);

}  // namespace loom::obs
