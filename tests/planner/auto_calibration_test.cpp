// A run's prediction calibrated from the first run (issue 38, item 3): a
// single-rank `loom train` without `loom bench calibrate`'s file measures
// this machine once (`loom bench calibrate --quick` for the run's thread
// count, in a child process), caches it under .cache/calibration/ keyed by
// CPU, thread count and build, says so in its log and predicts from it; the
// next run reads the cache; a `loom bench calibrate` file takes precedence;
// a run started by mpirun (or of several ranks) measures inside itself on
// rank 0, without forking, marked for a single-rank run to measure again.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli/run_loom.h"
#include "planner/cluster.h"
#include "planner/predict.h"

namespace {

namespace fs = std::filesystem;

std::string fresh_home() {
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/test-data/auto-calibration";
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string train_args() {
  return "train --config " LOOM_SOURCE_DIR "/configs/tiny.toml --set model.n_layer=2 --set train.steps=3"
         " --set train.eval_every=0 --set train.sample_tokens=0 --set 'train.run_dir=' --set runtime.threads=1"
         " --set data.format=bytes --set data.path=" LOOM_SOURCE_DIR "/data/sample/kjv.txt";
}

// The cached calibrations (a PATH.busy beside one marks it taken while the
// machine was loaded: a quieter run measures again).
size_t files_in(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) n += e.path().extension() == ".toml" ? 1 : 0;
  return n;
}

std::set<std::string> tomls_in(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".toml") out.insert(e.path().string());
  return out;
}

// As if every calibration so far had been taken on a quiet machine (tests
// run beside others: the load average decides nothing here).
void forget_busy_marks(const std::string& dir) {
  std::error_code ec;
  std::vector<fs::path> marks;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".busy") marks.push_back(e.path());
  for (const fs::path& m : marks) fs::remove(m, ec);
}

TEST(AutoCalibration, TheFirstRunMeasuresLaterRunsReadTheCache) {
  const std::string home = fresh_home(), env = "LOOM_HOME='" + home + "'";
  loom::test::CliResult r = loom::test::run_loom(train_args(), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("calibration: measuring this machine"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("calibration: took"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("plan vs measured:"), std::string::npos) << r.output;
  ASSERT_EQ(files_in(home + "/.cache/calibration"), 1u);
  // What it measured is a cluster file the planner reads: the step's share
  // of the peak and the process overhead, measured.
  forget_busy_marks(home + "/.cache/calibration");
  const fs::path cached = fs::directory_iterator(home + "/.cache/calibration")->path();
  const loom::planner::ClusterSpec c = loom::planner::load_cluster_file(cached.string());
  EXPECT_GT(c.matmul_efficiency, 0.01);
  EXPECT_LE(c.matmul_efficiency, 1.0);
  EXPECT_GT(c.overhead_bytes, 0);
  EXPECT_NE(c.description.find("--quick (1 threads)"), std::string::npos) << c.description;

  r = loom::test::run_loom(train_args(), env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("calibration: measuring"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("taken automatically for 1 threads"), std::string::npos) << r.output;
  EXPECT_EQ(files_in(home + "/.cache/calibration"), 1u);

  // Another thread count is another calibration.
  r = loom::test::run_loom(train_args() + " --set runtime.threads=2", env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("calibration: took"), std::string::npos) << r.output;
  EXPECT_EQ(files_in(home + "/.cache/calibration"), 2u);
  forget_busy_marks(home + "/.cache/calibration");

  // Under mpirun nothing is forked (a process of a launched job must not:
  // OpenMPI's finalize would wait forever): rank 0 measures inside the run
  // while the other waits, and marks the file for a single-rank run to
  // measure again (its overhead is not a fresh process's).
  const std::string mpirun =
      env + " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe --bind-to none";
  const std::set<std::string> before = tomls_in(home + "/.cache/calibration");
  r = loom::test::run_loom(train_args() + " --set runtime.threads=4", mpirun + " -np 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 measures this machine"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("calibration: measuring"), std::string::npos) << r.output;  // no child
  EXPECT_NE(r.output.find("plan vs measured:"), std::string::npos) << r.output;
  EXPECT_EQ(files_in(home + "/.cache/calibration"), 3u);
  std::string inside;
  for (const std::string& f : tomls_in(home + "/.cache/calibration"))
    if (!before.count(f)) inside = f;
  ASSERT_FALSE(inside.empty());
  EXPECT_TRUE(fs::exists(inside + ".partial"));
  const loom::planner::ClusterSpec in_run = loom::planner::load_cluster_file(inside);
  EXPECT_GT(in_run.overhead_bytes, 1 << 20);  // this process's resident memory after the probe
  EXPECT_LT(in_run.overhead_bytes, 1 << 30);
  EXPECT_GT(in_run.matmul_efficiency, 0.01);
  // The next launched run reads it; a single-rank run measures it all again.
  r = loom::test::run_loom(train_args() + " --set runtime.threads=4", mpirun + " -np 1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("measures this machine"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("taken automatically for 4 threads"), std::string::npos) << r.output;
  r = loom::test::run_loom(train_args() + " --set runtime.threads=4", env);
  ASSERT_EQ(r.code, 0) << r.output;
  // Measured again in a fresh process (the mark gone), or, the load average
  // above half the cores, read as it is (the mark kept).
  if (r.output.find("calibration: measuring this machine") != std::string::npos)
    EXPECT_FALSE(fs::exists(inside + ".partial"));
  else
    EXPECT_NE(r.output.find("taken automatically for 4 threads"), std::string::npos) << r.output;
  EXPECT_EQ(files_in(home + "/.cache/calibration"), 3u);
  forget_busy_marks(home + "/.cache/calibration");

  // `loom bench calibrate`'s own file is used as it is: nothing measured.
  fs::copy_file(cached, home + "/.cache/cluster-local.toml");
  r = loom::test::run_loom(train_args() + " --set runtime.threads=3", env);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("calibration:"), std::string::npos) << r.output;
  EXPECT_EQ(files_in(home + "/.cache/calibration"), 3u);
}

}  // namespace
