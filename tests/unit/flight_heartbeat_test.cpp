// The flight records' heartbeat (comm/flight_recorder.h): a rank whose
// heartbeat stopped is the one a hang names, even when every member entered
// the operation; a rank whose heartbeat goes on (busy, or waiting elsewhere)
// is never named while a frozen one exists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/flight_recorder.h"

namespace {

using loom::FlightOptions;
using loom::FlightRecorder;

// Three ranks' records in one folder: rank 0 waits; `frozen` ranks are
// stamped once, at their start, and never again.
struct Records {
  std::string dir;
  std::vector<std::unique_ptr<FlightRecorder>> ranks;
  Records(const std::string& name, std::vector<int> frozen, int world_size = 0, double stale_s = 0.4) {
    dir = (std::filesystem::temp_directory_path() / ("loom_flight_" + name + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);
    for (int r = 0; r < 3; r++) {
      const bool stops = std::count(frozen.begin(), frozen.end(), r) > 0;
      ranks.push_back(std::make_unique<FlightRecorder>(dir, r, FlightOptions{stops ? 0.0 : 0.05, stale_s, world_size}));
      ranks.back()->add_group("dp", {0, 1, 2}, r);
    }
  }
  ~Records() {
    ranks.clear();
    std::filesystem::remove_all(dir);
  }
  FlightRecorder& operator[](int r) { return *ranks[size_t(r)]; }
};

void past_stale() { std::this_thread::sleep_for(std::chrono::milliseconds(700)); }

TEST(FlightHeartbeat, ARankFrozenInsideTheCollectiveIsNamed) {
  Records rec("inside", {1});
  for (int r = 0; r < 3; r++) rec[r].enter(0, "all_reduce(sum) of 1024 fp32");
  past_stale();
  const loom::HangReport report = rec[0].explain_collective(0, 1);
  EXPECT_EQ(report.culprits, std::vector<int>{1}) << report.text;
  EXPECT_EQ(report.evidence, "heartbeat");
  ASSERT_EQ(report.frozen.size(), 1u);
  EXPECT_EQ(report.frozen[0].pid, int(::getpid()));
  EXPECT_NE(report.text.find("rank 1: its heartbeat stopped"), std::string::npos) << report.text;
}

// The deadline counts from the waiting rank's entry: a peer that entered
// late and froze just before it still has a fresh stamp. The verdict waits
// for that stamp to go stale (or to move) instead of naming nobody, and a
// live rank answers within its period.
TEST(FlightHeartbeat, ARankFrozenAMomentBeforeTheDeadlineIsNamed) {
  Records rec("just_now", {1});
  for (int r = 0; r < 3; r++) rec[r].enter(0, "all_gather of 4 bf16");
  const auto start = std::chrono::steady_clock::now();
  const loom::HangReport report = rec[0].explain_collective(0, 1);  // rank 1's stamp: fresh
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(report.culprits, std::vector<int>{1}) << report.text;
  EXPECT_EQ(report.evidence, "heartbeat");
  EXPECT_LT(took, 0.4 + 2 * 0.05 + 1.0) << "waited well past stale_s and two periods";
}

TEST(FlightHeartbeat, LiveRanksWithFreshStampsAreSettledWithinAPeriod) {
  Records rec("fresh_alive", {}, 0, 3.0);
  for (int r = 0; r < 3; r++) rec[r].enter(0, "all_reduce(sum)");
  const auto start = std::chrono::steady_clock::now();
  const loom::HangReport report = rec[0].explain_collective(0, 1);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(report.culprits.empty()) << report.text;
  EXPECT_LT(took, 1.5) << "a live rank stamps every 0.05 s: no need to wait out stale_s (3 s)";
}

TEST(FlightHeartbeat, AHealthyRankThatNeverEnteredIsNotNamedBesideAFrozenOne) {
  Records rec("elsewhere", {1});
  rec[0].enter(0, "all_reduce(sum)");
  rec[1].enter(0, "all_reduce(sum)");  // rank 2 waits on rank 1 somewhere else
  past_stale();
  const loom::HangReport report = rec[0].explain_collective(0, 1);
  EXPECT_EQ(report.culprits, std::vector<int>{1}) << report.text;
  EXPECT_NE(report.text.find("rank 2 never entered #1 but its heartbeat goes on: alive"), std::string::npos)
      << report.text;
}

TEST(FlightHeartbeat, WithoutAFrozenRankTheOneThatNeverEnteredIsNamed) {
  Records rec("absent", {});
  rec[0].enter(0, "all_reduce(sum)");
  rec[1].enter(0, "all_reduce(sum)");
  past_stale();  // every heartbeat goes on: a slow rank is not a frozen one
  const loom::HangReport report = rec[0].explain_collective(0, 1);
  EXPECT_EQ(report.culprits, std::vector<int>{2}) << report.text;
  EXPECT_EQ(report.evidence, "never entered");
  EXPECT_TRUE(report.frozen.empty());
}

TEST(FlightHeartbeat, EveryoneInsideAndAliveNamesNobody) {
  Records rec("transport", {});
  for (int r = 0; r < 3; r++) rec[r].enter(0, "all_reduce(sum)");
  past_stale();
  const loom::HangReport report = rec[0].explain_collective(0, 1);
  EXPECT_TRUE(report.culprits.empty()) << report.text;
  EXPECT_NE(report.text.find("every heartbeat goes on"), std::string::npos) << report.text;
}

TEST(FlightHeartbeat, AFrozenPeerOfATransferIsNamedAndTheVerdictWritten) {
  Records rec("p2p", {2});
  rec[0].enter_p2p(0, false, 2, "recv");
  rec[2].enter_p2p(0, true, 0, "send");  // it posted the send, then froze
  past_stale();
  const loom::HangReport report = rec[0].explain_p2p(0, false, 2, 1);
  EXPECT_EQ(report.culprits, std::vector<int>{2}) << report.text;
  EXPECT_EQ(report.evidence, "heartbeat");
  rec[0].write_hang(report, "receive from rank 2");
  std::ifstream in(rec.dir + "/hang.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["culprits"], nlohmann::json::array({2}));
  EXPECT_EQ(j["evidence"], "heartbeat");
  EXPECT_EQ(j["frozen"][0]["rank"], 2);
  EXPECT_EQ(j["frozen"][0]["pid"], int(::getpid()));
}

// A pipeline: rank 0 waits for rank 2's send; rank 2 is healthy but waits
// on rank 1, which froze. With the job's ranks known, rank 1 is named, not 2.
TEST(FlightHeartbeat, TheFrozenRankBehindAHealthyPeerIsNamedNotThePeer) {
  Records rec("behind", {1}, 3);
  rec[0].enter_p2p(0, false, 2, "recv");  // rank 2 never posts its send: it waits on rank 1
  past_stale();
  const loom::HangReport report = rec[0].explain_p2p(0, false, 2, 1);
  EXPECT_EQ(report.culprits, std::vector<int>{1}) << report.text;
  EXPECT_EQ(report.evidence, "heartbeat");
  // Looking at the peer alone (world_size 0) would name the healthy rank 2:
  // why the run passes its world size.
  Records group_only("peer", {1});
  group_only[0].enter_p2p(0, false, 2, "recv");
  past_stale();
  EXPECT_EQ(group_only[0].explain_p2p(0, false, 2, 1).culprits, std::vector<int>{2});
}

}  // namespace
