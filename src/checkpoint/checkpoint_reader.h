// Finding, verifying and reading checkpoints.
//
// resume "auto" takes the checkpoint `latest` names, or if it is damaged the
// newest good one before it; a damaged checkpoint is reported (by file) and
// skipped. An explicit path must be good, or the run stops naming the file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/sharded_tensors.h"

namespace loom {

// "" if `dir` is a complete checkpoint: its manifest matches its hash, parses
// and passes its checks; every file it lists exists with its recorded size
// (and sha256 when check_hashes); the manifest's index of pieces is what the
// files hold and covers every element. Else what is wrong, naming the file.
std::string checkpoint_problem(const std::string& dir, bool check_hashes = true);
// The same, throwing UserError with that message.
void verify_checkpoint(const std::string& dir, bool check_hashes = true);

struct ResumeChoice {
  std::string dir;                    // empty: nothing to resume from (a fresh start)
  std::vector<std::string> warnings;  // damaged checkpoints that were skipped, for the log
};

// spec "auto": under `root`, the checkpoint `latest` names if it is good,
// else the newest good one with an earlier step (without a readable `latest`:
// the newest good one); none there at all: an empty dir; some there but every
// one damaged: UserError naming each and why. "auto-or-fresh": the same, but
// all damaged is an empty dir (a fresh start) with the warnings. Checkpoints with a later step
// than `latest` are an abandoned history (or a save that died before
// updating `latest`) and are not taken.
// spec "none" or "": no resume. Any other spec is a checkpoint folder (or a
// root holding `latest`) that must be good: UserError naming the file if not.
// Hashes every file of the candidates: call it on one rank and broadcast the
// folder.
ResumeChoice resolve_resume(const std::string& spec, const std::string& root);

// An opened checkpoint: its manifest and its tensors, whatever the layout
// that wrote them.
class Checkpoint {
 public:
  // Reads the manifest and maps the files it lists. check_hashes: verify
  // first (checkpoint_problem; resolve_resume already did, on one rank).
  static Checkpoint open(const std::string& dir, bool check_hashes = false);

  const std::string& dir() const { return dir_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  const ShardedTensors& tensors() const { return *tensors_; }
  // UserError naming the field and this checkpoint's manifest if the model differs.
  void check_model(const std::map<std::string, int64_t>& expected) const;

 private:
  std::string dir_;
  CheckpointManifest manifest_;
  std::unique_ptr<ShardedTensors> tensors_;
};

}  // namespace loom
