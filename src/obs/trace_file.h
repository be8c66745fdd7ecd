// Each rank's timeline on disk as the run goes, so that a killed or crashed
// run keeps it up to its last flush:
//
//   <run_dir>/trace/rank-R.jsonl   one Chrome trace event per line: first the
//                                  rank's process_name, then "X" spans and
//                                  "i" instants, appended and flushed every
//                                  train.trace_flush_every steps
//
// trace.json (chrome_trace.h) is still merged from memory when the run ends;
// without it (the run died) `loom report` and `loom diagnose` read these
// files, and `loom report` writes trace.json from them.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "obs/trace_span.h"

namespace loom::obs {

class RankTraceFile {
 public:
  // Creates DIR (the run's trace/ folder) and DIR/rank-R.jsonl, replacing
  // an older file of this rank (a resumed run starts its own timeline).
  // Throws UserError naming the file if it cannot.
  RankTraceFile(const std::string& dir, int rank, int dp, int tp, int pp);
  ~RankTraceFile();
  RankTraceFile(const RankTraceFile&) = delete;
  RankTraceFile& operator=(const RankTraceFile&) = delete;

  // One line per span; flushed before returning.
  void append(const std::vector<TraceSpan>& spans);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int rank_;
  FILE* file_ = nullptr;
};

// Every DIR/rank-*.jsonl as one RankTrace per rank (sorted by rank); a
// cut-off last line is skipped and named in `notes`. Empty if DIR has none.
std::vector<RankTrace> read_rank_trace_files(const std::string& dir, std::vector<std::string>* notes);

}  // namespace loom::obs
