// How long checkpoint saves held up training: metrics.jsonl's
// checkpoint_stall_s (absent on steps without a save) and the report's
// "Checkpoints" line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "obs/obs_test_util.h"
#include "obs/report.h"
#include "obs/run_reader.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(CheckpointStall, RoundTripsAndIsAbsentWithoutASave) {
  StepMetrics m = healthy_step(4);
  nlohmann::json plain = m;
  EXPECT_FALSE(plain.contains("checkpoint_stall_s"));
  EXPECT_EQ(plain.get<StepMetrics>().checkpoint_stall_s, 0);
  m.checkpoint_stall_s = 0.0125;
  nlohmann::json saved = m;
  ASSERT_TRUE(saved.contains("checkpoint_stall_s"));
  EXPECT_DOUBLE_EQ(saved.get<StepMetrics>().checkpoint_stall_s, 0.0125);
}

TEST(CheckpointStall, ReportCountsSavesWithMeanAndMaxStall) {
  std::string dir = fresh_dir("checkpoint_stall");
  std::vector<StepMetrics> steps = healthy_steps(6);
  steps[1].checkpoint_stall_s = 0.010, steps[3].checkpoint_stall_s = 0.030, steps[5].checkpoint_stall_s = 0.020;
  write_run(dir, RunLayout{}, steps);
  std::string md = read_text(write_report(read_run_dir(dir)).dir + "/report.md");
  EXPECT_TRUE(has(md, "Checkpoints: 3 saves; training stalled 0.020 s per save on average, 0.030 s at most.")) << md;

  std::string none = fresh_dir("checkpoint_stall_none");
  write_run(none, RunLayout{}, healthy_steps(3));
  EXPECT_TRUE(has(read_text(write_report(read_run_dir(none)).dir + "/report.md"), "Checkpoints: none saved."));
}

}  // namespace
}  // namespace loom::obs
