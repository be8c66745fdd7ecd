#include "bench/bench_planner_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom::cli {
namespace {

constexpr double kMiB = 1 << 20;
// The issue's targets: memory within 10% on every row, step time within 20%
// after `loom bench calibrate`.
constexpr double kMemTarget = 0.10, kStepTarget = 0.20, kOversubscribedStepTarget = 0.30;

// pred / meas - 1, as loom train's "plan vs measured" line: + is over-predicted.
double rel_error(double pred, double meas) { return pred / meas - 1; }

// A number, or "-" when unknown.
std::string num(const char* fmt, double v) { return std::isfinite(v) ? strprintf(fmt, v) : std::string("-"); }

std::string layout_columns(const BenchLayout& l) {
  return strprintf("%-7s %2d %2d %2d %2d %1d %-11s %1d %2d %-9s %-4s %-2s", l.model->name, l.ranks, l.dp(), l.tp, l.pp,
                   l.zero, l.pp > 1 ? l.schedule : "-", l.v, l.micro_batches(), l.recompute, l.precision,
                   l.sp ? "sp" : "-");
}

// "gpt2-s dp2 tp1 pp2 ZeRO-3 1f1b v1 m2, recompute none, bf16"
std::string layout_name(const BenchLayout& l) {
  std::string s = strprintf("%s dp%d tp%d%s pp%d ZeRO-%d", l.model->name, l.dp(), l.tp, l.sp ? "+sp" : "", l.pp, l.zero);
  if (l.pp > 1) s += strprintf(" %s v%d m%d", l.schedule, l.v, l.micro_batches());
  else if (l.micro_batches() > 1) s += strprintf(" m%d", l.micro_batches());
  return s + strprintf(", recompute %s, %s", l.recompute, l.precision);
}

struct ErrorStats {
  int rows = 0, within = 0, worst_row = 0;
  double worst = NAN, mean_abs = 0;
};

ErrorStats stats(const std::vector<PlannerRun>& runs, double target,
                 const std::function<double(const PlannerRun&)>& error) {
  ErrorStats s;
  for (size_t i = 0; i < runs.size(); i++) {
    const double e = runs[i].ok ? error(runs[i]) : NAN;
    if (!std::isfinite(e)) continue;
    s.rows++, s.mean_abs += std::fabs(e), s.within += std::fabs(e) <= target;
    if (!std::isfinite(s.worst) || std::fabs(e) > std::fabs(s.worst)) s.worst = e, s.worst_row = int(i + 1);
  }
  if (s.rows > 0) s.mean_abs /= s.rows;
  return s;
}

void print_stats(const char* what, const ErrorStats& s, double target, const std::vector<PlannerRun>& runs) {
  if (s.rows == 0) {
    std::printf("  %-52s no row has both figures\n", what);
    return;
  }
  std::printf("  %-52s worst row %d, %+.1f%% (%s)\n  %-52s mean |error| %.1f%%; within %.0f%%: %d of %d rows\n", what,
              s.worst_row, 100 * s.worst, layout_name(runs[size_t(s.worst_row - 1)].layout).c_str(), "",
              100 * s.mean_abs, 100 * target, s.within, s.rows);
}

}  // namespace

OverheadProbe overhead_probe_from(const PlannerRun& run, double planner_overhead) {
  OverheadProbe p;
  p.ranks = run.layout.ranks;
  p.peak_rss = run.meas_mem;
  p.model_bytes = run.pred_mem - planner_overhead;
  p.overhead = p.peak_rss - p.model_bytes;
  p.ok = run.ok && std::isfinite(p.overhead);
  return p;
}

void substitute_overhead(PlannerRun& run, const std::vector<OverheadProbe>& probes, double planner_overhead) {
  for (const OverheadProbe& p : probes)
    if (p.ok && p.ranks == run.layout.ranks) run.pred_mem_measured_overhead = run.pred_mem - planner_overhead + p.overhead;
}

void print_overhead_header(const BenchModel& model) {
  std::printf("per-process overhead, measured: the %s model (%s), data parallel, ZeRO-0, fp32\n", model.name,
              model.describe().c_str());
  std::printf("%5s | %12s %18s %13s\n", "ranks", "peak RSS MiB", "planner model MiB", "overhead MiB");
}

void print_overhead_row(const OverheadProbe& p, const std::string& error) {
  if (!error.empty()) std::printf("%5d | failed: %s\n", p.ranks, error.c_str());
  else
    std::printf("%5d | %12s %18s %13s\n", p.ranks, num("%.1f", p.peak_rss / kMiB).c_str(),
                num("%.1f", p.model_bytes / kMiB).c_str(), num("%.1f", p.overhead / kMiB).c_str());
  std::fflush(stdout);
}

void print_run_header() {
  std::printf("%3s %-7s %2s %2s %2s %2s %1s %-11s %1s %2s %-9s %-4s %-2s | %8s %8s %7s | %9s %7s | %8s %8s %7s\n", "#",
              "model", "np", "dp", "tp", "pp", "Z", "schedule", "v", "m", "recompute", "prec", "sp", "pred MiB",
              "meas MiB", "err", "pred* MiB", "err*", "pred ms", "meas ms", "err");
  std::fflush(stdout);
}

