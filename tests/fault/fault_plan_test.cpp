// Fault injection's option parser and its schedule (issue 19): what fires
// where and when, and bad specs rejected naming the option.
#include <gtest/gtest.h>

#include <chrono>

#include "core/check.h"
#include "fault/fault_plan.h"

using loom::Fault;
using loom::FaultKind;
using loom::FaultPlan;
using loom::parse_fault;

TEST(FaultPlan, ParsesEveryKind) {
  Fault k = parse_fault("kill:rank=1:step=30");
  EXPECT_EQ(k.kind, FaultKind::kill);
  EXPECT_EQ(k.rank, 1);
  EXPECT_EQ(k.step, 30);
  EXPECT_EQ(parse_fault("stop:step=2:rank=0").kind, FaultKind::stop);
  Fault s = parse_fault("slow:rank=3:step=5:ms=150");
  EXPECT_EQ(s.kind, FaultKind::slow);
  EXPECT_EQ(s.ms, 150);
  EXPECT_EQ(parse_fault("kill-in-save:rank=0:step=20").kind, FaultKind::kill_in_save);
  EXPECT_EQ(loom::describe_fault(s), "slow:rank=3:step=5:ms=150");
  Fault p = parse_fault("pause:rank=1:step=9:ms=4000");
  EXPECT_EQ(p.kind, FaultKind::pause);
  EXPECT_EQ(p.ms, 4000);
  EXPECT_EQ(loom::describe_fault(p), "pause:rank=1:step=9:ms=4000");
}

TEST(FaultPlan, APauseKeepsTheRankBusyOnceAtItsStep) {
  FaultPlan plan({parse_fault("pause:rank=1:step=3:ms=150")});
  EXPECT_EQ(plan.slow_ms(5, 1), 0);  // not a straggler: it does not add to later steps
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  plan.at_step_begin(1, 1);  // step 2: nothing
  plan.at_step_begin(2, 0);  // step 3, another rank: nothing
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.1);
  t0 = Clock::now();
  plan.at_step_begin(2, 1);  // step 3 on rank 1: busy 150 ms, then goes on
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 0.15);
}

TEST(FaultPlan, RejectsBadSpecsNamingTheOption) {
  for (const char* bad : {"", "explode:rank=1:step=2", "kill:rank=1", "kill:step=3", "kill:rank=-1:step=3",
                          "kill:rank=1:step=0", "kill:rank=x:step=3", "slow:rank=1:step=2", "kill:rank=1:step=2:ms=5",
                          "kill:rank=1:step=2:oops", "slow:rank=1:step=2:ms=0",
                          "pause:rank=1:step=2", "stop:rank=1:step=2:ms=9"}) {
    try {
      parse_fault(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const loom::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--fault"), std::string::npos) << e.what();
    }
  }
  FaultPlan plan({parse_fault("kill:rank=4:step=3")});
  EXPECT_THROW(plan.check_ranks(4), loom::UserError);
  EXPECT_NO_THROW(plan.check_ranks(5));
}

TEST(FaultPlan, SlowFromItsStepOnAndSaveKillsAtTheirStep) {
  FaultPlan plan({parse_fault("slow:rank=2:step=5:ms=100"), parse_fault("slow:rank=2:step=7:ms=20"),
                  parse_fault("kill-in-save:rank=1:step=20")});
  EXPECT_EQ(plan.slow_ms(3, 2), 0);    // step 4 (1-based)
  EXPECT_EQ(plan.slow_ms(4, 2), 100);  // step 5
  EXPECT_EQ(plan.slow_ms(6, 2), 120);  // step 7: both
  EXPECT_EQ(plan.slow_ms(6, 1), 0);    // another rank
  EXPECT_TRUE(plan.kill_in_save(20, 1));
  EXPECT_FALSE(plan.kill_in_save(10, 1));
  EXPECT_FALSE(plan.kill_in_save(20, 0));
  plan.at_step_begin(0, 0);  // nothing fires for rank 0 at step 1 (the process goes on)
}
