// `loom bench cluster`: the planner's network model against an emulated
// cluster of 2 nodes x 2 ranks on this machine (scripts/cluster/emulate.sh:
// network namespaces joined through a bridge by tc-shaped links).
//
// The same model runs as three layouts: tp 2 inside each node with dp 2
// across the nodes (order tp-dp-pp), tp 2 across the nodes with dp 2 inside
// (dp-tp-pp), and dp 4. First all on one node (plain mpirun, shared memory):
// the baseline, and the runs that calibrate the emulated devices' compute.
// Then, for each link speed, the link itself is measured (a 2-rank
// all-reduce between the nodes, as `loom bench calibrate --mpi` measures a
// node) and written as a cluster file, and each layout runs across the two
// nodes. Predicted (planner::predict_loom_run with that file) against
// measured: step time, communication, and what the link costs (the step's
// growth over the one-node run of the same layout). Last, for each link
// speed, the overlap where each rank has a core of its own (dp 2 across,
// one rank per node): how much of the reduction stays exposed.
//
// --moe: the same with a mixture of experts (the mixtral family, 4 experts
// of width 512, top 2, on the same sizes) in three expert layouts of dp 4:
// ep 2 (each ep group inside a node, the experts' gradients reduced across),
// ep 4 (the all-to-all across the nodes, no expert gradient to reduce) and
// ep 1 (every expert on every rank, all reduced across).
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "config/run_config.h"
#include "core/check.h"
#include "elastic/relayout.h"
#include "core/atomic_file.h"
#include "kernels/cpu/isa.h"
#include "parallel/grid/parallel_context.h"
#include "planner/predict.h"
#include "train/run_context.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

constexpr int kNodes = 2, kRanksPerNode = 2, kRanks = kNodes * kRanksPerNode;

struct Options {
  std::vector<std::string> rates = {"1gbit", "100mbit"};
  int steps = 4;
  int batch = 8;                                // sequences a step (more: backward outlasts the reduction)
  std::vector<std::string> progress = {"off"};  // runtime.progress_thread in the runs across nodes
  std::vector<std::string> sets;  // child only: the layout's --set options
  bool moe = false;               // --moe: the mixture-of-experts layouts
};

struct BenchLayout {
  std::string name;
  std::vector<std::string> sets;  // over model_overrides()
};
const std::vector<BenchLayout> kLayouts = {
    {"tp2 in node, dp2 across", {"parallel.tp=2", "parallel.order=\"tp-dp-pp\""}},
    {"tp2 across, dp2 in node", {"parallel.tp=2", "parallel.order=\"dp-tp-pp\""}},
    {"dp4", {"parallel.tp=1", "parallel.dp_reduce=\"flat\""}},
    {"dp4, hierarchical reduction", {"parallel.tp=1", "parallel.dp_reduce=\"hierarchical\""}}};

// The layout (of either list) whose run measures the overlap across nodes:
// every gradient reduced flat over 4 ranks on 2 nodes.
constexpr size_t kOverlapLayout = 2;

// --moe: the model (over bench_config's sizes) and its expert layouts.
const std::vector<std::string> kMoeModel = {"model.family=\"mixtral\"", "model.n_kv_head=4", "model.n_experts=4",
                                            "model.top_k=2", "model.moe_ffn_hidden=512"};
std::vector<std::string> moe_sets(const std::string& ep) {
  std::vector<std::string> sets = kMoeModel;
  sets.push_back("parallel.ep=" + ep);
  return sets;
}
const std::vector<BenchLayout> kMoeLayouts = {{"mixtral ep2 in node, dp4", moe_sets("2")},
                                              {"mixtral ep4 across, dp4", moe_sets("4")},
                                              {"mixtral ep1 (experts whole), dp4", moe_sets("1")}};

