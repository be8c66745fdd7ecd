// `loom plan` and `loom bench calibrate` as a user runs them.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <toml++/toml.h>

#include "cli/run_loom.h"
#include "kernels/cpu/isa.h"

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
  // The bf16 peak follows the CPU: native products (avx512_bf16) about 1.8x
  // fp32's, widened ones about 0.9x.
  const toml::table cluster = toml::parse_file(out);
  const double fp32 = cluster.at_path("device.peak_tflops_fp32").value_or(0.0);
  const double bf16 = cluster.at_path("device.peak_tflops_bf16").value_or(0.0);
  ASSERT_GT(fp32, 0) << out;
  EXPECT_NEAR(bf16 / fp32, loom::cpu::native_bf16_products() ? 1.8 : 0.9, 1e-3) << out;
  CliResult p = run_loom("plan --model gpt2-124m --cluster " + out + " --batch 8 --seq 256 --top 2");
  EXPECT_EQ(p.code, 0) << p.output;
  // Widened bf16 (0.9x) loses to fp32 on speed; native bf16 (1.8x) wins.
  const std::string best = loom::cpu::native_bf16_products() ? " bf16 " : " fp32 ";
  const size_t row = p.output.find("\n  1 ");
  ASSERT_NE(row, std::string::npos) << p.output;
  EXPECT_NE(p.output.substr(row, p.output.find('\n', row + 1) - row).find(best), std::string::npos) << p.output;
  std::remove(out.c_str());
}

TEST(PlannerCli, LayoutAutoPrintsTheTrainCommand) {
  CliResult r = run_loom("plan --config configs/tiny.toml --layout auto --ranks 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--set parallel.dp="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("predicted: peak memory per rank"), std::string::npos) << r.output;
}

}  // namespace
