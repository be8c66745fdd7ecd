// `loom bench calibrate`: measures this machine and writes a cluster file the
// planner reads as preset "local" (.cache/cluster-local.toml).
//
// One "device" is one core: loom runs one rank per core or per group of
// cores. Measured: the fp32 FMA peak over all cores, memcpy bandwidth, the
// GEMM model the planner prices products with (the engine's own fp32,
// bf16 and fp16 products on three shapes), the rate a real loom training
// step reaches (the default model's shape, printed beside), and with --mpi the all-reduce bandwidth and latency of 2 ranks
// (mpirun, like `loom bench comm`), and the per-process memory beyond the
// model's own buffers.
//
// --quick --threads N: the same measurements, shorter, with the run's N
// threads: what `loom train` takes automatically (once per CPU, thread
// count and build, cached in .cache/calibration/) when no `loom bench
// calibrate` file exists, so that a run's prediction is calibrated from the
// first run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/command_util.h"
#include "cli/calibrate.h"
#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "kernels/backend.h"
#include "kernels/cpu/attention_tiled.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_lowp.h"
#include "model/stage_module.h"
#include "obs/peak_flops.h"
#include "optim/adamw.h"
#include "planner/cluster.h"
#include "planner/predict.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes moved per second by memcpy (read + write) of a buffer far beyond the caches.
double memcpy_traffic_bytes_per_s(size_t mib, int reps) {
  const size_t bytes = mib << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < reps; i++) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::max(best, 2.0 * double(bytes) / since(t0));
    std::swap(a, b);
  }
  return best;
}

// Seconds of the fastest of `reps` runs of fn (after one warm-up run).
template <class F>
double best_seconds(int reps, F&& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; i++) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, since(t0));
  }
  return best;
}

// The GEMM model of this machine (planner/work_model.h), from the engine's
// own products (y = x W^T, as a linear layer runs them) on `threads`
// threads: the large product's share of the FMA peak is the ceiling; a
// short reduction (K 64) and a skinny output (M 64) give the K and
// min(M, N) at which the rate halves; bf16 and fp16 products' rates on
// the large shape set their peaks (peak x ceiling = the measured rate).
struct GemmFigures {
  double fp32 = 0, short_k = 0, skinny = 0, bf16 = 0, fp16 = 0;  // FLOP/s
};

GemmFigures measure_gemms(int threads, bool quick) {
  set_threads(threads);
  constexpr int64_t L = 1024, S = 64;
  const int reps = quick ? 2 : 4;
  std::vector<float> a(L * L), b(L * L), c(L * L);
  for (size_t i = 0; i < a.size(); i++) a[i] = float(rng_uniform(5, 1, i) - 0.5), b[i] = float(rng_uniform(5, 2, i) - 0.5);
  cpu::MatmulEngine eng;
  auto rate = [&](int64_t M, int64_t N, int64_t K) {
    return 2.0 * M * N * K / best_seconds(reps, [&] { eng.gemm(c.data(), a.data(), b.data(), nullptr, M, N, K, false, true, false); });
  };
  GemmFigures g;
  g.fp32 = rate(L, L, L);
  g.short_k = rate(L, L, S);
  g.skinny = rate(S, L, L);
  std::vector<bf16> ab(a.size()), bb(b.size());
  std::vector<f16> ah(a.size()), bh(b.size());
  for (size_t i = 0; i < a.size(); i++) {
    ab[i] = float_to_bf16(a[i]), bb[i] = float_to_bf16(b[i]);
    ah[i] = float_to_f16(a[i]), bh[i] = float_to_f16(b[i]);
  }
  cpu::LowpMatmulEngine lowp;
  const double flops = 2.0 * L * L * L;
  g.bf16 = flops / best_seconds(reps, [&] { lowp.gemm(c.data(), ab.data(), bb.data(), nullptr, L, L, L, false, true, false); });
  g.fp16 = flops / best_seconds(reps, [&] { lowp.gemm(c.data(), ah.data(), bh.data(), nullptr, L, L, L, false, true, false); });
  return g;
}