// A tc rate such as "1gbit" or "100mbit" in bits per second; 0 if it is not one.
double rate_bits_per_s(const std::string& rate) {
  size_t digits = 0;
  while (digits < rate.size() && std::isdigit(static_cast<unsigned char>(rate[digits]))) digits++;
  if (digits == 0 || digits > 6) return 0;
  const std::string unit = rate.substr(digits);
  const double scale = unit == "kbit" ? 1e3 : unit == "mbit" ? 1e6 : unit == "gbit" ? 1e9 : 0;
  return std::stod(rate.substr(0, digits)) * scale;
}

Options parse(const Args& args) {
  Options o;
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench cluster: %s needs a value", args[i].c_str());
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--rates") {
      o.rates.clear();
      std::istringstream list(value());
      for (std::string r; std::getline(list, r, ',');) {
        LOOM_USER_CHECK(rate_bits_per_s(r) > 0, "bench cluster: --rates takes tc rates like 1gbit,100mbit; got '%s'",
                        r.c_str());
        o.rates.push_back(r);
      }
      LOOM_USER_CHECK(!o.rates.empty(), "bench cluster: --rates is empty");
    } else if (a == "--steps") o.steps = int_option(value(), "bench cluster", "--steps", 2, 100);
    else if (a == "--batch") o.batch = int_option(value(), "bench cluster", "--batch", 4, 256);
    else if (a == "--progress") {
      o.progress.clear();
      std::istringstream list(value());
      for (std::string p; std::getline(list, p, ',');) {
        LOOM_USER_CHECK(p == "on" || p == "off", "bench cluster: --progress takes on, off or on,off; got '%s'",
                        p.c_str());
        o.progress.push_back(p);
      }
      LOOM_USER_CHECK(!o.progress.empty(), "bench cluster: --progress is empty");
    }
    else if (a == "--set") o.sets.push_back(value());
    else if (a == "--moe") o.moe = true;
    else throw UserError(strprintf("bench cluster: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  return o;
}

// GPT-2 with 4 blocks of d_model 256 over 256 tokens, 8 sequences a step,
// fp32: enough gradient (3.2 M parameters) and activation traffic that a
// 1 Gb/s link shows, small enough for 4 ranks on 2 cores; `layout` on top.
RunConfig bench_config(const std::vector<std::string>& layout, int steps, int batch) {
  std::vector<std::string> sets = {
      "model.vocab_size=256", "model.n_layer=4", "model.n_head=4", "model.d_model=256", "model.seq_len=256",
      "train.batch_size=" + std::to_string(batch), "train.steps=" + std::to_string(steps + 1), "train.warmup_steps=2", "train.eval_every=0",
      "train.log_every=1000", "train.sample_tokens=0", "train.run_dir=\"\"", "runtime.threads=1",
      "precision.compute=\"fp32\"", "data.format=\"bytes\"",
      "data.path=\"" + project_root() + "/data/sample/kjv.txt\""};
  sets.insert(sets.end(), layout.begin(), layout.end());
  return load_run_config("", sets);
}

struct Measured {
  double step_s = 0, tp_s = 0, dp_wait_s = 0, a2a_s = 0;
  double dp_tail_s = 0;   // of dp_wait_s, the least over the ranks: the rest waited for a slower rank
  double calls_s = 0;     // in the calls that start and poll the gradient reduction during backward
  double reduce_alone_s = 0;  // the same bucketed reduction with nothing else running
  double exposed() const { return dp_wait_s + calls_s; }
  // The share of the gradient reduction backward hid: 1 - exposed / alone.
  double hidden() const { return reduce_alone_s > 0 ? std::clamp(1 - exposed() / reduce_alone_s, 0.0, 1.0) : 0; }
  int nodes = 0;
  std::vector<double> losses;
  double comm() const { return tp_s + dp_wait_s + a2a_s; }
};

// OpenMPI yields the core while it waits only when it sees more ranks than
// slots; the emulated nodes declare many slots, so both launches ask for it.
constexpr const char* kYield = "--mca mpi_yield_when_idle 1";

Measured run_layout(const std::string& launcher, const BenchLayout& l, int steps, int batch) {
  std::string cmd =
      launcher + " " + shell_quote(self_exe()) + strprintf(" bench cluster-child --steps %d --batch %d", steps, batch);
  for (const std::string& set : l.sets) cmd += " --set " + shell_quote(set);
  const std::string line = run_for_json(cmd + " 2>&1");
  LOOM_USER_CHECK(!line.empty(), "bench cluster: the run of '%s' failed", l.name.c_str());
  Measured m;
  m.step_s = json_number(line, "step_ms") * 1e-3;
  m.tp_s = json_number(line, "tp_ms") * 1e-3;
  m.dp_wait_s = json_number(line, "dp_wait_ms") * 1e-3;
  m.a2a_s = json_number(line, "a2a_ms") * 1e-3;
  m.reduce_alone_s = json_number(line, "reduce_alone_ms") * 1e-3;
  m.calls_s = json_number(line, "calls_ms") * 1e-3;
  m.dp_tail_s = json_number(line, "dp_tail_ms") * 1e-3;
  m.nodes = int(json_number(line, "nodes"));
  for (int s = 0; s <= steps; s++) m.losses.push_back(json_number(line, strprintf("loss%d", s).c_str()));
  LOOM_USER_CHECK(m.step_s > 0 && m.nodes > 0 && *std::min_element(m.losses.begin(), m.losses.end()) >= 0,
                  "bench cluster: the run of '%s' printed no step time, nodes or losses: %s", l.name.c_str(),
                  line.c_str());
  return m;
}

// The emulation script; `down` whatever happens.
struct EmulatedCluster {
  std::string script = project_root() + "/scripts/cluster/emulate.sh";
  bool up = false;
  void start(const std::string& rate) {
    const CommandResult r = run_command(shell_quote(script) + strprintf(" up %d %s 2>&1", kNodes, rate.c_str()));
    LOOM_USER_CHECK(r.status == 0, "bench cluster: emulate.sh up failed:\n%s", r.output.c_str());
    up = true;
  }
  void stop() {
    if (up) run_command(shell_quote(script) + " down 2>&1");
    up = false;
  }
  std::string launcher(int per_node) const {
    return "OMP_NUM_THREADS=1 " + shell_quote(script) +
           strprintf(" run %d %s -x OMP_NUM_THREADS --", per_node, kYield);
  }
  ~EmulatedCluster() { stop(); }
};

// This machine's devices as the emulation shares them: kRanks ranks on all
// its cores, kRanksPerNode to a node; `speed` scales the compute rate (the
// calibration below).
planner::ClusterSpec emulated(const planner::ClusterSpec& local, int nodes, double speed) {
  planner::ClusterSpec c = local;
  const double share = double(local.devices()) / kRanks;  // of one core per rank
  c.nodes = nodes;
  c.devices_per_node = kRanks / nodes;
  c.peak_flops_fp32 *= share * speed, c.peak_flops_bf16 *= share * speed, c.peak_flops_fp16 *= share * speed;
  c.memory_bandwidth *= share;
  c.memory_bytes = local.memory_bytes * local.devices() / kRanks;
  return c;
}

double percent_off(double predicted, double measured) { return 100.0 * (predicted / measured - 1); }

// "dp 1 tp 1 pp 2 cp 2 zero 1 mb 1"
std::string layout_name(const planner::Layout& l) {
  std::string s = strprintf("dp%d tp%d pp%d", l.dp, l.tp, l.pp);
  if (l.cp > 1) s += strprintf(" cp%d", l.cp);
  if (l.ep > 1) s += strprintf(" ep%d", l.ep);
  if (l.zero > 0) s += strprintf(" z%d", l.zero);
  return s + strprintf(" mb%d", l.micro_batch);
}

// The overlap where each rank has a core of its own: dp 2 across the nodes,
// one rank on each, flat, with the default 4 MiB buckets and with 1 MiB ones
// (the last bucket, filled as backward ends, is never hidden: smaller buckets
// shrink it), for each --progress setting. Each runs kOwnCoreRuns times and
// the run with the median exposed share is printed (the share varies run to
// run on 2 shared cores). Measured only: the cluster file describes the
// 4-rank emulation.
constexpr int kOwnCoreRuns = 3;
void print_own_core_overlap(const EmulatedCluster& cluster, const Options& o, const std::string& rate) {
  std::printf("%s, one rank per node (dp 2 across, each rank a core of its own; median of %d runs by exposed share):\n",
              rate.c_str(), kOwnCoreRuns);
  for (const char* bucket_mb : {"4", "1"}) {
    for (const std::string& progress : o.progress) {
      BenchLayout l{strprintf("dp2 across, %s MiB buckets%s", bucket_mb, progress == "on" ? ", progress thread" : ""),
                    {"parallel.tp=1", "parallel.dp_reduce=\"flat\"", std::string("parallel.bucket_mb=") + bucket_mb,
                     std::string("runtime.progress_thread=") + (progress == "on" ? "true" : "false")}};
      std::vector<Measured> runs;
      std::vector<double> shares;
      for (int i = 0; i < kOwnCoreRuns; i++) {
        runs.push_back(run_layout(cluster.launcher(1), l, o.steps, o.batch));
        LOOM_USER_CHECK(runs.back().nodes == kNodes, "bench cluster: the run saw %d nodes, not %d", runs.back().nodes,
                        kNodes);
        shares.push_back(runs.back().reduce_alone_s > 0 ? runs.back().exposed() / runs.back().reduce_alone_s : 1.0);
      }
      std::string all;
      for (double x : shares) all += strprintf("%s%.0f%%", all.empty() ? "" : " ", 100 * x);
      std::vector<size_t> by_share(runs.size());
      for (size_t i = 0; i < by_share.size(); i++) by_share[i] = i;
      std::sort(by_share.begin(), by_share.end(), [&](size_t a, size_t b) { return shares[a] < shares[b]; });
      const Measured& m = runs[by_share[by_share.size() / 2]];
      std::printf("%-8s %-45s | step %.3f s | reduction alone %.3f s, exposed %.3f s (wait %.3f, of it tail %.3f, "
                  "+ calls %.3f): %.0f%% of it (runs: %s); tail + calls: %.0f%%\n",
                  rate.c_str(), l.name.c_str(), m.step_s, m.reduce_alone_s, m.exposed(), m.dp_wait_s, m.dp_tail_s,
                  m.calls_s, 100 * shares[by_share[by_share.size() / 2]], all.c_str(),
                  m.reduce_alone_s > 0 ? 100 * (m.dp_tail_s + m.calls_s) / m.reduce_alone_s : 100.0);
    }
  }
}

}  // namespace

