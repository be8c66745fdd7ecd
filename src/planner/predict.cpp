#include "planner/predict.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/check.h"
#include "kernels/cpu/isa.h"
#include "obs/peak_flops.h"
#include "planner/comm_cost.h"
#include "planner/layout.h"
#include "planner/memory_model.h"
#include "planner/pipeline_sim.h"

namespace loom::planner {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The run's shape as loom lays it out.
struct LoomRun {
  double b, T, C, H, V, L;
  int dp, tp, pp, zero, accumulation, world;
  ModelConfig model;
};

LoomRun loom_run(const RunConfig& cfg, int world) {
  LOOM_USER_CHECK(world >= 1, "world size must be at least 1 (got %d)", world);
  const ParallelConfig& p = cfg.parallel;
  LOOM_USER_CHECK(p.tp >= 1 && p.pp >= 1 && world % (p.tp * p.pp) == 0,
                  "world size %d is not a multiple of parallel.tp x parallel.pp = %d", world, p.tp * p.pp);
  LOOM_USER_CHECK(cfg.model.n_head % p.tp == 0, "model.n_head %d is not divisible by parallel.tp %d",
                  cfg.model.n_head, p.tp);
  LOOM_USER_CHECK(cfg.model.kv_heads() % p.tp == 0, "model.n_kv_head %d is not divisible by parallel.tp %d",
                  cfg.model.kv_heads(), p.tp);
  LOOM_USER_CHECK(cfg.model.ffn() % p.tp == 0, "the MLP width %d (model.ffn_hidden) is not divisible by parallel.tp %d",
                  cfg.model.ffn(), p.tp);
  LOOM_USER_CHECK(p.pp <= cfg.model.n_layer, "parallel.pp %d is more than model.n_layer %d", p.pp,
                  cfg.model.n_layer);
  const int dp = p.dp > 0 ? p.dp : world / (p.tp * p.pp);
  LOOM_USER_CHECK(dp * p.tp * p.pp == world, "world size %d is not dp x tp x pp = %d x %d x %d", world, dp, p.tp,
                  p.pp);
  LOOM_USER_CHECK(cfg.train.batch_size % dp == 0, "train.batch_size %d is not divisible by dp %d",
                  cfg.train.batch_size, dp);
  const int rows = cfg.train.batch_size / dp;
  const int micro = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : rows;
  LOOM_USER_CHECK(rows % micro == 0, "train.micro_batch_size %d does not divide the %d rows of a replica", micro,
                  rows);
  const ModelConfig& m = cfg.model;
  return {double(micro), double(m.seq_len), double(m.d_model), double(m.n_head), double(m.vocab_size),
          double(m.n_layer), dp, p.tp, p.pp, p.zero, rows / micro, world, m};
}

// Bytes of one layer's activations for one micro-batch (the family's
// plan_block): `a` bytes per compute-type element (4 in fp32, 2 in bf16 / fp16)
// for the products' inputs and what attention and the MLP keep; fp32 for the
// norm statistics and the residual stream. Per layer, N = b T tokens:
//   both norms' outputs a 2 N C; their statistics in fp32 (GPT-2's
//   layernorm mean and rstd 2 x 2 N, LLaMA's RMSNorm rstd 2 N); the residual
//   stream after attention and after the MLP, fp32 2 N C (all of these on
//   N / tp tokens under sequence parallelism);
//   split over tp: q/k/v N (n_head + 2 n_kv_head) hd, the attention output
//   N C, the probabilities b n_head T^2, and the MLP's (GPT-2: fc N F and its
//   GELU N F; LLaMA: the gate/up product N 2F and the SwiGLU output N F).
double layer_bytes(const LoomRun& r, bool seq_parallel, double a) {
  const ModelConfig& m = r.model;
  const double N = r.b * r.T, bTC = N * r.C, t = r.tp, split = seq_parallel ? t : 1;
  const double stats = 2 * N, stats_per_row = m.is_llama() ? 1 : 2;  // (mean,) rstd of two norms
  const double norms = a * 2 * bTC + 4 * stats_per_row * stats, residuals = 4 * 2 * bTC;
  const double qkv = N * double(m.qkv_rows()) / t, atty = bTC / t, att = r.b * (r.H / t) * r.T * r.T;
  const double mlp = (m.is_llama() ? 3 : 2) * N * m.ffn() / t;
  return (norms + residuals) / split + a * (qkv + atty + att + mlp);
}

int layers_of(const LoomRun& r, int stage) { return layers_on_stage(int(r.L), r.pp, stage); }

// Parameters a rank of `stage` holds (memory_model.h's stage_parameters:
// its layers' share over tp, the embeddings on the first stage, the head
// and final norm on the last).
double stage_params(const LoomRun& r, int stage) {
  Layout l;
  l.dp = r.dp, l.tp = r.tp, l.pp = r.pp;
  return stage_parameters(r.model, l, stage);
}

// Training FLOPs of one micro-batch on one rank of `stage` (6N + 12LCT per
// token, split by stage and tp; the head's V x C matrix on the last stage).
double stage_flops(const LoomRun& r, int stage) {
  const ParameterCounts p = parameter_counts(r.model);
  const double C = r.C, per_layer = 6 * (p.layer_split + p.layer_replicated) + 12 * C * r.T;
  double per_token = layers_of(r, stage) * per_layer;
  if (stage == r.pp - 1) per_token += 6 * (r.V * C + p.final_norm);
  return per_token * r.b * r.T / r.tp;
}

struct StageFigures {
  double params, grads, optimizer, activations;
};

StageFigures stage_memory_bytes(const RunConfig& cfg, const LoomRun& r, int stage, double threads) {
  const double n = stage_params(r, stage);
  const bool lowp = cfg.precision.compute_precision() != ComputePrecision::fp32;
  const double a = lowp ? 2 : 4;  // bytes of a compute-type element
  StageFigures f;
  f.params = 4 * n + (lowp ? 2 * n : 0);  // fp32 master weights (+ their 16-bit compute copy)
  if (r.zero == 0) f.grads = 4 * n;
  else if (r.zero == 1 || r.accumulation > 1) f.grads = 4 * n + 4 * n / r.dp;  // full buffer + reduced shard
  else f.grads = std::min(4 * n, 4 * n / r.dp + 2 * double(cfg.parallel.bucket_mb) * kMiB);  // shard + buckets in flight
  if (cfg.precision.grad_reduce == "bf16" && r.dp > 1) f.grads += 2 * n + (r.zero >= 1 ? 2 * n / r.dp : 0);
  f.optimizer = 8 * n / (r.zero >= 1 ? r.dp : 1);
  // One micro-batch's activations per (micro-batch in flight) on this stage;
  // 1F1B holds min(m, pp - stage). Rows R: the tokens a rank keeps for
  // norms and residuals (N / tp under sequence parallelism).
  const bool sp = cfg.parallel.sequence_parallel && r.tp > 1;
  const int in_flight = r.pp == 1 ? 1 : std::min(r.accumulation, r.pp - stage);
  const double N = r.b * r.T, R = sp ? N / r.tp : N, C = r.C, t = r.tp, att = r.b * (r.H / t) * r.T * r.T;
  const bool llama = r.model.is_llama();
  double bytes = in_flight * layers_of(r, stage) * layer_bytes(r, sp, a);
  if (stage == 0) bytes += 4 * in_flight * R * C;  // encoded input of layer 0
  if (stage == r.pp - 1) {
    const double Vp = r.tp > 1 ? std::ceil(r.V / (64.0 * r.tp)) * 64.0 * r.tp : r.V;
    bytes += a * R * C + 4 * (llama ? 1 : 2) * R;    // final norm: output, (mean,) rstd
    if (sp) bytes += (2 * a + 4) * N * C;             // its gathered output and two work buffers
    bytes += a * N * Vp / t + 4 * (N + 3 * N);        // logits (this rank's vocabulary), losses, cross-entropy scratch
  }
  // Backward work space, reused by every layer (model/gpt2/, model/llama/
  // plan_block_work): dres, dbuf_c, the attention output's gradient, the MLP
  // output's (N F) and the probabilities' in fp32; the q/k/v gradient and
  // the MLP input's in the compute type (LLaMA: gate/up, N 2F, always;
  // GPT-2: GELU's input N F, 16-bit only, in place in fp32); in 16 bits also
  // the rounded residual gradient and attention's per-thread work space
  // (about 5 T hs + T^2 floats per thread: its fp16 backward layout).
  const double Fl = r.model.ffn() / t, qkv_grad = N * double(r.model.qkv_rows()) / t;
  const double mlp_in_grad = llama ? 2 * N * Fl : lowp ? N * Fl : 0;
  bytes += 4 * (2 * R * C + N * C / t + N * Fl + att) + a * (qkv_grad + mlp_in_grad);
  if (lowp) {
    const double hs = C / r.H;
    bytes += a * (R * C + (sp ? N * C : 0)) + 4 * threads * (5 * r.T * hs + r.T * r.T + 64 * hs);
  }
  // fp16 products (and bf16 ones on CPUs without avx512_bf16) widen their
  // operands to fp32 one panel at a time (kernels/cpu/matmul_lowp.h): at most
  // 512 x 1024 of A, 1024 x 1024 of B and a 512 x 1024 fp32 output panel,
  // 8 MiB. Counted for both 16-bit types: native bf16 allocates none of it.
  if (lowp) bytes += 4.0 * (512 * 1024 + 1024 * 1024 + 512 * 1024);
  f.activations = bytes;
  return f;
}

// Cores a rank computes on: runtime.threads, or cores / ranks on the node;
// ranks beyond the cores share them.
double rank_cores(const RunConfig& cfg, const LoomRun& r, const ClusterSpec& c) {
  const double ranks_per_node = std::ceil(double(r.world) / c.nodes);
  const double cores = c.devices_per_node;
  const double threads = cfg.runtime.threads > 0 ? cfg.runtime.threads : std::max(1.0, std::floor(cores / ranks_per_node));
  return std::min(threads, cores / ranks_per_node);
}

}  // namespace

