// `loom bench scaling`: weak scaling of data parallelism on the "small"
// shape (V=4096 L=6 C=384 H=6 T=256), the same micro-batch on every rank:
// 1 rank x 1 thread against N ranks x 1 thread for each ZeRO stage.
//
// Reports efficiency = tokens/s(N) / (N x tokens/s(1)), the share of
// gradient-reduction time that overlapped backward and the wait after it
// (from the reducer's timers), and per-rank peak RSS, AdamW state and the
// gradient memory a rank keeps. Each configuration is one `mpirun` of
// `loom bench scaling-child`, which runs the real training loop (loom::train)
// on the bundled text and prints one JSON line from rank 0.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "comm/progress_engine.h"
#include "config/run_config.h"
#include "core/check.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

struct Options {
  int ranks = 2;
  std::vector<int> zero = {0, 1, 2};
  int steps = 8;
  int micro_batch = 4;
  double bucket_mb = 4;
  int repeat = 1;
  std::vector<std::string> layouts = {"dp"};  // how the N ranks split the work: dp, tp or pp
  // The progress engine (runtime.progress_thread) in the N-rank runs: on, off.
  std::vector<std::string> progress = {"off"};
  int poll_us = 50;  // runtime.progress_poll_us
};

int positive_int(const std::string& s, const char* what, int min = 1) {
  return int_option(s, "bench scaling", what, min, (1 << 20) - 1);
}

Options parse(const Args& args) {
  Options o;
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench scaling: %s needs a value", args[i].c_str());
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--ranks") o.ranks = positive_int(value(), "--ranks", 2);
    else if (a == "--steps") o.steps = positive_int(value(), "--steps", 2);
    else if (a == "--micro-batch") o.micro_batch = positive_int(value(), "--micro-batch");
    else if (a == "--repeat") o.repeat = positive_int(value(), "--repeat");
    else if (a == "--poll-us") o.poll_us = positive_int(value(), "--poll-us");
    else if (a == "--bucket-mb") {
      std::string text = value();
      char* end = nullptr;
      o.bucket_mb = std::strtod(text.c_str(), &end);
      LOOM_USER_CHECK(!text.empty() && *end == 0 && o.bucket_mb > 0 && o.bucket_mb <= 65536,
                      "bench scaling: --bucket-mb must be a number in (0, 65536], got '%s'", text.c_str());
    } else if (a == "--layouts" || a == "--layout") {
      o.layouts.clear();
      std::stringstream list(value());
      for (std::string l; std::getline(list, l, ',');) {
        LOOM_USER_CHECK(l == "dp" || l == "tp" || l == "pp" || l == "alone",
                        "bench scaling: --layouts takes dp, tp, pp, alone; got '%s'", l.c_str());
        o.layouts.push_back(l);
      }
    } else if (a == "--progress") {
      o.progress.clear();
      std::stringstream list(value());
      for (std::string p; std::getline(list, p, ',');) {
        LOOM_USER_CHECK(p == "on" || p == "off", "bench scaling: --progress takes on, off; got '%s'", p.c_str());
        o.progress.push_back(p);
      }
      LOOM_USER_CHECK(!o.progress.empty(), "bench scaling: --progress needs on, off or both");
    } else if (a == "--zero") {
      o.zero.clear();
      std::stringstream list(value());
      for (std::string z; std::getline(list, z, ',');) o.zero.push_back(positive_int(z, "--zero", 0));
      for (int z : o.zero) LOOM_USER_CHECK(z <= 3, "bench scaling: --zero takes stages 0, 1, 2, 3");
    } else {
      throw UserError(strprintf("bench scaling: unknown option '%s' (try loom bench --help)", a.c_str()));
    }
  }
  LOOM_USER_CHECK(!o.zero.empty(), "bench scaling: nothing to run");
  return o;
}

