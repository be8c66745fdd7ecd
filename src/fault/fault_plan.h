// Fault injection, for tests and demos only: make a chosen rank die, hang or
// run slow at a chosen step, so that what loom does about failures (the
// elastic supervisor, hang attribution, straggler reports, checkpoints that
// survive a crash mid-write) can be exercised on one machine.
//
//   loom train --fault kill:rank=1:step=30          rank 1 dies (SIGKILL)
//   loom train --fault stop:rank=2:step=12          rank 2 hangs (SIGSTOP)
//   loom train --fault slow:rank=3:step=5:ms=150    rank 3 computes 150 ms longer
//                                                   every step from step 5 on
//   loom train --fault pause:rank=1:step=9:ms=4000  rank 1 is busy 4 s once (a long
//                                                   kernel or fsync: alive, out of MPI)
//   loom train --fault kill-in-save:rank=0:step=20  rank 0 dies while its
//                                                   background save of step 20
//                                                   is half written
//
// `step` counts as the log does (1-based): a kill or stop fires as step S
// begins; `rank` is the world rank. Several --fault options combine.
#pragma once

#include <string>
#include <vector>

namespace loom {

enum class FaultKind { kill, stop, slow, pause, kill_in_save };

struct Fault {
  FaultKind kind = FaultKind::kill;
  int rank = 0;
  int step = 1;  // 1-based, as logged
  int ms = 0;    // slow: extra milliseconds per step; pause: once
};

// Parses one --fault value; throws UserError naming the option and the part
// that is wrong.
Fault parse_fault(const std::string& spec);
std::string describe_fault(const Fault& f);

class FaultPlan {
 public:
  FaultPlan() = default;
  explicit FaultPlan(std::vector<Fault> faults) : faults_(std::move(faults)) {}

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }
  // Throws UserError if a fault names a rank outside the world.
  void check_ranks(int world_size) const;

  // As step `step` (0-based loop index) begins on world rank `rank`: kills,
  // stops or pauses this process when a fault says so (prints what it does first).
  void at_step_begin(int step, int rank) const;
  // Extra compute milliseconds this rank spends in step `step` (0-based).
  int slow_ms(int step, int rank) const;
  // Whether this rank dies half-way through writing the checkpoint saved
  // after `steps_done` steps.
  bool kill_in_save(long long steps_done, int rank) const;
  // What a checkpoint writer calls half-way through the file when
  // kill_in_save said so: prints what it does, then SIGKILL.
  [[noreturn]] static void die_in_save(long long steps_done, int rank);

 private:
  std::vector<Fault> faults_;
};

}  // namespace loom
