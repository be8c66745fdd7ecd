// What a run that failed and was restarted leaves for the readers: a resumed
// run's resume mark drops the failed run's steps after the checkpoint, and
// the report's Faults section shows loom elastic's restarts (elastic.jsonl)
// and the stragglers metrics.jsonl names.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "obs/obs_test_util.h"
#include "obs/report.h"
#include "obs/run_reader.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(ResumedRun, TheResumeMarkReplacesTheFailedRunsStepsAfterTheCheckpoint) {
  std::string dir = fresh_dir("resume_mark");
  {
    RunDir first(dir);
    for (int s = 1; s <= 7; s++) first.append_step(healthy_step(s));  // died after step 7
  }
  {
    RunDir resumed(dir, /*resume=*/true);  // appends
    resumed.append_resume_mark(4);         // from the checkpoint of step 4
    for (int s = 5; s <= 9; s++) {
      StepMetrics m = healthy_step(s);
      m.loss = 1.0 + s;  // tells the resumed run's lines apart
      resumed.append_step(m);
    }
  }
  RunData run = read_run_dir(dir);
  ASSERT_EQ(run.steps.size(), 9u);
  for (size_t i = 0; i < run.steps.size(); i++) EXPECT_EQ(run.steps[i].step, int64_t(i) + 1);
  EXPECT_EQ(run.steps[4].loss, 6.0);  // step 5, the resumed run's
  EXPECT_NE(run.steps[3].loss, 5.0);  // step 4, the first run's
  bool noted = false;
  for (const std::string& n : run.notes) noted |= has(n, "3 steps of a failed run replaced");
  EXPECT_TRUE(noted);
}

TEST(FaultsReport, ShowsRestartsAndStragglers) {
  std::string dir = fresh_dir("faults_report");
  std::vector<StepMetrics> steps = healthy_steps(12);
  steps[9].stragglers = {Straggler{3, 1.6, 0.16, 0.10}};
  steps[10].stragglers = {Straggler{3, 1.9, 0.19, 0.10}};
  write_run(dir, dp_layout(4), steps);
  RestartRecord r;
  r.attempt = 1, r.outcome = "restarted", r.reason = "rank 1 exited on signal 9 (Killed)", r.failed_ranks = {1};
  r.failed_at_step = 29, r.resumed_step = 20, r.steps_lost = 9, r.detect_s = 1.0, r.restart_s = 0.7;
  r.old_world = 4, r.new_world = 3, r.new_layout = "3 ranks: dp 3 tp 1 pp 1 v 1, micro-batch 4 x 1 | x";
  std::ofstream(dir + "/elastic.jsonl") << nlohmann::json(r).dump() << "\n";

  RunData run = read_run_dir(dir);
  ASSERT_EQ(run.restarts.size(), 1u);
  EXPECT_EQ(run.restarts[0].failed_ranks, std::vector<int>{1});
  EXPECT_EQ(run.restarts[0].steps_lost, 9);
  std::string md = read_text(write_report(run).dir + "/report.md");
  EXPECT_TRUE(has(md, "## Faults")) << md;
  EXPECT_TRUE(has(md, "Restarts (`loom elastic`, elastic.jsonl): 1.")) << md;
  EXPECT_TRUE(has(md, "| 1 | 1 | 29 | restarted | 20 | 9 | 1.0 s | 0.7 s | 3 ranks: dp 3 tp 1 pp 1 v 1, micro-batch 4 x 1 \\| x |"))
      << md;
  EXPECT_TRUE(has(md, "rank 3 from step 10, up to 1.90x the median rank's compute")) << md;

  std::string quiet = fresh_dir("faults_report_quiet");
  write_run(quiet, dp_layout(2), healthy_steps(3));
  md = read_text(write_report(read_run_dir(quiet)).dir + "/report.md");
  EXPECT_TRUE(has(md, "Restarts: none")) << md;
  EXPECT_TRUE(has(md, "Stragglers: none named.")) << md;
}

}  // namespace
}  // namespace loom::obs