// Share of the FMA peak loom's tiled attention reaches on its causal work
// (forward 4 B T^2/2 C FLOPs, backward 2.5x that), at the default model's
// shape.
double measure_tiled_attention(int threads, double peak, bool quick) {
  set_threads(threads);
  const ModelConfig m;
  const int B = 4, T = m.seq_len, C = m.d_model, NH = m.n_head;
  std::vector<float> qkv(size_t(B) * T * 3 * C), out(size_t(B) * T * C), lse(size_t(B) * NH * T),
      dout(out.size()), dqkv(qkv.size()), work(cpu::attention_tiled_work_floats(threads));
  for (size_t i = 0; i < qkv.size(); i++) qkv[i] = float(rng_uniform(7, 1, i) - 0.5);
  for (size_t i = 0; i < dout.size(); i++) dout[i] = float(rng_uniform(7, 2, i) - 0.5);
  const double seconds = best_seconds(quick ? 2 : 4, [&] {
    cpu::attention_tiled_forward(out.data(), lse.data(), qkv.data(), work.data(), B, T, C, NH);
    cpu::attention_tiled_backward(dqkv.data(), work.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                                  NH);
  });
  const double forward = 4.0 * B * T * (T / 2.0) * C;
  return std::clamp(3.5 * forward / seconds / peak, 1e-3, 1.0);
}

struct StepFigures {
  double flops_per_s = 0;
  double overhead_bytes = 0;  // peak RSS beyond the model's own buffers
};

// Training FLOP/s of a real loom step (forward, backward, AdamW) on the
// default model's shape (batch 4), the faster of two steps after a warm-up;
// and the process's memory beyond parameters, gradients, AdamW state and
// activations (libraries, thread stacks, allocator): the fixed overhead.
StepFigures measure_training_step(int threads) {
  set_threads(threads);
  ModelConfig cfg;  // the default job's model
  const int B = 4, T = cfg.seq_len;
  Backend ops;
  StageBuffers buffers;
  buffers.backend = &ops;
  auto model_owner = make_stage_module(cfg, ModelShard{}, TensorParallel{}, B, T, buffers);
  StageModule& model = *model_owner;
  model.init_parameters(1);
  AdamW opt(ops, model.layout().flat(), AdamWConfig{});
  std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) {
    tokens[i] = int32_t(rng_uniform(3, 1, i) * cfg.vocab_size);
    targets[i] = int32_t(rng_uniform(3, 2, i) * cfg.vocab_size);
  }
  std::vector<double> times;
  for (int step = 0; step < 3; step++) {
    auto t0 = Clock::now();
    model.zero_grads();
    model.forward_backward(tokens.data(), targets.data(), B, T);
    opt.step(model.params(), model.grads(), 1e-4f, 1.f);
    if (step > 0) times.push_back(since(t0));
  }
  StepFigures f;
  // The faster of two timed steps: this machine may be shared and noisy.
  f.flops_per_s = cfg.train_flops_per_token(T) * B * T / *std::min_element(times.begin(), times.end());
  const double owned = 16.0 * model.params_size() + double(model.activation_bytes());
  f.overhead_bytes = std::max(0.0, peak_rss_mib() * 1024 * 1024 - owned);
  return f;
}

}  // namespace

