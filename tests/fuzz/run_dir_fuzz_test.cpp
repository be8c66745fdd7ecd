// `loom report` and `loom diagnose` on a run directory whose files were
// damaged (a crashed run, a disk error, a hand edit): config.toml,
// layout.json, metrics.jsonl, summary.json, trace.json and elastic.jsonl,
// mutated one at a time. Each case must read, diagnose and report, or be
// refused with a UserError: never another exception, a signal or a hang.
#include <gtest/gtest.h>

#include "fuzz/fuzz_util.h"
#include "obs/diagnosis.h"
#include "obs/obs_test_util.h"
#include "obs/report.h"
#include "obs/run_figures.h"
#include "obs/run_reader.h"

namespace loom {
namespace {

using test::expect_accepted_or_refused;
using test::mutate_text;
using test::read_bytes;
using test::Rng;
using test::write_bytes;

TEST(Fuzz, RunDirectories) {
  const std::string dir = test::fuzz_dir("run");
  obs::RunSummary summary;
  summary.finished = true, summary.steps = 20, summary.wall_s = 3, summary.tokens_per_s = 40000, summary.mfu = 0.4;
  summary.predicted_step_s = 0.1, summary.measured_step_s = 0.11;
  summary.bubble_fraction_per_stage = {0.3, 0.3};
  summary.exposed_comm_s = {{"pp", 0.01}};
  obs::RunLayout layout = obs::test::dp_layout(1);
  layout.pp = 2, layout.world_size = 2;
  obs::test::write_run(dir, layout, obs::test::healthy_steps(20), summary, obs::test::pipeline_trace_pp2_m1(20));
  write_bytes(dir + "/elastic.jsonl",
              "{\"attempt\": 1, \"ranks\": 2, \"exit\": 137, \"cause\": \"rank 1 killed\", \"step\": 12}\n");
  const std::vector<std::string> files = {"config.toml", "layout.json", "metrics.jsonl", "summary.json", "trace.json",
                                          "elastic.jsonl"};
  std::map<std::string, std::string> good;
  for (const std::string& f : files) good[f] = read_bytes(dir + "/" + f);
  ASSERT_NO_THROW(obs::diagnose(obs::read_run_dir(dir), obs::compute_figures(obs::read_run_dir(dir))));
  const std::vector<std::string> values = {"-1", "0", "1e308", "-1e308", "null", "\"x\"", "[]", "{}", "[1, \"a\"]",
                                           "true", "99999999999999999999", "1e-320", "-0.0", "2147483648"};
  Rng rng(31);
  int refused = 0;
  for (int i = 0; i < 200; i++) {
    const std::string& f = rng.pick(files);
    write_bytes(dir + "/" + f, mutate_text(rng, good[f], values));
    expect_accepted_or_refused("run directory mutant " + std::to_string(i) + " (" + f + ")", [&] {
      obs::RunData run = obs::read_run_dir(dir);
      obs::diagnose(run, obs::compute_figures(run));
      if (i % 10 == 0) obs::write_report(run);  // charts (and PNGs where rsvg-convert is): a few cases only
    }, &refused);
    write_bytes(dir + "/" + f, good[f]);
  }
  // A damaged file is a note, not a refusal: the rest of the run is still read.
  EXPECT_LT(refused, 20);
}

}  // namespace
}  // namespace loom