struct Row {
  std::string layout = "dp", progress = "on";
  int ranks = 0, zero = 0;
  double tp_comm_ms = 0, gather_ms = 0, bubble = 0;
  double tokens_per_s = 0, step_ms = 0, overlap = 0, wait_ms = 0, tail_ms = 0, calls_ms = 0, optimizer_ms = 0;
  double buckets = 0;
  double rss_mb = 0, state_mb = 0, grad_mb = 0, param_mb = 0;
  double model_state_mb() const { return param_mb + grad_mb + state_mb; }
};

Row run_config(const Options& o, int ranks, int zero, const std::string& layout = "dp",
               const std::string& progress = "on") {
  std::string cmd = mpirun_prefix(ranks, 1) +
                    strprintf("'%s' bench scaling-child --zero %d --steps %d --micro-batch %d --bucket-mb %g --layouts "
                              "%s --progress %s --poll-us %d 2>&1",
                              self_exe().c_str(), zero, o.steps, o.micro_batch, o.bucket_mb, layout.c_str(),
                              progress.c_str(), o.poll_us);
  std::string line = run_for_json(cmd);
  LOOM_USER_CHECK(!line.empty(), "bench scaling: the run with %d ranks, ZeRO-%d failed", ranks, zero);
  Row r;
  r.layout = layout, r.ranks = ranks, r.zero = zero, r.progress = progress;
  r.tp_comm_ms = json_number(line, "tp_comm_ms");
  r.gather_ms = json_number(line, "gather_ms");
  r.bubble = json_number(line, "bubble");
  r.tokens_per_s = json_number(line, "tokens_per_s");
  r.step_ms = json_number(line, "step_ms");
  r.overlap = json_number(line, "overlap");
  r.calls_ms = json_number(line, "calls_ms");
  r.optimizer_ms = json_number(line, "optimizer_ms");
  r.wait_ms = json_number(line, "wait_ms");
  r.tail_ms = json_number(line, "tail_ms");
  r.buckets = json_number(line, "buckets");
  r.rss_mb = json_number(line, "peak_rss_mb");
  r.state_mb = json_number(line, "adamw_mb");
  r.grad_mb = json_number(line, "grad_mb");
  r.param_mb = json_number(line, "param_mb");
  return r;
}

// The run with the median tokens/s.
Row median(std::vector<Row> runs) {
  std::sort(runs.begin(), runs.end(), [](const Row& a, const Row& b) { return a.tokens_per_s < b.tokens_per_s; });
  return runs[runs.size() / 2];
}

}  // namespace

