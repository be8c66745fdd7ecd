// `loom diagnose` names the cause each synthetic run was built to show.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/run_loom.h"
#include "obs/diagnosis.h"
#include "obs/obs_test_util.h"
#include "obs/run_reader.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

Diagnosis diagnose_dir(const std::string& dir) {
  RunData run = read_run_dir(dir);
  return diagnose(run, compute_figures(run));
}

std::vector<std::string> causes(const Diagnosis& d) {
  std::vector<std::string> c;
  for (const Finding& f : d.findings) c.push_back(f.cause);
  return c;
}

std::string dump(const Diagnosis& d) {
  std::string s;
  for (const Finding& f : d.findings) {
    s += f.cause + ":";
    for (const auto& e : f.evidence) s += " [" + e + "]";
    s += " -> " + f.recommendation + "\n";
  }
  return s;
}

TEST(Diagnose, HealthyRunHasNoFindings) {
  std::string dir = fresh_dir("healthy");
  write_run(dir, dp_layout(2), healthy_steps(60));
  Diagnosis d = diagnose_dir(dir);
  EXPECT_TRUE(d.findings.empty()) << dump(d);
  EXPECT_FALSE(d.checked.empty());
}

TEST(Diagnose, TwoStagesOneMicroBatchIsPipelineBound) {
  std::string dir = fresh_dir("pipeline_bound");
  RunLayout l;
  l.world_size = 2, l.pp = 2, l.schedule = "1f1b", l.micro_batches = 1;
  std::vector<StepMetrics> steps = healthy_steps(20);
  for (auto& m : steps) m.time = {0.030, 0.0, 0.030, 0.005, 0.0}, m.step_time_s = 0.065;
  write_run(dir, l, steps, std::nullopt, pipeline_trace_pp2_m1(4));
  Diagnosis d = diagnose_dir(dir);
  ASSERT_FALSE(d.findings.empty());
  const Finding& f = d.findings[0];
  EXPECT_EQ(f.cause, "pipeline-bound") << dump(d);
  EXPECT_EQ(f.severity, Severity::high);
  std::string all = dump(d);
  EXPECT_NE(all.find("46%"), std::string::npos) << all;       // measured, from the trace
  EXPECT_NE(all.find("= 50%"), std::string::npos) << all;     // what pp=2, m=1 predicts
  EXPECT_NE(f.recommendation.find("at least 8"), std::string::npos) << all;
  for (const auto& c : causes(d)) EXPECT_NE(c, "communication-bound");
}

TEST(Diagnose, PipelineBoundFromTheLayoutAloneWhenNothingWasTimed) {
  std::string dir = fresh_dir("pipeline_layout_only");
  RunLayout l;
  l.world_size = 4, l.pp = 4, l.schedule = "gpipe", l.micro_batches = 2;
  RunDir(dir).write_layout(l);
  Diagnosis d = diagnose_dir(dir);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "pipeline-bound");
  EXPECT_NE(dump(d).find("predicted from layout.json"), std::string::npos);
}

// dp 8, 256 tokens per rank per step, 40 of every 100 ms waiting on the
// data group with 5% of its reduction overlapped.
struct CommBoundRun {
  RunLayout layout;
  std::vector<StepMetrics> steps;
  RunSummary summary;
};
CommBoundRun comm_bound_run() {
  CommBoundRun r;
  r.layout = dp_layout(8);
  r.layout.batch_size = 16, r.layout.seq_len = 128;
  r.steps = healthy_steps(30);
  for (auto& m : r.steps) m.time = {0.050, 0.040, 0.0, 0.009, 0.001}, m.step_time_s = 0.100;
  r.summary.finished = true;
  r.summary.exposed_comm_s = {{"dp", 0.040}, {"tp", 0.0}};
  r.summary.overlap = {{"dp", 0.05}};
  return r;
}

TEST(Diagnose, SmallBatchWithoutOverlapIsCommunicationBound) {
  std::string dir = fresh_dir("comm_bound");
  const CommBoundRun run = comm_bound_run();
  write_run(dir, run.layout, run.steps, run.summary);
  Diagnosis d = diagnose_dir(dir);
  ASSERT_EQ(causes(d), std::vector<std::string>{"communication-bound"}) << dump(d);
  const Finding& f = d.findings[0];
  std::string all = dump(d);
  EXPECT_NE(all.find("40% of the step"), std::string::npos) << all;
  EXPECT_NE(f.recommendation.find("bucket"), std::string::npos) << all;       // no overlap
  EXPECT_NE(f.recommendation.find("per-rank batch"), std::string::npos) << all;  // small batch
}

