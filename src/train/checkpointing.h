// Checkpoints from the training loop (the format and its guarantees are in
// src/checkpoint/ and docs/checkpoints.md): every rank that holds something
// no other rank writes (dp rank 0: the parameters of its stage and tp slice;
// every dp rank under ZeRO: its shard of the AdamW moments) writes its file,
// then rank 0 commits (manifest with sha256 of every file, rename, `latest`
// last). Resuming reads any layout's checkpoint into this one.
//
// train.async_checkpoint (the default): save() copies the rank's pieces into
// buffers of its own and returns; a thread per rank writes the file, and
// rank 0's thread commits once every rank's file is finished. The next
// save, a rollback, a resume and finish() first wait for that save on every
// rank and agree on how it ended: a failure stops every rank with a
// UserError naming the checkpoint.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "fault/fault_plan.h"
#include "parallel/grid/parallel_context.h"
#include "train/background_save.h"
#include "train/replica.h"

namespace loom {

// Where a run is in its data and schedule, saved with the weights.
struct TrainPosition {
  int64_t next_step = 0;  // the step to run next
  int64_t data_skip = 0;  // steps of data skipped by rollbacks (the batch of step s is data step s + data_skip)
  nlohmann::json guard;   // the loss guard's history (LossGuard::state)
};

class TrainCheckpoints {
 public:
  TrainCheckpoints(const RunConfig& cfg, const ParallelContext& ctx);

  // spec: "auto" (the newest good checkpoint under train.checkpoint_dir, if
  // any), a checkpoint folder, or "" (none). Loads it into `replica` and
  // returns where to continue; a fresh start returns {0, 0}. Collective;
  // waits for a save in flight first.
  TrainPosition resume(const std::string& spec, Replica& replica, FILE* log);
  // Collective: saves the state after `position.next_step` steps (in the
  // background with train.async_checkpoint). `faults` may kill this rank
  // half-way through its file (--fault kill-in-save).
  void save(const TrainPosition& position, Replica& replica, const FaultPlan& faults, FILE* log);
  // Collective: waits for a save in flight on every rank; throws UserError
  // on every rank if it failed. The end of training calls it.
  void finish(FILE* log);
  // The checkpoint this run last saved (or is saving) or resumed from (""
  // if none): where a rollback goes.
  const std::string& last() const { return last_; }
  // Seconds the save after `steps_done` steps held up training (on this
  // rank); 0 if there was none.
  double stall_s(int64_t steps_done) const { return steps_done == stall_step_ ? stall_s_ : 0; }

 private:
  void save_now(const TrainPosition& position, Replica& replica, const FaultPlan& faults, FILE* log);
  void save_in_background(const TrainPosition& position, Replica& replica, const FaultPlan& faults, FILE* log);
  CheckpointManifest manifest(const TrainPosition& position, Replica& replica) const;
  void settle(FILE* log);  // collective: the save in flight, finished and agreed on

  // LoRA: which base the adapters belong to (checkpoint/base_fingerprint.h),
  // worked out once, when first needed.
  const std::string& base_identity() const;
  mutable std::string base_identity_;
  const RunConfig& cfg_;
  const ParallelContext& ctx_;
  std::string last_;
  BackgroundSave background_;
  bool in_flight_ = false;       // the same on every rank
  int64_t in_flight_step_ = 0;
  double in_flight_stall_s_ = 0;
  int64_t stall_step_ = -1;
  double stall_s_ = 0;
};

}  // namespace loom
