// `loom report`: charts that parse and hold their series, report.md with the
// headline figures, partial and crashed runs.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/run_loom.h"
#include "obs/line_chart.h"
#include "obs/obs_test_util.h"
#include "obs/report.h"
#include "obs/run_reader.h"
#include "obs/svg.h"
#include "obs/timeline_chart.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(Report, NiceTicksCoverTheRange) {
  std::vector<double> t = nice_ticks(0.3, 9.7);
  ASSERT_GE(t.size(), 3u);
  EXPECT_LE(t.front(), 0.3);
  EXPECT_GE(t.back(), 9.7);
  EXPECT_EQ(t[1] - t[0], 2);
  EXPECT_EQ(tick_label(12000, 2000), "12k");
  EXPECT_EQ(tick_label(40050, 50), "40.05k");
  EXPECT_EQ(tick_label(0.5, 0.1), "0.5");
  EXPECT_EQ(tick_label(3, 1), "3");
}

TEST(Report, LineChartIsWellFormedAndHoldsItsSeries) {
  std::string dir = fresh_dir("chart");
  ChartSeries a, b;
  a.name = "train <loss> & more", b.name = "val";
  for (int i = 0; i < 50; i++) a.x.push_back(i), a.y.push_back(i == 20 ? NAN : 10.0 / (i + 1));
  b.x = {10, 20, 30}, b.y = {1, 0.8, 0.6};
  LineChart c;
  c.title = "Loss \"quoted\"", c.x_label = "step", c.y_label = "loss";
  std::string svg = render_line_chart(c, {a, b});
  std::ofstream(dir + "/c.svg") << svg;
  EXPECT_TRUE(well_formed_xml(dir + "/c.svg"));
  EXPECT_TRUE(has(svg, "data-series=\"train &lt;loss&gt; &amp; more\""));
  EXPECT_TRUE(has(svg, "data-series=\"val\""));
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 10, true);
  // the NaN breaks the line in two
  size_t lines = 0;
  for (size_t at = 0; (at = svg.find("<polyline data-series=\"train", at)) != std::string::npos; at++) lines++;
  EXPECT_EQ(lines, 2u);
  std::ofstream(dir + "/empty.svg") << render_line_chart(c, {});
  EXPECT_TRUE(well_formed_xml(dir + "/empty.svg"));
}

TEST(Report, FullRunWritesChartsAndSummary) {
  std::string dir = fresh_dir("full");
  RunLayout l;
  l.world_size = 2, l.pp = 2, l.schedule = "1f1b", l.micro_batches = 1;
  std::vector<StepMetrics> steps = healthy_steps(30);
  for (auto& m : steps) m.time = {0.030, 0.0, 0.030, 0.005, 0.0}, m.step_time_s = 0.065;
  RunSummary s;
  s.finished = true, s.steps = 30, s.predicted_step_s = 0.060, s.measured_step_s = 0.065;
  s.predicted_mem_bytes = 100 << 20, s.measured_mem_bytes = 110 << 20;
  s.overlap = {{"dp", 0.75}};
  write_run(dir, l, steps, s, pipeline_trace_pp2_m1(3));

  ReportOutput out = write_report(read_run_dir(dir));
  for (const char* f : {"report.md", "loss.svg", "throughput.svg", "mfu.svg", "timeline.svg"}) {
    EXPECT_TRUE(std::filesystem::exists(out.dir + "/" + f)) << f;
    if (std::string(f).ends_with(".svg")) {
      EXPECT_TRUE(well_formed_xml(out.dir + "/" + f)) << f;
    }
  }
  EXPECT_TRUE(has(read_text(out.dir + "/loss.svg"), "data-series=\"train loss\""));
  EXPECT_TRUE(has(read_text(out.dir + "/throughput.svg"), "data-series=\"tokens/s\""));
  std::string timeline = read_text(out.dir + "/timeline.svg");
  EXPECT_TRUE(has(timeline, "data-rank=\"0\"") && has(timeline, "data-rank=\"1\""));
  EXPECT_TRUE(has(timeline, "Timeline of step 3"));
  EXPECT_TRUE(has(timeline, span_kind_color(SpanKind::bubble)));

  std::string md = read_text(out.dir + "/report.md");
  for (const char* what : {"MFU", "tokens/s", "| 0 | 46.2% |", "| 1 | 46.2% |", "Overlap achieved", "75.0%",
                           "Predicted vs measured", "+8.3%", "+10.0%", "pipeline-bound"})
    EXPECT_TRUE(has(md, what)) << what << "\n" << md;
  // report.md shows the PNGs when rsvg-convert made them, else the SVGs.
  if (find_svg_converter().empty()) {
    EXPECT_TRUE(has(md, "rsvg-convert is not on PATH"));
    EXPECT_TRUE(has(md, "![loss](loss.svg)") && has(md, "![timeline](timeline.svg)")) << md;
  } else {
    EXPECT_TRUE(std::filesystem::exists(out.dir + "/loss.png"));
    EXPECT_TRUE(has(md, "![loss](loss.png)") && has(md, "![timeline](timeline.png)")) << md;
  }
}

