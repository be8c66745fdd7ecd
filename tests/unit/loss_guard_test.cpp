#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/loss_guard.h"
#include "core/check.h"

namespace loom {
namespace {

// A noisy, slowly falling loss curve: 3.0 -> ~2.9 over 40 steps, +-0.02.
double curve(int i) { return 3.0 - 0.0025 * i + 0.02 * std::sin(1.7 * i); }

LossGuardConfig config() {
  LossGuardConfig c;
  c.window = 20;
  c.z_threshold = 5;
  c.warmup = 10;
  c.max_skips = 3;
  return c;
}

TEST(CheckpointLossGuard, NonFiniteLossesAreSkippedEvenDuringWarmup) {
  LossGuard g(config());
  EXPECT_EQ(g.observe(std::numeric_limits<double>::quiet_NaN()), LossVerdict::Skip);
  EXPECT_NE(g.reason().find("NaN"), std::string::npos);
  EXPECT_EQ(g.observe(3.0), LossVerdict::Ok);
  EXPECT_EQ(g.observe(std::numeric_limits<double>::infinity()), LossVerdict::Skip);
  EXPECT_NE(g.reason().find("infinite"), std::string::npos);
  EXPECT_EQ(g.total_skips(), 2);
  EXPECT_EQ(g.skips_in_row(), 1);
}

TEST(CheckpointLossGuard, SpikesAreJudgedOnlyAfterWarmupAndNeverEnterTheHistory) {
  LossGuard g(config());
  for (int i = 0; i < 5; i++) EXPECT_EQ(g.observe(curve(i)), LossVerdict::Ok);
  EXPECT_EQ(g.observe(30.0), LossVerdict::Ok);  // still warming up: accepted
  LossGuard h(config());
  for (int i = 0; i < 30; i++) ASSERT_EQ(h.observe(curve(i)), LossVerdict::Ok) << i;
  double mean = h.mean(), sd = h.stddev();
  EXPECT_NEAR(mean, [] { double s = 0; for (int i = 10; i < 30; i++) s += curve(i); return s / 20; }(), 1e-12);
  EXPECT_EQ(h.observe(mean + 6 * sd), LossVerdict::Skip);
  EXPECT_NE(h.reason().find("sigma above the mean"), std::string::npos) << h.reason();
  EXPECT_EQ(h.mean(), mean);  // the spike did not move the statistics
  EXPECT_EQ(h.observe(mean + 4 * sd), LossVerdict::Ok);  // under the threshold
  EXPECT_EQ(h.skips_in_row(), 0);
  EXPECT_EQ(h.observe(mean - 20 * sd), LossVerdict::Ok);  // a sudden drop is not a spike
}

TEST(CheckpointLossGuard, RollbackAfterMaxSkipsInARowThenStartsCountingAgain) {
  LossGuard g(config());
  for (int i = 0; i < 20; i++) g.observe(curve(i));
  EXPECT_EQ(g.observe(50.0), LossVerdict::Skip);
  EXPECT_EQ(g.observe(std::nan("")), LossVerdict::Skip);
  EXPECT_EQ(g.observe(60.0), LossVerdict::Rollback);
  EXPECT_NE(g.reason().find("3 bad steps in a row"), std::string::npos) << g.reason();
  g.after_rollback();
  EXPECT_EQ(g.observe(50.0), LossVerdict::Skip);  // counting starts over
  EXPECT_EQ(g.observe(curve(20)), LossVerdict::Ok);
  EXPECT_EQ(g.observe(50.0), LossVerdict::Skip);  // an Ok in between resets the run
  EXPECT_EQ(g.observe(50.0), LossVerdict::Skip);
  EXPECT_EQ(g.total_skips(), 6);
}

TEST(CheckpointLossGuard, AFlatCurveUsesTheStdFloorAndZeroThresholdTurnsSpikesOff) {
  LossGuardConfig c = config();
  c.min_std = 0.01;
  LossGuard g(c);
  for (int i = 0; i < 20; i++) g.observe(2.0);
  EXPECT_EQ(g.observe(2.04), LossVerdict::Ok);    // 4 floors above: fine
  EXPECT_EQ(g.observe(2.2), LossVerdict::Skip);   // 20 floors above
  c.z_threshold = 0;
  LossGuard off(c);
  for (int i = 0; i < 20; i++) off.observe(2.0);
  EXPECT_EQ(off.observe(1e6), LossVerdict::Ok);
  EXPECT_EQ(off.observe(std::nan("")), LossVerdict::Skip);
}

// A saved state of the wrong shape is a user error naming it, not a JSON
// library's exception.
TEST(CheckpointLossGuard, AMalformedSavedStateIsNamed) {
  LossGuard g(config());
  for (const char* bad : {R"({"accepted": "history", "sum": 0, "skips_in_row": 0, "total_skips": 0})",
                          R"({"accepted": [1.0], "sum": 1.0})",
                          R"({"accepted": [1.0], "sum": 1.0, "skips_in_row": -2, "total_skips": 0})"}) {
    try {
      g.restore(nlohmann::json::parse(bad));
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const loom::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("loss guard"), std::string::npos) << e.what();
    }
  }
}

// A guard restored from its saved state judges the next losses exactly as
// the one that kept running (so a resumed run skips the same steps).
TEST(CheckpointLossGuard, RestoredStateJudgesLikeTheOriginal) {
  LossGuardConfig cfg;
  cfg.window = 8, cfg.warmup = 4, cfg.z_threshold = 3, cfg.max_skips = 2;
  LossGuard original(cfg);
  for (int i = 0; i < 12; i++) original.observe(3.0 - 0.1 * i + 0.01 * (i % 3));
  original.observe(NAN);  // one skip in a row carried over
  LossGuard restored(cfg);
  restored.restore(nlohmann::json::parse(original.state().dump()));
  EXPECT_EQ(restored.skips_in_row(), 1);
  EXPECT_EQ(restored.mean(), original.mean());
  for (double loss : {2.0, 9.0, 1.9, 30.0, 31.0}) {
    EXPECT_EQ(restored.observe(loss), original.observe(loss)) << loss;
    EXPECT_EQ(restored.reason(), original.reason());
  }
}

TEST(CheckpointLossGuard, BadSettingsNameTheField) {
  LossGuardConfig c = config();
  c.window = 1;
  try {
    LossGuard g(c);
    FAIL() << "accepted window 1";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("guard.window"), std::string::npos);
  }
  c = config();
  c.warmup = 50;
  EXPECT_THROW(LossGuard{c}, UserError);
  c = config();
  c.max_skips = 0;
  EXPECT_THROW(LossGuard{c}, UserError);
}

}  // namespace
}  // namespace loom
