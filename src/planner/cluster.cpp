#include "planner/cluster.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "core/check.h"
#include "core/regular_file.h"

namespace loom::planner {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Reads numbers out of the tree and remembers the keys it used, so that a
// misspelt key is reported instead of silently ignored.
class Reader {
 public:
  Reader(const toml::table& root, std::string origin) : root_(root), origin_(std::move(origin)) {}
  double number(const std::string& key, double fallback) {
    used_.insert(key);
    auto node = root_.at_path(key);
    if (!node) return fallback;
    LOOM_USER_CHECK(node.is_number() && std::isfinite(*node.value<double>()),
                    "cluster field '%s' in %s: expected a finite number", key.c_str(), origin_.c_str());
    return *node.value<double>();
  }
  int integer(const std::string& key, int fallback) {
    used_.insert(key);
    auto node = root_.at_path(key);
    if (!node) return fallback;
    LOOM_USER_CHECK(node.is_integer() && *node.value<int64_t>() >= 0 && *node.value<int64_t>() <= (1 << 24),
                    "cluster field '%s' in %s: expected a non-negative integer", key.c_str(), origin_.c_str());
    return int(*node.value<int64_t>());
  }
  std::string text(const std::string& key) {
    used_.insert(key);
    auto node = root_.at_path(key);
    if (!node) return "";
    LOOM_USER_CHECK(node.is_string(), "cluster field '%s' in %s: expected a string", key.c_str(), origin_.c_str());
    return *node.value<std::string>();
  }
  void reject_unknown(const toml::table& t, const std::string& prefix) const {
    for (auto&& [k, v] : t) {
      std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (const toml::table* sub = v.as_table()) reject_unknown(*sub, key);
      else LOOM_USER_CHECK(used_.count(key), "unknown cluster field '%s' in %s", key.c_str(), origin_.c_str());
    }
  }

 private:
  const toml::table& root_;
  std::string origin_;
  std::set<std::string> used_;
};

}  // namespace

double ClusterSpec::peak_flops(ComputePrecision p) const {
  switch (p) {
    case ComputePrecision::fp32: return peak_flops_fp32;
    case ComputePrecision::bf16: return peak_flops_bf16;
    case ComputePrecision::fp16: return peak_flops_fp16;
  }
  return 0;
}

