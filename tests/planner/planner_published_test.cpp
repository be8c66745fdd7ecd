// The published runs the planner is checked against (issue 38, item 5):
// Narayanan et al. 2021, Table 1, set up as the paper and NVIDIA's run script
// give them (the layout uses every GPU, the batch splits into whole
// micro-batches, the layers into the chunks), the paper's FLOP count by
// hand, and `loom bench planner --published` printing predicted against
// published TFLOP/s per GPU for every row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cli/run_loom.h"
#include "planner/published_runs.h"
#include "planner/time_model.h"

namespace loom::planner {
namespace {

TEST(PlannerPublished, NarayananRowsAreThePublishedLayouts) {
  const std::vector<PublishedRun> runs = narayanan_2021_runs();
  ASSERT_EQ(runs.size(), 10u);
  const int gpus[] = {32, 64, 128, 256, 512, 1024, 1536, 1920, 2520, 3072};
  for (size_t i = 0; i < runs.size(); i++) {
    const PublishedRun& r = runs[i];
    SCOPED_TRACE(r.name);
    const Layout& l = r.layout;
    EXPECT_EQ(l.devices(), gpus[i]);
    EXPECT_EQ(l.dp * l.micro_batch * l.micro_batches, r.workload.global_batch);
    EXPECT_EQ(r.workload.model.n_layer % (l.pp * l.v), 0);
    EXPECT_EQ(r.workload.model.n_head % l.tp, 0);
    EXPECT_EQ(l.recompute, Recompute::full);
    EXPECT_EQ(l.precision, ComputePrecision::fp16);
    EXPECT_TRUE(l.fp32_grads);
  }
  // Eq. 3 for 1.7B: 96 B s l h^2 (1 + s/6h + V/16lh), B 512, s 2048, l 24, h 2304, V 51200.
  const double B = 512, s = 2048, L = 24, h = 2304, V = 51200;
  EXPECT_DOUBLE_EQ(runs[0].flops_per_step, 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)));
  EXPECT_NEAR(runs[0].flops_per_step / 1e15, 15.47, 0.01);  // 15.5 PFLOP a step: 3.5 s at 137 TFLOP/s x 32
}

TEST(PlannerPublished, BenchPrintsEveryRowAgainstItsPublishedThroughput) {
  const test::CliResult r = test::run_loom("bench planner --published");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* row : {"1.7B", "3.6B", "7.5B", "18B", "39B", "76B", "145B", "310B", "530B", "1T"})
    EXPECT_NE(r.output.find(std::string("\n") + row + " "), std::string::npos) << row << "\n" << r.output;
  // Each ratio is the printed predicted over the published figure.
  const size_t at = r.output.find("\n1.7B ");
  ASSERT_NE(at, std::string::npos);
  const std::string line = r.output.substr(at + 1, r.output.find('\n', at + 1) - at - 1);
  const size_t bar = line.find('|');
  double published = 0, predicted = 0, ratio = 0;
  ASSERT_EQ(std::sscanf(line.c_str() + bar + 1, "%lf %lf %lfx", &published, &predicted, &ratio), 3) << line;
  EXPECT_EQ(published, 137);
  EXPECT_NEAR(ratio, predicted / published, 0.006);
  EXPECT_GT(ratio, 0.5);  // the same order as the published figure: the set-up is the paper's
  EXPECT_LT(ratio, 2.0);
  EXPECT_NE(r.output.find("within 10% of the published figure:"), std::string::npos) << r.output;
  // Beside each row, the free search's best plan and where its gain comes from.
  const size_t own = r.output.find("the planner's own best plan for each row");
  ASSERT_NE(own, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n1T ", own), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("x  dp ", own), std::string::npos) << r.output;
}

// The shape-based model against the published table: measured here, the
// ratios (predicted over published) lie within 1.03-1.17 with a spread of
// 1.145 (issue 38's target: at most 1.15); a change that breaks that shows.
TEST(PlannerPublished, RatiosStayCloseTogether) {
  const ClusterSpec nodes = load_cluster("a100-80gb", LOOM_SOURCE_DIR);
  double lo = 1e30, hi = 0;
  for (const PublishedRun& r : narayanan_2021_runs()) {
    const double ratio = predicted_tflops_per_gpu(r, nodes) / r.tflops_per_gpu;
    EXPECT_GT(ratio, 0.9) << r.name;
    EXPECT_LT(ratio, 1.2) << r.name;
    lo = std::min(lo, ratio), hi = std::max(hi, ratio);
  }
  EXPECT_LE(hi / lo, 1.15);
}

// MFU on one basis (model FLOPs, 6N + 12Lhs a token, as the trainer's log),
// hardware FLOPs beside it: full recomputation runs the forward again (4/3
// of the model FLOPs), none adds nothing.
TEST(PlannerMfu, ModelFlopsAndHardwareFlopsBeside) {
  const PublishedRun run = narayanan_2021_runs()[0];
  const ClusterSpec c = with_devices(load_cluster("a100-80gb", LOOM_SOURCE_DIR), run.layout.devices());
  Layout l = run.layout;
  const StepTime full = step_time(run.workload, l, c);
  const double tokens = double(run.workload.global_batch) * run.workload.seq_len();
  EXPECT_NEAR(full.mfu, run.workload.model.train_flops_per_token(2048) * tokens /
                            (full.step * l.devices() * c.peak_flops(l.precision)),
              1e-12);
  EXPECT_NEAR(full.hfu, full.mfu * 4 / 3, 1e-12);
  l.recompute = Recompute::none;
  const StepTime none = step_time(run.workload, l, c);
  EXPECT_DOUBLE_EQ(none.hfu, none.mfu);
  EXPECT_GT(none.mfu, full.mfu);  // the same model FLOPs in less time
}

}  // namespace
}  // namespace loom::planner