// The same exposed wait, but most of it the ranks spent waiting for a rank
// whose backward ended later (summary.json's waited_for_slower_s): that is no
// communication to tune, and the run is not called communication-bound.
TEST(Diagnose, WaitingForASlowerRankIsNotCommunication) {
  std::string dir = fresh_dir("comm_slower");
  CommBoundRun run = comm_bound_run();
  run.summary.waited_for_slower_s = {{"dp", 0.036}};
  write_run(dir, run.layout, run.steps, run.summary);
  Diagnosis d = diagnose_dir(dir);
  for (const auto& c : causes(d)) EXPECT_NE(c, "communication-bound") << dump(d);
  std::string all = dump(d);
  for (const std::string& c : d.checked) all += c + "\n";
  EXPECT_NE(all.find("exposed communication 4% of the step"), std::string::npos) << all;
  EXPECT_NE(all.find("36% of the step for a slower rank"), std::string::npos) << all;
}

TEST(Diagnose, TensorParallelAcrossNodesIsNamed) {
  std::string dir = fresh_dir("tp_slow_link");
  RunLayout l;
  l.world_size = 16, l.tp = 16, l.ranks_per_node = 8;
  std::vector<StepMetrics> steps = healthy_steps(20);
  for (auto& m : steps) m.time = {0.050, 0.045, 0.0, 0.004, 0.001}, m.step_time_s = 0.100;
  RunSummary s;
  s.exposed_comm_s = {{"tp", 0.045}};
  write_run(dir, l, steps, s);
  Diagnosis d = diagnose_dir(dir);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "communication-bound");
  EXPECT_NE(d.findings[0].recommendation.find("spans nodes"), std::string::npos) << dump(d);
}

TEST(Diagnose, ImbalancedStagesShowAStalledStage) {
  std::string dir = fresh_dir("stalled");
  RunLayout l;
  l.world_size = 4, l.pp = 4, l.schedule = "1f1b", l.micro_batches = 32;
  RunSummary s;
  s.compute_s_per_stage = {0.050, 0.050, 0.050, 0.090};
  s.bubble_fraction_per_stage = {0.12, 0.11, 0.10, 0.02};
  write_run(dir, l, healthy_steps(20), s);
  Diagnosis d = diagnose_dir(dir);
  ASSERT_EQ(causes(d), std::vector<std::string>{"stalled-stage"}) << dump(d);
  EXPECT_NE(d.findings[0].recommendation.find("from stage 3"), std::string::npos);
}

TEST(Diagnose, Fp16WithoutScalingUnderflows) {
  std::string dir = fresh_dir("fp16_underflow");
  RunLayout l = dp_layout(1);
  l.dtype = "fp16", l.loss_scaling = false;
  std::vector<StepMetrics> steps;
  for (int i = 1; i <= 40; i++) {
    StepMetrics m = healthy_step(i);
    m.loss = 9.01 - 0.0001 * (i % 3);  // stuck at the start
    m.grad_norm = i < 4 ? 1e-3 : 0.0;  // every gradient flushed to zero
    steps.push_back(m);
  }
  write_run(dir, l, steps);
  Diagnosis d = diagnose_dir(dir);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "fp16-underflow") << dump(d);
  EXPECT_EQ(d.findings[0].severity, Severity::high);
  std::string all = dump(d);
  EXPECT_NE(all.find("zero on 37 of 40 steps"), std::string::npos) << all;
  EXPECT_NE(d.findings[0].recommendation.find("loss scaling"), std::string::npos);
}

