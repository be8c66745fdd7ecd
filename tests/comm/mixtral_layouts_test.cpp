// The mixtral family (issue 40) in every layout built so far: dp with ZeRO
// 0-3, tp (every expert's width split, the router whole) with and without
// sequence parallelism, pp under 1F1B,
// interleaved and ZB-V, cp, bf16 with sharded masters, tp x pp: the run
// reproduces one process (first-step gradients within 1e-5 relative per
// global tensor, losses within rtol 1e-4; bf16 against bf16 within 1e-2).
// The test model's routers are drawn wide (model init std 0.02 gives router
// logits of std ~1 after the RMSNorm), so reduction order does not flip a
// top-2 choice.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/layout_check.h"
#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace {

constexpr int kBatch = 8, kSteps = 4;
using loom::test::world_size;

using Layout = loom::test::LayoutCase;
using loom::test::layout_case_name;

// Balancing: "" (the default, aux_free at its default rate), "aux_free"
// with a bias moving fast enough to change choices within the run,
// "sequence" (the per-sequence loss) with the router z-loss, "sigmoid"
// (sigmoid router scores with the per-sequence loss), or "shared" (a gated
// shared expert beside the routed ones).
std::vector<std::string> balance_fields(const std::string& balance) {
  if (balance == "aux_free") return {"model.moe_balance=\"aux_free\"", "model.moe_bias_rate=0.05"};
  if (balance == "sequence") return {"model.moe_balance=\"sequence\"", "model.moe_aux_coef=0.5", "model.moe_z_coef=0.01"};
  if (balance == "sigmoid")  // DeepSeek-V3's router: sigmoid scores, the sequence loss on normalised scores
    return {"model.moe_router=\"sigmoid\"", "model.moe_balance=\"sequence\"", "model.moe_aux_coef=0.5"};
  if (balance == "shared")  // Qwen2-MoE's gated shared expert beside aux_free balancing
    return {"model.moe_shared_ffn=32", "model.moe_balance=\"aux_free\"", "model.moe_bias_rate=0.05"};
  return {};
}

