// Progress: a bar on a terminal, sparse plain lines otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "obs/progress.h"

namespace loom::obs {
namespace {

std::string captured(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

int count(const std::string& s, char c) { return int(std::count(s.begin(), s.end(), c)); }

TEST(Progress, PlainLinesEveryTenPercent) {
  FILE* out = std::tmpfile();
  double now = 0;
  ProgressOptions o;
  o.out = out, o.terminal = 0, o.line_every_s = 1e9, o.clock = [&] { return now; };
  {
    Progress p("prepare", 1000, o);
    for (int i = 1; i <= 1000; i++) now += 0.01, p.update(i, "docs");
    p.finish();
  }
  std::string s = captured(out);
  EXPECT_EQ(count(s, '\n'), 10) << s;  // 10%, 20%, ... 90%, and the final line
  EXPECT_EQ(count(s, '\r'), 0);
  EXPECT_NE(s.find("prepare  10% 100/1000"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 9s"), std::string::npos) << s;
  EXPECT_NE(s.find("took 10s"), std::string::npos) << s;
  std::fclose(out);
}

TEST(Progress, PlainLinesAlsoEveryFewSeconds) {
  FILE* out = std::tmpfile();
  double now = 0;
  ProgressOptions o;
  o.out = out, o.terminal = 0, o.line_every_percent = 0, o.line_every_s = 30, o.clock = [&] { return now; };
  Progress p("train", 100, o);
  for (int i = 1; i <= 10; i++) now += 10, p.update(i);  // 100 s: a line every 30 s
  EXPECT_EQ(count(captured(out), '\n'), 3);
  std::fclose(out);
}

TEST(Progress, TerminalBarRedrawsInPlaceWithEta) {
  FILE* out = std::tmpfile();
  double now = 0;
  ProgressOptions o;
  o.out = out, o.terminal = 1, o.clock = [&] { return now; };
  {
    Progress p("train", 50, o);
    for (int i = 1; i <= 50; i++) now += 1, p.update(i, "loss 2.5");
    p.finish("loss 2.1");
  }
  std::string s = captured(out);
  EXPECT_GE(count(s, '\r'), 50);
  EXPECT_EQ(count(s, '\n'), 1);
  EXPECT_NE(s.find("[###############...............]  50% 25/50"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 25s | loss 2.5"), std::string::npos) << s;
  EXPECT_NE(s.find("100% 50/50"), std::string::npos);
  std::fclose(out);
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(Progress::format_duration(12.4), "12s");
  EXPECT_EQ(Progress::format_duration(185), "3m05s");
  EXPECT_EQ(Progress::format_duration(3720), "1h02m");
  EXPECT_EQ(Progress::format_duration(NAN), "?");
}

}  // namespace
}  // namespace loom::obs