TEST(Diagnose, CollapsingLossScaleWithSkippedSteps) {
  std::string dir = fresh_dir("scale_collapse");
  RunLayout l = dp_layout(2);
  l.dtype = "fp16", l.loss_scaling = true;
  std::vector<StepMetrics> steps;
  double scale = 65536;
  for (int i = 1; i <= 40; i++) {
    StepMetrics m = healthy_step(i);
    if (i > 10) {  // every step overflows from here: skipped, scale halved
      m.skipped = true, m.grad_norm = INFINITY, scale = std::max(scale / 2, 1.0);
    }
    m.loss_scale = scale;
    steps.push_back(m);
  }
  write_run(dir, l, steps);
  Diagnosis d = diagnose_dir(dir);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "loss-scale-collapse") << dump(d);
  std::string all = dump(d);
  EXPECT_NE(all.find("from 65536"), std::string::npos) << all;
  EXPECT_NE(all.find("30 of 40 steps skipped"), std::string::npos) << all;
}

TEST(Diagnose, RepeatedSkippedStepsWithoutCollapse) {
  std::string dir = fresh_dir("skips");
  RunLayout l = dp_layout(1);
  l.dtype = "fp16", l.loss_scaling = true;
  std::vector<StepMetrics> steps = healthy_steps(40);
  for (auto& m : steps) m.loss_scale = 1024;
  for (int i : {20, 21, 22, 23}) steps[i].skipped = true;
  write_run(dir, l, steps);
  EXPECT_EQ(causes(diagnose_dir(dir)), std::vector<std::string>{"skipped-steps"});
}

TEST(Diagnose, LossSpikeAndGradNormSpike) {
  std::string dir = fresh_dir("spike");
  std::vector<StepMetrics> steps = healthy_steps(60);
  steps[40].loss = 9.5;  // step 41
  steps[40].grad_norm = 80;
  write_run(dir, dp_layout(1), steps);
  Diagnosis d = diagnose_dir(dir);
  auto c = causes(d);
  EXPECT_NE(std::find(c.begin(), c.end(), "loss-spikes"), c.end()) << dump(d);
  EXPECT_NE(std::find(c.begin(), c.end(), "grad-norm-spikes"), c.end()) << dump(d);
  EXPECT_NE(dump(d).find("step 41"), std::string::npos);
}

TEST(Diagnose, RisingLossBlamesTheLearningRate) {
  std::string dir = fresh_dir("rising");
  std::vector<StepMetrics> steps = healthy_steps(40);
  for (auto& m : steps) m.loss = 3.0 + 0.02 * double(m.step), m.lr = 3e-2;
  write_run(dir, dp_layout(1), steps);
  Diagnosis d = diagnose_dir(dir);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].cause, "loss-rising") << dump(d);
  EXPECT_NE(d.findings[0].recommendation.find("learning rate"), std::string::npos);
}

// The advice reads the run's config.toml: a lever the run already pulls is
// not suggested again, the next one is, with the run's own value.
std::string advice_for(const std::string& name, const std::string& config_toml, const RunLayout& l,
                       const std::vector<StepMetrics>& steps, const std::string& cause,
                       const std::optional<RunSummary>& summary = std::nullopt) {
  const std::string dir = fresh_dir(name);
  write_run(dir, l, steps, summary);
  if (config_toml == "-") std::filesystem::remove(dir + "/config.toml");
  else RunDir(dir, true).write_config(config_toml);
  const Diagnosis d = diagnose_dir(dir);
  for (const Finding& f : d.findings)
    if (f.cause == cause) return f.recommendation;
  ADD_FAILURE() << name << ": no " << cause << " finding: " << dump(d);
  return "";
}

std::vector<StepMetrics> grad_spike_steps() {
  std::vector<StepMetrics> steps = healthy_steps(60);
  steps[40].grad_norm = 80;
  return steps;
}

TEST(DiagnoseAdvice, GradNormSpikesDoNotSuggestClippingARunThatClips) {
  const std::string clipped = advice_for("advice_clip_on", "[train]\ngrad_clip = 1.0\nlr = 0.003\nwarmup_steps = 20\n",
                                         dp_layout(1), grad_spike_steps(), "grad-norm-spikes");
  EXPECT_EQ(clipped.find("clip gradients (train.grad_clip"), std::string::npos) << clipped;
  EXPECT_NE(clipped.find("already clips gradients at 1"), std::string::npos) << clipped;
  EXPECT_NE(clipped.find("train.lr = 0.003: try 0.0015"), std::string::npos) << clipped;
  EXPECT_NE(clipped.find("train.warmup_steps = 20: try 100"), std::string::npos) << clipped;
  const std::string unclipped = advice_for("advice_clip_off", "[train]\ngrad_clip = 0.0\n", dp_layout(1),
                                           grad_spike_steps(), "grad-norm-spikes");
  EXPECT_NE(unclipped.find("train.grad_clip is 0: set it to 1.0"), std::string::npos) << unclipped;
  // Without config.toml: the generic advice.
  const std::string generic = advice_for("advice_clip_none", "-", dp_layout(1), grad_spike_steps(), "grad-norm-spikes");
  EXPECT_NE(generic.find("clip gradients (train.grad_clip, e.g. 1.0)"), std::string::npos) << generic;
}