loom::RunConfig config(const Layout& l, int dp, const std::string& balance = "") {
  std::vector<std::string> sets = balance_fields(balance);
  const std::vector<std::string> base = {"model.family=\"mixtral\"", "model.n_experts=4", "model.top_k=2", "model.moe_ffn_hidden=64", "model.n_layer=4",
       "model.vocab_size=300", "model.seq_len=32", "train.batch_size=" + std::to_string(kBatch),
       "train.micro_batch_size=" + std::to_string(kBatch / (dp * 2)), "train.steps=" + std::to_string(kSteps),
       "train.eval_every=0", "train.run_dir=\"\"", "runtime.threads=1", "parallel.tp=" + std::to_string(l.tp),
       "parallel.pp=" + std::to_string(l.pp), "parallel.cp=" + std::to_string(l.cp),
       "parallel.zero=" + std::to_string(l.zero), std::string("parallel.sequence_parallel=") + (l.sequence_parallel ? "true" : "false"), std::string("parallel.schedule=\"") + l.schedule + "\"",
       "parallel.virtual_stages=" + std::to_string(l.v), std::string("precision.compute=\"") + l.precision + "\"",
       "parallel.bucket_mb=0.05", "data.format=\"bytes\"", "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""};
  sets.insert(sets.begin(), base.begin(), base.end());
  return loom::load_run_config(LOOM_SOURCE_DIR "/configs/llama-tiny.toml", sets);
}

loom::TrainOptions options() {
  loom::TrainOptions o;
  o.keep_first_step_grads = true;
  return o;
}

const loom::TrainResult& single(const std::string& precision, const std::string& balance = "") {
  static std::map<std::string, loom::TrainResult> results;
  const std::string key = precision + "/" + balance;
  auto it = results.find(key);
  if (it == results.end()) {
    auto one = loom::ParallelContext::create_single();
    it = results
             .emplace(key, loom::train(config(Layout{1, 1, 1, "1f1b", 1, false, 0, precision.c_str()}, 1, balance),
                                       *one, nullptr, options()))
             .first;
  }
  return it->second;
}

class MixtralLlamaLayouts : public testing::TestWithParam<Layout> {};

TEST_P(MixtralLlamaLayouts, ReproduceOneProcess) {
  const Layout l = GetParam();
  int dp = 1;
  if (const std::string why = loom::test::layout_case_skip(l, kBatch, &dp); !why.empty()) GTEST_SKIP() << why;
  const loom::ParallelContext& ctx = loom::test::layout_context(l.tp, l.pp, l.cp);
  const loom::RunConfig cfg = config(l, dp);
  const loom::TrainResult got = loom::train(cfg, ctx, nullptr, options());
  const loom::TrainResult& want = single(l.precision);
  const bool fp32 = std::string(l.precision) == "fp32";
  int experts = 0;
  for (const auto& [name, err] : loom::test::gradient_errors(cfg, ctx, got.first_step_grads, want.first_step_grads)) {
    EXPECT_LE(err, fp32 ? 1e-5 : 1e-2) << name;
    experts += name.find("block_sparse_moe") != std::string::npos;
  }
  EXPECT_GT(experts, 0) << "no MoE tensor on this rank";
  if (fp32) loom::test::expect_same_losses(got, want);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MixtralLlamaLayouts,
    testing::Values(Layout{1, 1, 1, "1f1b", 1, false, 0, "fp32"}, Layout{1, 1, 1, "1f1b", 1, false, 1, "fp32"},
                    Layout{1, 1, 1, "1f1b", 1, false, 3, "fp32"}, Layout{2, 1, 1, "1f1b", 1, false, 0, "fp32"},
                    Layout{1, 2, 1, "1f1b", 1, false, 0, "fp32"}, Layout{1, 2, 1, "interleaved", 2, false, 0, "fp32"},
                    Layout{1, 2, 1, "zb-v", 2, false, 0, "fp32"}, Layout{1, 1, 2, "1f1b", 1, false, 0, "fp32"},
                    Layout{1, 1, 1, "1f1b", 1, false, 1, "bf16"}, Layout{2, 2, 1, "1f1b", 1, false, 1, "fp32"},
                    Layout{2, 1, 1, "1f1b", 1, true, 0, "fp32"}, Layout{2, 1, 1, "1f1b", 1, true, 1, "bf16"}),
    layout_case_name);

// The balancing modes in the layouts that split the tokens differently (dp,
// cp), the layers (pp) or the experts' width (tp): the same losses, the same
// first-step gradients, and every step's routing counted alike (the load
// figures come from exact integer counts: equal, not close), the bias moved
// alike, the balancing loss within rtol 1e-4.
class MixtralBalanceLlamaLayouts : public testing::TestWithParam<std::tuple<Layout, const char*>> {};

TEST_P(MixtralBalanceLlamaLayouts, ReproduceOneProcess) {
  const auto& [l, balance] = GetParam();
  int dp = 1;
  if (const std::string why = loom::test::layout_case_skip(l, kBatch, &dp); !why.empty()) GTEST_SKIP() << why;
  const loom::ParallelContext& ctx = loom::test::layout_context(l.tp, l.pp, l.cp);
  const loom::RunConfig cfg = config(l, dp, balance);
  const loom::TrainResult got = loom::train(cfg, ctx, nullptr, options());
  const loom::TrainResult& want = single("fp32", balance);
  for (const auto& [name, err] : loom::test::gradient_errors(cfg, ctx, got.first_step_grads, want.first_step_grads))
    EXPECT_LE(err, 1e-5) << name;
  loom::test::expect_same_losses(got, want);
  ASSERT_EQ(got.moe_steps.size(), want.moe_steps.size());
  for (size_t i = 0; i < got.moe_steps.size(); i++) {
    const loom::obs::MoeStepMetrics &g = got.moe_steps[i], &w = want.moe_steps[i];
    EXPECT_EQ(g.load_max, w.load_max) << "step " << i;
    EXPECT_EQ(g.load_min, w.load_min) << "step " << i;
    EXPECT_EQ(g.bias_max, w.bias_max) << "step " << i;
    EXPECT_NEAR(g.aux_loss, w.aux_loss, 1e-4 * std::abs(w.aux_loss)) << "step " << i;
    EXPECT_NEAR(g.z_loss, w.z_loss, 1e-4 * std::abs(w.z_loss)) << "step " << i;
  }
  const std::string mode = balance;
  if (mode == "aux_free" || mode == "shared") EXPECT_GT(want.moe_steps.back().bias_max, 0.04f) << "the bias never moved";
  if (mode == "sequence" || mode == "sigmoid") EXPECT_GT(want.moe_steps.back().aux_loss, 0.1) << "no balancing loss";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MixtralBalanceLlamaLayouts,
    testing::Combine(testing::Values(Layout{1, 1, 1, "1f1b", 1, false, 1, "fp32"}, Layout{2, 1, 1, "1f1b", 1, false, 0, "fp32"},
                                     Layout{1, 2, 1, "interleaved", 2, false, 0, "fp32"},
                                     Layout{1, 1, 2, "1f1b", 1, false, 0, "fp32"},
                                     Layout{1, 1, 1, "1f1b", 1, false, 3, "fp32"},
                                     Layout{2, 1, 1, "1f1b", 1, true, 0, "fp32"}),
                     testing::Values("aux_free", "sequence", "sigmoid", "shared")),
    [](const testing::TestParamInfo<std::tuple<Layout, const char*>>& i) {
      return layout_case_name(testing::TestParamInfo<Layout>(std::get<0>(i.param), i.index)) + "_" +
             std::get<1>(i.param);
    });

}  // namespace
