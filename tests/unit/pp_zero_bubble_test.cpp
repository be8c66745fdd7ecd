// Zero-bubble schedules (issue 20): ZB-H1 splits every backward into its
// input part (B) and weight part (W). At every pp in {2, 3, 4, 8} and m in
// {1, ..., 4 pp} it passes the checker (W after its B, gradients sent after
// B, matching sends, no deadlock), holds 1F1B's micro-batches until their B
// and at most pp (1F1B's first stage's peak) until their W; simulated with the paper's unit
// times its bubble is (pp - 1), a third of 1F1B's, once m >= pp, and never
// more than 1F1B's; the checker catches a W before its B or a missing W.
// ZB-V (two chunks per stage in a V) passes the same checks with at most
// 1F1B's first-stage activations, and leaves pp - 1 chunk units, a sixth of
// 1F1B's bubble.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "core/check.h"
#include "parallel/pp/schedule.h"
#include "parallel/pp/schedule_check.h"
#include "planner/pipeline_sim.h"

namespace loom::pp {
namespace {

std::string joined(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) out += p + "\n";
  return out;
}

// Unit F, B and W (1F1B's combined backward: B + W = 2).
double unit_bubble(const Schedule& s, int pp) {
  planner::StageDurations d;
  d.forward.assign(size_t(pp), 1.0), d.backward.assign(size_t(pp), 2.0);
  d.backward_input.assign(size_t(pp), 1.0), d.backward_weight.assign(size_t(pp), 1.0);
  const planner::PipelineTiming t = planner::simulate_pipeline(s, pp, 1, d);
  return t.makespan - t.stage_busy[0];
}

TEST(ZeroBubbleH1, IsValidWithinOneFOneBsActivationBound) {
  for (int pp : {2, 3, 4, 8})
    for (int m = 1; m <= 4 * pp; m++) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const Schedule s = zero_bubble_h1(pp, m);
      const std::vector<int> bound = max_in_flight_per_stage(ScheduleKind::ZeroBubbleH1, pp, m, 1);
      EXPECT_TRUE(check_schedule(s, pp, m, 1, bound).empty()) << joined(check_schedule(s, pp, m, 1, bound));
      EXPECT_EQ(peak_in_flight(s), bound);  // counted until each W
      // Counted until each B (what backward reads): 1F1B's bound, no more.
      const std::vector<int> one_f_one_b_bound = max_in_flight_per_stage(ScheduleKind::OneFOneB, pp, m, 1);
      for (int st = 0; st < pp; st++) {
        std::set<int> live;
        int peak = 0;
        for (const Action& a : s[size_t(st)]) {
          if (a.kind == ActionKind::Forward) live.insert(a.microbatch);
          if (a.kind == ActionKind::BackwardInput) live.erase(a.microbatch);
          peak = std::max(peak, int(live.size()));
        }
        EXPECT_EQ(peak, one_f_one_b_bound[size_t(st)]) << "stage " << st;
      }
      for (const StageSchedule& stage : s)
        EXPECT_EQ(std::count_if(stage.begin(), stage.end(), [](const Action& a) { return a.kind == ActionKind::Backward; }), 0);
    }
}

TEST(ZeroBubbleH1, FillsMostOfOneFOneBsBubbleWithWeightGradients) {
  for (int pp : {2, 4, 8})
    for (int m : {pp, 2 * pp, 4 * pp}) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const double h1 = unit_bubble(zero_bubble_h1(pp, m), pp);
      const double one_f_one_b_bubble = unit_bubble(one_f_one_b(pp, m), pp);
      EXPECT_DOUBLE_EQ(one_f_one_b_bubble, 3.0 * (pp - 1));  // (p - 1)(F + B + W)
      // The paper's ZB-H1: (p - 1)(F + B - 2W) = (p - 1) with unit times.
      EXPECT_DOUBLE_EQ(h1, pp - 1.0);
    }
  for (int m = 1; m <= 8; m++)
    EXPECT_LE(unit_bubble(zero_bubble_h1(2, m), 2), unit_bubble(one_f_one_b(2, m), 2)) << "m " << m;
}

