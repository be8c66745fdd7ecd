// `loom bench planner` as a user runs it: --quick prints the overhead probes,
// a row per run with every column, the worst rows, and exits 0. A benchmark:
// no figure is judged here, only that every run finished and was reported.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/run_loom.h"

namespace {

using loom::test::CliResult;
using loom::test::run_loom;

TEST(BenchPlanner, QuickPrintsEveryRowAndColumnAndExits0) {
  const std::string out = std::string(LOOM_BINARY_DIR) + "/bench_planner_test.json";
  CliResult r = run_loom("bench planner --quick --steps 2 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* text : {"per-process overhead, measured", "overhead MiB", "pred MiB", "meas MiB", "pred* MiB",
                           "err*", "pred ms", "meas ms", "recompute", "schedule", "worst row",
                           "memory, as loom train prints it", "memory, measured overhead substituted", "step time, ranks <="})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  // Rows 1..6, each a finished run with a percentage error.
  std::istringstream lines(r.output);
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    int index = 0;
    char model[16] = {};
    if (std::sscanf(line.c_str(), "%d %15s", &index, model) != 2 || std::string(model) != "gpt2-xs") continue;
    EXPECT_EQ(index, rows + 1) << line;
    EXPECT_EQ(line.find("failed"), std::string::npos) << line;
    EXPECT_NE(line.find('%'), std::string::npos) << line;
    rows++;
  }
  EXPECT_EQ(rows, 6) << r.output;

  std::ifstream file(out);
  ASSERT_TRUE(file.good()) << out;
  const nlohmann::json j = nlohmann::json::parse(file);
  ASSERT_EQ(j.at("rows").size(), 6u);
  for (const auto& row : j.at("rows")) {
    EXPECT_TRUE(row.at("ok").get<bool>()) << row.dump();
    EXPECT_GT(row.at("measured_mem_mib").get<double>(), 0) << row.dump();
    EXPECT_GT(row.at("measured_step_s").get<double>(), 0) << row.dump();
  }
  EXPECT_EQ(j.at("overhead").size(), 2u);  // at 1 and at 2 ranks
  std::remove(out.c_str());
}

TEST(BenchPlanner, BadOptionsExit2NamingTheOption) {
  for (const char* args : {"--steps 1", "--steps x", "--bogus", "--out"}) {
    CliResult r = run_loom(std::string("bench planner ") + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    const std::string flag = std::string(args).substr(0, std::string(args).find(' '));
    EXPECT_NE(r.output.find(flag), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("pred MiB"), std::string::npos) << "ran despite: " << args;
  }
}

}  // namespace