int cmd_bench_scaling(const Args& args) {
  const Options o = parse(args);
  std::printf("loom bench scaling: small shape (V=4096 L=6 C=384 H=6 T=256), micro-batch %d per rank, 1 thread per "
              "rank,\n%d timed steps after 1 warm-up, buckets of %g MiB; median tokens/s of %d run(s) per row\n\n",
              o.micro_batch, o.steps, o.bucket_mb, o.repeat);
  std::printf("%6s %5s %4s %6s | %7s %8s %10s %8s | %7s %7s %8s %8s %8s %8s %9s %8s %7s | %12s %9s %9s %10s %11s\n",
              "layout", "ranks", "zero", "thread", "tok/s", "step ms", "efficiency", "vs alone", "buckets", "overlap",
              "wait ms", "tail ms", "calls ms", "tp ms", "gather ms",
              "optim ms", "bubble", "peak RSS MiB", "AdamW MiB", "grads MiB", "params MiB", "state MiB");
  std::fflush(stdout);
  // One row per (layout, ZeRO stage): ZeRO stages apply to data parallelism.
  // And per progress mode (the progress thread on or off in the N-rank runs).
  struct Config {
    std::string layout;
    int zero = 0;
    std::string progress;
  };
  std::vector<Config> configs;
  for (const std::string& layout : o.layouts) {
    if (layout == "alone") continue;  // the ceiling row below runs in any case
    for (const std::string& p : o.progress) {
      if (layout == "dp")
        for (int z : o.zero) configs.push_back({layout, z, p});
      else
        configs.push_back({layout, 0, p});
    }
  }
  std::vector<Row> single, alone;
  std::vector<std::vector<Row>> runs(configs.size());
  for (int rep = 0; rep < o.repeat; rep++) {  // interleaved, so that a noisy minute hits every row alike
    single.push_back(run_config(o, 1, 0));
    alone.push_back(run_config(o, o.ranks, 0, "alone"));
    for (size_t c = 0; c < configs.size(); c++)
      runs[c].push_back(run_config(o, o.ranks, configs[c].zero, configs[c].layout, configs[c].progress));
  }
  const Row base = median(single), ceiling = median(alone);
  const double ceiling_efficiency = ceiling.tokens_per_s / (o.ranks * base.tokens_per_s);
  auto print = [&](const Row& r, double efficiency) {
    const bool reduces = r.ranks > 1 && r.layout == "dp", together = r.ranks > 1 && r.layout != "alone";
    std::printf("%6s %5d %4d %6s | %7.0f %8.1f %10s %8s | %7.0f %7s %8.1f %8.1f %8.1f %8.1f %9.1f %8.1f %6.1f%% | %12.0f %9.1f %9.1f "
                "%10.1f %11.1f\n",
                r.ranks > 1 ? r.layout.c_str() : "-", r.ranks, r.zero, together ? r.progress.c_str() : "-",
                r.tokens_per_s, r.step_ms, efficiency < 0 ? "-" : strprintf("%.3f", efficiency).c_str(),
                together ? strprintf("%.3f", efficiency / ceiling_efficiency).c_str() : "-", r.buckets,
                reduces ? strprintf("%.0f%%", 100 * r.overlap).c_str() : "-", r.wait_ms, r.tail_ms, r.calls_ms, r.tp_comm_ms, r.gather_ms,
                r.optimizer_ms, 100 * std::max(0.0, r.bubble), r.rss_mb, r.state_mb, r.grad_mb, r.param_mb,
                r.model_state_mb());
  };
  print(base, -1);
  print(ceiling, ceiling_efficiency);
  for (size_t c = 0; c < configs.size(); c++) {
    Row r = median(runs[c]);
    print(r, r.tokens_per_s / (o.ranks * base.tokens_per_s));
  }
  std::printf(
      "\nefficiency = tokens/s(%d ranks) / (%d x tokens/s(1 rank))\n"
      "alone      = the machine's ceiling: every rank trains its own one-rank job at the same time (shared cores,\n"
      "             caches and memory bandwidth, nothing exchanged); vs alone = efficiency / that ceiling\n"
      "overlap    = share of gradient-reduction time (some bucket between its start and its completion) during\n"
      "             which backward computed: before backward ended and outside the calls that start and poll\n"
      "             reductions (OpenMPI moves and adds the data inside them, on the rank's own core)\n"
      "wait ms    = per step, after backward, until every bucket was reduced (rank 0)\n"
      "tail ms    = per step, the least wait over the ranks: the reduction's own tail after the last rank's\n"
      "             backward; wait - tail was spent waiting for a rank whose backward ended later\n"
      "calls ms   = per step, during backward, inside those calls\n"
      "thread     = the progress thread (runtime.progress_thread): on, it completes the reductions while\n"
      "             backward computes and the calls above only start them and read a flag\n"
      "optim ms   = per step, AdamW (and under ZeRO the all-gather of the updated parameters)\n"
      "tp ms      = per step, waiting on tensor-parallel collectives (tp layout: ranks split each layer)\n"
      "gather ms  = per step, ZeRO-3: waiting for parameter gathers (each segment's starts while the one before\n"
      "             computes)\n"
      "bubble     = pipeline idle share of the worst stage (pp layout: ranks are stages, m = ranks micro-batches)\n"
      "peak RSS   = the largest over ranks; AdamW, grads = per rank, grads after a step (ZeRO-2, 3: the shard)\n"
      "params     = per rank: the fp32 parameters (ZeRO-3: the master shard plus the most gathered at once)\n"
      "state      = params + grads + AdamW: the model state a rank holds\n",
      o.ranks, o.ranks);
  return 0;
}