TEST(ZeroBubbleH1, CheckerCatchesAWeightPassBeforeItsInputPassAndAMissingOne) {
  Schedule s = zero_bubble_h1(2, 4);
  StageSchedule& last = s[1];
  auto b = std::find(last.begin(), last.end(), Action{ActionKind::BackwardInput, 0, 0});
  auto w = std::find(last.begin(), last.end(), Action{ActionKind::BackwardWeight, 0, 0});
  ASSERT_TRUE(b != last.end() && w != last.end());
  std::iter_swap(b, w);
  std::vector<std::string> problems = check_schedule(s, 2, 4, 1, 2);
  EXPECT_NE(joined(problems).find("BackwardInput of micro-batch 0 chunk 0 comes after its BackwardWeight"),
            std::string::npos)
      << joined(problems);
  s = zero_bubble_h1(2, 4);
  s[0].erase(std::find(s[0].begin(), s[0].end(), Action{ActionKind::BackwardWeight, 2, 0}));
  problems = check_schedule(s, 2, 4, 1, 2);
  EXPECT_NE(joined(problems).find("0 x BackwardWeight for micro-batch 2 chunk 0, expected 1"), std::string::npos)
      << joined(problems);
}

TEST(ZeroBubbleH1, BuildScheduleDispatchesAndRefusesChunks) {
  EXPECT_EQ(build_schedule(ScheduleKind::ZeroBubbleH1, 4, 8, 1), zero_bubble_h1(4, 8));
  EXPECT_THROW(build_schedule(ScheduleKind::ZeroBubbleH1, 4, 8, 2), UserError);
}

// ZB-V: two chunks per stage in a V. Unit times are one chunk's pass; a
// stage (two chunks) then takes 2 per F, B or W, and 1F1B's bubble is
// 6 (pp - 1) chunk units.
double unit_bubble_v(const Schedule& s, int pp) {
  const ChunkMap map = chunk_map(ScheduleKind::ZeroBubbleV, pp, 2);
  planner::StageDurations d;
  d.forward.assign(size_t(2 * pp), 1.0), d.backward.assign(size_t(2 * pp), 2.0);
  d.backward_input.assign(size_t(2 * pp), 1.0), d.backward_weight.assign(size_t(2 * pp), 1.0);
  const planner::PipelineTiming t = planner::simulate_pipeline(s, map, d);
  return t.makespan - t.stage_busy[0];
}

TEST(ZeroBubbleV, ChunkMapIsAV) {
  const ChunkMap map = chunk_map(ScheduleKind::ZeroBubbleV, 4, 2);
  const int want[4][2] = {{0, 7}, {1, 6}, {2, 5}, {3, 4}};
  for (int s = 0; s < 4; s++)
    for (int c = 0; c < 2; c++) {
      const int vs = map.virtual_stage(s, c);
      EXPECT_EQ(vs, want[s][c]);
      EXPECT_EQ(map.stage_of(vs), s);
      EXPECT_EQ(map.chunk_of(vs), c);
    }
  const ChunkMap interleaved = chunk_map(ScheduleKind::Interleaved1F1B, 4, 2);
  EXPECT_EQ(interleaved.virtual_stage(1, 1), 5);
  EXPECT_EQ(interleaved.stage_of(5), 1);
}

TEST(ZeroBubbleV, IsValidWithinOneFOneBsFirstStagePeak) {
  for (int pp : {2, 3, 4, 8})
    for (int m = 1; m <= 4 * pp; m++) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const Schedule s = zero_bubble_v(pp, m);
      const ChunkMap map = chunk_map(ScheduleKind::ZeroBubbleV, pp, 2);
      const std::vector<int> bound = max_in_flight_per_stage(ScheduleKind::ZeroBubbleV, pp, m, 2);
      const auto problems = check_schedule(s, map, m, bound);
      EXPECT_TRUE(problems.empty()) << joined(problems);
      // Counted in (micro-batch, chunk) pairs of half a stage's layers: at
      // most 2 pp, the activations of 1F1B's first stage (pp micro-batches).
      for (int peak : peak_in_flight(s)) EXPECT_LE(peak, 2 * pp);
      EXPECT_EQ(peak_in_flight(s)[0], std::min(2 * m, 2 * pp));
    }
}