void ClusterSpec::validate(const std::string& origin) const {
  auto need = [&](bool ok, const char* field, const char* what) {
    LOOM_USER_CHECK(ok, "cluster %s: '%s' %s", origin.c_str(), field, what);
  };
  need(nodes >= 1, "nodes", "must be at least 1 (a cluster with no devices cannot train)");
  need(devices_per_node >= 1, "devices_per_node", "must be at least 1 (a cluster with no devices cannot train)");
  need(memory_bytes > 0, "device.memory_gib", "must be > 0");
  need(peak_flops_fp32 > 0, "device.peak_tflops_fp32", "must be > 0");
  need(peak_flops_bf16 >= 0 && peak_flops_fp16 >= 0, "device.peak_tflops_bf16/fp16", "must be >= 0");
  need(matmul_efficiency > 0 && matmul_efficiency <= 1, "device.matmul_efficiency", "must be in (0, 1]");
  need(memory_bandwidth > 0, "device.memory_gbps", "must be > 0");
  need(memory_efficiency > 0 && memory_efficiency <= 1, "device.memory_efficiency", "must be in (0, 1]");
  need(gemm_tile_m >= 1 && gemm_tile_n >= 1, "device.gemm_tile_m/n", "must be at least 1");
  need(gemm_k_half >= 0 && gemm_k_half < 1e9 && gemm_mn_half >= 0 && gemm_mn_half < 1e9, "device.gemm_k_half/mn_half",
       "must be >= 0 and below 1e9");
  need(tiled_attention_efficiency >= 0 && tiled_attention_efficiency <= 1, "device.tiled_attention_efficiency",
       "must be in [0, 1] (0: priced as GEMMs)");
  need(tiled_attention_efficiency == 0 || tiled_attention_efficiency >= 1e-3, "device.tiled_attention_efficiency",
       "must be 0 or at least 0.001");
  need(intra_efficiency > 0 && intra_efficiency <= 1, "intra_node.efficiency", "must be in (0, 1]");
  need(inter_efficiency > 0 && inter_efficiency <= 1, "inter_node.efficiency", "must be in (0, 1]");
  need(inter_overlap >= 0 && inter_overlap <= 1, "inter_node.overlap", "must be in [0, 1]");
  need(inter_overlap_progress >= 0 && inter_overlap_progress <= 1, "inter_node.overlap_progress_thread",
       "must be in [0, 1]");
  need(overhead_bytes >= 0 && overhead_bytes < memory_bytes, "device.overhead_gib",
       "must be >= 0 and below the device memory");
  need(intra_bandwidth > 0, "intra_node.bandwidth_gbps", "must be > 0 (devices in a node must be able to talk)");
  need(inter_bandwidth > 0, "inter_node.bandwidth_gbit", "must be > 0 (nodes must be able to talk)");
  need(intra_latency >= 0 && inter_latency >= 0, "latency_us", "must be >= 0");
  need(int64_t(nodes) * devices_per_node <= (int64_t(1) << 24), "nodes x devices_per_node", "must be at most 2^24");
  // A finite figure can overflow once scaled to bytes or FLOP/s (1e300 GiB).
  const std::pair<double, const char*> figures[] = {
      {memory_bytes, "device.memory_gib"},         {peak_flops_fp32, "device.peak_tflops_fp32"},
      {peak_flops_bf16, "device.peak_tflops_bf16"}, {peak_flops_fp16, "device.peak_tflops_fp16"},
      {memory_bandwidth, "device.memory_gbps"},     {overhead_bytes, "device.overhead_gib"},
      {intra_bandwidth, "intra_node.bandwidth_gbps"}, {inter_bandwidth, "inter_node.bandwidth_gbit"},
      {intra_latency, "intra_node.latency_us"},     {inter_latency, "inter_node.latency_us"}};
  for (const auto& [v, field] : figures)
    need(std::isfinite(v) && v < 1e30, field, "must be finite and below 1e30 once in bytes, FLOP/s or seconds");
  // The planner divides by these: a positive figure must be a real one, not
  // 1e-300 (which turns every time into inf).
  const std::pair<double, const char*> divisors[] = {
      {memory_bytes, "device.memory_gib"},         {peak_flops_fp32, "device.peak_tflops_fp32"},
      {peak_flops_bf16, "device.peak_tflops_bf16"}, {peak_flops_fp16, "device.peak_tflops_fp16"},
      {memory_bandwidth, "device.memory_gbps"},     {intra_bandwidth, "intra_node.bandwidth_gbps"},
      {inter_bandwidth, "inter_node.bandwidth_gbit"}};
  for (const auto& [v, field] : divisors) need(v == 0 || v >= 1, field, "must be 0 or at least 1 byte, FLOP/s or byte/s");
  need(matmul_efficiency >= 1e-3, "device.matmul_efficiency", "must be at least 0.001");
}

ClusterSpec parse_cluster_toml(const std::string& text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw UserError(strprintf("cluster %s: %s (line %u)", origin.c_str(), std::string(e.description()).c_str(),
                              e.source().begin.line));
  }
  Reader r(root, origin);
  ClusterSpec c;
  c.name = r.text("name");
  c.description = r.text("description");
  c.nodes = r.integer("nodes", 1);
  c.devices_per_node = r.integer("devices_per_node", 1);
  c.memory_bytes = r.number("device.memory_gib", 0) * kGiB;
  c.peak_flops_fp32 = r.number("device.peak_tflops_fp32", 0) * 1e12;
  c.peak_flops_bf16 = r.number("device.peak_tflops_bf16", 0) * 1e12;
  c.peak_flops_fp16 = r.number("device.peak_tflops_fp16", 0) * 1e12;
  c.matmul_efficiency = r.number("device.matmul_efficiency", 0.5);
  c.gemm_units = r.integer("device.gemm_units", 0);
  c.gemm_tile_m = r.integer("device.gemm_tile_m", 1);
  c.gemm_tile_n = r.integer("device.gemm_tile_n", 1);
  c.gemm_k_half = r.number("device.gemm_k_half", 0);
  c.gemm_mn_half = r.number("device.gemm_mn_half", 0);
  c.tiled_attention_efficiency = r.number("device.tiled_attention_efficiency", 0);
  c.memory_bandwidth = r.number("device.memory_gbps", 0) * 1e9;
  c.memory_efficiency = r.number("device.memory_efficiency", 1);
  c.overhead_bytes = r.number("device.overhead_gib", 0) * kGiB;
  c.intra_bandwidth = r.number("intra_node.bandwidth_gbps", 0) * 1e9;
  c.intra_latency = r.number("intra_node.latency_us", 0) * 1e-6;
  c.inter_bandwidth = r.number("inter_node.bandwidth_gbit", 0) * 1e9 / 8;
  c.inter_latency = r.number("inter_node.latency_us", 0) * 1e-6;
  c.intra_efficiency = r.number("intra_node.efficiency", 1);
  c.inter_efficiency = r.number("inter_node.efficiency", 1);
  c.inter_overlap = r.number("inter_node.overlap", 0);
  c.inter_overlap_progress = r.number("inter_node.overlap_progress_thread", 0);
  r.reject_unknown(root, "");
  c.validate(origin);
  return c;
}

