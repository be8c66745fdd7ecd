// `loom plan` and `loom bench calibrate` as a user runs them.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli/run_loom.h"

namespace {

using loom::test::CliResult;
using loom::test::run_loom;

TEST(PlannerCli, PlansThe175BModelOnAThousandDevices) {
  CliResult r = run_loom("plan --model gpt3-175b --cluster a100-80gb --devices 1024 --top 3");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* words : {"174.60B parameters", "128 nodes", "step s", "Memo for plan #1", "Why it fits",
                            "Communication:", "Micro-batching", "Precision", "Likely bottleneck",
                            "First mitigation"})
    EXPECT_NE(r.output.find(words), std::string::npos) << words << "\n" << r.output;
}

TEST(PlannerCli, HelpListsPlanAndCalibrate) {
  CliResult r = run_loom("--help");
  EXPECT_NE(r.output.find("loom plan --model"), std::string::npos);
  EXPECT_NE(r.output.find("bench calibrate"), std::string::npos);
}

TEST(PlannerCli, FixedDimensionsAndADeadline) {
  CliResult r = run_loom("plan --model gpt3-13b --cluster h100-80gb --devices 64 --tp 8 --zero 1 --top 2 "
                         "--tokens 3e11 --deadline-days 100");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Meets the deadline"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tp 8"), std::string::npos) << r.output;
}

TEST(PlannerCli, CalibrateWritesAClusterThePlannerReads) {
  const std::string out = std::string(LOOM_BINARY_DIR) + "/planner_cluster_test.toml";
  CliResult c = run_loom("bench calibrate --out " + out);
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("GFLOP/s"), std::string::npos) << c.output;
  CliResult p = run_loom("plan --model gpt2-124m --cluster " + out + " --batch 8 --seq 256 --top 2");
  EXPECT_EQ(p.code, 0) << p.output;
  EXPECT_NE(p.output.find("fp32"), std::string::npos) << p.output;  // a CPU has no bf16 peak here
  std::remove(out.c_str());
}

TEST(PlannerCli, LayoutAutoPrintsTheTrainCommand) {
  CliResult r = run_loom("plan --config configs/tiny.toml --layout auto --ranks 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--set parallel.dp="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("predicted: peak memory per rank"), std::string::npos) << r.output;
}

}  // namespace
