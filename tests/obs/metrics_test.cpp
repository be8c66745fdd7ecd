// RunDir and the run records: files written, JSON round trips, crash-safe lines.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "obs/obs_test_util.h"
#include "obs/run_reader.h"
#include "core/check.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

TEST(Metrics, StepRoundTripKeepsEveryFieldAndNaN) {
  StepMetrics m = healthy_step(7);
  m.loss = NAN;
  m.skipped = true;
  m.loss_scale = 32768;
  m.val_loss = 3.5;
  nlohmann::json j = m;
  EXPECT_TRUE(j["loss"].is_null());
  for (const char* key : {"step", "loss", "lr", "grad_norm", "loss_scale", "skipped", "tokens_per_s", "mfu",
                          "peak_mem_bytes", "time_s", "step_time_s", "val_loss"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* part : {"compute", "comm_exposed", "bubble", "optimizer", "data"})
    EXPECT_TRUE(j["time_s"].contains(part)) << part;
  StepMetrics back = j.get<StepMetrics>();
  EXPECT_EQ(back.step, 7);
  EXPECT_TRUE(std::isnan(back.loss));
  EXPECT_TRUE(back.skipped);
  EXPECT_EQ(back.loss_scale, 32768);
  EXPECT_EQ(back.val_loss, 3.5);
  EXPECT_EQ(back.peak_mem_bytes, m.peak_mem_bytes);
  EXPECT_DOUBLE_EQ(back.time.compute, m.time.compute);
}

TEST(Metrics, RunDirWritesEveryFileAndReadsBack) {
  std::string dir = fresh_dir("run_dir");
  RunLayout layout;
  layout.world_size = 8, layout.dp = 2, layout.tp = 2, layout.pp = 2, layout.zero = 1;
  layout.schedule = "1f1b", layout.micro_batches = 8;
  RunSummary summary;
  summary.finished = true, summary.steps = 5, summary.predicted_step_s = 0.09, summary.measured_step_s = 0.1;
  summary.bubble_fraction_per_stage = {0.1, 0.12};
  summary.exposed_comm_s = {{"dp", 0.004}, {"tp", 0.002}};
  summary.overlap = {{"dp", 0.8}};
  write_run(dir, layout, healthy_steps(5), summary);
  for (const char* f : {"config.toml", "layout.json", "metrics.jsonl", "summary.json"})
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;

  RunData run = read_run_dir(dir);
  EXPECT_TRUE(run.has_config);
  ASSERT_TRUE(run.layout);
  EXPECT_EQ(run.layout->tp, 2);
  EXPECT_EQ(run.layout->schedule, "1f1b");
  EXPECT_EQ(run.layout->micro_batches, 8);
  ASSERT_EQ(run.steps.size(), 5u);
  EXPECT_EQ(run.steps[4].step, 5);
  ASSERT_TRUE(run.summary);
  EXPECT_TRUE(run.summary->finished);
  EXPECT_EQ(run.summary->bubble_fraction_per_stage.size(), 2u);
  EXPECT_DOUBLE_EQ(run.summary->exposed_comm_s["dp"], 0.004);
  EXPECT_EQ(run.missing, std::vector<std::string>{"trace.json"});
  EXPECT_TRUE(run.notes.empty());
  nlohmann::json s = nlohmann::json::parse(read_text(dir + "/summary.json"));
  EXPECT_TRUE(s["finished"].get<bool>());
}

TEST(Metrics, EachLineIsOnDiskBeforeTheNextStep) {
  std::string dir = fresh_dir("flushed");
  RunDir run(dir);
  run.append_step(healthy_step(1));
  run.append_step(healthy_step(2));
  // Still open (as in a crash before the end): both lines readable already.
  RunData read = read_run_dir(dir);
  EXPECT_EQ(read.steps.size(), 2u);
}

TEST(Metrics, ResumedRunAppends) {
  std::string dir = fresh_dir("resumed");
  RunDir(dir).append_step(healthy_step(1));
  RunDir(dir, /*resume=*/true).append_step(healthy_step(2));
  EXPECT_EQ(read_run_dir(dir).steps.size(), 2u);
  RunDir(dir).append_step(healthy_step(1));  // a new run in the same folder starts over
  EXPECT_EQ(read_run_dir(dir).steps.size(), 1u);
}

TEST(Metrics, ReaderSurvivesACutOffLastLine) {
  std::string dir = fresh_dir("cut_off");
  write_run(dir, dp_layout(1), healthy_steps(4));
  std::ofstream(dir + "/metrics.jsonl", std::ios::app) << R"({"step": 5, "loss": 2.3, "lr)";
  RunData run = read_run_dir(dir);
  EXPECT_EQ(run.steps.size(), 4u);
  std::string notes;
  for (const auto& n : run.notes) notes += n + "\n";
  EXPECT_NE(notes.find("cut off"), std::string::npos) << notes;
  EXPECT_NE(notes.find("did not finish"), std::string::npos) << notes;
}

TEST(Metrics, NothingReadableIsAUserError) {
  EXPECT_THROW(read_run_dir(fresh_dir("empty")), UserError);
  EXPECT_THROW(read_run_dir("/no/such/run/dir"), UserError);
}

}  // namespace
}  // namespace loom::obs
