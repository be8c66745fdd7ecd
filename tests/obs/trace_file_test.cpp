// Each rank's trace on disk as the run goes (trace/rank-R.jsonl): spans
// handed out once and only when ended, read back, and a killed run whose
// timeline `loom report` merges from them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/run_loom.h"
#include "obs/obs_test_util.h"
#include "obs/run_reader.h"
#include "obs/trace_file.h"
#include "obs/trace_recorder.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

TEST(TraceFile, FinishedSpansAreHandedOutOnceInOrderUpToTheFirstOpenOne) {
  TraceRecorder trace(0, {});
  auto a = trace.begin("a", SpanKind::forward);
  trace.end(a);
  auto step = trace.begin("step", SpanKind::step, CommGroup::none, kComputeTrack, 3);
  auto b = trace.begin("b", SpanKind::backward);
  trace.end(b);
  std::vector<TraceSpan> first = trace.take_finished();
  ASSERT_EQ(first.size(), 1u);  // "step" is open: it and "b" wait
  EXPECT_EQ(first[0].name, "a");
  trace.end(step);
  std::vector<TraceSpan> second = trace.take_finished();
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].name, "step");
  EXPECT_EQ(second[0].index, 3);
  EXPECT_EQ(second[1].name, "b");
  EXPECT_TRUE(trace.take_finished().empty());
}

TEST(TraceFile, AppendedSpansReadBackAndACutLineIsNamed) {
  const std::string dir = fresh_dir("trace_file") + "/trace";
  {
    RankTraceFile f(dir, 3, 1, 0, 1);
    TraceSpan s;
    s.name = "all_reduce grads", s.kind = SpanKind::comm, s.group = CommGroup::dp, s.track = kAsyncCommTrack;
    s.begin_us = 10, s.end_us = 25;
    TraceSpan m;
    m.name = "forward", m.kind = SpanKind::forward, m.index = 2, m.begin_us = 1, m.end_us = 9;
    f.append({m, s});
  }
  std::ofstream(dir + "/rank-3.jsonl", std::ios::app) << "{\"ph\":\"X\",\"pid\":3,\"na";  // cut by a crash
  std::vector<std::string> notes;
  const std::vector<RankTrace> ranks = read_rank_trace_files(dir, &notes);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 3);
  EXPECT_EQ(ranks[0].dp, 1);
  EXPECT_EQ(ranks[0].pp, 1);
  ASSERT_EQ(ranks[0].spans.size(), 2u);
  EXPECT_EQ(ranks[0].spans[0].name, "forward");
  EXPECT_EQ(ranks[0].spans[0].index, 2);
  EXPECT_EQ(ranks[0].spans[1].group, CommGroup::dp);
  EXPECT_EQ(ranks[0].spans[1].track, kAsyncCommTrack);
  EXPECT_DOUBLE_EQ(ranks[0].spans[1].end_us, 25);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("1 unreadable lines"), std::string::npos) << notes[0];
}

// A run killed at step 12 with flushes every 5 steps keeps its timeline up
// to the flush at step 10; loom report merges it into trace.json.
TEST(TraceFile, AKilledRunKeepsItsTimelineAndReportMergesIt) {
  const std::string runs = fresh_dir("trace_killed");
  auto r = loom::test::run_loom("train --config '" LOOM_SOURCE_DIR "/configs/tiny.toml' --set 'data.path=\"" LOOM_SOURCE_DIR
                                "/data/sample/kjv.txt\"' --set train.steps=30 --set train.eval_every=0"
                                " --set train.sample_tokens=0 --set train.trace_flush_every=5 --set 'train.run_dir=\"" +
                                runs + "\"' --set train.run_name=k --fault kill:rank=0:step=12");
  ASSERT_NE(r.output.find("killed (SIGKILL) at step 12"), std::string::npos) << r.output;
  const std::string dir = runs + "/k";
  EXPECT_FALSE(std::filesystem::exists(dir + "/trace.json"));
  RunData run = read_run_dir(dir);
  ASSERT_EQ(run.trace.size(), 1u);
  int last_step = -1;
  for (const TraceSpan& s : run.trace[0].spans)
    if (s.kind == SpanKind::step) last_step = std::max(last_step, s.index);
  // Step spans count from 0: steps 1..9 ended before the flush at step 10
  // (step 10's span was still open); nothing of steps 11 and 12.
  EXPECT_GE(last_step, 8);
  EXPECT_LT(last_step, 10);
  auto report = loom::test::run_loom("report '" + dir + "'");
  EXPECT_EQ(report.code, 0) << report.output;
  EXPECT_NE(report.output.find("trace.json from trace/rank-*.jsonl"), std::string::npos) << report.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/trace.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/report/timeline.svg"));
  // Reread: the merged trace.json is now the timeline.
  EXPECT_FALSE(read_run_dir(dir).trace_from_rank_files);
}

}  // namespace
}  // namespace loom::obs
