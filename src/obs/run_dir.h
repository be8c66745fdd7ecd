// RunDir: the folder one training run writes for later reading by
// `loom report` and `loom diagnose`:
//
//   config.toml     the resolved configuration
//   layout.json     RunLayout
//   metrics.jsonl   one StepMetrics object per line, appended as steps finish
//                   (and a resume mark where a resumed run continues it)
//   summary.json    RunSummary, written when the run ends ("finished": true)
//   trace.json      the merged Chrome trace (see chrome_trace.h)
//   trace/          each rank's spans as the run goes (trace_file.h)
//   events.out.tfevents.*  TensorBoard scalars of every step (train.tensorboard;
//                   `tensorboard --logdir runs`), flushed like metrics.jsonl
//
// Only rank 0 makes a RunDir. metrics.jsonl is flushed after every line, so
// a crashed run leaves a readable prefix; the other files appear atomically.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "obs/run_records.h"
#include "obs/tensorboard_events.h"

namespace loom::obs {

class RunDir {
 public:
  // Creates `path` (and its parents). Throws UserError naming the path if it
  // cannot. An existing metrics.jsonl there is replaced (one folder, one
  // run), unless `resume` (a run continued from a checkpoint appends).
  // tensorboard: also write each step's scalars as a TensorBoard event file
  // (a new file per run; a resumed run adds one).
  explicit RunDir(std::string path, bool resume = false, bool tensorboard = false);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  // runs/<name>, or runs/YYYYmmdd-HHMMSS when name is empty, under `root`.
  static std::string default_path(const std::string& root = "runs", const std::string& name = "");

  const std::string& path() const { return path_; }
  std::string file(const char* name) const { return path_ + "/" + name; }

  void write_config(const std::string& toml_text);
  void write_layout(const RunLayout& layout);
  void append_step(const StepMetrics& step);  // one line, flushed
  // {"resumed_at_step": N}: a run resumed from the checkpoint of step N
  // (0: from scratch); readers drop the lines of steps after N before it.
  void append_resume_mark(int64_t step);
  void write_summary(const RunSummary& summary);

 private:
  std::string path_;
  FILE* metrics_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace loom::obs
