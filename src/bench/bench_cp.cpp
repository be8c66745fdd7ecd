// `loom bench cp`: context parallelism on a long-sequence tiny model
// (--layers blocks, 2 by default, d_model 128, 4 heads, vocab 256, one
// sequence of T tokens per step, tiled attention either way), cp = 1 (one rank, one thread) against
// cp = 2 (two ranks, one thread each, the sequence split in four chunks):
// step time, the activation memory each rank planned, peak resident set,
// and the largest difference between the two runs' losses. Each row is one
// `mpirun` of `loom bench cp-child`, which runs the real training loop.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "config/run_config.h"
#include "core/check.h"
#include "kernels/cpu/isa.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

struct Options {
  int T = 8192;
  int steps = 3;
  int layers = 2;
  int cp = 1;  // child only
};

Options parse(const Args& args) {
  Options o;
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench cp: %s needs a value", args[i].c_str());
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--T") o.T = cli::int_option(value(), "bench cp", "--T", 64, 1 << 20);
    else if (a == "--steps") o.steps = cli::int_option(value(), "bench cp", "--steps", 2, 1000);
    else if (a == "--layers") o.layers = cli::int_option(value(), "bench cp", "--layers", 1, 64);
    else if (a == "--cp") o.cp = cli::int_option(value(), "bench cp", "--cp", 1, 64);
    else throw UserError(strprintf("bench cp: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  LOOM_USER_CHECK(o.T % 4 == 0, "bench cp: --T (%d) must be divisible by 4 (cp = 2 splits it in 4 chunks)", o.T);
  return o;
}

}  // namespace

int cmd_bench_cp(const Args& args) {
  const Options o = parse(args);
  std::printf("loom bench cp: %d blocks d_model 128, 4 heads, vocab 256, T %d, one sequence per step, tiled "
              "attention;\n%d timed steps after 1 warm-up\n%s\n\n",
              o.layers, o.T, o.steps, cpu::describe_dispatch().line().c_str());
  std::printf("%-3s %5s | %9s %7s | %12s %7s | %12s | %11s\n", "cp", "ranks", "step ms", "ratio", "act MiB/rank",
              "ratio", "peak RSS MiB", "max |dloss|");
  std::fflush(stdout);
  double base_ms = 0, base_act = 0;
  std::vector<double> base_losses;
  for (int cp : {1, 2}) {
    const std::string line = run_for_json(
        mpirun_prefix(cp, 1) +
        strprintf("'%s' bench cp-child --cp %d --T %d --steps %d --layers %d 2>&1", self_exe().c_str(), cp, o.T,
                  o.steps, o.layers));
    LOOM_USER_CHECK(!line.empty(), "bench cp: the run with cp = %d failed", cp);
    const double ms = json_number(line, "step_ms"), act = json_number(line, "act_mb");
    std::vector<double> losses;
    for (int s = 0; s < o.steps + 1; s++) losses.push_back(json_number(line, strprintf("loss%d", s).c_str()));
    if (cp == 1) base_ms = ms, base_act = act, base_losses = losses;
    double worst = 0;
    for (size_t s = 0; s < losses.size(); s++) worst = std::max(worst, std::abs(losses[s] - base_losses[s]));
    std::printf("%-3d %5d | %9.1f %6.2fx | %12.1f %6.2fx | %12.0f | %11.2e\n", cp, cp, ms, ms / base_ms, act,
                act / base_act, json_number(line, "rss_mb"), worst);
    std::fflush(stdout);
  }
  std::printf("\nstep ms      = mean step time after the first (ratio against cp = 1, this invocation)\n"
              "act MiB/rank = the activations each rank planned (every block's stored tensors and work space; with\n"
              "               cp also the ring's fp32 key/value and gradient blocks, one set for all blocks)\n"
              "max |dloss|  = largest difference between the step losses of the two runs (same data, seed)\n");
  return 0;
}

int cmd_bench_cp_child(const Args& args, MpiRuntime& mpi) {
  const Options o = parse(args);
  LOOM_USER_CHECK(mpi.world_size() == o.cp, "bench cp-child: run with -np %d", o.cp);
  const RunConfig cfg = load_run_config(
      "", {"model.vocab_size=256", "model.n_layer=" + std::to_string(o.layers), "model.d_model=128", "model.n_head=4",
           "model.seq_len=" + std::to_string(o.T), "model.attention=\"tiled\"", "train.batch_size=1",
           "train.micro_batch_size=1", "train.steps=" + std::to_string(o.steps + 1), "train.warmup_steps=2",
           "train.eval_every=0", "train.log_every=1000", "train.sample_tokens=0", "train.run_dir=\"\"",
           "runtime.threads=1", "parallel.cp=" + std::to_string(o.cp), "data.format=\"bytes\"",
           "data.path=\"" + project_root() + "/data/sample/kjv.txt\""});
  auto ctx = ParallelContext::create_mpi(ParallelGrid::for_world(o.cp, 1, 1, 1, "tp-dp-pp", o.cp), MpiOptions{600});
  const TrainResult r = train(cfg, *ctx, nullptr);
  if (mpi.world_rank() == 0) {
    std::printf("{\"step_ms\": %.2f, \"act_mb\": %.3f, \"rss_mb\": %.1f", r.step_ms,
                double(r.activation_bytes) / (1 << 20), r.peak_rss_bytes / (1 << 20));
    for (size_t s = 0; s < r.train_losses.size(); s++) std::printf(", \"loss%zu\": %.7f", s, r.train_losses[s]);
    std::printf("}\n");
  }
  return 0;
}

}  // namespace loom::cli
