// Stragglers (issue 19): the monitor names a rank that stays slower than the
// median within its window, not one slow step, and not millisecond noise;
// metrics.jsonl keeps what it named; `loom diagnose` reports it.
#include <gtest/gtest.h>

#include "obs/diagnosis.h"
#include "obs/obs_test_util.h"
#include "obs/run_reader.h"
#include "obs/straggler_monitor.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

std::vector<double> step_times(double base, int slow_rank, double slow) {
  std::vector<double> t = {base, base * 1.02, base * 0.98, base * 1.01};
  if (slow_rank >= 0) t[size_t(slow_rank)] = slow;
  return t;
}

TEST(StragglerMonitor, NamesASlowRankWithinItsWindowAndWhenItCatchesUp) {
  StragglerMonitor m(4, 1.2, 10);
  for (int s = 0; s < 12; s++) EXPECT_TRUE(m.observe(step_times(0.100, -1, 0)).empty());
  EXPECT_TRUE(m.observe(step_times(0.100, 2, 0.500)).empty());  // one slow step is not a straggler
  int named_at = -1;
  for (int s = 0; s < 20 && named_at < 0; s++) {
    auto events = m.observe(step_times(0.100, 3, 0.150));
    if (!events.empty()) {
      ASSERT_EQ(events.size(), 1u);
      EXPECT_TRUE(events[0].started);
      EXPECT_EQ(events[0].who.rank, 3);
      EXPECT_NEAR(events[0].who.ratio, 1.5, 0.05);
      EXPECT_NE(events[0].text().find("rank 3"), std::string::npos);
      named_at = s;
    }
  }
  EXPECT_GE(named_at, 4);   // a majority of the window first
  EXPECT_LE(named_at, 10);  // and then at once
  ASSERT_EQ(m.current().size(), 1u);
  int caught_up = -1;
  for (int s = 0; s < 20 && caught_up < 0; s++) {
    auto events = m.observe(step_times(0.100, -1, 0));
    if (!events.empty()) {
      caught_up = s;
      EXPECT_FALSE(events[0].started);
    }
  }
  EXPECT_GE(caught_up, 0);
  EXPECT_TRUE(m.current().empty());
}

TEST(StragglerMonitor, MillisecondNoiseAndOneRankAreNotStragglers) {
  StragglerMonitor m(4, 1.2, 5);
  for (int s = 0; s < 20; s++) EXPECT_TRUE(m.observe(step_times(0.002, 1, 0.004)).empty());  // 2x, but 2 ms
  StragglerMonitor off(4, 0, 5);
  EXPECT_FALSE(off.enabled());
  StragglerMonitor single(1, 1.2, 5);
  EXPECT_FALSE(single.enabled());
}

TEST(Diagnose, NamesTheStragglerFromMetrics) {
  std::string dir = fresh_dir("straggler");
  std::vector<StepMetrics> steps = healthy_steps(40);
  for (auto& m : steps) {
    m.busy_s = {0.1, 0.1, 0.1, m.step >= 20 ? 0.2 : 0.1};
    if (m.step >= 25) m.stragglers = {Straggler{3, 2.0, 0.2, 0.1}};
  }
  write_run(dir, dp_layout(4), steps);
  RunData run = read_run_dir(dir);
  ASSERT_EQ(run.steps.back().stragglers.size(), 1u);  // the round trip through metrics.jsonl
  EXPECT_EQ(run.steps.back().busy_s.size(), 4u);
  Diagnosis d = diagnose(run, compute_figures(run));
  bool found = false;
  for (const Finding& f : d.findings)
    if (f.cause == "straggler") {
      found = true;
      EXPECT_EQ(f.severity, Severity::high);
      EXPECT_NE(f.evidence[0].find("rank 3"), std::string::npos) << f.evidence[0];
      EXPECT_NE(f.evidence[0].find("step 25"), std::string::npos) << f.evidence[0];
    }
  EXPECT_TRUE(found);
  // A healthy multi-rank run says it checked.
  std::string healthy = fresh_dir("no_straggler");
  steps = healthy_steps(20);
  for (auto& m : steps) m.busy_s = {0.1, 0.1};
  write_run(healthy, dp_layout(2), steps);
  RunData h = read_run_dir(healthy);
  Diagnosis hd = diagnose(h, compute_figures(h));
  for (const Finding& f : hd.findings) EXPECT_NE(f.cause, "straggler");
  bool checked = false;
  for (const std::string& c : hd.checked) checked = checked || c.find("stragglers: none") != std::string::npos;
  EXPECT_TRUE(checked);
}

}  // namespace
}  // namespace loom::obs