int cmd_bench_cluster(const Args& args) {
  const Options o = parse(args);
  const std::vector<BenchLayout>& kLayouts = o.moe ? kMoeLayouts : ::loom::cli::kLayouts;
  const std::vector<std::string> model_sets = o.moe ? kMoeModel : std::vector<std::string>{};
  EmulatedCluster cluster;
  {
    LOOM_USER_CHECK(o.sets.empty(), "bench cluster: --set is for its child runs, not for bench cluster");
    const CommandResult check = run_command(shell_quote(cluster.script) + " check 2>&1");
    LOOM_USER_CHECK(check.status == 0, "bench cluster: cannot emulate a cluster here: %s", check.output.c_str());
  }
  const planner::ClusterSpec local = planner::local_cluster_or_default();
  std::printf("loom bench cluster: %d emulated nodes x %d ranks (network namespaces, tc-shaped links) on this "
              "machine's %d cores;\n%s 4 x 256, 256 tokens, batch %d, fp32, %d timed steps after 1 warm-up, 1 "
              "thread per rank\n%s\nplanner: %s\n\n",
              kNodes, kRanksPerNode, local.devices(), o.moe ? "Mixtral (4 experts of 512, top 2)" : "GPT-2", o.batch,
              o.steps, cpu::describe_dispatch().line().c_str(), local.description.c_str());
  std::fflush(stdout);
  auto predict = [&](const BenchLayout& l, const planner::ClusterSpec& c) {
    return planner::predict_loom_run(bench_config(l.sets, o.steps, o.batch), kRanks, c);
  };

  // One node: every group on shared memory.
  const std::string one_node = mpirun_prefix(kRanks, 1) + kYield;
  std::vector<Measured> base;
  for (const BenchLayout& l : kLayouts) base.push_back(run_layout(one_node, l, o.steps, o.batch));
  // The emulated devices' compute rate, calibrated on these runs: the speed
  // at which the prediction's compute fills the measured steps beyond what
  // it predicts for everything else.
  const MpiFigures intra = measure_all_reduce(mpirun_prefix(2, 1), "64M");
  auto with_intra = [&](planner::ClusterSpec c) {
    if (intra.ok) c.intra_bandwidth = intra.bus_bytes_per_s, c.intra_latency = intra.latency_s;
    return c;
  };
  double compute = 0, rest = 0;
  for (size_t i = 0; i < kLayouts.size(); i++) {
    const planner::RunPrediction p = predict(kLayouts[i], with_intra(emulated(local, 1, 1.0)));
    compute += p.compute_seconds, rest += base[i].step_s - (p.step_seconds - p.compute_seconds);
  }
  const double speed = compute / std::max(rest, 1e-9);
  const planner::ClusterSpec node = with_intra(emulated(local, 1, speed));
  std::printf("one node (shared memory): all-reduce %.2f GB/s bus bandwidth, %.0f us; compute calibrated on the\n"
              "one-node runs below: %.1f GFLOP/s per rank (%.2f x the planner's %s rate)\n",
              node.intra_bandwidth * 1e-9, node.intra_latency * 1e6,
              node.peak_flops_fp32 * node.matmul_efficiency * 1e-9, speed, local.name.c_str());

  std::printf("\n%-8s %-40s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s | %6s %6s\n", "link", "layout", "step s",
              "pred s", "off", "comm s", "pred s", "off", "link s", "pred s", "off", "hidden", "pred");
  int step_rows = 0, step_within_15 = 0;  // the rows across nodes: step predicted within 15%
  auto row = [&](const std::string& link, const std::string& name, const Measured& m,
                 const planner::RunPrediction& p, const Measured* one, const planner::RunPrediction* one_p) {
    if (link != "node") step_rows++, step_within_15 += std::abs(p.step_seconds / m.step_s - 1) <= 0.15;
    std::printf("%-8s %-40s | %8.3f %8.3f %+5.0f%% | %8.3f %8.3f %+5.0f%% | ", link.c_str(), name.c_str(), m.step_s,
                p.step_seconds, percent_off(p.step_seconds, m.step_s), m.comm(), p.comm_seconds,
                percent_off(p.comm_seconds, m.comm()));
    if (one) {
      const double link_m = m.step_s - one->step_s, link_p = p.step_seconds - one_p->step_seconds;
      if (link_m > 0) std::printf("%8.3f %8.3f %+5.0f%% | ", link_m, link_p, percent_off(link_p, link_m));
      else std::printf("%8.3f %8.3f %6s | ", link_m, link_p, "-");  // no slower than one node: noise
    } else {
      std::printf("%8s %8s %6s | ", "-", "-", "-");
    }
    // The gradient reduction's share hidden behind backward, where there is one.
    if (p.reduce_seconds > 0 && m.reduce_alone_s > 0)
      std::printf("%5.0f%% %5.0f%%\n", 100 * m.hidden(), 100 * p.reduce_hidden());
    else std::printf("%6s %6s\n", "-", "-");
    std::fflush(stdout);
  };
  std::vector<planner::RunPrediction> base_pred;
  for (size_t i = 0; i < kLayouts.size(); i++) {
    base_pred.push_back(predict(kLayouts[i], node));
    row("node", kLayouts[i].name, base[i], base_pred.back(), nullptr, nullptr);
  }

  int rankings_agree = 0, link_within_25 = 0, link_rows = 0, planner_best = 0;
  for (const std::string& rate : o.rates) {
    cluster.start(rate);
    // The link between the nodes as `loom bench calibrate --mpi` measures
    // it under a job with one rank on each node: a 2-rank all-reduce.
    const MpiFigures link = measure_all_reduce(cluster.launcher(1), "4M");
    LOOM_USER_CHECK(link.ok, "bench cluster: measuring the %s link failed", rate.c_str());
    planner::ClusterSpec two = emulated(local, kNodes, speed);
    // A cross-node reduction hides behind backward only as measured below.
    two.inter_overlap = 0;
    two.intra_bandwidth = node.intra_bandwidth, two.intra_latency = node.intra_latency;
    two.inter_bandwidth = link.bus_bytes_per_s, two.inter_latency = link.latency_s;
    two.name = "emulated-2x2-" + rate;
    two.description = strprintf("%d emulated nodes x %d ranks on one machine's %d cores, %s links (tc tbf); "
                                "measured by loom bench cluster",
                                kNodes, kRanksPerNode, local.devices(), rate.c_str());
    const std::string file = project_root() + "/.cache/cluster-" + two.name + ".toml";
    std::filesystem::create_directories(project_root() + "/.cache");
    write_file_atomically(file, two.to_toml());
    std::printf("\n%s link: all-reduce between the nodes (one rank on each) %.1f MB/s bus bandwidth (%.0f%% of the "
                "nominal rate), %.0f us; wrote %s\n",
                rate.c_str(), two.inter_bandwidth * 1e-6, 100 * two.inter_bandwidth * 8 / rate_bits_per_s(rate),
                link.latency_s * 1e6, file.c_str());
    std::vector<double> measured, predicted;
    std::vector<Measured> first_setting(kLayouts.size());
    double worst_dloss = 0;
    // With and without the progress thread (--progress); the rankings below
    // compare the first setting's runs.
    auto with_setting = [&](size_t i, size_t t) {
      BenchLayout l = kLayouts[i];
      const bool thread = o.progress[t] == "on";
      l.sets.push_back(std::string("runtime.progress_thread=") + (thread ? "true" : "false"));
      if (thread) l.name += ", progress thread";
      return l;
    };
    auto run_across = [&](const BenchLayout& l) {
      const Measured m = run_layout(cluster.launcher(kRanksPerNode), l, o.steps, o.batch);
      LOOM_USER_CHECK(m.nodes == kNodes, "bench cluster: the run saw %d nodes, not %d", m.nodes, kNodes);
      return m;
    };
    // The overlap across nodes, measured: the whole-group flat reduction
    // (kOverlapLayout) runs first under each --progress setting, and the
    // share of backward that hides a reduction across nodes (inter_overlap,
    // or inter_overlap_progress with the thread) is set so that the
    // prediction's exposed reduction is the one measured; every row below
    // uses it.
    two.inter_overlap = two.inter_overlap_progress = 0;
    std::vector<Measured> calibration(o.progress.size());
    for (size_t t = 0; t < o.progress.size(); t++) {
      const BenchLayout l = with_setting(kOverlapLayout, t);
      calibration[t] = run_across(l);
      const bool thread = o.progress[t] == "on";
      double& share = thread ? two.inter_overlap_progress : two.inter_overlap;
      auto exposed_at = [&](double f) {
        planner::ClusterSpec c = two;
        (thread ? c.inter_overlap_progress : c.inter_overlap) = f;
        return predict(l, c).reduce_exposed_seconds;
      };
      double lo = 0, hi = 1;
      if (calibration[t].exposed() >= exposed_at(0)) hi = 0;
      else if (calibration[t].exposed() <= exposed_at(1)) lo = 1;
      for (int it = 0; it < 40 && hi - lo > 1e-4; it++) {
        const double mid = 0.5 * (lo + hi);
        (exposed_at(mid) > calibration[t].exposed() ? lo : hi) = mid;
      }
      share = 0.5 * (lo + hi);
      write_file_atomically(file, two.to_toml());
      std::printf("overlap across nodes: %s exposed %.3f s of its reduction's %.3f s alone (%.0f%% hidden): "
                  "%s = %.2f of backward, written to the file\n",
                  l.name.c_str(), calibration[t].exposed(), calibration[t].reduce_alone_s,
                  100 * calibration[t].hidden(), thread ? "overlap_progress_thread" : "overlap", share);
    }
    for (size_t i = 0; i < kLayouts.size(); i++) {
      for (size_t t = 0; t < o.progress.size(); t++) {
        const BenchLayout l = with_setting(i, t);
        const Measured m = i == kOverlapLayout ? calibration[t] : run_across(l);
        row(rate, l.name, m, predict(l, two), &base[i], &base_pred[i]);
        if (t == 0) first_setting[i] = m;
      }
      // The ranking compares the first --progress setting's runs, predicted with that setting.
      const Measured& m = first_setting[i];
      const planner::RunPrediction p = predict(with_setting(i, 0), two);
      measured.push_back(m.step_s), predicted.push_back(p.step_seconds);
      const double link_m = m.step_s - base[i].step_s, link_p = p.step_seconds - base_pred[i].step_seconds;
      link_rows++, link_within_25 += link_m > 0 && std::abs(link_p / link_m - 1) <= 0.25;
      for (size_t k = 0; k < m.losses.size(); k++)
        worst_dloss = std::max(worst_dloss, std::abs(m.losses[k] - base[i].losses[k]));
    }
    // What the planner itself proposes for this cluster (loom plan --layout
    // auto --cluster FILE), run the same way, under the first --progress setting.
    std::vector<std::string> plain_sets = model_sets;
    plain_sets.push_back(std::string("runtime.progress_thread=") + (o.progress[0] == "on" ? "true" : "false"));
    const RunConfig plain = bench_config(plain_sets, o.steps, o.batch);
    const planner::Layout chosen = planner::choose_layout(plain, kRanks, two);
    BenchLayout proposal{"planner: " + layout_name(chosen), plain_sets};
    for (const std::string& set : elastic::layout_overrides(plain, chosen)) proposal.sets.push_back(set);
    const Measured pm = run_layout(cluster.launcher(kRanksPerNode), proposal, o.steps, o.batch);
    row(rate, proposal.name, pm, predict(proposal, two), nullptr, nullptr);
    const bool best = pm.step_s <= *std::min_element(measured.begin(), measured.end());
    planner_best += best;
    print_own_core_overlap(cluster, o, rate);
    cluster.stop();
    auto order_of = [&](const std::vector<double>& t) {
      std::vector<size_t> idx(t.size());
      for (size_t i = 0; i < t.size(); i++) idx[i] = i;
      std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return t[a] < t[b]; });
      std::string s;
      for (size_t i : idx) s += (s.empty() ? "" : " < ") + kLayouts[i].name;
      return s;
    };
    const std::string m_order = order_of(measured), p_order = order_of(predicted);
    rankings_agree += m_order == p_order;
    std::printf("%s: measured %s\n%*s  predicted %s (%s)\n%*s  the planner's own choice ran %.2fx the best of "
                "these (%s); losses within %.1e of the one-node runs\n",
                rate.c_str(), m_order.c_str(), int(rate.size()), "", p_order.c_str(),
                m_order == p_order ? "same order" : "DIFFERENT order", int(rate.size()), "",
                pm.step_s / *std::min_element(measured.begin(), measured.end()), best ? "faster" : "slower",
                worst_dloss);
  }
  std::printf("\nrankings: %zu of %zu link speeds in the measured order; step within 15%%: %d of %d rows across "
              "nodes; link cost within 25%%: %d of %d rows; the planner's choice was the fastest at %d of %zu\n"
              "step s = mean step time after the first; pred s = planner::predict_loom_run on the cluster file "
              "(compute calibrated on one node, links measured)\n"
              "comm s = tensor-parallel waits + gradient-reduction wait after backward (+ the expert all-to-alls' "
              "waits), as loom measures them; the "
              "waits include\n         a peer that is not running (4 ranks share 2 cores), which the prediction "
              "does not model\n"
              "link s = step time across the two nodes minus the same layout's on one node: what the link costs\n"
              "tail   = of the wait after backward, the least over the ranks per step: the reduction's own; the "
              "rest waited\n         for a rank whose backward ended later\n",
              size_t(rankings_agree), o.rates.size(), step_within_15, step_rows, link_within_25, link_rows,
              planner_best, o.rates.size());
  return 0;
}