planner::ClusterSpec measure_this_machine(int threads, bool quick, bool with_step) {
  planner::ClusterSpec c = planner::measure_local_cluster_quickly();
  const int cores = c.devices_per_node;
  // The threads the products run on: every core, or (--threads) a run's own.
  if (threads <= 0) threads = cores;
  std::printf("loom bench calibrate%s: %d cores, %.1f GiB memory per core, %d threads\n", quick ? " --quick" : "",
              cores, c.memory_bytes / (1 << 30), threads);
  const double peak = measure_peak_gflops(threads, quick ? 0.1 : 0.3) * 1e9;
  c.peak_flops_fp32 = peak / threads;
  std::printf("  fp32 FMA peak:        %.1f GFLOP/s over %d threads (%.1f per core)\n", peak * 1e-9, threads,
              c.peak_flops_fp32 * 1e-9);
  // Before the memcpy buffers, so that the peak RSS is the training step's.
  const StepFigures step = with_step ? measure_training_step(threads) : StepFigures{};
  const GemmFigures g = measure_gemms(threads, quick);
  c.matmul_efficiency = std::clamp(g.fp32 / peak, 1e-3, 1.0);
  // eff(K) = ceiling x K / (K + k_half): k_half = K (ceiling / eff - 1).
  c.gemm_k_half = std::max(0.0, 64 * (g.fp32 / g.short_k - 1));
  c.gemm_mn_half = std::max(0.0, 64 * (g.fp32 / g.skinny - 1));
  // 16-bit products at their measured rate relative to fp32's on the same
  // shape (the ceiling stays fp32's; a busy machine can measure the FMA peak
  // below the GEMM, clamping the ceiling, and the ratio still holds).
  c.peak_flops_bf16 = c.peak_flops_fp32 * g.bf16 / g.fp32;
  c.peak_flops_fp16 = c.peak_flops_fp32 * g.fp16 / g.fp32;
  c.tiled_attention_efficiency = measure_tiled_attention(threads, peak, quick);
  if (with_step) c.overhead_bytes = step.overhead_bytes;
  std::printf("  fp32 GEMM 1024^3:     %.1f GFLOP/s = %.1f%% of peak (the ceiling); K 64: %.1f (K at half rate %.0f), "
              "M 64: %.1f (min(M,N) at half rate %.0f)\n",
              g.fp32 * 1e-9, 100 * c.matmul_efficiency, g.short_k * 1e-9, c.gemm_k_half, g.skinny * 1e-9,
              c.gemm_mn_half);
  std::printf("  16-bit GEMM 1024^3:   bf16 %.1f GFLOP/s (%.2fx fp32), fp16 %.1f (%.2fx)\n", g.bf16 * 1e-9,
              g.bf16 / g.fp32, g.fp16 * 1e-9, g.fp16 / g.fp32);
  std::printf("  tiled attention:      %.1f%% of peak on its causal work (default model's shape, forward + backward)\n",
              100 * c.tiled_attention_efficiency);
  if (with_step) {
    std::printf("  loom training step:   %.1f GFLOP/s = %.1f%% of peak (default model, batch 4, %d threads)\n",
                step.flops_per_s * 1e-9, 100 * step.flops_per_s / peak, threads);
    std::printf("  process overhead:     %.1f MiB beyond the model's buffers (peak RSS)\n",
                c.overhead_bytes / (1 << 20));
  }
  c.memory_bandwidth = quick ? memcpy_traffic_bytes_per_s(64, 3) : memcpy_traffic_bytes_per_s(128, 4);
  std::printf("  memcpy traffic:       %.1f GB/s (one thread, read + write)\n", c.memory_bandwidth * 1e-9);
  return c;
}

namespace {
}  // namespace

int cmd_bench_calibrate(const Args& args) {
  std::string out = planner::local_cluster_path(planner::default_root());
  bool mpi = false, quick = false;
  int threads = 0;
  for (size_t i = 1; i < args.size(); i++) {
    if (args[i] == "--out" && i + 1 < args.size()) out = args[++i];
    else if (args[i] == "--mpi") mpi = true;
    else if (args[i] == "--quick") quick = true;
    else if (args[i] == "--threads" && i + 1 < args.size())
      threads = int_option(args[++i], "bench calibrate", "--threads", 1, 4096);
    else
      throw UserError(strprintf("bench calibrate: unknown option '%s' (--out FILE, --mpi, --quick, --threads N; "
                                "try loom bench --help)",
                                args[i].c_str()));
  }
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  planner::ClusterSpec c = measure_this_machine(threads, quick, true);
  if (mpi) {
    MpiFigures f = measure_all_reduce(mpirun_prefix(2, 1), "64M");
    LOOM_USER_CHECK(f.ok, "bench calibrate: the MPI measurement failed (is mpirun installed?); run without --mpi");
    c.intra_bandwidth = f.bus_bytes_per_s;
    c.intra_latency = f.latency_s;
    std::printf("  MPI all_reduce:       %.2f GB/s bus bandwidth at 64 MiB, %.1f us per ring step (2 ranks)\n",
                f.bus_bytes_per_s * 1e-9, f.latency_s * 1e6);
  } else {
    std::printf("  MPI all_reduce:       not measured (add --mpi); assuming %.1f GB/s, %.0f us\n",
                c.intra_bandwidth * 1e-9, c.intra_latency * 1e6);
  }
  c.description = strprintf("this machine, measured by loom bench calibrate%s%s: one device per core",
                            quick ? strprintf(" --quick (%d threads)", threads).c_str() : "", mpi ? " --mpi" : "");
  if (std::filesystem::path(out).has_parent_path())
    std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  write_file_atomically(out, c.to_toml());
  std::printf("wrote %s (use it as: loom plan --cluster local)\n", out.c_str());
  return 0;
}

}  // namespace loom::cli
