#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>

#include "data/byte_dataset.h"
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

float evaluate(GPT& model, const ByteDataset& data, int batches, int B, int T, std::vector<int32_t>& tokens,
               std::vector<int32_t>& targets) {
  double sum = 0;
  for (int i = 0; i < batches; i++) {
    data.val_batch(i, B, T, tokens.data(), targets.data());
    sum += model.forward(tokens.data(), targets.data(), B, T);
  }
  return float(sum / batches);
}

}  // namespace

TrainResult train(const RunConfig& cfg, FILE* log) {
  cfg.validate();
  const int B = cfg.train.batch_size, T = cfg.model.seq_len;
  ByteDataset data(cfg.data.path, cfg.data.val_fraction, T);  // checks the file before any work
  int threads = set_threads(cfg.runtime.threads);

  GPT model(cfg.model, B, T);
  model.init_parameters(uint64_t(cfg.train.seed));
  AdamW optimizer(model.layout(), AdamWConfig{cfg.train.beta1, cfg.train.beta2, cfg.train.eps,
                                              cfg.train.weight_decay});
  LrSchedule schedule{cfg.train.lr, cfg.train.min_lr, cfg.train.warmup_steps, cfg.train.steps};

  TrainResult result;
  result.peak_gflops = measure_peak_gflops(threads);
  const double flops_per_step = cfg.model.train_flops_per_token(T) * double(B) * T;
  if (log) {
    std::fprintf(log, "model: GPT-2, %d layers, d_model %d, %d heads, vocab %d, seq_len %d: %.2fM parameters\n",
                 cfg.model.n_layer, cfg.model.d_model, cfg.model.n_head, cfg.model.vocab_size, T,
                 double(cfg.model.num_parameters()) / 1e6);
    std::fprintf(log, "data: %s (%zu train / %zu validation bytes), batch %d x %d tokens\n",
                 cfg.data.path.c_str(), data.train_size(), data.val_size(), B, T);
    std::fprintf(log, "memory: parameters+gradients %.1f MiB, AdamW state %.1f MiB, activations %.1f MiB\n",
                 2.0 * double(model.params_size()) * 4 / (1 << 20), double(optimizer.state_bytes()) / (1 << 20),
                 double(model.activation_bytes()) / (1 << 20));
    std::fprintf(log, "threads: %d, measured fp32 peak %.0f GFLOP/s\n", threads, result.peak_gflops);
    std::fflush(log);
  }

  std::vector<int32_t> tokens(size_t(B) * T), targets(size_t(B) * T);
  double timed_seconds = 0, window_seconds = 0;
  int timed_steps = 0, window_steps = 0;
  for (int step = 0; step < cfg.train.steps; step++) {
    auto t0 = Clock::now();
    data.train_batch(uint64_t(cfg.train.seed), step, B, T, tokens.data(), targets.data());
    model.zero_grads();
    float loss = model.forward_backward(tokens.data(), targets.data(), B, T);
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
      window_seconds = 0, window_steps = 0;
    }
    bool eval_due = cfg.train.eval_every > 0 && ((step + 1) % cfg.train.eval_every == 0 || last);
    if (eval_due) {
      float val = evaluate(model, data, cfg.train.eval_batches, B, T, tokens, targets);
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
