// The planner on the mixtral family (issue 40): the presets' parameter
// counts within 1% of the published totals, the work model pricing the
// experts a token runs (top_k of E, as balanced batches of products), the
// activations an MoE block keeps, with sequence parallelism splitting the
// block's rows but not the experts' pairs; expert parallelism (issue 41)
// dividing the experts' state by ep and paying an all-to-all on the links
// its group crosses.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "planner/cluster.h"
#include "planner/memory_model.h"
#include "planner/model_presets.h"
#include "planner/memo.h"
#include "planner/search.h"
#include "planner/time_model.h"
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

// mixtral-8x7b on two nodes of 8 x H100 (16 devices, dp 16, ZeRO-1, bf16):
// ep 8 gives each rank one expert of each layer, so its parameters and
// optimizer state fall by about the experts' share x 7/8; the all-to-all
// costs nothing with ep 1, stays on NVLink with ep 8 (a node's ranks), and
// crosses the network with ep 16, where it costs more.
TEST(PlannerMoe, ExpertParallelismDividesTheExpertsStateAndPaysTheAllToAll) {
  Workload w;
  w.model = model_preset("mixtral-8x7b").model;
  w.global_batch = 64;
  const ClusterSpec c = with_devices(load_cluster("h100-80gb", LOOM_SOURCE_DIR), 16);
  ASSERT_EQ(c.nodes, 2);
  Layout l;
  l.dp = 16, l.micro_batch = 1, l.micro_batches = 4, l.zero = 1, l.recompute = Recompute::full;
  const ParameterCounts& pc = w.counts();
  const double experts = pc.layer_experts * w.model.n_layer, total = stage_parameters(w.model, l, 0);
  EXPECT_GT(experts / total, 0.9);  // Mixtral's parameters are mostly experts
  std::map<int, MemoryBreakdown> mem;
  std::map<int, StepTime> time;
  for (int ep : {1, 8, 16}) {
    Layout e = l;
    e.ep = ep;
    mem[ep] = stage_memory(w, e, c, 0);
    time[ep] = step_time(w, e, c);
    EXPECT_NEAR(stage_parameters(w.model, e, 0), total - experts * (1 - 1.0 / ep), 1e-6 * total) << "ep " << ep;
  }
  // The replicated parameters and gradients fall by the experts' 7/8; ZeRO-1
  // already shards the optimizer state 16 ways either way (the experts' over
  // 2 expert-data ranks of 1/8 of them).
  EXPECT_NEAR(mem[8].params, mem[1].params * (1 - experts / total * 7 / 8), 0.01 * mem[1].params);
  EXPECT_NEAR(mem[8].grads, mem[1].grads * (1 - experts / total * 7 / 8), 0.01 * mem[1].grads);
  EXPECT_NEAR(mem[8].optimizer, mem[1].optimizer, 1e-6 * mem[1].optimizer);
  EXPECT_EQ(time[1].ep_comm, 0);
  EXPECT_GT(time[8].ep_comm, 0);
  EXPECT_FALSE(time[8].links.ep.crosses_nodes);
  EXPECT_TRUE(time[16].links.ep.crosses_nodes);
  EXPECT_GT(time[16].ep_comm, time[8].ep_comm);
  // At 100 Gb/s between nodes (SCENARIOS.md 9) the crossing all-to-all costs far more.
  const ClusterSpec slow = with_devices(load_cluster("a100-80gb-100g", LOOM_SOURCE_DIR), 16);
  Layout e8 = l, e16 = l;
  e8.ep = 8, e16.ep = 16;
  EXPECT_GT(step_time(w, e16, slow).ep_comm, 5 * step_time(w, e8, slow).ep_comm);
  // The worst case the engine reserves: the experts' rows grow with ep.
  EXPECT_GT(layer_activation_bytes(w.model, 4096, 1, 1, false, Recompute::none, true, 8),
            layer_activation_bytes(w.model, 4096, 1, 1, false, Recompute::none, true, 1));
}

// The search tries ep (dividing dp x cp and the experts) and the memo
// explains the choice when ep wins.
TEST(PlannerMoe, TheSearchTriesEpAndTheMemoExplainsIt) {
  Workload w;
  w.model = model_preset("mixtral-8x7b").model;
  w.global_batch = 64;
  const ClusterSpec c = with_devices(load_cluster("h100-80gb", LOOM_SOURCE_DIR), 16);
  SearchSpace space;
  space.tp = {1}, space.pp = {1}, space.cp = {1}, space.ep = {1, 8}, space.zero = {1};
  space.precision = {ComputePrecision::bf16};
  space.recompute = {Recompute::full};
  space.micro_batch = {1};
  space.ignore_memory = true;
  const SearchResult r = search_layouts(w, c, space, 4);
  ASSERT_FALSE(r.top.empty());
  bool saw[2] = {false, false};
  for (const Candidate& cand : r.top) saw[cand.layout.ep == 8] = true;
  EXPECT_TRUE(saw[0] && saw[1]) << "both ep 1 and ep 8 timed";
  for (const Candidate& cand : r.top)
    if (cand.layout.ep == 8) {
      EXPECT_NE(cand.layout.describe().find(" ep 8"), std::string::npos) << cand.layout.describe();
      const std::string memo = write_memo(w, c, cand);
      EXPECT_NE(memo.find("expert parallel over 8 ranks"), std::string::npos) << memo;
    }
}

}  // namespace
}  // namespace loom::planner