void print_run_row(int index, const PlannerRun& r) {
  std::printf("%3d %s | ", index, layout_columns(r.layout).c_str());
  if (!r.ok) {
    std::printf("failed: %s\n", r.error.c_str());
  } else {
    std::printf("%8s %8s %7s | %9s %7s | %8s %8s %7s\n", num("%.1f", r.pred_mem / kMiB).c_str(),
                num("%.1f", r.meas_mem / kMiB).c_str(), num("%+.1f%%", 100 * rel_error(r.pred_mem, r.meas_mem)).c_str(),
                num("%.1f", r.pred_mem_measured_overhead / kMiB).c_str(),
                num("%+.1f%%", 100 * rel_error(r.pred_mem_measured_overhead, r.meas_mem)).c_str(),
                num("%.1f", 1e3 * r.pred_step).c_str(), num("%.1f", 1e3 * r.meas_step).c_str(),
                num("%+.1f%%", 100 * rel_error(r.pred_step, r.meas_step)).c_str());
  }
  std::fflush(stdout);
}

void print_summary(const std::vector<PlannerRun>& runs, double planner_overhead, bool calibrated) {
  int failed = 0;
  for (const PlannerRun& r : runs) failed += !r.ok;
  std::printf("\n%zu rows, %d finished%s\n", runs.size(), int(runs.size()) - failed,
              failed ? strprintf(", %d failed (their reasons are in their rows)", failed).c_str() : "");
  const std::string mem = strprintf("memory, as loom train prints it (overhead %.0f MiB):", planner_overhead / kMiB);
  print_stats(mem.c_str(), stats(runs, kMemTarget, [](const PlannerRun& r) { return rel_error(r.pred_mem, r.meas_mem); }),
              kMemTarget, runs);
  print_stats("memory, measured overhead substituted (*):",
              stats(runs, kMemTarget,
                    [](const PlannerRun& r) { return rel_error(r.pred_mem_measured_overhead, r.meas_mem); }),
              kMemTarget, runs);
  // Rows whose ranks outnumber the cores time-share them: reported apart,
  // against a wider target (issue 38: 30%).
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string fits = strprintf("step time%s, ranks <= %d cores:", calibrated ? "" : " (UNCALIBRATED)", cores);
  const std::string over = strprintf("step time%s, ranks > %d cores:", calibrated ? "" : " (UNCALIBRATED)", cores);
  print_stats(fits.c_str(), stats(runs, kStepTarget, [cores](const PlannerRun& r) {
                return r.layout.ranks <= cores ? rel_error(r.pred_step, r.meas_step) : NAN;
              }),
              kStepTarget, runs);
  print_stats(over.c_str(), stats(runs, kOversubscribedStepTarget, [cores](const PlannerRun& r) {
                return r.layout.ranks > cores ? rel_error(r.pred_step, r.meas_step) : NAN;
              }),
              kOversubscribedStepTarget, runs);
  std::printf(
      "\nnp, dp, tp, pp = ranks and the grid; Z = ZeRO stage; v = chunks per stage; m = micro-batches per step\n"
      "pred MiB  = the planner's peak memory per rank (the rank that needs the most), as the run printed it\n"
      "meas MiB  = the largest peak RSS over the run's ranks\n"
      "err       = pred / meas - 1 (+: predicted more than measured)\n"
      "pred* MiB = pred with the planner's %.1f MiB per-process overhead replaced by the one measured above at the\n"
      "            same rank count (= the probe's peak RSS less the planner's bytes for the probe model's buffers)\n"
      "pred ms   = the planner's step time; meas ms = the mean of the run's steps after the first\n"
      "targets (issues 18, 38): memory within 10%% on every row; step time within 20%% (30%% where ranks outnumber\n"
      "            the cores) with the automatic calibration\n",
      planner_overhead / kMiB);
}

nlohmann::json to_json(const std::vector<PlannerRun>& runs, const std::vector<OverheadProbe>& probes,
                       double planner_overhead, bool calibrated) {
  nlohmann::json j;
  j["calibrated"] = calibrated;
  j["planner_overhead_mib"] = planner_overhead / kMiB;
  j["overhead"] = nlohmann::json::array();
  for (const OverheadProbe& p : probes)
    j["overhead"].push_back({{"ranks", p.ranks}, {"ok", p.ok}, {"peak_rss_mib", p.peak_rss / kMiB},
                             {"model_mib", p.model_bytes / kMiB}, {"overhead_mib", p.overhead / kMiB}});
  j["rows"] = nlohmann::json::array();
  for (const PlannerRun& r : runs) {
    const BenchLayout& l = r.layout;
    j["rows"].push_back({{"model", l.model->name}, {"ranks", l.ranks}, {"dp", l.dp()}, {"tp", l.tp}, {"pp", l.pp},
                         {"zero", l.zero}, {"schedule", l.pp > 1 ? l.schedule : "none"}, {"virtual_stages", l.v},
                         {"micro_batches", l.micro_batches()}, {"recompute", l.recompute},
                         {"precision", l.precision}, {"sequence_parallel", l.sp}, {"ok", r.ok}, {"error", r.error},
                         {"predicted_mem_mib", r.pred_mem / kMiB}, {"measured_mem_mib", r.meas_mem / kMiB},
                         {"predicted_mem_measured_overhead_mib", r.pred_mem_measured_overhead / kMiB},
                         {"predicted_step_s", r.pred_step}, {"measured_step_s", r.meas_step}});
  }
  return j;
}

}  // namespace loom::cli
