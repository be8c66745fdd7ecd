// `loom bench elastic [--ranks 4] [--steps 60] [--kill-step 30] [--every 10] [--batch 12]
//                     [--async-checkpoint]`:
// one rank of a `loom elastic` run is killed as step --kill-step begins; the
// supervisor restarts the job on the survivors from the newest checkpoint.
// Prints the time to detect the failure, the time to restart (relaunch and
// load), the steps lost, and the largest loss difference against the same
// run without the failure (an mpirun of loom train on all ranks, in the same
// bench), from the resumed checkpoint's step on. Issue 19's targets: losses
// within 1e-4, steps lost <= one checkpoint interval (with synchronous saves,
// the default here; --async-checkpoint adds the steps a save in flight took).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "core/check.h"
#include "kernels/cpu/isa.h"
#include "obs/run_reader.h"

namespace loom::cli {
namespace {

std::map<int64_t, double> losses(const std::string& run_dir) {
  std::map<int64_t, double> out;
  for (const obs::StepMetrics& m : obs::read_run_dir(run_dir).steps) out[m.step] = m.loss;
  return out;
}

}  // namespace

int cmd_bench_elastic(const Args& args) {
  int ranks = 4, steps = 60, kill_step = 30, every = 10, batch = 12;
  bool async_saves = false;  // synchronous: the bound on work lost is one interval
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&](const char* flag) {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench elastic: %s needs a value", flag);
      return args[++i];
    };
    if (args[i] == "--ranks") ranks = int_option(value("--ranks"), "bench elastic", "--ranks", 2, 64);
    else if (args[i] == "--steps") steps = int_option(value("--steps"), "bench elastic", "--steps", 4, 100000);
    else if (args[i] == "--kill-step") kill_step = int_option(value("--kill-step"), "bench elastic", "--kill-step", 2, 100000);
    else if (args[i] == "--every") every = int_option(value("--every"), "bench elastic", "--every", 1, 100000);
    else if (args[i] == "--batch") batch = int_option(value("--batch"), "bench elastic", "--batch", 1, 4096);
    else if (args[i] == "--async-checkpoint") async_saves = true;
    else throw UserError(strprintf("bench elastic: unknown option '%s' (try loom bench --help)", args[i].c_str()));
  }
  LOOM_USER_CHECK(kill_step <= steps, "bench elastic: --kill-step %d is past --steps %d", kill_step, steps);
  const std::string dir = strprintf("/tmp/loom-bench-elastic.%d", int(::getpid()));
  struct RemoveAtEnd {  // also when a check fails
    std::string dir;
    ~RemoveAtEnd() { std::filesystem::remove_all(dir); }
  } remove_at_end{dir};
  const std::string common =
      strprintf(" --config '%s/configs/tiny.toml' --set train.steps=%d --set train.batch_size=%d "
                "--set train.checkpoint_every=%d --set runtime.threads=1 --set runtime.comm_timeout_s=20 "
                "--set train.eval_every=0 --set train.run_dir=%s/runs --set train.async_checkpoint=%s",
                project_root().c_str(), steps, batch, every, dir.c_str(), async_saves ? "true" : "false");
  std::printf("bench elastic: tiny GPT-2, %d ranks, global batch %d, %d steps, %s checkpoint every %d; rank 1 "
              "killed as step %d begins\n%s\n",
              ranks, batch, steps, async_saves ? "asynchronous" : "synchronous", every, kill_step,
              cpu::describe_dispatch().line().c_str());
  std::fflush(stdout);

  CommandResult ref = run_command(mpirun_prefix(ranks, 1) + "'" + self_exe() + "' train" + common +
                                  strprintf(" --set train.checkpoint_dir=%s/ck_ref --set train.run_name=ref 2>&1",
                                            dir.c_str()));
  LOOM_CHECK(ref.status == 0, "bench elastic: the uninterrupted run failed:\n%s", ref.output.c_str());
  CommandResult el = run_command(strprintf("'%s' elastic --np %d", self_exe().c_str(), ranks) + common +
                                 strprintf(" --set train.checkpoint_dir=%s/ck --set train.run_name=elastic "
                                           "--fault kill:rank=1:step=%d 2>&1",
                                           dir.c_str(), kill_step));
  LOOM_CHECK(el.status == 0, "bench elastic: loom elastic failed:\n%s", el.output.c_str());

  const obs::RunData run = obs::read_run_dir(dir + "/runs/elastic");
  LOOM_CHECK(run.restarts.size() == 1, "bench elastic: expected one restart, elastic.jsonl has %zu",
             run.restarts.size());
  const obs::RestartRecord& r = run.restarts[0];
  const auto want = losses(dir + "/runs/ref"), got = losses(dir + "/runs/elastic");
  double max_diff = 0;
  int compared = 0;
  for (const auto& [step, loss] : got)
    if (step > r.resumed_step && want.count(step)) max_diff = std::max(max_diff, std::fabs(loss - want.at(step))), compared++;
  LOOM_CHECK(compared == steps - r.resumed_step, "bench elastic: compared %d steps, expected %lld", compared,
             (long long)(steps - r.resumed_step));
  std::printf("failure:        %s\n", r.reason.c_str());
  std::printf("restarted on:   %s\n", r.new_layout.c_str());
  std::printf("time to detect: %.2f s (the kill to the end of the failed job)\n", r.detect_s);
  std::printf("time to restart: %.2f s (the end of the failed job to the relaunched job resuming at step %lld)\n",
              r.restart_s, (long long)r.resumed_step);
  std::printf("steps lost:     %lld (failed after step %lld; checkpoint interval %d: target <= %d%s)\n",
              (long long)r.steps_lost, (long long)r.failed_at_step, every, every,
              async_saves ? ", plus the steps a save still being written took" : "");
  std::printf("max |loss - uninterrupted %d-rank run's| over steps %lld..%d: %.3g (target 1e-4)\n", ranks,
              (long long)r.resumed_step + 1, steps, max_diff);
  std::printf("{\"detect_s\": %.4f, \"restart_s\": %.4f, \"steps_lost\": %lld, \"new_world\": %d, "
              "\"max_loss_diff\": %.3g}\n",
              r.detect_s, r.restart_s, (long long)r.steps_lost, r.new_world, max_diff);
  return 0;
}

}  // namespace loom::cli
