// loom elastic (issue 19): which ranks failed, read from mpirun's output and
// the flight recorder's hang.json; the layout a restart runs on the
// survivors (the user's while it divides the batch, else the planner's, the
// global batch always kept); bad options refused before anything launches.
#include <gtest/gtest.h>

#include <filesystem>

#include "config/run_config.h"
#include "core/check.h"
#include "elastic/job_failure.h"
#include "elastic/relayout.h"
#include "elastic/supervisor.h"
#include "planner/predict.h"

namespace loom::elastic {
namespace {

TEST(ElasticFailure, ReadsTheRankMpirunSaysDied) {
  RankDeath d = parse_rank_death(
      "mpirun noticed that process rank 3 with PID 0 on node vm exited on signal 9 (Killed).\n");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.reason, "rank 3 exited on signal 9 (Killed)");
  EXPECT_EQ(parse_rank_death("step 12/30 | loss 3.2 | rank 3").rank, -1);
  JobFailure f = classify_failure(137, "", {d}, "");
  EXPECT_TRUE(f.rank_failure);
  EXPECT_EQ(f.ranks, std::vector<int>{3});
}

TEST(ElasticFailure, AHangNamesTheCulpritsFromHangJson) {
  const std::string hang = R"({"waiting_rank": 0, "culprits": [2],
    "explanation": "flight recorder: all_reduce(sum) #25 on group dp (ranks 0,1,2,3):\n  rank 2 never entered #25; last span 'optimizer'\n  ranks 1,3 entered it"})";
  // mpirun's clean-up may report a rank it killed afterwards: the hang is the cause.
  JobFailure f = classify_failure(2, hang, {parse_rank_death("process rank 1 with PID 9 on node a exited on signal 9")}, "");
  EXPECT_TRUE(f.rank_failure);
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_EQ(f.reason, "hang in all_reduce(sum) #25 on group dp (ranks 0,1,2,3): rank 2 never entered #25; last span "
                      "'optimizer'; ranks 1,3 entered it");
}

TEST(ElasticFailure, AFrozenRankFromItsHeartbeatIsLeftOutAndItsProcessNamed) {
  const std::string hang = R"j({"waiting_rank": 0, "culprits": [1], "evidence": "heartbeat",
    "frozen": [{"rank": 1, "pid": 4242, "host": "vm"}],
    "explanation": "flight recorder: all_reduce(sum) #9 on group dp (ranks 0,1,2,3):\n  rank 1: its heartbeat stopped 5.1 s ago: the process is frozen (stopped, not dead)"})j";
  JobFailure f = classify_failure(3, hang, {}, "", "loom: all_reduce(sum): no completion after 5 s");
  EXPECT_TRUE(f.rank_failure);
  EXPECT_EQ(f.ranks, std::vector<int>{1});
  ASSERT_EQ(f.frozen.size(), 1u);
  EXPECT_EQ(f.frozen[0].rank, 1);
  EXPECT_EQ(f.frozen[0].pid, 4242);
  EXPECT_EQ(f.frozen[0].host, "vm");
  EXPECT_NE(f.reason.find("rank 1: its heartbeat stopped"), std::string::npos) << f.reason;
}

TEST(ElasticFailure, AnErrorThatIsNoRanksIsNotRestarted) {
  JobFailure f = classify_failure(2, "", {}, "loom: rank 0: error: data file 'x' (data.path) not found");
  EXPECT_FALSE(f.rank_failure);
  EXPECT_NE(f.reason.find("data.path"), std::string::npos);
  EXPECT_FALSE(classify_failure(2, "{\"culprits\": []}", {}, "").rank_failure);  // stuck in the transport
}

TEST(ElasticFailure, ReadsTheTasksSrunSaysDied) {
  std::vector<RankDeath> d = parse_rank_deaths("srun: error: nid001: tasks 0,2-3: Killed\n");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].rank, 0);
  EXPECT_EQ(d[1].rank, 2);
  EXPECT_EQ(d[2].rank, 3);
  EXPECT_EQ(d[2].reason, "rank 3 on nid001: Killed (srun)");
  d = parse_rank_deaths("srun: error: n7: task 5: Segmentation fault (core dumped)");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rank, 5);
  // Not deaths: a task that exited with a code, the tasks srun itself stopped.
  EXPECT_TRUE(parse_rank_deaths("srun: error: n7: task 1: Exited with exit code 2").empty());
  EXPECT_TRUE(parse_rank_deaths("srun: error: n7: tasks 0,2: Terminated").empty());
  EXPECT_TRUE(parse_rank_deaths("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.").empty());
  // mpirun's line still reads through the same call.
  d = parse_rank_deaths("mpirun noticed that process rank 1 with PID 811 on node vm exited on signal 9 (Killed).");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rank, 1);
}

