// `loom diagnose`: rules that read a run's figures and metrics and name the
// likely causes of slowness or instability, each with its evidence and a
// change to try. Thresholds are plain numbers here (and in
// docs/observability.md) so a finding can always be traced to its rule.
#pragma once

#include <string>
#include <vector>

#include "obs/run_figures.h"
#include "obs/run_reader.h"

namespace loom::obs {

struct DiagnoseThresholds {
  double bubble_share = 0.20;        // pipeline-bound: a stage idles this share of the step (0.40: high)
  double exposed_comm_share = 0.25;  // communication-bound: exposed comm share of the step (0.45: high)
  double low_overlap = 0.50;         // "no overlap": less than this share of a group's comm hidden
  int small_batch_tokens = 16384;    // tokens per dp rank per step below which dp reduction dominates
  double stage_imbalance = 1.20;     // stalled stage: slowest stage's compute / the mean
  double skipped_share = 0.10;       // repeated skipped steps: this share of steps ...
  int skipped_run = 3;               // ... or this many in a row
  double scale_collapse = 1024;      // loss scale ends this many times below its peak (or at <= 1)
  double grad_spike = 10;            // grad norm above this x the median of the previous 20 steps
  double loss_spike = 1.25;          // loss above this x the median of the previous 20 steps
  double loss_rise = 1.02;           // mean loss of the last quarter over the first quarter's
  double zero_grad_share = 0.10;     // fp16 underflow: share of steps with a zero gradient norm
  // Router collapse (a mixture of experts): over the run's last quarter, the
  // busiest expert's load at this share of its ceiling E/k (1: every token
  // of a layer chose it; 0.9: high).
  double router_collapse = 0.75;
};

enum class Severity { warning, high };

struct Finding {
  std::string cause;  // "pipeline-bound", "communication-bound", "stalled-stage", "loss-scale-collapse",
                      // "skipped-steps", "fp16-underflow", "non-finite-loss", "grad-norm-spikes",
                      // "loss-spikes", "loss-rising", "straggler", "router-collapse"
  std::string area;   // "performance" or "numerics"
  Severity severity = Severity::warning;
  double score = 0;  // for ordering: how far past its threshold
  std::vector<std::string> evidence;
  std::string recommendation;
};

struct Diagnosis {
  std::vector<Finding> findings;  // most severe first
  std::vector<std::string> checked;  // what was looked at and found healthy, or could not be checked
};

Diagnosis diagnose(const RunData& run, const RunFigures& figures, const DiagnoseThresholds& t = {});

std::string diagnosis_text(const RunData& run, const Diagnosis& d);
std::string diagnosis_json(const RunData& run, const Diagnosis& d);

}  // namespace loom::obs