TEST(ZeroBubbleV, LeavesASixthOfOneFOneBsBubble) {
  for (int pp : {2, 4, 8})
    for (int m : {pp, 2 * pp, 4 * pp}) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const double v = unit_bubble_v(zero_bubble_v(pp, m), pp);
      // 1F1B on the same stages: F 2, B + W 4 chunk units per micro-batch.
      planner::StageDurations d;
      d.forward.assign(size_t(pp), 2.0), d.backward.assign(size_t(pp), 4.0);
      const planner::PipelineTiming one = planner::simulate_pipeline(one_f_one_b(pp, m), pp, 1, d);
      EXPECT_DOUBLE_EQ(one.makespan - one.stage_busy[0], 6.0 * (pp - 1));
      EXPECT_LE(v, pp - 1.0);
    }
}

// Built with the pass times it will run with (B longer than F, W shorter,
// as measured on loom bench pp's model: 1, 1.23, 0.93), ZB-V stays valid
// and leaves less bubble than the schedule built for equal times does.
TEST(ZeroBubbleV, BuiltWithThePassTimesItRunsWithLeavesLessBubble) {
  const PassRatios real{1.0, 1.23, 0.93};
  auto bubble = [&](const Schedule& s, int pp) {
    planner::StageDurations d;
    d.forward.assign(size_t(2 * pp), real.forward), d.backward.assign(size_t(2 * pp), 2.16);
    d.backward_input.assign(size_t(2 * pp), real.backward_input);
    d.backward_weight.assign(size_t(2 * pp), real.backward_weight);
    const planner::PipelineTiming t = planner::simulate_pipeline(s, chunk_map(ScheduleKind::ZeroBubbleV, pp, 2), d);
    return t.bubble_fraction();
  };
  for (int pp : {2, 3, 4})
    for (int m = 1; m <= 4 * pp; m++) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const Schedule s = zero_bubble_v(pp, m, real);
      const auto problems = check_schedule(s, chunk_map(ScheduleKind::ZeroBubbleV, pp, 2), m,
                                           max_in_flight_per_stage(ScheduleKind::ZeroBubbleV, pp, m, 2));
      EXPECT_TRUE(problems.empty()) << joined(problems);
    }
  for (int m : {4, 8, 16}) {
    SCOPED_TRACE("m " + std::to_string(m));
    EXPECT_LT(bubble(zero_bubble_v(2, m, real), 2), 0.8 * bubble(zero_bubble_v(2, m), 2));
  }
}

// Every pass-time ratio a model gives (B + W = 2 F; attention-heavy shapes
// have W well below F): a valid schedule, never stuck (review of issue 20:
// with W / F = 0.2 the stages could fill every set with first halves).
TEST(ZeroBubbleV, IsValidForEveryPassTimeRatio) {
  for (double a : {-0.5, 0.0, 0.3, 0.6, 0.8, 0.95})
    for (int pp : {2, 3, 4, 8})
      for (int m = pp; m <= 4 * pp + 4; m += (pp > 4 ? 3 : 1)) {
        SCOPED_TRACE("a " + std::to_string(a) + " pp " + std::to_string(pp) + " m " + std::to_string(m));
        const PassRatios t{1.0, 1.0 + a, 1.0 - a};
        Schedule s;
        ASSERT_NO_THROW(s = zero_bubble_v(pp, m, t));
        const auto problems = check_schedule(s, chunk_map(ScheduleKind::ZeroBubbleV, pp, 2), m,
                                             max_in_flight_per_stage(ScheduleKind::ZeroBubbleV, pp, m, 2));
        EXPECT_TRUE(problems.empty()) << joined(problems);
      }
}

TEST(ZeroBubbleV, BuildScheduleDispatchesAndWantsTwoChunks) {
  EXPECT_EQ(build_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 2), zero_bubble_v(4, 8));
  EXPECT_THROW(build_schedule(ScheduleKind::ZeroBubbleV, 4, 8, 1), UserError);
}

}  // namespace
}  // namespace loom::pp
