// What `loom bench planner` prints and writes: the overhead probes, one row
// per run (predicted against measured memory and step time, with errors) and
// the worst rows.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bench/bench_planner_matrix.h"

namespace loom::cli {

// One `loom train` run: its prediction and what it measured (NaN: unknown).
struct PlannerRun {
  BenchLayout layout;
  bool ok = false;
  std::string error;  // why it did not finish
  double pred_mem = NAN, meas_mem = NAN;    // bytes per rank: the planner's largest, the largest peak RSS
  double pred_step = NAN, meas_step = NAN;  // seconds
  // pred_mem with the planner's per-process overhead replaced by the
  // overhead measured at the same rank count.
  double pred_mem_measured_overhead = NAN;
};

// The per-process overhead at one rank count: peak RSS of the smallest model
// minus the planner's bytes for that model's own buffers.
struct OverheadProbe {
  int ranks = 0;
  bool ok = false;
  double peak_rss = NAN, model_bytes = NAN, overhead = NAN;
};

OverheadProbe overhead_probe_from(const PlannerRun& run, double planner_overhead);
void substitute_overhead(PlannerRun& run, const std::vector<OverheadProbe>& probes, double planner_overhead);

void print_overhead_header(const BenchModel& model);
void print_overhead_row(const OverheadProbe& p, const std::string& error);
void print_run_header();
void print_run_row(int index, const PlannerRun& run);
// The worst row of each error, mean |error| and the rows within the targets.
void print_summary(const std::vector<PlannerRun>& runs, double planner_overhead, bool calibrated);
nlohmann::json to_json(const std::vector<PlannerRun>& runs, const std::vector<OverheadProbe>& probes,
                       double planner_overhead, bool calibrated);

}  // namespace loom::cli
