// Property tests for the pipeline schedules and their checker
// (src/parallel/pp/): every builder at every pp <= 8, m <= 32, v <= 4 passes
// the checker, the in-flight peaks are what each schedule promises, and the
// checker catches deliberately broken schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "core/check.h"
#include "parallel/pp/schedule.h"
#include "parallel/pp/schedule_check.h"

namespace {

using loom::pp::Action;
using loom::pp::ActionKind;
using loom::pp::Schedule;
using loom::pp::ScheduleKind;

std::string joined(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) out += p + "\n";
  return out;
}

bool mentions(const std::vector<std::string>& problems, const std::string& word) {
  return std::any_of(problems.begin(), problems.end(),
                     [&](const std::string& p) { return p.find(word) != std::string::npos; });
}

size_t find_action(const loom::pp::StageSchedule& stage, ActionKind kind, int mb, int chunk = 0) {
  auto it = std::find(stage.begin(), stage.end(), Action{kind, mb, chunk});
  EXPECT_NE(it, stage.end()) << loom::pp::to_string(Action{kind, mb, chunk});
  return size_t(it - stage.begin());
}

std::vector<std::string> check(const Schedule& s, ScheduleKind kind, int pp, int m, int v = 1) {
  return loom::pp::check_schedule(s, pp, m, v, loom::pp::max_in_flight_per_stage(kind, pp, m, v));
}

TEST(PipelineSchedule, GPipeIsValidAndKeepsEveryMicrobatch) {
  for (int pp = 1; pp <= 8; pp++) {
    for (int m = 1; m <= 32; m++) {
      SCOPED_TRACE(testing::Message() << "pp " << pp << " m " << m);
      Schedule s = loom::pp::gpipe(pp, m);
      auto problems = check(s, ScheduleKind::GPipe, pp, m);
      ASSERT_TRUE(problems.empty()) << joined(problems);
      EXPECT_EQ(loom::pp::peak_in_flight(s), std::vector<int>(pp, m));
    }
  }
}

TEST(PipelineSchedule, OneFOneBIsValidAndPeaksAtMinOfMAndStagesLeft) {
  for (int pp = 1; pp <= 8; pp++) {
    for (int m = 1; m <= 32; m++) {
      SCOPED_TRACE(testing::Message() << "pp " << pp << " m " << m);
      Schedule s = loom::pp::one_f_one_b(pp, m);
      auto problems = check(s, ScheduleKind::OneFOneB, pp, m);
      ASSERT_TRUE(problems.empty()) << joined(problems);
      std::vector<int> peaks = loom::pp::peak_in_flight(s);
      for (int stage = 0; stage < pp; stage++) EXPECT_EQ(peaks[stage], std::min(m, pp - stage));
    }
  }
}

