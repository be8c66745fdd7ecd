// LossScaler's state machine: growth after growth_interval clean steps,
// backoff after `hysteresis` overflows, the minimum, fixed and off modes,
// the JSON state, and the cross-rank found-inf agreement.
#include "precision/loss_scaler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "comm/self_comm.h"
#include "core/check.h"
#include "precision/found_inf.h"
#include "kernels/cpu/non_finite.h"

namespace {

using namespace loom;
using loom::cpu::unscale_and_check;

LossScalerOptions small_options() {
  LossScalerOptions o;
  o.initial_scale = 1024.0f;
  o.growth_interval = 3;
  o.hysteresis = 2;
  o.min_scale = 128.0f;
  return o;
}

std::string user_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

TEST(LossScaler, DefaultsAreTheIssuesDynamicScaler) {
  LossScaler s;
  EXPECT_EQ(s.mode(), LossScaleMode::dynamic);
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inv_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.options().growth_interval, 1000);
  EXPECT_EQ(s.options().growth_factor, 2.0f);
  EXPECT_EQ(s.options().backoff_factor, 0.5f);
  EXPECT_EQ(s.options().hysteresis, 2);
  EXPECT_EQ(s.options().min_scale, 1.0f);
  // 999 clean steps keep the scale; the 1000th doubles it.
  for (int i = 0; i < 999; i++) ASSERT_FALSE(s.update(false).grew);
  ScalerDecision d = s.update(false);
  EXPECT_TRUE(d.grew);
  EXPECT_EQ(d.scale, 131072.0f);
}

TEST(LossScaler, GrowsAfterEachIntervalOfCleanSteps) {
  LossScaler s(small_options());
  EXPECT_EQ(s.update(false).scale, 1024.0f);
  EXPECT_EQ(s.update(false).scale, 1024.0f);
  ScalerDecision d = s.update(false);
  EXPECT_TRUE(d.grew);
  EXPECT_FALSE(d.skip_step);
  EXPECT_EQ(d.scale, 2048.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  for (int i = 0; i < 3; i++) d = s.update(false);
  EXPECT_EQ(d.scale, 4096.0f);
}

TEST(LossScaler, OverflowSkipsAndBacksOffOnlyAfterHysteresis) {
  LossScaler s(small_options());
  ScalerDecision d = s.update(true);  // first overflow: tolerated
  EXPECT_TRUE(d.skip_step);
  EXPECT_FALSE(d.backed_off);
  EXPECT_EQ(d.scale, 1024.0f);
  EXPECT_EQ(s.hysteresis_left(), 1);
  d = s.update(true);  // second: backs off
  EXPECT_TRUE(d.skip_step);
  EXPECT_TRUE(d.backed_off);
  EXPECT_EQ(d.scale, 512.0f);
  d = s.update(true);  // budget spent: every further overflow backs off
  EXPECT_EQ(d.scale, 256.0f);
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, OverflowResetsGrowthAndOnlyGrowthRestoresHysteresis) {
  LossScaler s(small_options());
  s.update(false), s.update(false);
  s.update(true);  // interrupts the run of clean steps, uses 1 of 2
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(false), s.update(false);
  EXPECT_EQ(s.scale(), 1024.0f);           // only 2 clean steps since the overflow
  EXPECT_EQ(s.hysteresis_left(), 1);       // clean steps alone do not restore it
  EXPECT_TRUE(s.update(true).backed_off);  // so this overflow backs off
  for (int i = 0; i < 3; i++) s.update(false);
  EXPECT_EQ(s.scale(), 1024.0f);  // grew back
  EXPECT_EQ(s.hysteresis_left(), 2);
}

TEST(LossScaler, NeverBacksOffBelowTheMinimum) {
  LossScaler s(small_options());
  for (int i = 0; i < 20; i++) s.update(true);
  EXPECT_EQ(s.scale(), 128.0f);
  EXPECT_FALSE(s.update(true).backed_off);
  EXPECT_TRUE(s.update(true).skip_step);
}

TEST(LossScaler, FixedAndOffNeverChangeTheScaleButSkipNonFiniteSteps) {
  LossScalerOptions o = small_options();
  o.mode = LossScaleMode::fixed;
  LossScaler fixed(o);
  o.mode = LossScaleMode::off;
  LossScaler off(o);
  EXPECT_EQ(fixed.scale(), 1024.0f);
  EXPECT_EQ(off.scale(), 1.0f);
  for (int i = 0; i < 10; i++) {
    const bool inf = i % 3 == 0;
    EXPECT_EQ(fixed.update(inf).skip_step, inf);
    EXPECT_EQ(off.update(inf).skip_step, inf);
  }
  EXPECT_EQ(fixed.scale(), 1024.0f);
  EXPECT_EQ(off.scale(), 1.0f);
}

TEST(LossScaler, StateRoundTripsThroughJsonAndContinuesIdentically) {
  LossScaler a(small_options());
  for (bool inf : {false, true, false, false, false, false, true, false}) a.update(inf);
  const std::string saved = a.state().dump();
  LossScaler b(small_options());
  b.load_state(nlohmann::json::parse(saved));
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.hysteresis_left(), a.hysteresis_left());
  EXPECT_EQ(b.skipped_steps(), a.skipped_steps());
  EXPECT_EQ(b.state(), a.state());
  for (bool inf : {false, false, true, true, true, false, false, false, false}) {
    ScalerDecision da = a.update(inf), db = b.update(inf);
    ASSERT_EQ(da.scale, db.scale);
    ASSERT_EQ(da.skip_step, db.skip_step);
  }
}

