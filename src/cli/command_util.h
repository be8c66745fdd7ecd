// Small helpers the commands share (train, elastic and calibrate, and the
// benchmarks of src/bench/): running a child command (or an mpirun job of
// this executable) and reading what it prints, this executable's path, peak
// RSS, integer options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::cli {

// The number after "key": in a one-line JSON object (-1 if absent).
double json_number(const std::string& line, const char* key);
// s in single quotes for a shell command line (inner quotes escaped).
std::string shell_quote(const std::string& s);

struct CommandResult {
  int status = -1;     // the exit code; -1 if it could not start or a signal ended it
  std::string output;  // what it printed (stderr too if the command says 2>&1)
};
CommandResult run_command(const std::string& command);
// Runs `command` (stderr included if it says 2>&1); returns its last JSON
// line, or "" (after printing the output) if it failed or printed none.
std::string run_for_json(const std::string& command);

// "OMP_NUM_THREADS=t mpirun --oversubscribe --bind-to none -np n ": ranks may
// outnumber the cores. The first call as root also sets the variables without
// which OpenMPI refuses root (a benchmark launched by root means it).
std::string mpirun_prefix(int ranks, int threads_per_rank);

// all_reduce between 2 ranks from `loom bench comm-child` launched by
// `launcher` (mpirun_prefix(2, 1), or an emulated cluster's mpirun): bus
// bandwidth at the largest size (max_bytes, like "64M"), latency per ring
// step from the 4 KiB time (a 2-rank ring takes 2 steps).
struct MpiFigures {
  bool ok = false;
  double bus_bytes_per_s = 0, latency_s = 0;
};
MpiFigures measure_all_reduce(const std::string& launcher, const std::string& max_bytes);

std::string self_exe();
double peak_rss_mib();  // of this process so far
// The benchmarks' batch: tokens and targets drawn from the counter-based RNG
// over [0, vocab) (both vectors keep their sizes).
void random_batch(int vocab, std::vector<int32_t>* tokens, std::vector<int32_t>* targets);

// `text` as an integer in [min, max], else a UserError such as "bench pp:
// --steps must be an integer in [2, 1024], got 'x'".
int int_option(const std::string& text, const char* command, const char* flag, int min, int max);

}  // namespace loom::cli