// The data group's wait after backward, split: the report counts only what
// was not spent waiting for a slower rank as exposed communication.
TEST(Report, CommunicationSetsApartTheWaitForASlowerRank) {
  std::string dir = fresh_dir("slower");
  std::vector<StepMetrics> steps = healthy_steps(10);
  for (auto& m : steps) m.time = {0.050, 0.040, 0.0, 0.009, 0.001}, m.step_time_s = 0.100;
  RunSummary s;
  s.finished = true, s.steps = 10;
  s.exposed_comm_s = {{"dp", 0.040}};
  s.waited_for_slower_s = {{"dp", 0.030}};
  s.overlap = {{"dp", 0.5}};
  write_run(dir, dp_layout(2), steps, s);
  const std::string md = read_text(write_report(read_run_dir(dir)).dir + "/report.md");
  for (const char* what : {"Exposed communication: 10.0% of the step", "waited 30.0% of the step for a slower rank",
                           "| dp | 40.00 ms | 30.00 ms | 50.0% |"})
    EXPECT_TRUE(has(md, what)) << what << "\n" << md;
}

// A mixture of experts' run: the Experts section with its loads, losses
// and bias at the first, middle and last step; a dense run has none.
TEST(Report, ExpertsSectionShowsTheRouting) {
  std::string dir = fresh_dir("experts");
  RunLayout l;
  std::vector<StepMetrics> steps = healthy_steps(9);
  for (size_t i = 0; i < steps.size(); i++)
    steps[i].moe = MoeStepMetrics{8, 2, 3.9 - 0.3 * double(i), 0.01 * double(i), 0.02, 0.004, 0.001 * double(i)};
  write_run(dir, l, steps);
  const std::string md = read_text(write_report(read_run_dir(dir)).dir + "/report.md");
  for (const char* what : {"## Experts", "8 experts, top 2", "ceiling 4.00", "| 1 | 3.90 | 0.00 | 0.02 | 0.004 | 0 |",
                           "| 5 | 2.70 | 0.04 |", "| 9 | 1.50 | 0.08 | 0.02 | 0.004 | 0.008 |"})
    EXPECT_TRUE(has(md, what)) << what << "\n" << md;
  std::string dense = fresh_dir("experts-dense");
  write_run(dense, l, healthy_steps(9));
  EXPECT_FALSE(has(read_text(write_report(read_run_dir(dense)).dir + "/report.md"), "## Experts"));
}

