// Why an mpirun job of `loom train` ended badly, read from what it printed
// and from the flight recorder's hang.json: which world ranks failed, and
// whether a restart on the others can help.
//
//   a rank died     mpirun: "process rank 1 with PID 811 on node vm exited on
//                   signal 9 (Killed)"                 -> restart without rank 1
//   a rank hung     <run_dir>/flight/hang.json (the rank whose deadline expired
//                   names the culprits)                -> restart without them
//   a timeout only  a rank named a collective that never completed, but no
//                   rank died and no flight record names a culprit (a link
//                   or node lost: every rank waits)  -> no restart, the
//                   timeout named
//   anything else   a bad config, an internal error: the same launch would
//                   fail again                          -> no restart
#pragma once

#include <string>
#include <vector>

namespace loom::elastic {

struct JobFailure {
  bool rank_failure = false;  // a rank died or hung: the survivors may go on
  std::vector<int> ranks;     // the failed world ranks (sorted, unique)
  std::string reason;         // one line, for the log and elastic.jsonl
  // Frozen ranks (hang.json's evidence "heartbeat"): their processes may be
  // stopped, not dead; the supervisor kills those still there.
  struct Frozen {
    int rank = 0, pid = 0;
    std::string host;
  };
  std::vector<Frozen> frozen;
};

// The rank and reason of one line of mpirun's output if it says a rank died
// of a signal, else rank -1.
struct RankDeath {
  int rank = -1;
  std::string reason;  // "rank 1 exited on signal 9 (Killed)"
};
RankDeath parse_rank_death(const std::string& line);
// Every rank one line of mpirun's or srun's output says died of a signal:
// srun's "srun: error: node1: tasks 0,2-3: Killed" names several (its
// "Terminated" tasks are the ones it stopped itself, and "Exited with exit
// code" is no signal: neither counts).
std::vector<RankDeath> parse_rank_deaths(const std::string& line);

// hang_json: the text of hang.json ("" when there is none). deaths: what
// parse_rank_death found in the job's output. last_error: the job's last
// "loom: ... error: ..." line, for the reason when no rank failed.
// timeout_line: the first "loom: ...: no completion after N s; aborting the
// job" line ("" if none).
JobFailure classify_failure(int exit_code, const std::string& hang_json, const std::vector<RankDeath>& deaths,
                            const std::string& last_error, const std::string& timeout_line = "");

}  // namespace loom::elastic
