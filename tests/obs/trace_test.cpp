// TraceRecorder, the merged Chrome trace and the per-rank breakdown.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "comm/self_comm.h"
#include "obs/obs_test_util.h"
#include "obs/trace_analysis.h"
#include "obs/trace_recorder.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;
using nlohmann::json;

// Every (pid, tid) closes exactly what it opened, innermost first, in time order.
void expect_matched_begin_end(const json& doc, size_t expected_ranks) {
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<std::pair<int, int>, std::vector<std::string>> open;
  std::map<std::pair<int, int>, double> last_ts;
  std::map<int, std::string> names;
  size_t pairs = 0;
  for (const json& e : doc["traceEvents"]) {
    std::string ph = e["ph"];
    int pid = e["pid"], tid = e["tid"];
    if (ph == "M") {
      if (e["name"] == "process_name") names[pid] = e["args"]["name"];
      continue;
    }
    double ts = e["ts"];
    EXPECT_GE(ts, last_ts[std::make_pair(pid, tid)]) << "time goes back on rank " << pid;
    last_ts[std::make_pair(pid, tid)] = ts;
    auto key = std::make_pair(pid, tid);
    if (ph == "B") open[key].push_back(e["name"]);
    if (ph == "E") {
      ASSERT_FALSE(open[key].empty()) << "E without B on rank " << pid;
      open[key].pop_back();
      pairs++;
    }
  }
  for (const auto& [key, stack] : open) EXPECT_TRUE(stack.empty()) << "unclosed span on rank " << key.first;
  EXPECT_EQ(names.size(), expected_ranks);
  EXPECT_GT(pairs, 0u);
}

TEST(Trace, RecorderNestsAndSerializes) {
  TraceRecorder rec(3, {1, 0, 1}, 64);
  rec.set_origin_now();
  {
    ScopedSpan step(&rec, "step", SpanKind::step, CommGroup::none, 1);
    { ScopedSpan f(&rec, "forward", SpanKind::forward, CommGroup::none, 0); }
    auto async = rec.begin("all_reduce", SpanKind::comm, CommGroup::dp, kAsyncCommTrack);
    { ScopedSpan b(&rec, "backward", SpanKind::backward, CommGroup::none, 0); }
    rec.instant("bucket ready");
    rec.end(async);
  }
  ScopedSpan nothing(nullptr, "ignored", SpanKind::other);  // no recorder: a no-op
  RankTrace t = deserialize_rank_trace(rec.serialize());
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.dp, 1);
  EXPECT_EQ(t.pp, 1);
  ASSERT_EQ(t.spans.size(), 5u);
  EXPECT_EQ(t.spans[0].name, "step");
  EXPECT_EQ(t.spans[0].index, 1);
  EXPECT_EQ(t.spans[2].group, CommGroup::dp);
  EXPECT_EQ(t.spans[2].track, kAsyncCommTrack);
  EXPECT_TRUE(t.spans[4].instant);
  for (const TraceSpan& s : t.spans) {
    EXPECT_GE(s.end_us, s.begin_us) << s.name;
    EXPECT_GE(s.begin_us, t.spans[0].begin_us);
    EXPECT_LE(s.end_us, t.spans[0].end_us);
  }
}

TEST(Trace, FullBufferDropsAndCounts) {
  TraceRecorder rec(0, {}, 2);
  for (int i = 0; i < 5; i++) {
    rec.begin("x", SpanKind::other);
    rec.end();
  }
  EXPECT_EQ(rec.size(), 2u);
  EXPECT_EQ(rec.dropped(), 3u);
  TraceRecorder off(0, {}, 0);
  off.begin("x", SpanKind::other);
  off.end();
  EXPECT_EQ(off.size(), 0u);
}