int cmd_bench_scaling_child(const Args& args, MpiRuntime& mpi) {
  const Options o = parse(args);
  const int zero = o.zero.at(0), world = mpi.world_size();
  const std::string layout = o.layouts.at(0);
  const bool alone = layout == "alone";
  const int tp = layout == "tp" ? world : 1, pp = layout == "pp" ? world : 1;
  RunConfig cfg = load_run_config(
      "", {"model.vocab_size=4096", "model.n_layer=6", "model.d_model=384", "model.n_head=6", "model.seq_len=256",
           "train.batch_size=" + std::to_string(o.micro_batch * (alone ? 1 : world)),
           "train.steps=" + std::to_string(o.steps + 1),
           "train.warmup_steps=2", "train.eval_every=0", "train.log_every=1000", "runtime.threads=1",
           "parallel.zero=" + std::to_string(zero), strprintf("parallel.bucket_mb=%g", o.bucket_mb),
           "parallel.tp=" + std::to_string(tp), "parallel.pp=" + std::to_string(pp),
           // pp: the same per-rank work as m = ranks micro-batches of micro_batch rows
           "train.micro_batch_size=" + std::to_string(pp > 1 || tp > 1 ? o.micro_batch : 0),
           "data.format=\"bytes\"", "data.path=\"" + project_root() + "/data/sample/kjv.txt\""});
  ProgressEngine* engine = o.progress.at(0) == "on" && world > 1 ? mpi.progress_engine(o.poll_us) : nullptr;
  auto ctx = ParallelContext::create_mpi(ParallelGrid::for_world(world, 0, tp, pp), MpiOptions{600, engine});
  TrainResult r;
  double step_ms = 0;
  if (alone) {
    // The machine's own ceiling: every rank trains its own one-rank job at the
    // same time, so the ranks share cores, caches and memory bandwidth as the
    // dp runs do, but exchange nothing. Tokens/s summed, step time the mean.
    auto single = ParallelContext::create_single();
    ctx->world().barrier();
    r = train(cfg, *single, nullptr);
    float figures[2] = {float(r.tokens_per_s), float(r.step_ms)};
    ctx->world().all_reduce(figures, 2, DType::f32, ReduceOp::Sum);
    r.tokens_per_s = figures[0], step_ms = figures[1] / world;
  } else {
    r = train(cfg, *ctx, nullptr);
    step_ms = 1e3 * cfg.train.batch_size * cfg.model.seq_len / r.tokens_per_s;
  }
  float bubble = 0;
  for (float b : r.bubble) bubble = std::max(bubble, b);
  float rss = float(peak_rss_mib());
  ctx->world().all_reduce(&rss, 1, DType::f32, ReduceOp::Max);
  if (mpi.world_rank() == 0)
    std::printf("{\"ranks\": %d, \"zero\": %d, \"tokens_per_s\": %.1f, \"step_ms\": %.1f, \"overlap\": %.4f, "
                "\"wait_ms\": %.2f, \"tail_ms\": %.2f, \"calls_ms\": %.2f, \"optimizer_ms\": %.2f, \"buckets\": %d, "
                "\"peak_rss_mb\": %.1f, \"adamw_mb\": %.2f, \"grad_mb\": %.2f, \"param_mb\": %.2f, "
                "\"tp_comm_ms\": %.2f, \"gather_ms\": %.2f, \"bubble\": %.4f}\n",
                world, zero, r.tokens_per_s, step_ms, r.reduce_overlap, r.reduce_wait_ms, r.reduce_tail_ms,
                r.reduce_calls_ms, r.optimizer_ms, r.buckets, rss, double(r.optimizer_state_bytes) / (1 << 20),
                double(r.grad_bytes) / (1 << 20), double(r.param_bytes) / (1 << 20), r.tp_comm_ms, r.gather_wait_ms,
                bubble);
  return 0;
}

}  // namespace loom::cli
