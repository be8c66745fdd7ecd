// `loom bench pp`: pipeline parallelism with pp = 2 stages on the two cores
// (one rank and one thread per stage), on a model whose stages are balanced
// (8 blocks of d_model 384, T 256, a 256-token vocabulary so the head costs
// little), for every schedule (GPipe, 1F1B, interleaved, zero-bubble ZB-H1 and ZB-V)
// and m micro-batches of one sequence: the measured bubble per stage beside
// the planner's simulation of the same action lists with the measured pass
// times and beside (pp - 1) / (v m + pp - 1), the largest stage bubble
// against 1F1B's at the same m, the activation sets a stage held at once and
// the activation memory it planned (GPipe: m, 1F1B: pp - stage, ZB-H1: pp,
// ZB-V: 2 pp (micro-batch, chunk) pairs of half the layers),
// and tokens/s. Each row is one `mpirun` of `loom bench pp-child`, which runs
// the real training loop.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "config/run_config.h"
#include "core/check.h"
#include "kernels/cpu/isa.h"
#include "parallel/grid/parallel_context.h"
#include "parallel/pp/pipeline_plan.h"
#include "parallel/pp/schedule.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

struct Options {
  std::vector<int> m = {1, 2, 4, 8, 16};
  int steps = 4;
  std::string schedule = "1f1b";  // child only
  int v = 1;                       // child only
};

int int_option(const std::string& s, const char* what, int min) { return cli::int_option(s, "bench pp", what, min, 1024); }

