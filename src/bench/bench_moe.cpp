// `loom bench moe`: a mixture of experts against the dense model of the same
// active FLOPs, on one rank.
//   step:    whole training steps (forward, backward, AdamW) of a small
//            LLaMA-style MoE (--experts E, --top-k k, experts of width
//            --moe-ffn F in every block) and of the dense model whose MLP
//            is k x F wide, alternating, on the same random batch: time
//            per token and its ratio, and the AdamW share (the MoE's
//            optimizer walks E / k times the dense MLP's parameters)
//   balance: --balance-steps steps of training on the bundled text with
//            model.moe_balance none, aux_free (--bias-rate) and sequence
//            (--aux-coef): the busiest and idlest expert's load over the
//            mean in the worst layer, median of the last 10 steps
//   ep:      (--ep 1,2,4, under mpirun: each a divisor of the world) the MoE's
//            step with its experts spread over ep ranks of a dp = world
//            run, one ep after the other: step time against ep 1, the
//            slowest rank's wait on the token all-to-alls and its share of
//            the step (the exchange blocks: none of it is hidden), the
//            busiest rank's received pairs over the mean, the experts'
//            state per rank against ep 1 (falls as 1/ep without ZeRO).
//            (The planner against measured ep runs: loom bench cluster --moe,
//            whose compute rate is calibrated on its own runs.)
// --precision bf16 | fp16 runs the step table in 16-bit compute.
// Medians of --steps alternating runs; ratios against this invocation's
// dense run.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "core/check.h"
#include "kernels/cpu/grad_norm.h"
#include "optim/grad_clip.h"
#include "kernels/cpu/isa.h"
#include "parallel/grid/parallel_context.h"
#include "train/replica.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

struct Options {
  int experts = 8, top_k = 2, moe_ffn = 256, d_model = 256, layers = 4, seq = 256, batch = 8, steps = 8;
  int balance_steps = 150;
  double bias_rate = 0.01, aux_coef = 0.01;
  std::string data = "data/sample/kjv.txt";
  std::string precision = "fp32";
  std::vector<int> ep;  // --ep: the expert-parallel sizes to run (under mpirun)
  int shared_ffn = 0;   // --shared-ffn: a shared expert's width (the exchange overlaps it)
};