std::string ClusterSpec::to_toml() const {
  std::ostringstream o;
  o.precision(6);
  // toml++ quotes and escapes the strings (a name may hold quotes or newlines).
  o << "name = " << toml::value<std::string>(name) << "\n"
    << "description = " << toml::value<std::string>(description) << "\n"
    << "nodes = " << nodes << "\n"
    << "devices_per_node = " << devices_per_node << "\n\n[device]\n"
    << "memory_gib = " << memory_bytes / kGiB << "\n"
    << "peak_tflops_fp32 = " << peak_flops_fp32 / 1e12 << "\n"
    << "peak_tflops_bf16 = " << peak_flops_bf16 / 1e12 << "\n"
    << "peak_tflops_fp16 = " << peak_flops_fp16 / 1e12 << "\n"
    << "matmul_efficiency = " << matmul_efficiency << "\n"
    << "gemm_units = " << gemm_units << "\n"
    << "gemm_tile_m = " << gemm_tile_m << "\n"
    << "gemm_tile_n = " << gemm_tile_n << "\n"
    << "gemm_k_half = " << gemm_k_half << "\n"
    << "gemm_mn_half = " << gemm_mn_half << "\n"
    << "tiled_attention_efficiency = " << tiled_attention_efficiency << "\n"
    << "memory_gbps = " << memory_bandwidth / 1e9 << "\n"
    << "memory_efficiency = " << memory_efficiency << "\n"
    << "overhead_gib = " << overhead_bytes / kGiB << "\n\n[intra_node]\n"
    << "bandwidth_gbps = " << intra_bandwidth / 1e9 << "\n"
    << "latency_us = " << intra_latency * 1e6 << "\n"
    << "efficiency = " << intra_efficiency << "\n\n[inter_node]\n"
    << "bandwidth_gbit = " << inter_bandwidth * 8 / 1e9 << "\n"
    << "latency_us = " << inter_latency * 1e6 << "\n"
    << "efficiency = " << inter_efficiency << "\n"
    << "overlap = " << inter_overlap << "\n"
    << "overlap_progress_thread = " << inter_overlap_progress << "\n";
  return o.str();
}

ClusterSpec with_devices(ClusterSpec c, int devices) {
  LOOM_USER_CHECK(devices >= 1, "--devices must be at least 1 (got %d)", devices);
  if (devices <= c.devices_per_node) {
    c.nodes = 1;
    c.devices_per_node = devices;
    return c;
  }
  LOOM_USER_CHECK(devices % c.devices_per_node == 0,
                  "--devices %d is not a whole number of %s nodes (%d devices each)", devices, c.name.c_str(),
                  c.devices_per_node);
  c.nodes = devices / c.devices_per_node;
  return c;
}

ClusterSpec load_cluster_file(const std::string& path) {
  require_regular_file(path, "cluster file");
  std::ifstream in(path);
  LOOM_USER_CHECK(in.good(), "cannot read cluster file '%s'", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  ClusterSpec c = parse_cluster_toml(text.str(), path);
  if (c.name.empty()) c.name = std::filesystem::path(path).stem().string();
  return c;
}

std::string default_root() {
  const char* home = std::getenv("LOOM_HOME");
  return home && *home ? home : LOOM_SOURCE_DIR;
}

std::string local_cluster_path(const std::string& root) { return root + "/.cache/cluster-local.toml"; }

std::string cluster_preset_names(const std::string& root) {
  std::set<std::string> names = {"local"};
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root + "/configs/clusters", ec))
    if (e.path().extension() == ".toml") names.insert(e.path().stem().string());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

ClusterSpec load_cluster(const std::string& name_or_path, const std::string& root) {
  namespace fs = std::filesystem;
  if (name_or_path == "local") {
    const std::string path = local_cluster_path(root);
    std::error_code ec;
    LOOM_USER_CHECK(fs::exists(path, ec), "cluster preset 'local' needs a calibration: run 'loom bench calibrate' "
                                      "first (it writes %s)", path.c_str());
    return load_cluster_file(path);
  }
  const bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                               fs::path(name_or_path).extension() == ".toml";
  if (looks_like_path) return load_cluster_file(name_or_path);
  const std::string preset = root + "/configs/clusters/" + name_or_path + ".toml";
  std::error_code ec;
  LOOM_USER_CHECK(fs::exists(preset, ec), "unknown cluster preset '%s' (known: %s; or a path to a .toml file)",
                  name_or_path.c_str(), cluster_preset_names(root).c_str());
  return load_cluster_file(preset);
}

}  // namespace loom::planner
