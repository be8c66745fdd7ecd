// The planner on the mixtral family (issue 40): the presets' parameter
// counts within 1% of the published totals, the work model pricing the
// experts a token runs (top_k of E, as balanced batches of products), the
// activations an MoE block keeps, with sequence parallelism splitting the
// block's rows but not the experts' pairs.
#include <gtest/gtest.h>

#include <cmath>

#include "planner/cluster.h"
#include "planner/memory_model.h"
#include "planner/model_presets.h"
#include "planner/search.h"
#include "planner/work_model.h"

namespace loom::planner {
namespace {

TEST(PlannerMoe, MixtralPresetsHaveThePublishedParameterCounts) {
  EXPECT_NEAR(double(model_preset("mixtral-8x7b").model.num_parameters()), 46.7e9, 0.01 * 46.7e9);
  EXPECT_NEAR(double(model_preset("mixtral-8x22b").model.num_parameters()), 141e9, 0.01 * 141e9);
  // Active: about 12.9B and 39B a token (the model card's figures).
  const ModelConfig& m = model_preset("mixtral-8x7b").model;
  const double active = (m.train_flops_per_token(0)) / 6;
  EXPECT_NEAR(active, 12.9e9, 0.03 * 12.9e9);
}

TEST(PlannerMoe, ExpertsArePricedByTheTopKATokenRunsAndKeepTheirActivations) {
  DeviceRates d;
  d.peak = 1e15, d.ceiling = 0.8, d.units = 132, d.tile_m = 256, d.tile_n = 128, d.k_half = 64, d.bandwidth = 3e12;
  BlockShape moe;
  moe.model = model_preset("mixtral-8x7b").model;
  moe.sequences = 4;
  BlockShape dense = moe;
  dense.model.n_experts = 0;  // the same block with one MLP of the experts' width
  const PassSeconds pm = block_seconds(moe, d), pd = block_seconds(dense, d);
  // Two experts a token plus the router and the permutations: more than one
  // dense MLP, well under two and a half; far under all eight.
  const double ratio = (pm.forward + pm.backward()) / (pd.forward + pd.backward());
  EXPECT_GT(ratio, 1.3);
  EXPECT_LT(ratio, 2.5);
  const double act_m = layer_activation_bytes(moe.model, 4096, 1, 1, false, Recompute::none, true);
  const double act_d = layer_activation_bytes(dense.model, 4096, 1, 1, false, Recompute::none, true);
  EXPECT_GT(act_m, act_d);
  EXPECT_EQ(layer_activation_bytes(moe.model, 4096, 1, 1, false, Recompute::full, true), 2.0 * 4096 * 4096);
}

TEST(PlannerMoe, SequenceParallelismSplitsTheRowsButNotTheExpertsPairs) {
  const ModelConfig& m = model_preset("mixtral-8x7b").model;
  const double s = 4096, h = m.d_model;
  const double plain = layer_activation_bytes(m, s, 1, 8, false, Recompute::none, true);
  const double sp = layer_activation_bytes(m, s, 1, 8, true, Recompute::none, true);
  // The residual stream and norms (8 s h + 8 s bytes, fp32) split over tp 8.
  EXPECT_NEAR(plain - sp, (8 * s * h + 8 * s) * (1 - 1.0 / 8), 1.0);
  // The pairs' buffers stay whole: far more than the dense block's sp figure.
  ModelConfig dense = m;
  dense.n_experts = 0;
  EXPECT_GT(sp, 2 * layer_activation_bytes(dense, s, 1, 8, true, Recompute::none, true));
}

}  // namespace
}  // namespace loom::planner
