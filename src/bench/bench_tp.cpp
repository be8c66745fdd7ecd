// `loom bench tp`: tensor parallelism on the "small" shape (V=4096 L=6 C=384
// H=6 T=256) with the same two cores used two ways: 1 rank x 2 threads
// (tp=1) against 2 ranks x 1 thread (tp=2), without and with sequence
// parallelism. Reports tokens/s and its ratio to tp=1, the share of step time
// spent waiting on tensor-parallel communication, and per-rank parameter and
// activation bytes (the memory tensor parallelism divides). Each row is one
// `mpirun` of `loom bench tp-child`, which runs the real training loop on the
// bundled text and prints one JSON line from rank 0.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "config/run_config.h"
#include "core/check.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

struct Options {
  int steps = 6, micro_batch = 4, repeat = 1;
  int tp = 1;                      // child only
  bool sequence_parallel = false;  // child only
};

int int_option(const std::string& s, const char* what, int min) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  LOOM_USER_CHECK(!s.empty() && *end == 0 && v >= min && v < 1 << 20, "bench tp: %s must be an integer >= %d, got '%s'",
                  what, min, s.c_str());
  return int(v);
}

Options parse(const Args& args) {
  Options o;
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench tp: %s needs a value", args[i].c_str());
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--steps") o.steps = int_option(value(), "--steps", 2);
    else if (a == "--micro-batch") o.micro_batch = int_option(value(), "--micro-batch", 1);
    else if (a == "--repeat") o.repeat = int_option(value(), "--repeat", 1);
    else if (a == "--tp") o.tp = int_option(value(), "--tp", 1);
    else if (a == "--sequence-parallel") o.sequence_parallel = true;
    else throw UserError(strprintf("bench tp: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  return o;
}

struct Row {
  int tp = 1;
  bool sp = false;
  double tokens_per_s = 0, step_ms = 0, tp_comm_ms = 0, param_mb = 0, act_mb = 0, rss_mb = 0;
};

Row run_row(const Options& o, int tp, bool sp) {
  std::string cmd = mpirun_prefix(tp, 2 / tp) + strprintf("'%s' bench tp-child --tp %d %s --steps %d --micro-batch %d 2>&1",
                                                          self_exe().c_str(), tp, sp ? "--sequence-parallel" : "",
                                                          o.steps, o.micro_batch);
  std::string line = run_for_json(cmd);
  LOOM_USER_CHECK(!line.empty(), "bench tp: the run with tp=%d%s failed", tp, sp ? " (sequence parallel)" : "");
  Row r{tp, sp};
  r.tokens_per_s = json_number(line, "tokens_per_s");
  r.step_ms = json_number(line, "step_ms");
  r.tp_comm_ms = json_number(line, "tp_comm_ms");
  r.param_mb = json_number(line, "param_mb");
  r.act_mb = json_number(line, "activation_mb");
  r.rss_mb = json_number(line, "peak_rss_mb");
  return r;
}

Row median(std::vector<Row> runs) {
  std::sort(runs.begin(), runs.end(), [](const Row& a, const Row& b) { return a.tokens_per_s < b.tokens_per_s; });
  return runs[runs.size() / 2];
}

}  // namespace

int cmd_bench_tp(const Args& args) {
  const Options o = parse(args);
  std::printf("loom bench tp: small shape (V=4096 L=6 C=384 H=6 T=256), micro-batch %d, 2 cores: tp=1 as 1 rank x 2 "
              "threads,\ntp=2 as 2 ranks x 1 thread; %d timed steps after 1 warm-up; median of %d run(s) per row\n\n",
              o.micro_batch, o.steps, o.repeat);
  std::printf("%3s %4s | %7s %8s %8s | %11s %9s | %14s %16s %12s\n", "tp", "sp", "tok/s", "vs tp=1", "step ms",
              "tp comm ms", "tp comm %", "params MiB/rank", "activations MiB", "peak RSS MiB");
  std::fflush(stdout);
  struct Config {
    int tp;
    bool sp;
  };
  const std::vector<Config> configs = {{1, false}, {2, false}, {2, true}};
  std::vector<std::vector<Row>> runs(configs.size());
  for (int rep = 0; rep < o.repeat; rep++)  // interleaved, so that a noisy minute hits every row alike
    for (size_t c = 0; c < configs.size(); c++) runs[c].push_back(run_row(o, configs[c].tp, configs[c].sp));
  const Row base = median(runs[0]);
  for (size_t c = 0; c < configs.size(); c++) {
    const Row r = median(runs[c]);
    std::printf("%3d %4s | %7.0f %7.2fx %8.1f | %11.1f %8.1f%% | %14.1f %16.1f %12.0f\n", r.tp, r.sp ? "on" : "off",
                r.tokens_per_s, r.tokens_per_s / base.tokens_per_s, r.step_ms, r.tp_comm_ms,
                100 * r.tp_comm_ms / r.step_ms, r.param_mb, r.act_mb, r.rss_mb);
  }
  std::printf(
      "\nvs tp=1       = tokens/s against 1 rank x 2 threads in the same invocation\n"
      "tp comm ms    = per step, waiting on tensor-parallel all-reduce / reduce-scatter / all-gather (not hidden)\n"
      "params        = this rank's parameter buffer: 1/tp of the split matrices and embedding + the replicated norms\n"
      "                and biases (gradients take as much again, AdamW twice as much)\n"
      "activations   = this rank's planned activations for one micro-batch (sequence parallelism splits the\n"
      "                norms' and residuals' rows)\n");
  return 0;
}

int cmd_bench_tp_child(const Args& args, MpiRuntime& mpi) {
  const Options o = parse(args);
  const int world = mpi.world_size();
  LOOM_USER_CHECK(world == o.tp, "bench tp-child: run with -np equal to --tp");
  RunConfig cfg = load_run_config(
      "", {"model.vocab_size=4096", "model.n_layer=6", "model.d_model=384", "model.n_head=6", "model.seq_len=256",
           "train.batch_size=" + std::to_string(o.micro_batch), "train.steps=" + std::to_string(o.steps + 1),
           "train.warmup_steps=2", "train.eval_every=0", "train.log_every=1000", "runtime.threads=0",
           "parallel.tp=" + std::to_string(o.tp),
           std::string("parallel.sequence_parallel=") + (o.sequence_parallel ? "true" : "false"),
           "data.format=\"bytes\"", "data.path=\"" + project_root() + "/data/sample/kjv.txt\""});
  auto ctx = ParallelContext::create_mpi(ParallelGrid::for_world(world, 1, o.tp, 1), MpiOptions{600});
  TrainResult r = train(cfg, *ctx, nullptr);
  float rss = float(peak_rss_mib());
  ctx->world().all_reduce(&rss, 1, DType::f32, ReduceOp::Max);
  if (mpi.world_rank() == 0)
    std::printf("{\"tp\": %d, \"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"tp_comm_ms\": %.2f, \"param_mb\": %.2f, "
                "\"activation_mb\": %.2f, \"peak_rss_mb\": %.1f}\n",
                o.tp, r.tokens_per_s, r.step_ms, r.tp_comm_ms, double(r.param_bytes) / (1 << 20),
                double(r.activation_bytes) / (1 << 20), rss);
  return 0;
}

}  // namespace loom::cli
