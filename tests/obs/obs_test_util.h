// Synthetic run directories for the observability tests: healthy steps,
// pipeline traces and the helpers to check what report and diagnose wrote.
#pragma once

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "obs/chrome_trace.h"
#include "obs/run_dir.h"

namespace loom::obs::test {

// An empty folder of this name under the build tree.
inline std::string fresh_dir(const std::string& name) {
  std::string dir = std::string(LOOM_BINARY_DIR) + "/test_obs/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Parsed by Python's XML parser (the system's, no packages needed).
inline bool well_formed_xml(const std::string& path) {
  std::string cmd = "/usr/bin/python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' '" + path +
                    "' 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

// A step of a healthy run: falling loss, steady throughput, little exposed comm.
inline StepMetrics healthy_step(int step) {
  StepMetrics m;
  m.step = step;
  m.loss = 2.0 + 5.0 * std::exp(-step / 40.0);
  m.lr = 1e-3;
  m.grad_norm = 1.0 + 0.05 * std::sin(step);
  m.loss_scale = 1;
  m.step_time_s = 0.100;
  m.tokens_per_s = 40000 + 100 * std::sin(step);
  m.mfu = 0.40;
  m.peak_mem_bytes = {100 << 20, 101 << 20};
  m.time = {0.085, 0.005, 0.0, 0.009, 0.001};
  return m;
}

inline std::vector<StepMetrics> healthy_steps(int n) {
  std::vector<StepMetrics> v;
  for (int i = 1; i <= n; i++) v.push_back(healthy_step(i));
  return v;
}

inline RunLayout dp_layout(int dp) {
  RunLayout l;
  l.world_size = l.dp = dp;
  l.batch_size = 64, l.seq_len = 256, l.micro_batch_size = 64 / dp;
  return l;
}

inline void write_run(const std::string& dir, const RunLayout& layout, const std::vector<StepMetrics>& steps,
                      const std::optional<RunSummary>& summary = std::nullopt,
                      const std::vector<RankTrace>& trace = {}) {
  RunDir run(dir);
  run.write_config("[train]\nsteps = " + std::to_string(steps.size()) + "\n");
  run.write_layout(layout);
  for (const StepMetrics& m : steps) run.append_step(m);
  if (summary) run.write_summary(*summary);
  if (!trace.empty()) {
    std::ofstream(dir + "/trace.json") << chrome_trace_json(trace);
  }
}

inline TraceSpan span(const char* name, SpanKind kind, double begin_ms, double end_ms, int index = -1,
                      CommGroup group = CommGroup::none, int track = kComputeTrack) {
  TraceSpan s;
  s.name = name, s.kind = kind, s.group = group, s.track = track, s.index = index;
  s.begin_us = begin_ms * 1e3, s.end_us = end_ms * 1e3;
  return s;
}

// pp = 2, one micro-batch per step (GPipe = 1F1B here): forward 10 ms,
// backward 20 ms, optimizer 5 ms; each stage idles 30 of 65 ms.
inline std::vector<RankTrace> pipeline_trace_pp2_m1(int steps) {
  std::vector<RankTrace> ranks(2);
  for (int r = 0; r < 2; r++) ranks[r].rank = r, ranks[r].pp = r;
  for (int s = 0; s < steps; s++) {
    double t = s * 65.0;
    ranks[0].spans.push_back(span("step", SpanKind::step, t, t + 65, s + 1));
    ranks[0].spans.push_back(span("forward", SpanKind::forward, t, t + 10, 0));
    ranks[0].spans.push_back(span("recv grad", SpanKind::bubble, t + 10, t + 40, -1, CommGroup::pp));
    ranks[0].spans.push_back(span("backward", SpanKind::backward, t + 40, t + 60, 0));
    ranks[0].spans.push_back(span("adamw", SpanKind::optimizer, t + 60, t + 65));
    ranks[1].spans.push_back(span("step", SpanKind::step, t, t + 65, s + 1));
    ranks[1].spans.push_back(span("recv activation", SpanKind::bubble, t, t + 10, -1, CommGroup::pp));
    ranks[1].spans.push_back(span("forward", SpanKind::forward, t + 10, t + 20, 0));
    ranks[1].spans.push_back(span("backward", SpanKind::backward, t + 20, t + 40, 0));
    ranks[1].spans.push_back(span("drain", SpanKind::bubble, t + 40, t + 60, -1, CommGroup::pp));
    ranks[1].spans.push_back(span("adamw", SpanKind::optimizer, t + 60, t + 65));
  }
  return ranks;
}

}  // namespace loom::obs::test
