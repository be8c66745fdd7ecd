// This machine as a cluster for the planner: one device per core.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/check.h"
#include "core/cpu_info.h"
#include "core/rng.h"
#include "kernels/cpu/isa.h"
#include "obs/peak_flops.h"
#include "planner/predict.h"

namespace loom::planner {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}  // namespace

double bf16_speedup_of_this_cpu() {
  // Native bf16 products (avx512_bf16, not capped below it): bench/matmul_bench
  // measured 1.7-1.9x the fp32 rate. Elsewhere loom widens them to fp32:
  // `loom info` measured 0.88x on a layer product (AVX2 AMD EPYC).
  return cpu::native_bf16_products() ? 1.8 : 0.9;
}

double machine_memory_bytes() {
  double mem_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double value;
    meminfo >> value;
    if (key == "MemTotal:") mem_kib = value;
    meminfo.ignore(256, '\n');
  }
  return mem_kib * 1024;
}

void check_fits_this_machine(const RunConfig& cfg, int world_size, int ranks_on_node) {
  const double total = machine_memory_bytes();
  if (total <= 0) return;  // no /proc/meminfo: nothing to judge by
  // Memory figures only: the time model's rates do not matter here, and no
  // overhead is added, so only a run that cannot fit at all is refused.
  ClusterSpec c;
  c.name = "this machine";
  c.devices_per_node = std::max(1, ranks_on_node);
  c.memory_bytes = total / c.devices_per_node;
  c.peak_flops_fp32 = 1e9, c.memory_bandwidth = 1e9, c.intra_bandwidth = 1e9, c.inter_bandwidth = 1e9;
  RunPrediction p;
  try {
    p = predict_loom_run(cfg, world_size, c);
  } catch (const UserError&) {
    return;  // a layout the prediction cannot model: the engine's own checks judge it
  }
  const double need = p.peak_memory_bytes - p.overhead_bytes, have = total / std::max(1, ranks_on_node);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  LOOM_USER_CHECK(need <= have,
                  "this run needs %.1f GiB per rank (parameters %.1f, gradients %.1f, AdamW %.1f, activations %.1f "
                  "GiB) but this machine has %.1f GiB for each of its %d ranks (MemTotal): shrink the model or "
                  "train.batch_size / train.micro_batch_size, or use more ranks, parallel.zero, train.recompute "
                  "(loom plan --layout auto --config ... finds a layout that fits)",
                  need / kGiB, p.params_bytes / kGiB, p.grads_bytes / kGiB, p.optimizer_bytes / kGiB,
                  p.activation_bytes / kGiB, have / kGiB, std::max(1, ranks_on_node));
}

ClusterSpec measure_local_cluster_quickly() {
  ClusterSpec c;
  c.name = "local";
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  c.description = strprintf("this machine, one device per core (%d cores), measured quickly", cores);
  c.nodes = 1;
  c.devices_per_node = cores;
  const double mem = machine_memory_bytes();
  c.memory_bytes = (mem > 0 ? mem : 4.0 * (1ull << 30)) / cores;
  c.peak_flops_fp32 = measure_peak_gflops(cores) * 1e9 / cores;
  c.peak_flops_bf16 = c.peak_flops_fp32 * bf16_speedup_of_this_cpu();
  // Uncalibrated guesses, replaced by `loom bench calibrate` (and the
  // automatic calibration a run takes): oneDNN's large fp32 products reach
  // about 70% of the FMA peak (bench/matmul_bench), a core streams ~10 GB/s,
  // MPI over shared memory moves a few GB/s.
  c.matmul_efficiency = 0.7;
  c.tiled_attention_efficiency = 0.18;  // measured on a 2-core Xeon (avx512_bf16) at T 256
  c.memory_bandwidth = 10e9;
  c.overhead_bytes = 150 * kMiB;
  c.intra_bandwidth = 4e9;
  c.intra_latency = 2e-6;
  c.inter_bandwidth = 12.5e9;
  c.inter_latency = 5e-6;
  return c;
}

std::string auto_calibration_path(const std::string& root, int threads) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::string stamp;
  if (!ec) {
    const auto size = std::filesystem::file_size(exe, ec);
    const auto time = std::filesystem::last_write_time(exe, ec).time_since_epoch().count();
    stamp = strprintf("%llu|%lld", (unsigned long long)size, (long long)time);
  }
  const std::string key = read_cpu_info().model + "|" + cpu::isa_name(cpu::kernel_isa()) + "|" +
                          std::to_string(threads) + "|" + stamp;
  return strprintf("%s/.cache/calibration/%016llx.toml", root.c_str(), (unsigned long long)stable_hash(key.c_str()));
}

ClusterSpec local_cluster_or_default() {
  const std::string path = local_cluster_path(default_root());
  if (std::filesystem::exists(path)) return load_cluster_file(path);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  if (const std::string automatic = auto_calibration_path(default_root(), cores); std::filesystem::exists(automatic))
    return load_cluster_file(automatic);
  return measure_local_cluster_quickly();
}

ClusterSpec cluster_for_run(const std::string& name_or_path, int nodes, int threads) {
  if (!name_or_path.empty() && name_or_path != "local") return load_cluster(name_or_path, default_root());
  ClusterSpec c = local_cluster_or_default();
  if (threads > 0 && !std::filesystem::exists(local_cluster_path(default_root())))
    if (const std::string own = auto_calibration_path(default_root(), threads); std::filesystem::exists(own))
      c = load_cluster_file(own);
  if (nodes > 1 && c.nodes == 1) {
    c.nodes = nodes;
    c.description += strprintf(", as %d such nodes", nodes);
  }
  return c;
}

}  // namespace loom::planner
