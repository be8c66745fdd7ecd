#include "elastic/supervisor.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "config/run_config.h"
#include "core/check.h"
#include "elastic/child_job.h"
#include "elastic/job_failure.h"
#include "elastic/relayout.h"
#include "obs/run_dir.h"
#include "obs/run_reader.h"
#include "planner/layout.h"
#include "planner/predict.h"

namespace loom::elastic {

namespace {

// A frozen rank's process may outlive its job (stopped, it cannot act on
// the launcher's SIGTERM): SIGKILL it where it runs on this machine and
// still exists (another machine's is its node agent's to kill).
void kill_frozen(const std::vector<JobFailure::Frozen>& frozen, FILE* out) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  for (const JobFailure::Frozen& p : frozen) {
    if (p.host != host) {
      std::fprintf(out, "loom elastic: rank %d (pid %d) is on %s: not this machine's to kill\n", p.rank, p.pid,
                   p.host.c_str());
      continue;
    }
    if (::kill(p.pid, 0) != 0) continue;  // already gone
    // Only a loom process: a pid may have been given to another since.
    std::ifstream cmdline(strprintf("/proc/%d/cmdline", p.pid));
    const std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (args.find("loom") == std::string::npos) continue;
    ::kill(p.pid, SIGKILL);
    std::fprintf(out, "loom elastic: killed the frozen rank %d (pid %d)\n", p.rank, p.pid);
  }
}

}  // namespace
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What one launch printed that the supervisor acts on, with the times.
struct Attempt {
  int exit_code = -1;
  std::vector<RankDeath> deaths;
  std::string last_error;                    // the last "loom: ... error: ..." line
  std::string timeout_line;                  // the first "loom: ...; aborting the job" line
  bool launcher_stopping = false;            // srun said it is ending the step
  std::optional<Clock::time_point> fault_at;  // an injected fault announced itself
  std::optional<Clock::time_point> resumed_at;
  int64_t resumed_step = -1;                 // from "resume: ... (step N, ..." (0: fresh start)
  Clock::time_point ended;
};

// Reads the job's merged output line by line as it comes, echoing it;
// on_resume runs when the job says where it resumed.
// What one line of the job's output tells the supervisor.
void note_line(Attempt& a, const std::string& line, Clock::time_point now,
               const std::function<void(const Attempt&)>& on_resume) {
  // Once srun stops the step itself it may report the tasks it killed as
  // "Killed" too: only the deaths before that count.
  if ((line.rfind("srun: ", 0) == 0 && (line.find("Terminating") != std::string::npos ||
                                        line.find("step aborted") != std::string::npos)) ||
      line.find("CANCELLED AT") != std::string::npos)
    a.launcher_stopping = true;
  if (!(a.launcher_stopping && line.rfind("srun: ", 0) == 0))
    for (RankDeath& d : parse_rank_deaths(line)) a.deaths.push_back(std::move(d));
  if (line.rfind("loom: ", 0) == 0 && line.find("aborting the job") != std::string::npos && a.timeout_line.empty())
    a.timeout_line = line.substr(0, line.find_last_not_of('\n') + 1);
  if (line.rfind("loom: fault injection:", 0) == 0 && !a.fault_at) a.fault_at = now;
  if (line.rfind("loom: ", 0) == 0 && line.find("error: ") != std::string::npos)
    a.last_error = line.substr(0, line.find_last_not_of('\n') + 1);
  // "resume: DIR (step N, ..." or "resume: no checkpoint ..." (not the
  // "resume: skipped ..." warnings before them).
  const bool resumed = line.rfind("resume: ", 0) == 0 && line.find("(step ") != std::string::npos;
  if ((resumed || line.rfind("resume: no checkpoint", 0) == 0) && !a.resumed_at) {
    a.resumed_at = now;
    a.resumed_step = resumed ? std::atoll(line.c_str() + line.find("(step ") + 6) : 0;
    on_resume(a);
  }
}