Options parse(const Args& args) {
  Options o;
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench pp: %s needs a value", args[i].c_str());
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--steps") o.steps = int_option(value(), "--steps", 2);
    else if (a == "--m") {
      o.m.clear();
      std::stringstream list(value());
      for (std::string x; std::getline(list, x, ',');) o.m.push_back(int_option(x, "--m", 1));
    } else if (a == "--schedule") o.schedule = value();
    else if (a == "--v") o.v = int_option(value(), "--v", 1);
    else throw UserError(strprintf("bench pp: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  LOOM_USER_CHECK(!o.m.empty(), "bench pp: nothing to run");
  return o;
}

}  // namespace

int cmd_bench_pp(const Args& args) {
  const Options o = parse(args);
  std::printf("loom bench pp: pp = 2 (1 rank x 1 thread per stage), 8 blocks d_model 384 T 256 vocab 256, micro-batch "
              "1 sequence;\n%d timed steps after 1 warm-up\n%s\n\n",
              o.steps, cpu::describe_dispatch().line().c_str());
  std::printf("%-11s %2s %3s | %8s %8s | %7s %7s | %7s | %7s | %9s %9s | %11s %11s | %6s\n", "schedule", "v", "m",
              "bubble 0", "bubble 1", "sim 0", "sim 1", "theory", "vs 1f1b", "in-flight", "(bound)", "act MiB st0",
              "act MiB st1", "tok/s");
  std::fflush(stdout);
  struct Row {
    const char* schedule;
    int v;
  };
  std::map<int, double> one_f_one_b;  // m -> 1F1B's largest stage bubble
  for (const Row& row : {Row{"gpipe", 1}, Row{"1f1b", 1}, Row{"interleaved", 2}, Row{"zb-h1", 1}, Row{"zb-v", 2}}) {
    for (int m : o.m) {
      if (std::string(row.schedule) == "interleaved" && m % 2 != 0) continue;  // needs m % pp == 0
      if (std::string(row.schedule).rfind("zb-", 0) == 0 && m < 2) continue;  // zero-bubble: m >= pp
      std::string line = run_for_json(
          mpirun_prefix(2, 1) + strprintf("'%s' bench pp-child --schedule %s --v %d --m %d --steps %d 2>&1",
                                          self_exe().c_str(), row.schedule, row.v, m, o.steps));
      LOOM_USER_CHECK(!line.empty(), "bench pp: the run %s v=%d m=%d failed", row.schedule, row.v, m);
      const double theory = 1.0 / (row.v * m + 1);  // (pp - 1) / (v m + pp - 1) at pp = 2
      const double worst = std::max(json_number(line, "bubble0"), json_number(line, "bubble1"));
      if (std::string(row.schedule) == "1f1b") one_f_one_b[m] = worst;
      const std::string ratio =
          one_f_one_b.count(m) && one_f_one_b[m] > 0 ? strprintf("%6.2fx", worst / one_f_one_b[m]) : "     - ";
      std::printf("%-11s %2d %3d | %7.1f%% %7.1f%% | %6.1f%% %6.1f%% | %6.1f%% | %7s | %4.0f %4.0f %4.0f %4.0f | %11.1f "
                  "%11.1f | %6.0f\n",
                  row.schedule, row.v, m, 100 * json_number(line, "bubble0"), 100 * json_number(line, "bubble1"),
                  100 * json_number(line, "sim0"), 100 * json_number(line, "sim1"), 100 * theory, ratio.c_str(),
                  json_number(line, "inflight0"), json_number(line, "inflight1"), json_number(line, "bound0"),
                  json_number(line, "bound1"), json_number(line, "act0_mb"), json_number(line, "act1_mb"),
                  json_number(line, "tokens_per_s"));
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nbubble     = per stage, the share of the pipeline phase (step start to its last backward) the stage did not\n"
      "             compute; sim = the planner's simulation of the same action lists with the measured mean pass\n"
      "             times (no message costs); theory = (pp - 1) / (v m + pp - 1), 1F1B / GPipe's\n"
      "vs 1f1b    = the largest stage bubble against 1F1B's at the same m (measured in this invocation)\n"
      "in-flight  = most micro-batch activation sets each stage held at once (stage 0, stage 1), then the\n"
      "             schedule's bound (GPipe m, 1F1B pp - stage, ZB-H1 pp until the weight pass; interleaved\n"
      "             and ZB-V count (micro-batch, chunk) pairs, ZB-V at most 2 pp)\n"
      "act MiB    = activation memory each stage planned: the bound x one micro-batch's activations (ZB-H1's\n"
      "             weight pass keeps its operands in buffers its input pass is done with: no extra memory)\n");
  return 0;
}

int cmd_bench_pp_child(const Args& args, MpiRuntime& mpi) {
  const Options o = parse(args);
  LOOM_USER_CHECK(mpi.world_size() == 2, "bench pp-child: run with -np 2");
  const int m = o.m.at(0);
  RunConfig cfg = load_run_config(
      "", {"model.vocab_size=256", "model.n_layer=8", "model.d_model=384", "model.n_head=6", "model.seq_len=256",
           "train.batch_size=" + std::to_string(m), "train.micro_batch_size=1",
           "train.steps=" + std::to_string(o.steps + 1), "train.warmup_steps=2", "train.eval_every=0",
           "train.log_every=1000", "runtime.threads=1", "parallel.pp=2", "parallel.schedule=\"" + o.schedule + "\"",
           "parallel.virtual_stages=" + std::to_string(o.v), "data.format=\"bytes\"",
           "data.path=\"" + project_root() + "/data/sample/kjv.txt\""});
  auto ctx = ParallelContext::create_mpi(ParallelGrid::for_world(2, 1, 1, 2), MpiOptions{600});
  TrainResult r = train(cfg, *ctx, nullptr);
  const int stage = ctx->coord().pp;
  const pp::ScheduleKind kind = pp::parse_schedule_kind(o.schedule);
  // Per stage: peak in flight, its bound, activation MiB.
  std::vector<float> per_stage(6, 0.f);
  per_stage[size_t(stage)] = float(r.peak_in_flight);
  per_stage[size_t(2 + stage)] = float(pp::max_in_flight(kind, 2, m, o.v, stage));
  per_stage[size_t(4 + stage)] = float(double(r.activation_bytes) / (1 << 20));
  ctx->world().all_reduce(per_stage.data(), per_stage.size(), DType::f32, ReduceOp::Sum);
  if (mpi.world_rank() == 0)
    std::printf("{\"bubble0\": %.4f, \"bubble1\": %.4f, \"sim0\": %.4f, \"sim1\": %.4f, \"inflight0\": %.0f, "
                "\"inflight1\": %.0f, \"bound0\": %.0f, \"bound1\": %.0f, \"act0_mb\": %.2f, \"act1_mb\": %.2f, "
                "\"tokens_per_s\": %.1f}\n",
                r.bubble.at(0), r.bubble.at(1), r.simulated_bubble.at(0), r.simulated_bubble.at(1), per_stage[0], per_stage[1], per_stage[2], per_stage[3], per_stage[4],
                per_stage[5], r.tokens_per_s);
  return 0;
}

}  // namespace loom::cli
