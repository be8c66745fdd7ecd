// Saving a checkpoint from many ranks without MPI in here.
//
//   CheckpointWriter w(root, step);             // every rank, same root and step
//   w.write_rank_file(rank, pieces);            // each writing rank, concurrently
//   -- barrier --
//   if (lead) w.commit(manifest, writer_ranks, keep_last);
//   -- barrier (or broadcast of the result) --
//
// write_rank_file writes <root>/.tmp_step_N/rank_RRRRR.safetensors (fsynced,
// hashed while written) and a small ".sha256" note beside it. commit() checks
// every expected file against its note and that the pieces cover every
// tensor, writes manifest.json with every file's size and sha256, renames the
// folder to step_N, fsyncs the root, rewrites `latest` (atomically) last,
// then deletes checkpoints beyond the newest keep_last and leftover
// .tmp_ folders. Until the rename nothing a reader looks at has changed, so
// a crash or a failed check leaves the previous checkpoints as they were.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/tensor_piece.h"

namespace loom {

struct CommitResult {
  std::string dir;                   // the new checkpoint
  std::vector<std::string> removed;  // older checkpoints and leftovers deleted
};

class CheckpointWriter {
 public:
  CheckpointWriter(std::string root, int64_t step);

  const std::string& root() const { return root_; }
  const std::string& staging_dir() const { return staging_; }  // <root>/.tmp_step_N
  const std::string& final_dir() const { return final_; }      // <root>/step_N

  // One writing rank's pieces. Safe to call from many processes at once.
  // `half_written`: see write_safetensors (fault injection).
  FileRecord write_rank_file(int rank, const std::vector<CheckpointPiece>& pieces,
                             const std::function<void()>& half_written = {}) const;
  // Those of `writer_ranks` whose file is not finished yet (no ".sha256"
  // note): what a lead that commits without a barrier waits for.
  std::vector<int> unfinished_ranks(const std::vector<int>& writer_ranks) const;

  // The lead, once every rank in writer_ranks has returned from
  // write_rank_file. Fills manifest.step (if 0), files and tensors.
  // keep_last >= 1: checkpoints kept, counting this one (those with a
  // later step, from an abandoned history, are left alone). Throws
  // UserError naming the file if anything is missing or inconsistent;
  // then no checkpoint is replaced.
  CommitResult commit(CheckpointManifest manifest, const std::vector<int>& writer_ranks, int keep_last) const;

 private:
  std::string root_, staging_, final_;
  int64_t step_;
};

// A single process: write rank 0's file and commit.
CommitResult save_checkpoint(const std::string& root, const CheckpointManifest& manifest,
                             const std::vector<CheckpointPiece>& pieces, int keep_last);

}  // namespace loom
