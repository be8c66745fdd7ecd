// Reads back whatever a run directory holds, however the run ended. Every
// file is optional; what is missing or damaged is described in `notes`
// (a crashed run: no summary.json, a cut-off last line of metrics.jsonl).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "obs/run_records.h"
#include "obs/trace_span.h"

namespace loom::obs {

struct RunData {
  std::string path;
  bool has_config = false;
  // config.toml as loom reads it (absent, or damaged: see notes); diagnose's
  // advice reads it so that it never suggests what the run already does.
  std::optional<RunConfig> config;
  std::optional<RunLayout> layout;
  std::vector<StepMetrics> steps;  // in file order; a resume mark drops the steps after it
  std::vector<RestartRecord> restarts;  // elastic.jsonl (`loom elastic`), when there
  std::optional<RunSummary> summary;
  std::vector<RankTrace> trace;  // empty when there is no trace.json (nor trace/rank-*.jsonl)
  bool trace_from_rank_files = false;  // read from trace/ (no trace.json, or an older one)
  std::vector<std::string> missing;  // files not there
  std::vector<std::string> notes;    // files there but damaged, and how
  bool anything() const { return layout || !steps.empty() || summary || !trace.empty(); }
};

// Throws UserError (exit code 2) only when nothing at all can be read:
// no such directory, or none of its files usable.
RunData read_run_dir(const std::string& path);

}  // namespace loom::obs
