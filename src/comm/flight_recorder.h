// FlightRecorder: which rank a hang is waiting for.
//
// Every collective a rank enters on a group gets that group's next sequence
// number (every member calls a group's collectives in the same order, so #N
// is the same operation on every member); point-to-point transfers are
// counted per peer. Each rank keeps its last entered and completed operation
// per group, the trace span it last began and its step in a small record
// file, <dir>/rank_RRRRR.flight, memory-mapped so that an update is a few
// stores (no system call). When a deadline expires, the rank that timed out
// reads its group members' records and says which rank never entered
// operation #N of which group and what that rank did last (explain_*), and
// leaves the answer in <dir>/hang.json for a supervisor.
//
// A heartbeat thread stamps the record every `heartbeat_s`: a process that
// is stopped (SIGSTOP, a cgroup freeze, a debugger) stops stamping, while one
// busy in a long kernel, an fsync or a slow evaluation goes on. When every
// member entered the operation a rank waits in (a rank frozen inside it),
// the members whose stamp is older than `stale_s` are the culprits; a member
// with a fresh stamp is never named while a stale one exists.
//
// The records are read across processes through the file system: on several
// machines <dir> must be on a shared file system for a rank to read another
// machine's records (an unreadable record is said to be unreadable).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace loom {

struct FlightRecord;  // the mapped file (flight_recorder.cpp)

// One member's state as read from its record.
struct HangReport {
  std::string text;          // lines for the log, naming ranks, groups and operations
  std::vector<int> culprits;  // world ranks that never entered (or never posted) the operation, or froze
  std::string evidence;       // "heartbeat" (stamps stopped), "never entered", or "" (no culprit)
  struct Process {
    int rank = 0, pid = 0;
    std::string host;
  };
  std::vector<Process> frozen;  // evidence "heartbeat": where the stopped processes are (a supervisor kills them)
};

struct FlightOptions {
  double heartbeat_s = 0.5;  // the heartbeat thread's period; <= 0: stamped once, at the start (tests)
  double stale_s = 3;        // a stamp older than this marks a frozen process (runtime.heartbeat_stale_s)
  // The job's ranks (0 .. world_size-1), every one of which a verdict looks
  // at for a stopped heartbeat: a frozen rank outside the group a rank waits
  // in (a pipeline peer's own peer) explains the wait too. 0: the group only.
  int world_size = 0;
};

class FlightRecorder {
 public:
  // Creates <dir>/rank_RRRRR.flight (and dir). Throws UserError naming the
  // path if it cannot.
  FlightRecorder(std::string dir, int world_rank, FlightOptions options = {});
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  const std::string& dir() const { return dir_; }
  static std::string record_path(const std::string& dir, int world_rank);

  // A group this rank belongs to (name unique on this rank; members in group
  // rank order, as world ranks). Returns its slot, or -1 when the record has
  // no room left (nothing is then recorded for that group).
  int add_group(const std::string& name, const std::vector<int>& members, int my_group_rank);

  // A collective entered on `slot`: its sequence number (1, 2, ...).
  uint64_t enter(int slot, const char* op);
  void complete(int slot, uint64_t seq);
  // A send to / receive from group rank `peer`: its count for that peer and
  // direction (1, 2, ...). Peers beyond the record's room count as 0.
  uint64_t enter_p2p(int slot, bool send, int peer, const char* op);
  void complete_p2p(int slot, bool send, int peer);

  void note_span(const char* name);
  void note_step(int step);  // 1-based, as logged

  // What the other members of `slot` say about collective #seq, or about
  // this rank's transfer #count with `peer`.
  HangReport explain_collective(int slot, uint64_t seq) const;
  HangReport explain_p2p(int slot, bool send, int peer, uint64_t count) const;
  // Writes <dir>/hang.json (atomically): waiting rank, group, operation, culprits, text;
  // only the first rank of the job to time out (it claims <dir>/hang.claim) writes it.
  void write_hang(const HangReport& report, const std::string& what) const;

 private:
  struct Group {
    std::string name;
    std::vector<int> members;
    int me = 0;
  };
  void beat();  // the heartbeat thread
  // The ranks of the job (this one aside) whose heartbeat stopped, each with
  // a line for the report; `group`: the members looked at when world_size is 0.
  void find_frozen(const std::vector<int>& group, double now, HangReport& out, std::string& lines) const;
  std::vector<int> judged_ranks(const std::vector<int>& group) const;  // the ranks find_frozen looks at
  // Waits until each of `ranks` with a fresh stamp stamps again or goes stale.
  void settle_heartbeats(const std::vector<int>& ranks) const;
  std::string dir_;
  int world_rank_;
  FlightOptions options_;
  FlightRecord* rec_ = nullptr;
  std::vector<Group> groups_;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace loom
