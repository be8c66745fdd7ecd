#include "fault/fault_plan.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/check.h"

namespace loom {

namespace {

const char* kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::kill: return "kill";
    case FaultKind::stop: return "stop";
    case FaultKind::slow: return "slow";
    case FaultKind::kill_in_save: return "kill-in-save";
    case FaultKind::pause: return "pause";
  }
  return "?";
}

int parse_int(const std::string& spec, const std::string& key, const std::string& text, int min) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  LOOM_USER_CHECK(!text.empty() && *end == '\0' && errno == 0 && v >= min && v <= 1000000000,
                  "--fault '%s': %s must be an integer >= %d, got '%s'", spec.c_str(), key.c_str(), min,
                  text.c_str());
  return int(v);
}

// A pause: the compute thread spins as in one long kernel (the process stays
// alive: its heartbeat thread goes on stamping).
void busy_for(const Fault& f, int rank) {
  std::fprintf(stderr, "loom: fault injection: rank %d busy for %d ms at step %d (alive, not in MPI)\n", rank, f.ms,
               f.step);
  std::fflush(stderr);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(f.ms);
  volatile unsigned long spins = 0;
  while (std::chrono::steady_clock::now() < end) spins = spins + 1;
}

}  // namespace

Fault parse_fault(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream in(spec);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  LOOM_USER_CHECK(!parts.empty(), "--fault needs KIND:rank=R:step=S (kinds: kill, stop, slow, pause, kill-in-save)");
  Fault f;
  const std::string& kind = parts[0];
  if (kind == "kill") f.kind = FaultKind::kill;
  else if (kind == "stop") f.kind = FaultKind::stop;
  else if (kind == "slow") f.kind = FaultKind::slow;
  else if (kind == "pause") f.kind = FaultKind::pause;
  else if (kind == "kill-in-save") f.kind = FaultKind::kill_in_save;
  else throw UserError(strprintf("--fault '%s': unknown kind '%s' (kill, stop, slow, pause or kill-in-save)", spec.c_str(),
                                 kind.c_str()));
  const bool takes_ms = f.kind == FaultKind::slow || f.kind == FaultKind::pause;
  bool have_rank = false, have_step = false, have_ms = false;
  for (size_t i = 1; i < parts.size(); i++) {
    const size_t eq = parts[i].find('=');
    LOOM_USER_CHECK(eq != std::string::npos, "--fault '%s': '%s' is not key=value", spec.c_str(), parts[i].c_str());
    const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
    if (key == "rank") f.rank = parse_int(spec, key, value, 0), have_rank = true;
    else if (key == "step") f.step = parse_int(spec, key, value, 1), have_step = true;
    else if (key == "ms" && takes_ms) f.ms = parse_int(spec, key, value, 1), have_ms = true;
    else throw UserError(strprintf("--fault '%s': unknown key '%s' for %s (rank, step%s)", spec.c_str(), key.c_str(),
                                   kind.c_str(), takes_ms ? ", ms" : ""));
  }
  LOOM_USER_CHECK(have_rank && have_step, "--fault '%s': needs rank=R and step=S", spec.c_str());
  LOOM_USER_CHECK(!takes_ms || have_ms, "--fault '%s': %s needs ms=M (%s)", spec.c_str(), kind.c_str(),
                  f.kind == FaultKind::slow ? "extra ms per step" : "how long the rank is busy, once");
  return f;
}

std::string describe_fault(const Fault& f) {
  std::string s = strprintf("%s:rank=%d:step=%d", kind_name(f.kind), f.rank, f.step);
  if (f.kind == FaultKind::slow || f.kind == FaultKind::pause) s += strprintf(":ms=%d", f.ms);
  return s;
}

void FaultPlan::check_ranks(int world_size) const {
  for (const Fault& f : faults_)
    LOOM_USER_CHECK(f.rank < world_size, "--fault '%s': rank %d does not exist (the world has %d ranks)",
                    describe_fault(f).c_str(), f.rank, world_size);
}

void FaultPlan::at_step_begin(int step, int rank) const {
  for (const Fault& f : faults_) {
    if (f.rank != rank || f.step != step + 1) continue;
    if (f.kind == FaultKind::pause) {
      busy_for(f, rank);
      continue;
    }
    if (f.kind != FaultKind::kill && f.kind != FaultKind::stop) continue;
    std::fprintf(stderr, "loom: fault injection: rank %d %s at step %d\n", rank,
                 f.kind == FaultKind::kill ? "killed (SIGKILL)" : "stopped (SIGSTOP)", f.step);
    std::fflush(stderr);
    std::fflush(stdout);
    ::raise(f.kind == FaultKind::kill ? SIGKILL : SIGSTOP);
  }
}

int FaultPlan::slow_ms(int step, int rank) const {
  int ms = 0;
  for (const Fault& f : faults_)
    if (f.kind == FaultKind::slow && f.rank == rank && step + 1 >= f.step) ms += f.ms;
  return ms;
}

bool FaultPlan::kill_in_save(long long steps_done, int rank) const {
  for (const Fault& f : faults_)
    if (f.kind == FaultKind::kill_in_save && f.rank == rank && f.step == steps_done) return true;
  return false;
}

void FaultPlan::die_in_save(long long steps_done, int rank) {
  std::fprintf(stderr, "loom: fault injection: rank %d killed (SIGKILL) half-way through writing its checkpoint file "
               "for step %lld\n", rank, steps_done);
  std::fflush(stderr);
  std::fflush(stdout);
  ::raise(SIGKILL);
  std::abort();  // not reached
}

}  // namespace loom