TEST(DiagnoseAdvice, LossSpikesAndRisingLossNameTheRunsLearningRate) {
  std::vector<StepMetrics> spike = healthy_steps(60);
  spike[40].loss = 9.5;
  const std::string a = advice_for("advice_loss_spike", "[train]\nlr = 0.01\nbatch_size = 16\ngrad_clip = 1.0\n",
                                   dp_layout(1), spike, "loss-spikes");
  EXPECT_NE(a.find("train.lr = 0.01: try 0.005"), std::string::npos) << a;
  EXPECT_NE(a.find("train.batch_size = 16"), std::string::npos) << a;
  EXPECT_EQ(a.find("clip gradients"), std::string::npos) << a;  // it clips already
  const std::string b = advice_for("advice_loss_spike_noclip", "[train]\ngrad_clip = 0.0\n", dp_layout(1), spike,
                                   "loss-spikes");
  EXPECT_NE(b.find("train.grad_clip is 0"), std::string::npos) << b;
  std::vector<StepMetrics> rising = healthy_steps(40);
  for (auto& m : rising) m.loss = 3.0 + 0.02 * double(m.step);
  const std::string r = advice_for("advice_rising", "[train]\nlr = 0.02\n", dp_layout(1), rising, "loss-rising");
  EXPECT_NE(r.find("train.lr = 0.02: try 0.01"), std::string::npos) << r;
}

TEST(DiagnoseAdvice, NumericsAdviceFollowsThePrecisionThatRan) {
  std::vector<StepMetrics> nan_steps = healthy_steps(30);
  nan_steps[20].loss = NAN;
  RunLayout scaled = dp_layout(1);
  scaled.dtype = "fp16", scaled.loss_scaling = true;
  // fp16 with scaling on and clipping on: the next levers are the rate and bf16.
  const std::string a = advice_for("advice_nan_scaled", "[train]\ngrad_clip = 1.0\n[precision]\ncompute = \"fp16\"\n",
                                   scaled, nan_steps, "non-finite-loss");
  EXPECT_EQ(a.find("clip gradients"), std::string::npos) << a;
  EXPECT_EQ(a.find("loss scaling on"), std::string::npos) << a;
  EXPECT_NE(a.find("precision.compute = \"bf16\""), std::string::npos) << a;
  // fp32, no clipping: clipping, and nothing about fp16.
  const std::string b = advice_for("advice_nan_fp32", "[train]\ngrad_clip = 0.0\n", dp_layout(1), nan_steps,
                                   "non-finite-loss");
  EXPECT_NE(b.find("train.grad_clip is 0"), std::string::npos) << b;
  EXPECT_EQ(b.find("fp16"), std::string::npos) << b;
  // Skipped steps: the run's own growth interval.
  std::vector<StepMetrics> skips = healthy_steps(40);
  for (auto& m : skips) m.loss_scale = 1024;
  for (int i : {20, 21, 22, 23}) skips[size_t(i)].skipped = true;
  const std::string c = advice_for("advice_skips", "[precision]\ncompute = \"fp16\"\ngrowth_interval = 500\n", scaled,
                                   skips, "skipped-steps");
  EXPECT_NE(c.find("precision.growth_interval = 500: try 2000"), std::string::npos) << c;
  // A collapsing scale in a run that clips: not "clip gradients".
  std::vector<StepMetrics> collapse = healthy_steps(40);
  double scale = 65536;
  for (auto& m : collapse) {
    if (m.step > 10) m.skipped = true, m.grad_norm = INFINITY, scale = std::max(scale / 2, 1.0);
    m.loss_scale = scale;
  }
  const std::string d = advice_for("advice_collapse", "[train]\ngrad_clip = 0.5\n[precision]\ncompute = \"fp16\"\n",
                                   scaled, collapse, "loss-scale-collapse");
  EXPECT_NE(d.find("clipped at 0.5"), std::string::npos) << d;
  EXPECT_EQ(d.find("clip gradients"), std::string::npos) << d;
}