// A rank that named a timeout has asked MPI to abort the job; mpirun may
// still wait for a daemon it cannot reach (a cut link), so after this long
// the supervisor ends it: SIGTERM, then SIGKILL.
constexpr double kAbortGraceS = 15, kKillGraceS = 5;

Attempt run_attempt(const std::string& command, const std::string& launcher, FILE* out,
                    const std::function<void(const Attempt&)>& on_resume) {
  Attempt a;
  ChildJob job(command);
  std::string line;
  char buf[4096];
  const int fd = ::fileno(job.output());
  std::optional<Clock::time_point> abort_named, terminated;
  bool killed = false;
  for (;;) {
    // Wait for output at most a second, so the abort grace is checked.
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 1000);
    const auto tick = Clock::now();
    if (abort_named && !terminated && seconds_between(*abort_named, tick) > kAbortGraceS) {
      std::fprintf(out, "loom elastic: the job was aborted %.0f s ago and %s has not ended (a node it cannot "
                        "reach?); stopping it\n",
                   kAbortGraceS, launcher.c_str());
      std::fflush(out);
      job.signal(SIGTERM), terminated = tick;
    }
    if (terminated && !killed && seconds_between(*terminated, tick) > kKillGraceS) job.signal(SIGKILL), killed = true;
    if (ready <= 0) continue;
    const ssize_t got = ::read(fd, buf, sizeof buf - 1);
    if (got <= 0) break;  // end of output: the job ended
    buf[got] = 0;
    line += buf;
    for (size_t end; (end = line.find('\n')) != std::string::npos; line.erase(0, end + 1)) {
      const std::string one = line.substr(0, end + 1);
      std::fputs(one.c_str(), out);
      std::fflush(out);
      const auto now = Clock::now();
      note_line(a, one, now, on_resume);
      if (!a.timeout_line.empty() && !abort_named) abort_named = now;
    }
  }
  if (!line.empty()) note_line(a, line, Clock::now(), on_resume);
  a.exit_code = job.wait();
  a.ended = Clock::now();
  return a;
}
// The last step metrics.jsonl records (0 if none) and how long ago its
// line was written.
int64_t last_step(const std::string& run_dir, double* age_s) {
  *age_s = -1;
  const std::string metrics = run_dir + "/metrics.jsonl";
  struct stat st;
  if (::stat(metrics.c_str(), &st) != 0) return 0;
  const double mtime = double(st.st_mtim.tv_sec) + 1e-9 * double(st.st_mtim.tv_nsec);
  *age_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - mtime;
  try {
    const obs::RunData run = obs::read_run_dir(run_dir);
    return run.steps.empty() ? 0 : run.steps.back().step;
  } catch (const UserError&) {
    return 0;
  }
}

void append_record(const std::string& file, const obs::RestartRecord& r) {
  std::ofstream o(file, std::ios::app);
  o << nlohmann::json(r).dump() << "\n";
}

std::string layout_text(const RunConfig& cfg, int world) { return describe_layout(world, planner::layout_of(cfg, world)); }

}  // namespace

