#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>

#include "core/check.h"
#include "data/token_source.h"
#include "kernels/cpu/grad_norm.h"
#include "model/gpt.h"
#include "obs/peak_flops.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

namespace loom {

int set_threads(int requested) {
  int n = requested > 0 ? requested : omp_get_num_procs();
  omp_set_num_threads(n);
  return n;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

float evaluate(GPT& model, const TokenSource& data, int batches, int B, RowRange rows, int T,
               const ParallelContext& ctx) {
  std::vector<int32_t> tokens(size_t(rows.size()) * T), targets(tokens.size());
  ValidationIterator it(data, B, T, rows);
  double sum = 0;
  for (int i = 0; i < batches; i++) {
    it.next(tokens.data(), targets.data());
    sum += model.forward(tokens.data(), targets.data(), rows.size(), T);
  }
  float loss = float(sum / batches);
  ctx.dp().all_reduce(&loss, 1, DType::f32, ReduceOp::Avg);
  return loss;
}

}  // namespace

void check_layout(const RunConfig& cfg, const ParallelGrid& grid) {
  LOOM_USER_CHECK(grid.tp() == 1,
                  "parallel.tp = %d: tensor parallelism is not implemented yet (use parallel.tp = 1)", grid.tp());
  LOOM_USER_CHECK(grid.pp() == 1,
                  "parallel.pp = %d: pipeline parallelism is not implemented yet (use parallel.pp = 1)", grid.pp());
  LOOM_USER_CHECK(cfg.train.batch_size % grid.dp() == 0,
                  "config field 'train.batch_size' (%d) must be divisible by the data-parallel size %d",
                  cfg.train.batch_size, grid.dp());
}

TrainResult train(const RunConfig& cfg, const ParallelContext& ctx, FILE* log) {
  cfg.validate();
  check_layout(cfg, ctx.grid());
  if (!ctx.is_logging_rank()) log = nullptr;  // rank 0 logs
  const int B = cfg.train.batch_size, T = cfg.model.seq_len, dp = ctx.grid().dp();
  // This replica's rows of the global batch, which is a function of (seed,
  // step) alone: any dp size trains on the same data.
  const RowRange rows = data_parallel_rows(B, ctx.coord().dp, dp);
  auto data = open_token_source(cfg.data, B, T, cfg.model.vocab_size);  // checks the data before any work
  int threads = set_threads(cfg.runtime.threads > 0 ? cfg.runtime.threads
                                                    : std::max(1, omp_get_num_procs() / ctx.ranks_on_node()));

  GPT model(cfg.model, rows.size(), T);
  model.init_parameters(uint64_t(cfg.train.seed));
  AdamW optimizer(model.layout(), AdamWConfig{cfg.train.beta1, cfg.train.beta2, cfg.train.eps,
                                              cfg.train.weight_decay});
  LrSchedule schedule{cfg.train.lr, cfg.train.min_lr, cfg.train.warmup_steps, cfg.train.steps};

  TrainResult result;
  // Every rank measures at once, so ranks sharing cores see the peak they share.
  ctx.world().barrier();
  float peak = float(measure_peak_gflops(threads));
  ctx.world().all_reduce(&peak, 1, DType::f32, ReduceOp::Sum);
  result.peak_gflops = peak;
  const double flops_per_step = cfg.model.train_flops_per_token(T) * double(B) * T;
  if (log) {
    std::fprintf(log, "layout: %s; this process is rank 0 of %d\n", ctx.grid().describe().c_str(),
                 ctx.grid().world_size());
    std::fprintf(log, "model: GPT-2, %d layers, d_model %d, %d heads, vocab %d, seq_len %d: %.2fM parameters\n",
                 cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head, cfg.model.vocab_size, T,
                 double(cfg.model.num_parameters()) / 1e6);
    std::fprintf(log, "data: %s; global batch %d x %d tokens, %d rows per replica\n", data->describe().c_str(), B,
                 T, rows.size());
    std::fprintf(log, "memory per rank: parameters+gradients %.1f MiB, AdamW state %.1f MiB, activations %.1f MiB\n",
                 2.0 * double(model.params_size()) * 4 / (1 << 20), double(optimizer.state_bytes()) / (1 << 20),
                 double(model.activation_bytes()) / (1 << 20));
    std::fprintf(log, "threads: %d per rank, measured fp32 peak %.0f GFLOP/s over all ranks\n", threads,
                 result.peak_gflops);
    std::fflush(log);
  }

  std::vector<int32_t> tokens(size_t(rows.size()) * T), targets(tokens.size());
  double timed_seconds = 0, window_seconds = 0;
  int timed_steps = 0, window_steps = 0;
  for (int step = 0; step < cfg.train.steps; step++) {
    auto t0 = Clock::now();
    data->train_batch(uint64_t(cfg.train.seed), step, B, T, rows, tokens.data(), targets.data());
    model.zero_grads();
    float loss = model.forward_backward(tokens.data(), targets.data(), rows.size(), T);
    if (dp > 1) {
      // Each replica's gradient is of its own mean loss; their average is the
      // gradient of the global mean (equal rows per replica).
      ctx.dp().all_reduce(model.grads(), size_t(model.params_size()), DType::f32, ReduceOp::Avg);
      ctx.dp().all_reduce(&loss, 1, DType::f32, ReduceOp::Avg);
    }
    double norm = global_grad_norm(model.layout(), model.grads());
    float clip = cpu::clip_scale(norm, cfg.train.grad_clip);
    float lr = schedule.at(step);
    optimizer.step(model.params(), model.grads(), lr, clip);
    double dt = seconds_since(t0);
    result.train_losses.push_back(loss);
    if (step > 0) timed_seconds += dt, timed_steps++;  // the first step warms up caches and primitives
    window_seconds += dt, window_steps++;

    bool last = step + 1 == cfg.train.steps;
    if (log && (step % cfg.train.log_every == 0 || last)) {
      double tok_s = double(B) * T * window_steps / window_seconds;
      double gflops = flops_per_step * window_steps / window_seconds * 1e-9;
      std::fprintf(log,
                   "step %5d/%d | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | %.1f GFLOP/s (%.1f%% of "
                   "peak)\n",
                   step + 1, cfg.train.steps, loss, lr, norm, tok_s, gflops, 100.0 * gflops / result.peak_gflops);
      std::fflush(log);
    }
    if (step % cfg.train.log_every == 0 || last) window_seconds = 0, window_steps = 0;
    bool eval_due = cfg.train.eval_every > 0 && ((step + 1) % cfg.train.eval_every == 0 || last);
    if (eval_due) {
      float val = evaluate(model, *data, cfg.train.eval_batches, B, rows, T, ctx);
      result.val_losses.push_back(val);
      if (log) std::fprintf(log, "step %5d/%d | val loss %.4f\n", step + 1, cfg.train.steps, val), std::fflush(log);
    }
  }
  if (timed_steps > 0) {
    result.tokens_per_s = double(B) * T * timed_steps / timed_seconds;
    result.gflops = flops_per_step * timed_steps / timed_seconds * 1e-9;
  }
  if (log)
    std::fprintf(log, "done: %d steps, %.0f tok/s, %.1f GFLOP/s (%.1f%% of the measured peak)\n", cfg.train.steps,
                 result.tokens_per_s, result.gflops, 100.0 * result.gflops / result.peak_gflops);
  return result;
}

}  // namespace loom
