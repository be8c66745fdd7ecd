// The headline figures of a run, computed once from whatever it left
// (summary.json first, then the trace, then metrics.jsonl) and shared by
// report and diagnose, each with where it came from.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "obs/run_reader.h"
#include "obs/trace_analysis.h"

namespace loom::obs {

struct RunFigures {
  int steps_measured = 0;  // steps the medians cover (the first is left out when there are more)
  double step_s = kUnknown, tokens_per_s = kUnknown, mfu = kUnknown;  // medians
  double peak_mem_bytes = kUnknown;                                   // max over ranks and steps
  TimeSplit split;  // medians, seconds per step (rank 0)

  std::vector<double> bubble_per_stage;  // share of the step
  std::string bubble_source;             // "summary.json", "trace.json", "metrics.jsonl (rank 0)" or ""
  std::vector<double> compute_s_per_stage;
  std::string compute_source;
  std::map<std::string, double> exposed_comm_s;  // group -> seconds per step
  double exposed_comm_share = kUnknown;          // of the step, all groups, less waited_for_slower_s
  // group -> seconds per step of exposed_comm_s spent waiting for a slower
  // rank (summary.json); waited_for_slower_share: their sum, of the step.
  std::map<std::string, double> waited_for_slower_s;
  double waited_for_slower_share = 0;
  std::string comm_source;
  std::map<std::string, double> overlap;

  bool has_trace = false;
  TraceBreakdown trace;  // valid when has_trace
};

RunFigures compute_figures(const RunData& run);

// Median of the finite values (NaN if none).
double median_of(std::vector<double> v);

}  // namespace loom::obs