int run_elastic(const ElasticOptions& o, FILE* out) {
  LOOM_USER_CHECK(o.np >= 1, "elastic: --np must be at least 1 (got %d)", o.np);
  LOOM_USER_CHECK(o.launcher == "mpirun" || o.launcher == "srun", "elastic: --launcher takes mpirun or srun, got '%s'",
                  o.launcher.c_str());
  LOOM_USER_CHECK(o.max_restarts >= 0, "elastic: --max-restarts must be 0 or more (got %d)", o.max_restarts);
  LOOM_USER_CHECK(o.min_ranks >= 1 && o.min_ranks <= o.np,
                  "elastic: --min-ranks %d must be in [1, --np %d] (the world it starts with)", o.min_ranks, o.np);
  RunConfig cfg = load_run_config(o.config_path, o.overrides);
  LOOM_USER_CHECK(!cfg.train.checkpoint_dir.empty() && cfg.train.checkpoint_every > 0,
                  "elastic: a restart resumes from the newest checkpoint, so set train.checkpoint_dir and "
                  "train.checkpoint_every > 0 (now '%s' and %d)",
                  cfg.train.checkpoint_dir.c_str(), cfg.train.checkpoint_every);
  LOOM_USER_CHECK(!cfg.train.run_dir.empty(), "elastic: train.run_dir is empty; the supervisor needs the run "
                                              "directory (hang records, elastic.jsonl)");
  // One run directory for every attempt.
  const std::string run_dir = obs::RunDir::default_path(cfg.train.run_dir, cfg.train.run_name);
  const std::string run_name = std::filesystem::path(run_dir).filename().string();
  std::filesystem::create_directories(run_dir);
  const std::string log_file = run_dir + "/elastic.jsonl";
  if (o.resume.empty()) std::remove(log_file.c_str());  // a fresh run, a fresh log
  if (::geteuid() == 0) {  // whoever runs the supervisor as root means it
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }

  const char* omp = std::getenv("OMP_NUM_THREADS");
  const bool user_threads = omp && *omp;
  int world = o.np;
  std::vector<std::string> layout_sets;  // the relaunch's layout (none: the user's)
  std::string layout_desc = layout_text(cfg, world);
  if (o.layout == "auto") {  // chosen here, so that the log and elastic.jsonl name what runs
    const planner::Layout l = planner::choose_layout(cfg, world, planner::local_cluster_or_default());
    layout_sets = layout_overrides(cfg, l);
    layout_desc = describe_layout(world, l) + " (--layout auto)";
  }
  std::optional<obs::RestartRecord> pending;  // a restart waiting for its relaunch to resume
  Clock::time_point failed_job_ended;
  for (int attempt = 1;; attempt++) {
    if (const int sig = ChildJob::interrupted()) {  // between attempts
      std::fprintf(out, "loom elastic: interrupted by signal %d; not restarting\n", sig);
      return 128 + sig;
    }
    for (const char* stale : {"/flight/hang.json", "/flight/hang.claim"}) std::remove((run_dir + stale).c_str());
    // Threads per rank: the user's OMP_NUM_THREADS, else the cores shared out.
    if (!user_threads) setenv("OMP_NUM_THREADS", std::to_string(std::max(1u, std::thread::hardware_concurrency() / unsigned(world))).c_str(), 1);
    // exec: the supervisor's signals reach mpirun (or srun) itself, not a
    // shell. srun ends the step when a task dies (--kill-on-bad-exit), as
    // mpirun does, and starts it through PMIx unless the options say --mpi.
    std::string cmd = o.launcher == "srun"
                          ? strprintf("exec srun --ntasks=%d --kill-on-bad-exit=1 --mpi=pmix", world)
                          : strprintf("exec mpirun --oversubscribe --bind-to none -np %d", world);
    for (const auto& a : o.mpirun_args) cmd += " " + shell_quote(a);
    cmd += " " + shell_quote(o.loom_exe) + " train";
    if (!o.config_path.empty()) cmd += " --config " + shell_quote(o.config_path);
    for (const auto& s : o.overrides) cmd += " --set " + shell_quote(s);
    if (cfg.train.run_name.empty()) cmd += " --set " + shell_quote("train.run_name=" + run_name);
    for (const auto& s : layout_sets) cmd += " --set " + shell_quote(s);
    if (attempt == 1) {
      if (!o.resume.empty()) cmd += " --resume " + shell_quote(o.resume);
      for (const auto& f : o.faults) cmd += " --fault " + shell_quote(f);
    } else {
      cmd += " --resume auto";
    }
    std::fprintf(out, "loom elastic: attempt %d on %s\n  %s\n", attempt, layout_desc.c_str(), cmd.c_str());
    std::fflush(out);
    // The restart that led here: how long until it resumed, what it lost.
    auto on_resume = [&](const Attempt& now) {
      if (!pending) return;
      pending->restart_s = seconds_between(failed_job_ended, *now.resumed_at);
      pending->resumed_step = now.resumed_step;
      pending->steps_lost = std::max<int64_t>(0, pending->failed_at_step - now.resumed_step);
      append_record(log_file, *pending);
      std::fprintf(out, "loom elastic: attempt %d resumed at step %lld, %.1f s after the failed job ended; %lld steps "
                        "lost\n",
                   attempt, (long long)now.resumed_step, pending->restart_s, (long long)pending->steps_lost);
      std::fflush(out);
      pending.reset();
    };
    const Attempt a = run_attempt(cmd, o.launcher, out, on_resume);
    if (pending) append_record(log_file, *pending), pending.reset();  // it failed before resuming
    if (a.exit_code == 0) {
      std::fprintf(out, "loom elastic: finished on %s after %d restart%s (%s)\n", layout_desc.c_str(), attempt - 1,
                   attempt == 2 ? "" : "s", log_file.c_str());
      return 0;
    }

    if (const int sig = ChildJob::interrupted()) {  // stopped on purpose: no restart
      std::fprintf(out, "loom elastic: interrupted by signal %d; the job was stopped, not restarted\n", sig);
      return 128 + sig;
    }
    std::vector<RankDeath> deaths;  // ranks of this world only
    for (const RankDeath& d : a.deaths)
      if (d.rank < world) deaths.push_back(d);
    const JobFailure f = classify_failure(a.exit_code, read_text(run_dir + "/flight/hang.json"), deaths,
                                          a.last_error, a.timeout_line);
    kill_frozen(f.frozen, out);
    // Kept for the post-mortem: the next attempt's verdict, if any, is hang.json.
    std::rename((run_dir + "/flight/hang.json").c_str(),
                (run_dir + strprintf("/flight/hang.attempt%d.json", attempt)).c_str());
    obs::RestartRecord r;
    r.attempt = attempt, r.reason = f.reason, r.failed_ranks = f.ranks;
    double age_s = -1;
    r.failed_at_step = last_step(run_dir, &age_s);
    // From the failure (an injected fault says when; else the last step the
    // job finished) to the end of the job.
    r.detect_s = a.fault_at ? seconds_between(*a.fault_at, a.ended) : age_s;
    r.old_world = world, r.old_layout = layout_desc;
    auto stop = [&](const std::string& why, int code) {
      r.outcome = "stopped", r.reason = f.reason + "; " + why;
      append_record(log_file, r);
      std::fprintf(out, "loom elastic: attempt %d failed (%s); not restarting: %s\n", attempt, f.reason.c_str(),
                   why.c_str());
      return code;
    };
    if (!f.rank_failure && !a.timeout_line.empty())
      return stop("no rank to leave out (every rank waited: check the network between the nodes)", 1);
    if (!f.rank_failure)
      return stop("not a rank failure (the same launch would fail again)", a.exit_code == 2 ? 2 : 1);
    if (attempt > o.max_restarts) return stop(strprintf("--max-restarts %d reached", o.max_restarts), 1);
    const int survivors = world - int(f.ranks.size());
    if (survivors < o.min_ranks)
      return stop(strprintf("%d rank%s left, fewer than --min-ranks %d", survivors, survivors == 1 ? "" : "s",
                            o.min_ranks),
                  1);
    Relayout next;
    try {
      next = relayout(cfg, survivors, o.min_ranks, planner::local_cluster_or_default(), o.layout == "auto");
    } catch (const UserError& e) {
      return stop(e.what(), 1);
    }
    r.outcome = "restarted", r.new_world = next.world, r.new_layout = next.describe();
    std::fprintf(out, "loom elastic: attempt %d failed at step %lld: %s (detected in %.1f s); restarting on %s\n",
                 attempt, (long long)r.failed_at_step, f.reason.c_str(), r.detect_s, r.new_layout.c_str());
    std::fflush(out);
    world = next.world, layout_sets = next.overrides, layout_desc = r.new_layout;
    pending = r;
    failed_job_ended = a.ended;
  }
}

}  // namespace loom::elastic
