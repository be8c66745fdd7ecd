// RunRecorder: what `loom train` leaves behind for `loom report` and `loom
// diagnose` (src/obs/): a run directory with the resolved config, the layout,
// metrics.jsonl (one line per step, written as it goes) and, at the end,
// summary.json and trace.json (every rank's spans merged, one track per rank).
// Rank 0 writes; every rank records its own spans. With no directory it
// records nothing (tests, benchmarks).
#pragma once

#include <memory>
#include <string>

#include "config/run_config.h"
#include "comm/flight_recorder.h"
#include "obs/progress.h"
#include "obs/run_dir.h"
#include "obs/trace_file.h"
#include "obs/trace_recorder.h"
#include "parallel/grid/parallel_context.h"

namespace loom {

class RunRecorder {
 public:
  // dir: the run directory (rank 0's choice; empty: record nothing).
  // resuming: a run started with --resume appends to metrics.jsonl (a
  // restart continues its run directory) instead of replacing it.
  RunRecorder(const std::string& dir, const RunConfig& cfg, const ParallelContext& ctx, int micro_batches,
              bool resuming = false);
  ~RunRecorder();  // detaches the flight recorder from the groups

  bool active() const { return active_; }
  // Spans of this rank (nullptr when not recording: ScopedSpan is a no-op).
  obs::TraceRecorder* trace() { return trace_.get(); }
  // This rank's flight record (<dir>/flight/), attached to every group;
  // nullptr when not recording.
  FlightRecorder* flight() { return flight_.get(); }
  // Where a resumed run continues (steps after it are rewritten); only
  // when constructed with resuming.
  void resumed_at(int64_t step);
  // One step (every rank calls it): its spans appended to the rank's trace
  // file every train.trace_flush_every steps; metrics.jsonl (rank 0) and
  // progress.
  void step(const obs::StepMetrics& metrics);
  // Collective: merges the trace, writes summary.json.
  void finish(obs::RunSummary summary);
  const std::string& dir() const { return dir_; }

 private:
  const ParallelContext& ctx_;
  bool active_;
  std::string dir_;
  int steps_;
  bool resuming_;
  std::unique_ptr<obs::RunDir> run_;
  std::unique_ptr<obs::TraceRecorder> trace_;
  std::unique_ptr<obs::RankTraceFile> trace_file_;  // every rank's trace/rank-R.jsonl
  int trace_flush_every_ = 0;
  std::unique_ptr<FlightRecorder> flight_;
  std::unique_ptr<obs::Progress> progress_;
};

}  // namespace loom