// report.html: one page with every chart inline, nothing it must fetch, tags
// that nest (Python's HTML parser), and, where a browser is installed, a
// page that renders headless.
TEST(Report, HtmlIsOneSelfContainedPage) {
  std::string dir = fresh_dir("html");
  RunLayout l;
  l.world_size = 2, l.pp = 2, l.schedule = "1f1b", l.micro_batches = 1;
  RunSummary s;
  s.finished = true, s.predicted_step_s = 0.060, s.measured_step_s = 0.065;
  std::vector<StepMetrics> steps = healthy_steps(30);
  write_run(dir, l, steps, s, pipeline_trace_pp2_m1(3));
  ReportOutput out = write_report(read_run_dir(dir));
  const std::string html = read_text(out.dir + "/report.html");
  size_t charts = 0;
  for (const auto& e : std::filesystem::directory_iterator(out.dir)) charts += e.path().extension() == ".svg";
  size_t inline_svgs = 0;
  for (size_t at = 0; (at = html.find("<svg", at)) != std::string::npos; at++) inline_svgs++;
  EXPECT_EQ(inline_svgs, charts);
  EXPECT_GE(charts, 4u);
  EXPECT_FALSE(has(html, " src=")) << "an external file";
  EXPECT_FALSE(has(html, "<link")) << "an external file";
  for (const char* what : {"<h2>Throughput</h2>", "<table>", "<th>stage</th>", "Predicted vs measured", "timeline"})
    EXPECT_TRUE(has(html, what)) << what;
  // Every element the converter writes is closed, in order.
  const std::string check = R"(/usr/bin/python3 -c '
import sys
from html.parser import HTMLParser
void = {"meta", "br", "img", "path", "line", "rect", "polyline", "circle", "text", "title", "g", "tspan", "polygon"}
class P(HTMLParser):
    def __init__(s): super().__init__(); s.stack = []; s.bad = []
    def handle_starttag(s, t, a):
        if t not in void: s.stack.append(t)
    def handle_endtag(s, t):
        if t in void: return
        if not s.stack or s.stack[-1] != t: s.bad.append(t)
        else: s.stack.pop()
p = P(); p.feed(open(sys.argv[1]).read())
sys.exit(1 if p.bad or p.stack else 0)' ')" + out.dir + "/report.html'";
  EXPECT_EQ(std::system(check.c_str()), 0) << "report.html has unbalanced tags";

  std::string browser;
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
    if (std::system((std::string("command -v ") + b + " > /dev/null 2>&1").c_str()) == 0) {
      browser = b;
      break;
    }
  if (browser.empty()) GTEST_SKIP() << "no headless browser (chromium) installed: the page was not rendered";
  const std::string shot = out.dir + "/rendered.png";
  const std::string render = "timeout 60 " + browser + " --headless --no-sandbox --disable-gpu --window-size=1100,3000 "
                             "--screenshot='" + shot + "' 'file://" + out.dir + "/report.html' > /dev/null 2>&1";
  EXPECT_EQ(std::system(render.c_str()), 0) << render;
  ASSERT_TRUE(std::filesystem::exists(shot));
  EXPECT_GT(std::filesystem::file_size(shot), 20000u) << "a blank page?";
}

TEST(Report, CrashedRunReportsWhatIsThereAndWhatIsMissing) {
  std::string dir = fresh_dir("crashed");
  write_run(dir, dp_layout(2), healthy_steps(12));
  std::ofstream(dir + "/metrics.jsonl", std::ios::app) << R"({"step": 13, "loss": 2.)";
  auto r = loom::test::run_loom("report '" + dir + "'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "missing: summary.json")) << r.output;
  EXPECT_TRUE(has(r.output, "cut off")) << r.output;
  std::string md = read_text(dir + "/report/report.md");
  EXPECT_TRUE(has(md, "Missing: summary.json trace.json")) << md;
  EXPECT_TRUE(has(md, "12 steps")) << md;
  EXPECT_TRUE(has(md, "did not finish")) << md;
  EXPECT_TRUE(well_formed_xml(dir + "/report/loss.svg"));
}

TEST(Report, SummaryOnlyRunStillReports) {
  std::string dir = fresh_dir("summary_only");
  RunSummary s;
  s.finished = true, s.measured_step_s = 0.2, s.tokens_per_s = 1000;
  RunDir(dir).write_summary(s);  // an empty metrics.jsonl beside it
  auto r = loom::test::run_loom("report '" + dir + "'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(read_text(dir + "/report/report.md"), "200.0 ms"));
}

TEST(Report, NothingToReadExitsWith2) {
  auto r = loom::test::run_loom("report '" + fresh_dir("nothing") + "'");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "nothing readable")) << r.output;
  r = loom::test::run_loom("report /no/such/run");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.output, "/no/such/run"));
  r = loom::test::run_loom("report");
  EXPECT_EQ(r.code, 2);
}

}  // namespace
}  // namespace loom::obs