std::string RunPrediction::describe() const {
  return strprintf("peak memory per rank %.1f MiB (parameters %.1f, gradients %.1f, AdamW %.1f, activations %.1f, "
                   "overhead %.1f), step %.3f s (compute %.3f, bubble %.3f, communication %.3f, optimizer %.3f)",
                   peak_memory_bytes / kMiB, params_bytes / kMiB, grads_bytes / kMiB, optimizer_bytes / kMiB,
                   activation_bytes / kMiB, overhead_bytes / kMiB, step_seconds, compute_seconds, bubble_seconds,
                   comm_seconds, optimizer_seconds);
}

RunPrediction predict_loom_run(const RunConfig& cfg, int world_size, const ClusterSpec& cluster) {
  const LoomRun r = loom_run(cfg, world_size);
  RunPrediction out;
  out.overhead_bytes = cluster.overhead_bytes;
  for (int s = 0; s < r.pp; s++) {
    StageFigures f = stage_memory_bytes(cfg, r, s, rank_cores(cfg, r, cluster));
    const double total = f.params + f.grads + f.optimizer + f.activations + cluster.overhead_bytes;
    if (total > out.peak_memory_bytes) {
      out.peak_memory_bytes = total;
      out.params_bytes = f.params, out.grads_bytes = f.grads, out.optimizer_bytes = f.optimizer;
      out.activation_bytes = f.activations;
    }
  }

  const double cores = rank_cores(cfg, r, cluster);
  // bf16 products run at the cluster's bf16 peak when it names one; on this
  // CPU (avx512_bf16) bench/matmul_bench measured 1.7-1.9x the fp32 rate,
  // so 1.8x stands in for an uncalibrated one. fp16 has no arithmetic here:
  // its products run in fp32 on widened operands.
  double speedup = 1;
  if (cfg.precision.compute_precision() == ComputePrecision::bf16)
    speedup = cluster.peak_flops_bf16 > 0 ? cluster.peak_flops_bf16 / cluster.peak_flops_fp32 : 1.8;
  const double rate = cluster.peak_flops_fp32 * cores * cluster.matmul_efficiency * speedup;
  const double mem_bw = cluster.memory_bandwidth * cores;
  const GroupLinks links = group_links(cluster, r.dp, r.tp, r.pp);
  const double act_bytes = 4 * r.b * r.T * r.C;
  const double tp_ar = all_reduce_seconds(act_bytes, r.tp, links.tp);
  StageDurations d;
  d.p2p_seconds = r.pp > 1 ? p2p_seconds(act_bytes, links.pp) : 0;
  for (int s = 0; s < r.pp; s++) {
    const double layers = layers_of(r, s), compute = stage_flops(r, s) / rate;
    d.forward.push_back(compute / 3 + 2 * layers * tp_ar);
    d.backward.push_back(2 * compute / 3 + 2 * layers * tp_ar);
  }
  const auto schedule = pp::one_f_one_b(r.pp, r.accumulation);
  const PipelineTiming timing = simulate_pipeline(schedule, r.pp, 1, d);
  for (int s = 0; s < r.pp; s++) {
    const double n = stage_params(r, s), updated = n / (r.zero >= 1 ? r.dp : 1);
    double reduce = 0, gather = 0;
    if (r.zero == 0) reduce = all_reduce_seconds(4 * n, r.dp, links.dp);
    else reduce = reduce_scatter_seconds(4 * n, r.dp, links.dp), gather = all_gather_seconds(4 * n, r.dp, links.dp);
    // Buckets reduce while the last micro-batch's backward runs.
    const double exposed = std::max(0.0, reduce - d.backward[s]) + gather;
    // zero_grads writes 4 B, the norm reads 4 B, AdamW moves about 28 B per parameter.
    const double opt = (4 * n + 32 * updated) / mem_bw;
    const double end = timing.stage_finish[s] + exposed + opt;
    if (end > out.step_seconds) {
      out.step_seconds = end;
      out.compute_seconds = r.accumulation * stage_flops(r, s) / rate;
      out.comm_seconds = exposed + r.accumulation * 4 * layers_of(r, s) * tp_ar;
      out.optimizer_seconds = opt;
      out.bubble_seconds = timing.makespan - timing.stage_busy[s];
    }
  }
  return out;
}