TEST(LossScaler, BadStateOrOptionsNameTheField) {
  LossScaler s(small_options());
  nlohmann::json st = s.state();
  st.erase("scale");
  EXPECT_NE(user_error([&] { s.load_state(st); }).find("loss_scaler.scale: missing"), std::string::npos);
  st = s.state();
  st["growth_tracker"] = "three";
  EXPECT_NE(user_error([&] { s.load_state(st); }).find("loss_scaler.growth_tracker"), std::string::npos);
  st = s.state();
  st["scale"] = -4.0;
  EXPECT_NE(user_error([&] { s.load_state(st); }).find("loss_scaler.scale"), std::string::npos);
  EXPECT_NE(user_error([&] { s.load_state(nlohmann::json::array()); }).find("not a JSON object"), std::string::npos);

  LossScalerOptions o;
  o.backoff_factor = 1.5f;
  EXPECT_NE(user_error([&] { LossScaler{o}; }).find("precision.backoff_factor"), std::string::npos);
  o = {};
  o.growth_interval = 0;
  EXPECT_NE(user_error([&] { LossScaler{o}; }).find("precision.growth_interval"), std::string::npos);
  o = {};
  o.hysteresis = 0;
  EXPECT_NE(user_error([&] { LossScaler{o}; }).find("precision.hysteresis"), std::string::npos);
}

// A communicator standing for one rank among several: its all-reduce folds
// in the other ranks' values (given up front) with the requested op, so a
// test can check that the flag is combined with MAX, not summed or averaged.
class PeersComm final : public Communicator {
 public:
  explicit PeersComm(std::vector<float> peer_flags) : peers_(std::move(peer_flags)) {}
  int rank() const override { return 0; }
  int size() const override { return int(peers_.size()) + 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  std::unique_ptr<Work> all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) override {
    LOOM_CHECK(count == 1 && dtype == DType::f32, "test communicator takes one float");
    float& v = *static_cast<float*>(buf);
    for (float p : peers_) v = op == ReduceOp::Max ? std::max(v, p) : v + p;
    if (op == ReduceOp::Avg) v /= float(size());
    return inner_.all_reduce_async(buf, count, dtype, op);
  }
  std::unique_ptr<Work> reduce_scatter_async(const void*, void*, size_t, DType, ReduceOp) override { return fail(); }
  std::unique_ptr<Work> all_gather_async(const void*, void*, size_t, DType) override { return fail(); }
  std::unique_ptr<Work> broadcast_async(void*, size_t, DType, int) override { return fail(); }
  std::unique_ptr<Work> send_async(const void*, size_t, DType, int, int) override { return fail(); }
  std::unique_ptr<Work> recv_async(void*, size_t, DType, int, int) override { return fail(); }
  void barrier() override {}

 private:
  static std::unique_ptr<Work> fail() { throw Error("not used by this test"); }
  std::vector<float> peers_;
  std::string name_ = "world";
  std::vector<int> ranks_{0};
  SelfComm inner_{"world"};  // supplies the completed Work handle
};

TEST(LossScaler, AnyRanksOverflowSkipsTheStepOnEveryRank) {
  SelfComm self("world");
  EXPECT_FALSE(any_rank_found_inf(self, false));
  EXPECT_TRUE(any_rank_found_inf(self, true));
  PeersComm clean_peers({0.f, 0.f, 0.f}), one_bad_peer({0.f, 1.f, 0.f});
  EXPECT_FALSE(any_rank_found_inf(clean_peers, false));
  EXPECT_TRUE(any_rank_found_inf(clean_peers, true));
  EXPECT_TRUE(any_rank_found_inf(one_bad_peer, false));  // this rank's gradients were fine

  // One optimizer step as the trainer will run it, with an inf injected on
  // another rank: the step is skipped here too, and the scale halves once
  // the hysteresis is spent.
  LossScalerOptions o;
  o.hysteresis = 1;
  LossScaler s(o);
  std::vector<float> grads = {0.5f * s.scale(), -2.0f * s.scale(), 1e-3f * s.scale()};
  const bool local = unscale_and_check(grads.data(), grads.size(), s.inv_scale());
  EXPECT_FALSE(local);
  EXPECT_EQ(grads, (std::vector<float>{0.5f, -2.0f, 1e-3f}));  // power-of-two scale: exact
  ScalerDecision d = s.update(any_rank_found_inf(one_bad_peer, local));
  EXPECT_TRUE(d.skip_step);
  EXPECT_TRUE(d.backed_off);
  EXPECT_EQ(d.scale, 32768.0f);
}

}  // namespace
