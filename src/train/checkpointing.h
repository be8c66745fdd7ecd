// Checkpoints from the training loop (the format and its guarantees are in
// src/checkpoint/ and docs/checkpoints.md): every rank that holds something
// no other rank writes (dp rank 0: the parameters of its stage and tp slice;
// every dp rank under ZeRO: its shard of the AdamW moments) writes its file,
// then rank 0 commits (manifest with sha256 of every file, rename, `latest`
// last). Resuming reads any layout's checkpoint into this one.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
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
  // returns where to continue; a fresh start returns {0, 0}. Collective.
  TrainPosition resume(const std::string& spec, Replica& replica, FILE* log);
  // Collective: saves the state after `position.next_step` steps.
  void save(const TrainPosition& position, Replica& replica, FILE* log);
  // The checkpoint this run last saved or resumed from ("" if none): where a
  // rollback goes.
  const std::string& last() const { return last_; }

 private:
  const RunConfig& cfg_;
  const ParallelContext& ctx_;
  std::string last_;
};

}  // namespace loom