double bf16_speedup_of_this_cpu() {
  // Native bf16 products (avx512_bf16, not capped below it): bench/matmul_bench
  // measured 1.7-1.9x the fp32 rate. Elsewhere loom widens them to fp32:
  // `loom info` measured 0.88x on a layer product (AVX2 AMD EPYC).
  return cpu::native_bf16_products() ? 1.8 : 0.9;
}

ClusterSpec measure_local_cluster_quickly() {
  ClusterSpec c;
  c.name = "local";
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  c.description = strprintf("this machine, one device per core (%d cores), measured quickly", cores);
  c.nodes = 1;
  c.devices_per_node = cores;
  double mem_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double value;
    meminfo >> value;
    if (key == "MemTotal:") mem_kib = value;
    meminfo.ignore(256, '\n');
  }
  c.memory_bytes = (mem_kib > 0 ? mem_kib * 1024 : 4.0 * (1ull << 30)) / cores;
  c.peak_flops_fp32 = measure_peak_gflops(cores) * 1e9 / cores;
  c.peak_flops_bf16 = c.peak_flops_fp32 * bf16_speedup_of_this_cpu();
  // Uncalibrated guesses, replaced by `loom bench calibrate`: loom's steps
  // reach about a third of the fp32 peak (README), a core streams ~10 GB/s,
  // MPI over shared memory moves a few GB/s.
  c.matmul_efficiency = 0.33;
  c.memory_bandwidth = 10e9;
  c.overhead_bytes = 150 * kMiB;
  c.intra_bandwidth = 4e9;
  c.intra_latency = 2e-6;
  c.inter_bandwidth = 12.5e9;
  c.inter_latency = 5e-6;
  return c;
}