TEST(Trace, MergedChromeTraceIsValidWithMatchedSpans) {
  std::string dir = fresh_dir("merged");
  std::vector<std::vector<uint8_t>> per_rank;
  for (int r = 0; r < 3; r++) {
    TraceRecorder rec(r, {r, 0, 0}, 128);
    for (int s = 1; s <= 2; s++) {
      ScopedSpan step(&rec, "step", SpanKind::step, CommGroup::none, s);
      { ScopedSpan f(&rec, "forward", SpanKind::forward); }
      auto id = rec.begin("all_reduce", SpanKind::comm, CommGroup::dp, kAsyncCommTrack);
      { ScopedSpan b(&rec, "backward", SpanKind::backward); }
      { ScopedSpan w(&rec, "wait grads", SpanKind::wait, CommGroup::dp); }
      rec.end(id);
    }
    rec.begin("left open", SpanKind::other);  // a span never ended still closes in the file
    per_rank.push_back(rec.serialize());
  }
  merge_chrome_trace(per_rank, dir + "/trace.json");
  json doc = json::parse(read_text(dir + "/trace.json"));
  expect_matched_begin_end(doc, 3);
  bool labelled = false;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["args"].contains("name") && e["args"]["name"] == "rank 2 (dp 2, tp 0, pp 0)") labelled = true;
  EXPECT_TRUE(labelled);

  std::vector<std::string> notes;
  std::vector<RankTrace> back = read_chrome_trace(dir + "/trace.json", &notes);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[2].dp, 2);
  EXPECT_EQ(back[0].spans.size(), 2u * 5 + 1);
  EXPECT_TRUE(notes.empty());
}

TEST(Trace, OverlappingSpansOnOneTrackAreCutToNest) {
  RankTrace r;
  r.spans = {span("a", SpanKind::forward, 0, 10), span("b", SpanKind::comm, 5, 15)};
  json doc = json::parse(chrome_trace_json({r}));
  expect_matched_begin_end(doc, 1);
}

TEST(Trace, GatherOverACommunicatorWritesRankZerosFile) {
  std::string dir = fresh_dir("gathered");
  SelfComm world("world");
  TraceRecorder rec(0, {}, 16);
  { ScopedSpan s(&rec, "forward", SpanKind::forward); }
  std::vector<RankTrace> gathered = gather_chrome_trace(world, rec, dir + "/trace.json");
  ASSERT_EQ(gathered.size(), 1u);
  EXPECT_EQ(gathered[0].spans.size(), 1u);
  std::vector<RankTrace> back = read_chrome_trace(dir + "/trace.json", nullptr);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].spans.size(), 1u);
}

TEST(Trace, BreakdownFindsBubblePerStage) {
  TraceBreakdown t = analyze_trace(pipeline_trace_pp2_m1(3));
  ASSERT_EQ(t.bubble_fraction_per_stage.size(), 2u);
  EXPECT_NEAR(t.bubble_fraction_per_stage[0], 30.0 / 65, 1e-6);
  EXPECT_NEAR(t.bubble_fraction_per_stage[1], 30.0 / 65, 1e-6);
  EXPECT_NEAR(t.compute_s_per_stage[0], 0.030, 1e-9);
  EXPECT_NEAR(t.step_s, 0.065, 1e-9);
  EXPECT_EQ(t.ranks[0].steps, 2);  // the first step is warm-up
}

TEST(Trace, BreakdownSplitsExposedAndHiddenCommunication) {
  RankTrace r;
  for (int s = 0; s < 2; s++) {
    double t = s * 100;
    r.spans.push_back(span("step", SpanKind::step, t, t + 100, s + 1));
    r.spans.push_back(span("backward", SpanKind::backward, t, t + 80));
    r.spans.push_back(span("tp all_reduce", SpanKind::comm, t + 10, t + 15, -1, CommGroup::tp));  // inside backward
    r.spans.push_back(span("grads", SpanKind::comm, t + 40, t + 90, -1, CommGroup::dp, kAsyncCommTrack));
    r.spans.push_back(span("wait grads", SpanKind::wait, t + 80, t + 90, -1, CommGroup::dp));
    r.spans.push_back(span("adamw", SpanKind::optimizer, t + 90, t + 100));
  }
  TraceBreakdown t = analyze_trace({r});
  EXPECT_NEAR(t.exposed_comm_s["dp"], 0.010, 1e-9);
  EXPECT_NEAR(t.exposed_comm_s["tp"], 0.005, 1e-9);
  EXPECT_NEAR(t.overlap["dp"], 0.8, 1e-9);
  EXPECT_NEAR(t.ranks[0].self(SpanKind::backward), 75e3, 1e-6);  // less the nested tp all-reduce
}

}  // namespace
}  // namespace loom::obs
