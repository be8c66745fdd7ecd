// One rank's share of an asynchronous checkpoint save, on a thread of its
// own, so that training goes on while the file is written. No MPI in here:
// train/checkpointing.cpp does every collective on the training thread.
//
//   BackgroundSave bg;
//   bg.snapshot(replica.checkpoint_pieces());  // at the step boundary: a copy
//   bg.start(job);                             // write it; the lead then commits
//   ... training ...
//   std::string e = bg.wait_written();         // this rank's file done (or failed)
//   -- every rank agrees whether any file failed; if so the lead calls cancel_commit() --
//   SaveOutcome o = bg.finish();               // joins: the commit's result
//
// The lead commits without a barrier: it waits for every writer's ".sha256"
// note in the staging folder (CheckpointWriter::unfinished_ranks), for at
// most `notes_timeout_s`, then commits as the synchronous path does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/tensor_piece.h"

namespace loom {

struct SaveJob {
  std::string root;  // train.checkpoint_dir
  int64_t step = 0;
  int rank = 0;
  bool writes = false;                          // this rank writes a file (the snapshot)
  bool kill_half_way = false;                   // fault injection: SIGKILL half-way through the file
  std::optional<CheckpointManifest> manifest;   // the lead's: commit it once every writer is done
  std::vector<int> writer_ranks;
  int keep_last = 1;
  double notes_timeout_s = 0;  // the lead's patience for the writers' notes; 0 = forever
};

struct SaveOutcome {
  std::string write_error;   // this rank's file ("" = written or nothing to write)
  std::string commit_error;  // the lead's commit ("" = committed, or not the lead)
  std::string dir;           // the lead: the committed checkpoint
  double seconds = 0;        // the whole job, on its thread
};

class BackgroundSave {
 public:
  BackgroundSave() = default;
  ~BackgroundSave();  // cancels a lead's wait and joins
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Copies the pieces' data into buffers owned here, kept from save to save
  // (the parameters and moments are the same size every time). Not while a
  // job runs.
  void snapshot(const std::vector<CheckpointPiece>& pieces);
  void start(SaveJob job);
  bool running() const { return thread_.joinable(); }
  // Blocks until this rank's file is written or has failed; its error.
  std::string wait_written();
  // The lead stops waiting for notes (another rank's file failed) and does
  // not commit.
  void cancel_commit() { cancel_ = true; }
  // Joins the thread; what the job did. {} if none ran.
  SaveOutcome finish();

 private:
  void run(const SaveJob& job);
  void mark_written(std::string error);
  std::string commit_when_written(const SaveJob& job, std::string* dir);

  std::unique_ptr<float[]> storage_;
  size_t capacity_ = 0;  // floats in storage_
  std::vector<CheckpointPiece> pieces_;

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable written_cv_;
  bool written_ = false;
  std::atomic<bool> cancel_{false};
  SaveOutcome outcome_;
};

}  // namespace loom