int cmd_bench_cluster_child(const Args& args, MpiRuntime& mpi) {
  const Options o = parse(args);
  // bench cluster runs it on kRanks ranks; fewer (2, one per node) measure
  // the reduction where each rank has a core of its own.
  LOOM_USER_CHECK(mpi.world_size() >= 2 && mpi.world_size() <= kRanks, "bench cluster-child: run with -np 2 to %d",
                  kRanks);
  const RunConfig cfg = bench_config(o.sets, o.steps, o.batch);
  const ParallelConfig& pc = cfg.parallel;
  auto ctx = make_run_context(cfg, ParallelGrid::for_world(mpi.world_size(), pc.dp, pc.tp, pc.pp, pc.order, pc.cp, pc.ep), mpi);
  const TrainResult r = train(cfg, *ctx, nullptr);
  // The gradient reduction alone: the buckets the run reduces, started
  // together and waited for, with nothing to overlap (best of 3; slowest rank).
  float alone_ms = 0;
  if (Communicator& dp = ctx->dp(); dp.size() > 1) {
    std::vector<float> grads(size_t(r.param_bytes / 4), 1.0f);  // fp32: one gradient per parameter
    const size_t bucket = size_t(double(cfg.parallel.bucket_mb) * (1 << 20) / 4);
    alone_ms = 1e30f;
    for (int rep = 0; rep < 3; rep++) {
      ctx->world().barrier();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::unique_ptr<Work>> works;
      for (size_t at = 0; at < grads.size(); at += bucket)
        works.push_back(dp.all_reduce_async(grads.data() + at, std::min(bucket, grads.size() - at), DType::f32,
                                            ReduceOp::Sum));
      for (auto& w : works) w->wait();
      alone_ms = std::min(alone_ms, float(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
    }
    ctx->world().all_reduce(&alone_ms, 1, DType::f32, ReduceOp::Max);
  }
  double a2a_ms = 0;  // the expert all-to-alls' wait, mean over the steps after the first
  for (size_t s = 1; s < r.moe_steps.size(); s++) a2a_ms += r.moe_steps[s].a2a_ms / double(r.moe_steps.size() - 1);
  if (mpi.world_rank() == 0) {
    std::printf("{\"step_ms\": %.2f, \"tp_ms\": %.2f, \"dp_wait_ms\": %.2f, \"a2a_ms\": %.2f, \"nodes\": %d, "
                "\"reduce_alone_ms\": %.2f, \"calls_ms\": %.2f, \"dp_tail_ms\": %.2f",
                r.step_ms, r.tp_comm_ms, r.reduce_wait_ms, a2a_ms, ctx->nodes().nodes(), alone_ms, r.reduce_calls_ms,
                r.reduce_tail_ms);
    for (size_t s = 0; s < r.train_losses.size(); s++) std::printf(", \"loss%zu\": %.7f", s, r.train_losses[s]);
    std::printf("}\n");
  }
  return 0;
}

}  // namespace loom::cli