TEST(PipelineSchedule, InterleavedIsValidAndWithinMegatronsWarmupBound) {
  for (int pp = 1; pp <= 8; pp++) {
    for (int m = pp; m <= 32; m += pp) {
      for (int v = 1; v <= 4; v++) {
        SCOPED_TRACE(testing::Message() << "pp " << pp << " m " << m << " v " << v);
        Schedule s = loom::pp::interleaved_1f1b(pp, m, v);
        auto problems = check(s, ScheduleKind::Interleaved1F1B, pp, m, v);
        ASSERT_TRUE(problems.empty()) << joined(problems);
        // The bound is tight: some stage reaches it (stage 0 has the largest).
        EXPECT_EQ(loom::pp::peak_in_flight(s), loom::pp::max_in_flight_per_stage(ScheduleKind::Interleaved1F1B, pp, m, v));
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedWithOneChunkIsOneFOneB) {
  for (int pp = 1; pp <= 8; pp++)
    for (int m = pp; m <= 32; m += pp) EXPECT_EQ(loom::pp::interleaved_1f1b(pp, m, 1), loom::pp::one_f_one_b(pp, m));
}

TEST(PipelineSchedule, EveryStageEndsWithReduceThenStep) {
  for (const Schedule& s : {loom::pp::gpipe(4, 8), loom::pp::one_f_one_b(4, 8), loom::pp::interleaved_1f1b(4, 8, 2)}) {
    for (const auto& stage : s) {
      ASSERT_GE(stage.size(), 2u);
      EXPECT_EQ(stage[stage.size() - 2].kind, ActionKind::ReduceGrads);
      EXPECT_EQ(stage.back().kind, ActionKind::OptimizerStep);
    }
  }
}

TEST(PipelineScheduleCheck, CatchesBackwardBeforeItsForward) {
  Schedule s = loom::pp::one_f_one_b(4, 8);
  auto& last = s[3];
  std::swap(last[find_action(last, ActionKind::Forward, 2)], last[find_action(last, ActionKind::Backward, 2)]);
  auto problems = check(s, ScheduleKind::OneFOneB, 4, 8);
  EXPECT_TRUE(mentions(problems, "Forward of micro-batch 2 chunk 0 comes after its Backward")) << joined(problems);
}

TEST(PipelineScheduleCheck, CatchesADroppedSend) {
  Schedule s = loom::pp::one_f_one_b(4, 8);
  s[1].erase(s[1].begin() + find_action(s[1], ActionKind::SendActivation, 3));
  auto problems = check(s, ScheduleKind::OneFOneB, 4, 8);
  EXPECT_TRUE(mentions(problems, "0 x SendActivation for micro-batch 3")) << joined(problems);
  EXPECT_TRUE(mentions(problems, "7 sends but 8 receives")) << joined(problems);
  EXPECT_TRUE(mentions(problems, "deadlock")) << joined(problems);
}

TEST(PipelineScheduleCheck, CatchesReorderedReceives) {
  Schedule s = loom::pp::gpipe(4, 8);
  auto& stage = s[2];
  std::swap(stage[find_action(stage, ActionKind::RecvGrad, 4)], stage[find_action(stage, ActionKind::RecvGrad, 5)]);
  auto problems = check(s, ScheduleKind::GPipe, 4, 8);
  EXPECT_TRUE(mentions(problems, "gradient channel stage 3 -> 2, message 4")) << joined(problems);
}

TEST(PipelineScheduleCheck, CatchesExceedingTheInFlightBound) {
  // GPipe holds all 8 micro-batches; 1F1B's bound allows at most 4.
  auto problems = check(loom::pp::gpipe(4, 8), ScheduleKind::OneFOneB, 4, 8);
  EXPECT_TRUE(mentions(problems, "stage 0: 8 micro-batches in flight, bound is 4")) << joined(problems);
  EXPECT_TRUE(loom::pp::check_schedule(loom::pp::one_f_one_b(4, 8), 4, 8, 1, 3).size() == 1);
}

TEST(PipelineScheduleCheck, CatchesADeadlock) {
  // Stage 0 waits for the gradient before sending the activation it depends on.
  Schedule s = loom::pp::one_f_one_b(2, 1);
  auto& first = s[0];
  size_t send = find_action(first, ActionKind::SendActivation, 0);
  Action moved = first[send];
  first.erase(first.begin() + send);
  first.insert(first.begin() + find_action(first, ActionKind::Backward, 0) + 1, moved);
  auto problems = check(s, ScheduleKind::OneFOneB, 2, 1);
  ASSERT_EQ(problems.size(), 1u) << joined(problems);
  EXPECT_TRUE(mentions(problems, "deadlock")) << joined(problems);
}

TEST(PipelineScheduleCheck, CatchesMissingAndMisplacedActions) {
  Schedule s = loom::pp::interleaved_1f1b(2, 4, 2);
  s[0].pop_back();  // no OptimizerStep
  s[1].push_back({ActionKind::Forward, 9, 0});
  auto problems = check(s, ScheduleKind::Interleaved1F1B, 2, 4, 2);
  EXPECT_TRUE(mentions(problems, "outside 4 micro-batches x 2 chunks")) << joined(problems);
  s[1].pop_back();
  problems = check(s, ScheduleKind::Interleaved1F1B, 2, 4, 2);
  EXPECT_TRUE(mentions(problems, "stage 0: the list must end with ReduceGrads, OptimizerStep")) << joined(problems);
  EXPECT_FALSE(check(loom::pp::gpipe(3, 4), ScheduleKind::GPipe, 2, 4).empty());  // wrong stage count
}

void expect_user_error(const std::function<void()>& f, const std::string& field) {
  try {
    f();
    ADD_FAILURE() << "no UserError naming " << field;
  } catch (const loom::UserError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, BadSizesRaiseUserErrorNamingTheField) {
  expect_user_error([] { loom::pp::gpipe(0, 4); }, "parallel.pp");
  expect_user_error([] { loom::pp::one_f_one_b(-1, 4); }, "parallel.pp");
  expect_user_error([] { loom::pp::gpipe(2, 0); }, "micro-batches");
  expect_user_error([] { loom::pp::one_f_one_b(2, 0); }, "micro-batches");
  expect_user_error([] { loom::pp::interleaved_1f1b(2, 4, 0); }, "chunks");
  expect_user_error([] { loom::pp::interleaved_1f1b(0, 4, 2); }, "parallel.pp");
  expect_user_error([] { loom::pp::interleaved_1f1b(2, 0, 2); }, "micro-batches");
  expect_user_error([] { loom::pp::interleaved_1f1b(4, 6, 2); }, "micro-batches (6) to be a multiple of parallel.pp (4)");
  expect_user_error([] { loom::pp::build_schedule(ScheduleKind::OneFOneB, 2, 4, 2); }, "chunks");
}

}  // namespace