TEST(ElasticFailure, ATimeoutWithNoCulpritIsAHangNotRestarted) {
  const std::string line = "loom: pipeline send to rank 1: no completion after 5 s; aborting the job";
  JobFailure f = classify_failure(139, "", {}, "", line);
  EXPECT_FALSE(f.rank_failure);
  EXPECT_EQ(f.reason.rfind("hang: pipeline send to rank 1: no completion after 5 s", 0), 0u) << f.reason;
  // A death or a culprit still decides when there is one.
  f = classify_failure(137, "", {{1, "rank 1 exited on signal 9 (Killed)"}}, "", line);
  EXPECT_TRUE(f.rank_failure);
  EXPECT_EQ(f.ranks, std::vector<int>{1});
}

RunConfig tiny(int batch) {
  RunConfig cfg = load_run_config(std::string(LOOM_SOURCE_DIR) + "/configs/tiny.toml", {});
  cfg.train.batch_size = batch;
  return cfg;
}

TEST(ElasticRelayout, KeepsTheUsersShapeWithFewerReplicasAndTheSameBatch) {
  const planner::ClusterSpec cluster = planner::measure_local_cluster_quickly();
  Relayout r = relayout(tiny(12), 3, 1, cluster);
  EXPECT_EQ(r.world, 3);
  EXPECT_TRUE(r.users);
  EXPECT_EQ(r.layout.dp, 3);
  EXPECT_EQ(r.layout.dp * r.layout.micro_batch * r.layout.micro_batches, 12);
  EXPECT_NE(std::find(r.overrides.begin(), r.overrides.end(), "parallel.dp=3"), r.overrides.end());
  // A run started with --layout auto asks the planner again.
  Relayout planned = relayout(tiny(12), 3, 1, cluster, /*planner_only=*/true);
  EXPECT_FALSE(planned.users);
  EXPECT_EQ(planned.world, 3);
  EXPECT_NE(planned.describe().find("the planner's choice"), std::string::npos);
}

// Expert parallelism: a restart keeps the user's ep where the survivors'
// data group still divides by it, else the largest that divides it and the
// experts (the checkpoint reshards over ep).
TEST(ElasticRelayout, KeepsADividingEp) {
  const planner::ClusterSpec cluster = planner::measure_local_cluster_quickly();
  RunConfig cfg = load_run_config(std::string(LOOM_SOURCE_DIR) + "/configs/mixtral-tiny.toml",
                                  {"train.batch_size=24", "parallel.ep=4"});
  Relayout eight = relayout(cfg, 8, 1, cluster);
  ASSERT_TRUE(eight.users);
  EXPECT_EQ(eight.layout.ep, 4);
  Relayout six = relayout(cfg, 6, 1, cluster);  // dp 6: neither 4 nor 3 (8 experts) divides; 2 does
  ASSERT_TRUE(six.users);
  EXPECT_EQ(six.layout.dp, 6);
  EXPECT_EQ(six.layout.ep, 2);
  EXPECT_NE(std::find(six.overrides.begin(), six.overrides.end(), "parallel.ep=2"), six.overrides.end());
}

TEST(ElasticRelayout, AsksThePlannerWhenTheUsersShapeNoLongerDivides) {
  const planner::ClusterSpec cluster = planner::measure_local_cluster_quickly();
  // Batch 8 on 3 ranks: dp 3 does not divide it, and tiny's 2 layers and 2
  // heads split over neither 3 stages nor 3 tensor ranks: no layout of 3
  // ranks runs, so the restart goes to 2.
  Relayout r = relayout(tiny(8), 3, 1, cluster);
  EXPECT_EQ(r.world, 2);
  EXPECT_EQ(r.layout.devices(), 2);
  EXPECT_EQ(r.layout.dp * r.layout.micro_batch * r.layout.micro_batches, 8);
  // With at least 3 ranks required, there is nothing to run: the reason says so.
  try {
    relayout(tiny(8), 3, 3, cluster);
    FAIL() << "expected no layout";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("3 ranks"), std::string::npos) << e.what();
  }
}

TEST(ElasticOptions, BadOptionsNameTheOptionBeforeLaunching) {
  auto message = [](ElasticOptions o) {
    try {
      run_elastic(o, stdout);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ElasticOptions o;
  o.np = 4, o.config_path = std::string(LOOM_SOURCE_DIR) + "/configs/tiny.toml";
  o.overrides = {"train.checkpoint_every=5", "train.checkpoint_dir=" + testing::TempDir() + "/elastic_ck",
                 "train.run_dir=" + testing::TempDir() + "/elastic_runs"};
  ElasticOptions bad = o;
  bad.max_restarts = -1;
  EXPECT_NE(message(bad).find("--max-restarts"), std::string::npos);
  bad = o, bad.min_ranks = 5;
  EXPECT_NE(message(bad).find("--min-ranks 5"), std::string::npos);
  bad = o, bad.overrides = {o.overrides[2]};  // no checkpoints saved: nothing to restart from
  EXPECT_NE(message(bad).find("train.checkpoint_every > 0"), std::string::npos);
  bad = o, bad.overrides.push_back("train.checkpoint_dir=\"\"");
  EXPECT_NE(message(bad).find("train.checkpoint_dir"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(testing::TempDir() + "/elastic_runs"));  // nothing written
}

}  // namespace
}  // namespace loom::elastic