ClusterSpec local_cluster_or_default() {
  const std::string path = local_cluster_path(default_root());
  if (std::filesystem::exists(path)) return load_cluster_file(path);
  return measure_local_cluster_quickly();
}

ParallelConfig choose_layout(const RunConfig& cfg, int world_size, const ClusterSpec& cluster) {
  int micro = 0;
  return choose_layout(cfg, world_size, cluster, &micro);
}

ParallelConfig choose_layout(const RunConfig& cfg, int world_size, const ClusterSpec& cluster, int* micro_batch) {
  LOOM_USER_CHECK(world_size >= 1, "world size must be at least 1 (got %d)", world_size);
  const ModelConfig& m = cfg.model;
  // Ranks of one node share its memory.
  const double ranks_per_node = std::ceil(double(world_size) / cluster.nodes);
  const double budget = cluster.memory_bytes * cluster.devices_per_node / ranks_per_node;
  bool found = false;
  double best_step = 0, least_missing = -1;
  ParallelConfig best = cfg.parallel;
  for (int tp = 1; tp <= world_size; tp++) {
    if (world_size % tp || !tp_divides(m, tp)) continue;
    for (int pp = 1; pp <= std::min(m.n_layer, world_size / tp); pp++) {
      if ((world_size / tp) % pp) continue;
      const int dp = world_size / (tp * pp);
      if (cfg.train.batch_size % dp) continue;
      const int rows = cfg.train.batch_size / dp;
      for (int micro = 1; micro <= rows; micro++) {
        if (rows % micro) continue;
        if (cfg.train.micro_batch_size > 0 && micro != cfg.train.micro_batch_size) continue;
        for (int zero = 0; zero <= (dp > 1 ? 2 : 0); zero++) {
          RunConfig c = cfg;
          c.parallel.dp = dp, c.parallel.tp = tp, c.parallel.pp = pp, c.parallel.zero = zero;
          c.train.micro_batch_size = micro;
          const RunPrediction p = predict_loom_run(c, world_size, cluster);
          if (p.peak_memory_bytes > budget) {
            const double missing = p.peak_memory_bytes - budget;
            if (least_missing < 0 || missing < least_missing) least_missing = missing;
            continue;
          }
          // Equal predicted times: the larger micro-batch (bigger matrix
          // products run closer to peak than the model assumes).
          const bool better = !found || p.step_seconds < best_step * (1 - 1e-9) ||
                              (p.step_seconds <= best_step * (1 + 1e-9) && micro > *micro_batch);
          if (better) {
            found = true, best_step = p.step_seconds;
            best = c.parallel;
            *micro_batch = micro;
          }
        }
      }
    }
  }
  LOOM_USER_CHECK(found || least_missing >= 0,
                  "no layout of %d ranks divides train.batch_size %d over its replicas (dp must divide it)",
                  world_size, cfg.train.batch_size);
  LOOM_USER_CHECK(found,
                  "no layout of %d ranks fits: the closest needs %.1f MiB more per rank than the %.1f MiB each has "
                  "(%s); use more ranks, a smaller model or a smaller batch",
                  world_size, least_missing / kMiB, budget / kMiB, cluster.name.c_str());
  return best;
}

}  // namespace loom::planner