Options parse(const Args& args) {
  Options o;
  const char* cmd = "bench moe";
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench moe: %s needs a value", args[i].c_str());
      return args[++i];
    };
    auto real = [&](const char* flag) {
      const std::string v = value();
      try {
        size_t used = 0;
        const double x = std::stod(v, &used);
        if (used == v.size() && x >= 0 && x < 1e6) return x;
      } catch (...) {
      }
      throw UserError(strprintf("bench moe: %s expects a number >= 0, got '%s'", flag, v.c_str()));
    };
    const std::string& a = args[i];
    if (a == "--experts") o.experts = int_option(value(), cmd, "--experts", 2, 256);
    else if (a == "--top-k") o.top_k = int_option(value(), cmd, "--top-k", 1, 64);
    else if (a == "--moe-ffn") o.moe_ffn = int_option(value(), cmd, "--moe-ffn", 8, 1 << 16);
    else if (a == "--d-model") o.d_model = int_option(value(), cmd, "--d-model", 32, 1 << 14);
    else if (a == "--layers") o.layers = int_option(value(), cmd, "--layers", 1, 256);
    else if (a == "--seq") o.seq = int_option(value(), cmd, "--seq", 8, 1 << 16);
    else if (a == "--batch") o.batch = int_option(value(), cmd, "--batch", 1, 4096);
    else if (a == "--steps") o.steps = int_option(value(), cmd, "--steps", 1, 1000);
    else if (a == "--balance-steps") o.balance_steps = int_option(value(), cmd, "--balance-steps", 0, 100000);
    else if (a == "--bias-rate") o.bias_rate = real("--bias-rate");
    else if (a == "--aux-coef") o.aux_coef = real("--aux-coef");
    else if (a == "--data") o.data = value();
    else if (a == "--shared-ffn") o.shared_ffn = int_option(value(), cmd, "--shared-ffn", 0, 1 << 16);
    else if (a == "--ep") {
      o.ep.clear();
      const std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        o.ep.push_back(int_option(list.substr(at, comma - at), cmd, "--ep", 1, 4096));
        at = comma + 1;
      }
    }
    else if (a == "--precision") {
      o.precision = value();
      LOOM_USER_CHECK(o.precision == "fp32" || o.precision == "bf16" || o.precision == "fp16",
                      "bench moe: --precision must be fp32, bf16 or fp16 (got '%s')", o.precision.c_str());
    }
    else throw UserError(strprintf("bench moe: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  LOOM_USER_CHECK(o.top_k <= o.experts, "bench moe: --top-k %d is more than --experts %d", o.top_k, o.experts);
  return o;
}

// LLaMA of the options' sizes; experts > 0: the mixtral family, else a
// dense MLP of width ffn.
ModelConfig model(const Options& o, int experts, int ffn) {
  ModelConfig m{512, o.layers, 4, o.d_model, o.seq};
  m.family = ModelFamily::llama, m.n_kv_head = 2, m.ffn_hidden = ffn;
  if (experts > 0) m.n_experts = experts, m.top_k = o.top_k, m.moe_ffn_hidden = o.moe_ffn;
  m.validate();
  return m;
}

struct Timed {
  std::vector<double> step_s, adam_s;
  size_t param_mib = 0;
};

// One step of a replica: forward and backward, the reduction, AdamW.
void step(Replica& r, const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int T, Timed& t) {
  const auto t0 = std::chrono::steady_clock::now();
  r.forward_backward(tokens, targets, T);
  const double norm = r.reduce();
  const auto t1 = std::chrono::steady_clock::now();
  r.update(1e-4f, clip_scale(norm, 1.0f));
  const auto t2 = std::chrono::steady_clock::now();
  t.step_s.push_back(std::chrono::duration<double>(t2 - t0).count());
  t.adam_s.push_back(std::chrono::duration<double>(t2 - t1).count());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench_step(const Options& o) {
  const ModelConfig moe = model(o, o.experts, 0), dense = model(o, 0, o.top_k * o.moe_ffn);
  std::printf("step: LLaMA, %d blocks, d_model %d, seq %d, batch %d, vocab 512, %s; MoE: %d experts of width %d, "
              "top %d, aux_free; dense: MLP width %d (the same active FLOPs)\n",
              o.layers, o.d_model, o.seq, o.batch, o.precision.c_str(), o.experts, o.moe_ffn, o.top_k,
              o.top_k * o.moe_ffn);
  auto ctx = ParallelContext::create_single();
  std::vector<std::unique_ptr<Replica>> replicas;
  for (const ModelConfig& m : {dense, moe}) {
    RunConfig cfg;
    cfg.model = m;
    cfg.train.batch_size = o.batch, cfg.train.micro_batch_size = o.batch;
    cfg.precision.compute = o.precision;
    replicas.push_back(std::make_unique<Replica>(cfg, *ctx, o.batch, 1));
    replicas.back()->init_parameters(1234);
  }
  std::vector<int32_t> tokens(size_t(o.batch) * o.seq), targets(tokens.size());
  random_batch(512, &tokens, &targets);
  Timed t[2];
  for (int i = 0; i < 2; i++) step(*replicas[size_t(i)], tokens, targets, o.seq, t[i]);  // warm-up
  t[0] = t[1] = Timed{};
  for (int s = 0; s < o.steps; s++)
    for (int i = 0; i < 2; i++) step(*replicas[size_t(i)], tokens, targets, o.seq, t[i]);
  const double tokens_per_step = double(o.batch) * o.seq, base = median(t[0].step_s) / tokens_per_step;
  std::printf("%-6s | %12s %12s %6s | %9s %6s | %10s\n", "model", "params", "us/token", "ratio", "AdamW ms", "share",
              "flops/tok");
  for (int i = 0; i < 2; i++) {
    const ModelConfig& m = i ? moe : dense;
    const double per_token = median(t[i].step_s) / tokens_per_step, adam = median(t[i].adam_s);
    std::printf("%-6s | %12lld %12.2f %5.2fx | %9.2f %5.1f%% | %10.3g\n", i ? "MoE" : "dense",
                (long long)m.num_parameters(), 1e6 * per_token, per_token / base, 1e3 * adam,
                100 * adam / median(t[i].step_s), m.train_flops_per_token(o.seq));
  }
  const double adam_extra = (median(t[1].adam_s) - median(t[0].adam_s)) / tokens_per_step;
  std::printf("the MoE's extra AdamW time is %.2f us/token, %.0f%% of its extra step time\n", 1e6 * adam_extra,
              100 * adam_extra / std::max(1e-12, median(t[1].step_s) / tokens_per_step - base));
}

void bench_balance(const Options& o) {
  LOOM_USER_CHECK(std::filesystem::is_regular_file(o.data),
                  "bench moe: --data '%s' is not a text file (the balance table trains on it; run from the "
                  "repository root, or pass --data FILE, or --balance-steps 0)",
                  o.data.c_str());
  std::printf("\nbalance: %d steps on %s (bytes), %d experts of width 64, top %d, 4 blocks of d_model 128; the "
              "busiest / idlest expert's pairs over the mean, worst layer, median of the last 10 steps (max E/k = "
              "%.1f: every token chose the same experts)\n",
              o.balance_steps, o.data.c_str(), o.experts, o.top_k, double(o.experts) / o.top_k);
  std::printf("%-34s | %9s %9s | %9s\n", "model.moe_balance", "load max", "load min", "last loss");
  auto ctx = ParallelContext::create_single();
  struct Mode {
    std::string label;
    MoeBalance balance;
  };
  for (const Mode& mode : {Mode{"none", MoeBalance::none},
                           Mode{strprintf("aux_free, moe_bias_rate %g", o.bias_rate), MoeBalance::aux_free},
                           Mode{strprintf("sequence, moe_aux_coef %g", o.aux_coef), MoeBalance::sequence}}) {
    RunConfig cfg;
    cfg.model = ModelConfig{256, 4, 4, 128, 128};
    cfg.model.family = ModelFamily::llama, cfg.model.n_kv_head = 2;
    cfg.model.n_experts = o.experts, cfg.model.top_k = o.top_k, cfg.model.moe_ffn_hidden = 64;
    cfg.model.moe_balance = mode.balance, cfg.model.moe_bias_rate = o.bias_rate, cfg.model.moe_aux_coef = o.aux_coef;
    cfg.data.format = "bytes", cfg.data.path = o.data;
    cfg.train.steps = o.balance_steps, cfg.train.batch_size = 8, cfg.train.lr = 3e-3, cfg.train.warmup_steps = 10;
    cfg.train.eval_every = 0, cfg.train.sample_tokens = 0, cfg.train.run_dir = "", cfg.train.checkpoint_every = 0;
    cfg.runtime.threads = omp_get_max_threads();
    const TrainResult r = train(cfg, *ctx, nullptr);
    std::vector<double> high, low;
    for (size_t i = r.moe_steps.size() - std::min<size_t>(10, r.moe_steps.size()); i < r.moe_steps.size(); i++)
      high.push_back(r.moe_steps[i].load_max), low.push_back(r.moe_steps[i].load_min);
    std::printf("%-34s | %9.2f %9.2f | %9.4f\n", mode.label.c_str(), median(high), median(low),
                double(r.train_losses.back()));
  }
}

// The MoE's step under mpirun with its experts over each ep of o.ep (dp =
// world, one micro-batch of o.batch rows per rank).
void bench_ep(const Options& o, const MpiRuntime& mpi) {
  const int world = mpi.world_size();
  const bool rank0 = mpi.world_rank() == 0;
  for (int ep : o.ep)
    LOOM_USER_CHECK(world % ep == 0 && o.experts % ep == 0,
                    "bench moe: --ep %d must divide the world (%d ranks: mpirun -np N) and --experts (%d)", ep, world,
                    o.experts);
  RunConfig cfg;
  cfg.model = model(o, o.experts, 0);
  cfg.model.moe_shared_ffn = o.shared_ffn;
  cfg.train.batch_size = o.batch * world, cfg.train.micro_batch_size = o.batch;
  cfg.precision.compute = o.precision;
  if (rank0)
    std::printf("ep: %d ranks (dp %d), each a micro-batch of %d x %d tokens; %d experts of width %d, top %d, "
                "d_model %d, %d blocks, %s\n%4s | %9s %6s | %8s %7s %7s | %9s | %12s %7s\n",
                world, world, o.batch, o.seq, o.experts, o.moe_ffn, o.top_k, o.d_model, o.layers, o.precision.c_str(),
                "ep", "step ms", "ratio", "a2a ms", "share", "hid ms", "rank load", "expert MiB", "ratio");
  double base_step = 0, base_experts = 0;
  for (int ep : o.ep) {
    cfg.parallel.ep = ep;
    auto ctx = ParallelContext::create_mpi(ParallelGrid::for_world(world, world, 1, 1, "tp-dp-pp", 1, ep),
                                           MpiOptions{600});
    Replica r(cfg, *ctx, o.batch, 1);
    r.init_parameters(1234);
    std::vector<int32_t> tokens(size_t(o.batch) * o.seq), targets(tokens.size());
    random_batch(512, &tokens, &targets);
    Timed t;
    std::vector<double> a2a, hidden, load;
    for (int s = 0; s < o.steps + 1; s++) {
      step(r, tokens, targets, o.seq, t);
      a2a.push_back(r.router_step().exchange_s), hidden.push_back(r.router_step().hidden_s);
      load.push_back(r.router_step().rank_load_max);
    }
    // The first step warms up; every rank's median, the slowest's reported.
    t.step_s.erase(t.step_s.begin()), a2a.erase(a2a.begin()), load.erase(load.begin()), hidden.erase(hidden.begin());
    double figures[3] = {median(t.step_s), median(a2a), median(hidden)};
    ctx->world().all_reduce(figures, 3, DType::f32, ReduceOp::Max);
    // The experts' state on this rank: parameters, gradients and AdamW moments of the "experts" group
    // (ep 1: the experts' tensors inside the one trained group, counted by their share of it).
    double experts = 0;
    for (const auto& g : r.groups()) {
      const double bytes = double(g->param_bytes() + g->grad_bytes_resident() + g->optimizer_state_bytes());
      if (g->spec().name == "experts") experts += bytes;
      else if (ep == 1 && !g->frozen()) {
        double expert_floats = 0, floats = 0;
        for (const ParamGroup::Member& m : g->members()) {
          const ParamSpec& p = r.layouts()[size_t(m.chunk)].params[size_t(m.tensor)];
          floats += double(p.numel);
          if (is_expert_tensor(p.name)) expert_floats += double(p.numel);
        }
        experts += bytes * expert_floats / std::max(1.0, floats);
      }
    }
    if (ep == o.ep.front()) base_step = figures[0], base_experts = experts;
    if (rank0)
      std::printf("%4d | %9.2f %5.2fx | %8.2f %6.1f%% %6.2f | %9.2f | %12.2f %6.2fx\n", ep,
                  1e3 * figures[0], figures[0] / base_step, 1e3 * figures[1], 100 * figures[1] / figures[0],
                  1e3 * figures[2],
                  median(load), experts / (1 << 20), experts / base_experts);
  }
  if (rank0)
    std::printf("a2a = the slowest rank's wait on the token all-to-alls per step (exposed); hid = their flight "
                "beside the shared expert's work (--shared-ffn; 0 without); rank load = "
                "the busiest rank's received pairs over the mean; expert MiB = the experts' parameters, gradients "
                "and AdamW state on one rank\n");
}

}  // namespace

int cmd_bench_moe_ep(const Args& args, MpiRuntime& mpi) {
  const Options o = parse(args);
  if (mpi.world_rank() == 0)
    std::printf("loom bench moe --ep: %d threads a rank, median of %d steps\n%s\n\n", omp_get_max_threads(), o.steps,
                cpu::describe_dispatch().line().c_str());
  bench_ep(o, mpi);
  return 0;
}

int cmd_bench_moe(const Args& args) {
  const Options o = parse(args);
  std::printf("loom bench moe: %d threads, median of %d alternating steps\n%s\n\n", omp_get_max_threads(), o.steps,
              cpu::describe_dispatch().line().c_str());
  bench_step(o);
  if (o.balance_steps > 0) bench_balance(o);
  std::printf("\nratio = time per token over the dense model's, this invocation; share = AdamW of the step\n");
  return 0;
}

}  // namespace loom::cli