TEST(DiagnoseAdvice, SmallBucketsAlreadyMeanTheNextLever) {
  const CommBoundRun run = comm_bound_run();
  const RunLayout& l = run.layout;
  const std::vector<StepMetrics>& steps = run.steps;
  const RunSummary& s = run.summary;
  const std::string big = advice_for("advice_buckets_big", "[parallel]\nbucket_mb = 16.0\n", l, steps,
                                     "communication-bound", s);
  EXPECT_NE(big.find("parallel.bucket_mb = 16: try 4"), std::string::npos) << big;
  const std::string small = advice_for("advice_buckets_small", "[parallel]\nbucket_mb = 0.5\n", l, steps,
                                       "communication-bound", s);
  EXPECT_EQ(small.find("use smaller buckets"), std::string::npos) << small;
  EXPECT_NE(small.find("small already (parallel.bucket_mb = 0.5)"), std::string::npos) << small;
}

// A mixture of experts whose busiest expert takes nearly every token (3.9x
// the mean of a ceiling E/k = 4) is named, with the lever its balancing
// mode offers; a balanced one is reported healthy.
TEST(DiagnoseAdvice, RouterCollapseNamesTheBalancingLever) {
  auto moe_steps = [](double load_max, double load_min) {
    std::vector<StepMetrics> steps = healthy_steps(40);
    for (StepMetrics& m : steps) m.moe = MoeStepMetrics{8, 2, load_max, load_min, 0, 0, 0.002};
    return steps;
  };
  const std::string aux = advice_for("router_collapse_aux", "[model]\nfamily = \"mixtral\"\nmoe_bias_rate = 0.001\n",
                                     dp_layout(1), moe_steps(3.9, 0), "router-collapse");
  EXPECT_NE(aux.find("model.moe_bias_rate = 0.001, largest bias 0.002): raise the rate (try 0.01)"), std::string::npos)
      << aux;
  const std::string none = advice_for("router_collapse_none", "[model]\nfamily = \"mixtral\"\nmoe_balance = \"none\"\n",
                                      dp_layout(1), moe_steps(3.9, 0), "router-collapse");
  EXPECT_NE(none.find("model.moe_balance = \"aux_free\""), std::string::npos) << none;
  const std::string dir = fresh_dir("router_balanced");
  write_run(dir, dp_layout(1), moe_steps(1.3, 0.8));
  const Diagnosis d = diagnose_dir(dir);
  for (const Finding& f : d.findings) EXPECT_NE(f.cause, "router-collapse") << dump(d);
  bool said = false;
  for (const std::string& c : d.checked) said = said || c.find("router collapse: none") != std::string::npos;
  EXPECT_TRUE(said) << dump(d);
}

TEST(Diagnose, CommandPrintsTextAndJson) {
  std::string dir = fresh_dir("cli_pipeline");
  RunLayout l;
  l.world_size = 2, l.pp = 2, l.schedule = "1f1b", l.micro_batches = 1;
  write_run(dir, l, healthy_steps(10), std::nullopt, pipeline_trace_pp2_m1(3));
  auto text = loom::test::run_loom("diagnose '" + dir + "'");
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("1. pipeline-bound (performance, high)"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("change:"), std::string::npos);
  EXPECT_NE(text.output.find("missing: summary.json"), std::string::npos) << text.output;
  auto js = loom::test::run_loom("diagnose --json '" + dir + "'");
  EXPECT_EQ(js.code, 0);
  nlohmann::json j = nlohmann::json::parse(js.output);
  EXPECT_EQ(j["findings"][0]["cause"], "pipeline-bound");
  EXPECT_FALSE(j["findings"][0]["evidence"].empty());
  auto none = loom::test::run_loom("diagnose '" + fresh_dir("cli_empty") + "'");
  EXPECT_EQ(none.code, 2);
  auto bad = loom::test::run_loom("diagnose --frob x");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--frob"), std::string::npos);
}

}  // namespace
}  // namespace loom::obs
