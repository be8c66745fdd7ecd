#include "obs/report.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/check.h"
#include "obs/diagnosis.h"
#include "obs/line_chart.h"
#include "obs/report_html.h"
#include "obs/run_figures.h"
#include "obs/timeline_chart.h"

namespace loom::obs {
namespace {

std::string num(double v, const char* fmt = "%.3g") { return std::isfinite(v) ? strprintf(fmt, v) : "n/a"; }
std::string pct(double share) { return std::isfinite(share) ? strprintf("%.1f%%", share * 100) : "n/a"; }
std::string mib(double bytes) { return std::isfinite(bytes) ? strprintf("%.1f MiB", bytes / (1 << 20)) : "n/a"; }
std::string ratio(double predicted, double measured) {
  if (!std::isfinite(predicted) || !std::isfinite(measured) || predicted <= 0) return "n/a";
  return strprintf("%+.1f%%", (measured / predicted - 1) * 100);
}

ChartSeries named(const char* name) {
  ChartSeries s;
  s.name = name;
  return s;
}

std::vector<ChartSeries> loss_series(const RunData& run) {
  ChartSeries train = named("train loss"), val = named("validation loss");
  for (const StepMetrics& m : run.steps) {
    train.x.push_back(double(m.step)), train.y.push_back(m.skipped ? kUnknown : m.loss);
    if (std::isfinite(m.val_loss)) val.x.push_back(double(m.step)), val.y.push_back(m.val_loss);
  }
  std::vector<ChartSeries> out{train};
  if (!val.x.empty()) out.push_back(val);
  return out;
}

ChartSeries series_of(const RunData& run, const char* name, double StepMetrics::*field, double scale = 1) {
  ChartSeries s = named(name);
  for (const StepMetrics& m : run.steps) s.x.push_back(double(m.step)), s.y.push_back(m.*field * scale);
  return s;
}

bool varies(const RunData& run, double StepMetrics::*field, double baseline) {
  for (const StepMetrics& m : run.steps)
    if (std::isfinite(m.*field) && m.*field != baseline) return true;
  return false;
}

bool convert_to_png(const std::string& converter, const std::string& svg, const std::string& png) {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::execl(converter.c_str(), converter.c_str(), "-o", png.c_str(), svg.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string layout_line(const RunLayout& l) {
  std::string s = strprintf("dp %d x tp %d x pp %d%s = %d ranks (order %s), ZeRO %d", l.dp, l.tp, l.pp,
                            l.cp > 1 ? strprintf(" x cp %d", l.cp).c_str() : "", l.world_size, l.order.c_str(),
                            l.zero);
  if (l.pp > 1)
    s += strprintf(", schedule %s with %d micro-batches%s", l.schedule.c_str(), l.micro_batches,
                   l.virtual_stages > 1 ? strprintf(" and %d virtual stages", l.virtual_stages).c_str() : "");
  s += ", compute " + l.dtype + (l.loss_scaling ? " with dynamic loss scaling" : "");
  if (l.batch_size > 0) s += strprintf(", global batch %d x %d tokens", l.batch_size, l.seq_len);
  if (l.nodes > 0) s += strprintf(", on %d node%s (at most %d ranks each)", l.nodes, l.nodes == 1 ? "" : "s",
                                  l.ranks_per_node);
  return s;
}

// Saves and how long each held up training (metrics.jsonl's checkpoint_stall_s).
std::string checkpoints_line(const RunData& run) {
  int saves = 0;
  double sum = 0, worst = 0;
  for (const StepMetrics& m : run.steps)
    if (m.checkpoint_stall_s > 0) saves++, sum += m.checkpoint_stall_s, worst = std::max(worst, m.checkpoint_stall_s);
  if (saves == 0) return "Checkpoints: none saved.\n";
  return strprintf("Checkpoints: %d saves; training stalled %.3f s per save on average, %.3f s at most.\n", saves,
                   sum / saves, worst);
}

// Restarts (elastic.jsonl), stragglers (metrics.jsonl) and checkpoint stalls.
std::string faults_section(const RunData& run) {
  std::string md = "\n## Faults\n\n";
  if (run.restarts.empty()) md += "Restarts: none (no elastic.jsonl: not run under `loom elastic`, or nothing failed).\n";
  else {
    md += strprintf("Restarts (`loom elastic`, elastic.jsonl): %zu.\n\n", run.restarts.size());
    md += "| attempt | failed ranks | after step | outcome | resumed at | steps lost | detect | restart | layout after | "
          "reason |\n|---|---|---|---|---|---|---|---|---|---|\n";
    auto cell = [](std::string text) {  // a table cell: no column breaks
      for (size_t at = 0; (at = text.find('|', at)) != std::string::npos; at += 2) text.replace(at, 1, "\\|");
      return text;
    };
    for (const RestartRecord& r : run.restarts) {
      std::string ranks;
      for (int k : r.failed_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(k);
      md += strprintf("| %d | %s | %lld | %s | %s | %s | %s | %s | %s | %s |\n", r.attempt, ranks.c_str(),
                      (long long)r.failed_at_step, r.outcome.c_str(),
                      r.resumed_step >= 0 ? std::to_string(r.resumed_step).c_str() : "n/a",
                      r.steps_lost >= 0 ? std::to_string(r.steps_lost).c_str() : "n/a", num(r.detect_s, "%.1f s").c_str(),
                      num(r.restart_s, "%.1f s").c_str(), r.new_layout.empty() ? "n/a" : cell(r.new_layout).c_str(),
                      cell(r.reason).c_str());
    }
  }
  // Each rank the straggler monitor named: from when, and how slow at worst.
  std::map<int, std::pair<int64_t, double>> named;  // rank -> first step, largest ratio
  for (const StepMetrics& m : run.steps)
    for (const Straggler& x : m.stragglers) {
      auto [it, fresh] = named.try_emplace(x.rank, m.step, x.ratio);
      if (!fresh) it->second.second = std::max(it->second.second, x.ratio);
    }
  if (named.empty()) md += "\nStragglers: none named.\n";
  else {
    md += "\nStragglers (train.straggler_factor):";
    for (const auto& [rank, first] : named)
      md += strprintf(" rank %d from step %lld, up to %.2fx the median rank's compute;", rank, (long long)first.first,
                      first.second);
    md.back() = '.', md += "\n";
  }
  md += "\n" + checkpoints_line(run);
  return md;
}

// A mixture of experts' routing (metrics.jsonl's moe): the expert loads,
// the router losses and the balancing bias at the first, middle and last
// step recorded; empty for a dense model.
std::string experts_section(const RunData& run) {
  std::vector<const StepMetrics*> moe;
  for (const StepMetrics& m : run.steps)
    if (m.moe.experts > 0) moe.push_back(&m);
  if (moe.empty()) return "";
  const MoeStepMetrics& last = moe.back()->moe;
  std::string md = strprintf("\n## Experts\n\n%d experts, top %d: the busiest and idlest expert's (token, expert) "
                             "pairs over the mean in the worst layer (perfect balance 1.00; the ceiling %.2f means "
                             "every token chose the same experts; 0 an expert with no token).\n\n"
                             "| step | load max | load min | aux loss | z-loss | largest bias |\n|---|---|---|---|---|---|\n",
                             last.experts, last.top_k, double(last.experts) / std::max(1, last.top_k));
  std::vector<size_t> rows = {0, moe.size() / 2, moe.size() - 1};
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (size_t i : rows) {
    const MoeStepMetrics& x = moe[i]->moe;
    md += strprintf("| %lld | %s | %s | %s | %s | %s |\n", (long long)moe[i]->step, num(x.load_max, "%.2f").c_str(),
                    num(x.load_min, "%.2f").c_str(), num(x.aux_loss, "%.4g").c_str(), num(x.z_loss, "%.4g").c_str(),
                    num(x.bias_max, "%.3g").c_str());
  }
  if (last.ep > 1) {  // expert parallelism: what the exchange cost and how evenly the ranks were loaded
    md += strprintf("\nExperts spread over ep = %d ranks: the slowest rank's wait on the token all-to-alls per step "
                    "(exposed, not hidden behind compute) and the busiest rank's received (token, expert) rows over "
                    "the mean (1.00: every rank ran as many); hidden: the exchanges' flight beside the shared "
                    "expert's work.\n\n| step | all-to-all ms | hidden ms | rank load max |\n|---|---|---|---|\n",
                    last.ep);
    for (size_t i : rows)
      md += strprintf("| %lld | %.2f | %.2f | %s |\n", (long long)moe[i]->step, moe[i]->moe.a2a_ms,
                      moe[i]->moe.a2a_hidden_ms, num(moe[i]->moe.rank_load_max, "%.2f").c_str());
  }
  return md;
}

std::string markdown(const RunData& run, const RunFigures& f, const std::vector<std::string>& charts,
                     const std::string& png_note) {
  std::string md = "# Run report: " + run.path + "\n\n";
  std::string read;
  if (run.layout) read += " layout.json,";
  if (!run.steps.empty())
    read += strprintf(" metrics.jsonl (%zu steps, %lld to %lld),", run.steps.size(), (long long)run.steps.front().step,
                      (long long)run.steps.back().step);
  if (run.summary) read += run.summary->finished ? " summary.json (finished)," : " summary.json (not finished),";
  if (!run.trace.empty()) read += strprintf(" trace.json (%zu ranks),", run.trace.size());
  if (!read.empty()) read.pop_back();
  md += "Read:" + read + ".\n";
  if (!run.missing.empty()) {
    md += "Missing:";
    for (const std::string& m : run.missing) md += " " + m;
    md += ".\n";
  }
  for (const std::string& n : run.notes) md += "\n> " + n + "\n";
  if (run.layout) md += "\nLayout: " + layout_line(*run.layout) + ".\n";
  if (run.summary && run.summary->cpu.count("line")) md += "\nCPU and kernels: `" + run.summary->cpu.at("line") + "`.\n";

  md += "\n## Throughput\n\n| | |\n|---|---|\n";
  md += "| step time (median) | " + num(f.step_s * 1e3, "%.1f ms") + " |\n";
  md += "| tokens/s (median) | " + num(f.tokens_per_s, "%.0f") + " |\n";
  md += "| MFU (median) | " + pct(f.mfu) + " |\n";
  md += "| peak memory per rank (max) | " + mib(f.peak_mem_bytes) + " |\n";
  md += strprintf("| steps measured | %d (the first is left out as warm-up) |\n", f.steps_measured);

  if (f.steps_measured > 0 && f.step_s > 0) {
    md += "\nTime split of a step (rank 0, medians):\n\n| part | seconds | share |\n|---|---|---|\n";
    std::pair<const char*, double> parts[] = {{"compute", f.split.compute},     {"communication exposed", f.split.comm_exposed},
                                              {"pipeline bubble", f.split.bubble}, {"optimizer", f.split.optimizer},
                                              {"data", f.split.data}};
    for (const auto& [name, v] : parts) md += strprintf("| %s | %.4f | %s |\n", name, v, pct(v / f.step_s).c_str());
  }

  md += "\n## Pipeline\n\n";
  if (f.bubble_per_stage.empty()) md += "Bubble per stage: not measured.\n";
  else {
    md += "| stage | bubble (share of step) |" + std::string(f.compute_s_per_stage.empty() ? "" : " compute per step |") +
          "\n|---|---|" + (f.compute_s_per_stage.empty() ? "" : "---|") + "\n";
    for (size_t s = 0; s < f.bubble_per_stage.size(); s++) {
      md += strprintf("| %zu | %s |", s, pct(f.bubble_per_stage[s]).c_str());
      if (!f.compute_s_per_stage.empty())
        md += " " + (s < f.compute_s_per_stage.size() ? num(f.compute_s_per_stage[s] * 1e3, "%.2f ms") : "n/a") + " |";
      md += "\n";
    }
    md += "\nSource: " + f.bubble_source + ".\n";
  }

  md += "\n## Communication\n\n";
  if (f.exposed_comm_s.empty() && !std::isfinite(f.exposed_comm_share)) md += "Exposed communication: not measured.\n";
  else {
    md += "Exposed communication: " + pct(f.exposed_comm_share) + " of the step (" + f.comm_source + ")";
    if (f.waited_for_slower_share > 0)
      md += "; besides, the ranks waited " + pct(f.waited_for_slower_share) +
            " of the step for a slower rank's compute (a straggler or noisy cores, not communication)";
    md += ".\n\n";
    if (!f.exposed_comm_s.empty()) {
      md += "| group | waited per step | of it for a slower rank | overlap achieved |\n|---|---|---|---|\n";
      for (const auto& [g, v] : f.exposed_comm_s) {
        auto o = f.overlap.find(g);
        auto w = f.waited_for_slower_s.find(g);
        md += "| " + g + " | " + num(v * 1e3, "%.2f ms") + " | " +
              (w == f.waited_for_slower_s.end() ? "n/a" : num(w->second * 1e3, "%.2f ms")) + " | " +
              (o == f.overlap.end() ? "n/a" : pct(o->second)) + " |\n";
      }
    }
    for (const auto& [g, o] : f.overlap)
      if (!f.exposed_comm_s.count(g)) md += "Overlap achieved for " + g + ": " + pct(o) + ".\n";
  }

  md += experts_section(run);
  md += faults_section(run);

  md += "\n## Predicted vs measured\n\n";
  if (!run.summary) md += "No summary.json: nothing predicted to compare.\n";
  else {
    const RunSummary& s = *run.summary;
    md += "| | predicted | measured | measured vs predicted |\n|---|---|---|---|\n";
    md += "| step time | " + num(s.predicted_step_s * 1e3, "%.1f ms") + " | " + num(s.measured_step_s * 1e3, "%.1f ms") +
          " | " + ratio(s.predicted_step_s, s.measured_step_s) + " |\n";
    md += "| peak memory per rank | " + mib(s.predicted_mem_bytes) + " | " + mib(s.measured_mem_bytes) + " | " +
          ratio(s.predicted_mem_bytes, s.measured_mem_bytes) + " |\n";
  }

  md += "\n## Charts\n\n";
  for (const std::string& c : charts) {
    std::string stem = c.substr(0, c.size() - 4);  // loss.svg or loss.png: "loss"
    md += "![" + stem + "](" + c + ")\n";
  }
  if (!png_note.empty()) md += "\n" + png_note + "\n";

  Diagnosis d = diagnose(run, f);
  md += "\n## Likely causes (loom diagnose)\n\n";
  if (d.findings.empty()) md += "None found.\n";
  for (const Finding& x : d.findings)
    md += "- **" + x.cause + "**: " + (x.evidence.empty() ? "" : x.evidence[0]) + ". Change: " + x.recommendation + ".\n";
  return md;
}

}  // namespace

std::string find_svg_converter() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = (end > start ? dirs.substr(start, end - start) : ".") + "/rsvg-convert";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

ReportOutput write_report(const RunData& run) {
  ReportOutput out;
  out.dir = run.path + "/report";
  std::error_code ec;
  std::filesystem::create_directories(out.dir, ec);
  LOOM_USER_CHECK(!ec, "cannot create '%s': %s", out.dir.c_str(), ec.message().c_str());
  RunFigures f = compute_figures(run);

  std::vector<std::string> charts;
  auto save = [&](const std::string& name, const std::string& svg) {
    write_file_atomically(out.dir + "/" + name, svg);
    charts.push_back(name);
  };
  if (!run.steps.empty()) {
    save("loss.svg", render_line_chart({"Training loss", "step", "loss"}, loss_series(run)));
    LineChart throughput{"Throughput", "step", "tokens/s"};
    throughput.y_from_zero = true;
    save("throughput.svg", render_line_chart(throughput, {series_of(run, "tokens/s", &StepMetrics::tokens_per_s)}));
    if (varies(run, &StepMetrics::mfu, kUnknown)) {
      LineChart mfu{"Model FLOPs utilization", "step", "MFU (%)"};
      mfu.y_from_zero = true;
      save("mfu.svg", render_line_chart(mfu, {series_of(run, "MFU %", &StepMetrics::mfu, 100)}));
    }
    if (varies(run, &StepMetrics::loss_scale, 1)) {
      LineChart c{"Loss scale", "step", "loss scale"};
      c.log_y = true;
      save("loss_scale.svg", render_line_chart(c, {series_of(run, "loss scale", &StepMetrics::loss_scale)}));
    }
  }
  if (!run.trace.empty()) save("timeline.svg", render_timeline(run.trace).svg);

  std::string converter = find_svg_converter();
  std::vector<std::string> pictures = charts;  // what report.md shows: the PNGs when there are
  if (charts.empty()) {
  } else if (converter.empty()) {
    out.png_note = "No PNGs: rsvg-convert is not on PATH (Debian package librsvg2-bin).";
  } else {
    int failed = 0;
    for (const std::string& c : std::vector<std::string>(charts)) {
      std::string png = c.substr(0, c.size() - 4) + ".png";
      if (convert_to_png(converter, out.dir + "/" + c, out.dir + "/" + png)) {
        out.files.push_back(png);
        std::replace(pictures.begin(), pictures.end(), c, png);
      } else {
        failed++;
      }
    }
    if (failed) out.png_note = strprintf("rsvg-convert failed on %d of %zu charts.", failed, charts.size());
  }
  out.files.insert(out.files.begin(), charts.begin(), charts.end());
  const std::string md = markdown(run, f, pictures, out.png_note);
  write_file_atomically(out.dir + "/report.md", md);
  // The same page for a browser, every chart's SVG inline: one file.
  write_file_atomically(out.dir + "/report.html", report_html(md, "loom report: " + run.path, out.dir));
  out.files.insert(out.files.begin(), {"report.md", "report.html"});
  return out;
}

}  // namespace loom::obs
