// The seed scenarios: what the planner must decide.
#include <gtest/gtest.h>

#include <cmath>

#include "planner/cluster.h"
#include "planner/memo.h"
#include "planner/model_presets.h"
#include "planner/search.h"

namespace loom::planner {
namespace {

ClusterSpec preset(const std::string& name, int devices) {
  return with_devices(load_cluster(name, LOOM_SOURCE_DIR), devices);
}

Workload preset_workload(const std::string& name) {
  const ModelPreset& p = model_preset(name);
  return Workload{p.model, p.global_batch};
}

// Model-state bytes per parameter, fp32 and mixed precision alike (ZeRO paper).
constexpr double kStateBytesPerParameter = 16;

TEST(PlannerScenarios, ThirtyBillionPureDataParallelFp32DoesNotFitOn8x80GB) {
  const Workload w = preset_workload("gpt3-30b");
  const ClusterSpec c = preset("a100-80gb", 8);
  const Layout pure_dp{8, 1, 1, 1, 1, w.global_batch / 8, 0, Recompute::full, false, ComputePrecision::fp32};
  const MemoryBreakdown m = peak_memory(w, pure_dp, c);
  EXPECT_GT(m.total(), c.memory_bytes);
  EXPECT_GT(m.params + m.grads + m.optimizer, 16 * 29e9);  // 480 GB of model states on each device

  // Nothing in pure data parallelism (any ZeRO stage short of 3, fp32) fits...
  SearchSpace space;
  space.tp = {1}, space.pp = {1}, space.precision = {ComputePrecision::fp32}, space.zero = {0, 1, 2};
  EXPECT_TRUE(search_layouts(w, c, space, 1).top.empty());
  // ...so the plan splits the model: each device holds a part of the parameters.
  const SearchResult r = search_layouts(w, c, SearchSpace{}, 3);
  ASSERT_FALSE(r.top.empty());
  const Layout& best = r.top[0].layout;
  EXPECT_TRUE(best.tp * best.pp > 1 || best.zero == 3) << best.describe();
  const double held = stage_parameters(w.model, best, 0) / (best.zero == 3 ? best.dp : 1);
  EXPECT_LT(held, 0.6 * double(w.model.num_parameters())) << best.describe();
}

TEST(PlannerScenarios, ThirtyBillionOn32x24GBNeedsTheSplitThatMakesItFit) {
  const Workload w = preset_workload("gpt3-30b");
  const ClusterSpec c = preset("pcie-24gb", 32);
  // Without ZeRO each device keeps 16 B for each of its N / (tp x pp) parameters.
  const double room = c.memory_bytes - c.overhead_bytes;
  const int factor = int(std::ceil(kStateBytesPerParameter * w.model.num_parameters() / room));
  ASSERT_GE(factor, 16);
  SearchSpace space;
  space.zero = {0};
  space.precision = {ComputePrecision::bf16};
  const SearchResult r = search_layouts(w, c, space, 1000000);  // every fitting layout, timed
  ASSERT_FALSE(r.top.empty());
  EXPECT_EQ(int64_t(r.top.size()), r.fitting);
  for (const Candidate& cand : r.top)
    EXPECT_GE(cand.layout.tp * cand.layout.pp, factor) << cand.layout.describe();
  // With every option open, it still fits and runs.
  EXPECT_FALSE(search_layouts(w, c, SearchSpace{}, 1).top.empty());
}

// Scenario 8: llama2-70b on one node of 8 x 80 GB. Training every weight
// with Adam keeps 16 B per parameter: 69.0B x 16 = 1104 GB of model states
// against 8 x 80 GiB = 687 GB of devices, so no layout fits, whatever the
// split; the planner says so with the figures and finds that two nodes do.
TEST(PlannerScenarios, SeventyBillionLlamaOnOneNodeOf8x80GB) {
  const Workload w = preset_workload("llama2-70b");
  const ClusterSpec c = preset("a100-80gb", 8);
  const double n = double(w.model.num_parameters());
  ASSERT_GT(kStateBytesPerParameter * n, c.devices() * c.memory_bytes);
  const SearchResult r = search_layouts(w, c, SearchSpace{}, 5);
  EXPECT_TRUE(r.top.empty());
  EXPECT_GT(r.considered, 1000);
  ASSERT_TRUE(r.have_closest);
  // The closest still holds at least an eighth of the states on a device (128.5 GiB).
  const MemoryBreakdown& m = r.closest.memory;
  EXPECT_GE(m.params + m.grads + m.optimizer, 0.999 * kStateBytesPerParameter * n / 8) << r.closest.layout.describe();
  const std::string why = write_no_fit_memo(w, c, r);
  for (const char* words : {"No layout fits 8 x 80.0 GiB", "68.98B parameters x 16 B", "= 1104 GB",
                            "each would hold 128.5 GiB", "at least 14 devices", "Closest:"})
    EXPECT_NE(why.find(words), std::string::npos) << words << "\n" << why;

  // Two nodes (16 devices) are the fewest a100-80gb devices that hold it.
  SearchResult larger;
  ASSERT_EQ(smallest_fitting_devices(w, c, SearchSpace{}, 3, 8, 1024, &larger), 16);
  ASSERT_FALSE(larger.top.empty());
  const Candidate& best = larger.top[0];
  EXPECT_LE(best.memory.total(), c.memory_bytes);
  EXPECT_LE(best.layout.tp, 8) << best.layout.describe();
  const std::string memo = write_memo(w, with_devices(c, 16), best);
  EXPECT_NE(memo.find("Model: llama family"), std::string::npos) << memo;
  EXPECT_NE(memo.find("8 key/value heads"), std::string::npos) << memo;
}

// The smaller LLaMA presets fit one 8 x 80 GB node.
TEST(PlannerScenarios, EightBillionLlamaFitsOneNode) {
  for (const char* name : {"llama2-7b", "llama2-13b", "llama3-8b"}) {
    const SearchResult r = search_layouts(preset_workload(name), preset("a100-80gb", 8), SearchSpace{}, 1);
    ASSERT_FALSE(r.top.empty()) << name;
    EXPECT_GT(r.top[0].time.mfu, 0.2) << name;
    EXPECT_LT(r.top[0].time.mfu, 0.87) << name;  // a100-80gb's GEMM ceiling
  }
}

TEST(PlannerScenarios, NeverTensorParallelAcrossNodesWhenItFitsInsideOne) {
  struct Case {
    const char *model, *cluster;
    int devices;
  } cases[] = {
      {"gpt3-6.7b", "a100-40gb", 16},   {"gpt3-13b", "a100-80gb", 64},  {"gpt3-70b", "h100-80gb", 256},
      {"gpt3-175b", "a100-80gb", 1024}, {"gpt3-30b", "a100-80gb-100g", 64}, {"gpt2-1.5b", "pcie-24gb", 16},
      {"llama2-70b", "a100-80gb", 64},  {"llama3-405b", "h100-80gb", 512},
  };
  for (const Case& k : cases) {
    const ClusterSpec c = preset(k.cluster, k.devices);
    const SearchResult r = search_layouts(preset_workload(k.model), c, SearchSpace{}, 5);
    ASSERT_FALSE(r.top.empty()) << k.model;
    for (const Candidate& cand : r.top) {
      EXPECT_LE(cand.layout.tp, c.devices_per_node) << k.model << " on " << k.cluster << ": " << cand.layout.describe();
      EXPECT_FALSE(cand.time.links.tp.crosses_nodes) << k.model << ": " << cand.layout.describe();
    }
  }
}

TEST(PlannerScenarios, RankOrderDecidesTheLink) {
  const ClusterSpec c = preset("a100-80gb", 64);
  GroupLinks inside = group_links(c, 8, 8, 1);  // tp innermost: 8 tp ranks fill one node
  EXPECT_FALSE(inside.tp.crosses_nodes);
  EXPECT_TRUE(inside.dp.crosses_nodes);
  // What a large collective reaches of each link (the preset's efficiencies).
  EXPECT_DOUBLE_EQ(inside.tp.bandwidth, c.intra_bandwidth * c.intra_efficiency);
  // 8 dp rings leave each node at once and share its NICs.
  EXPECT_DOUBLE_EQ(inside.dp.bandwidth, c.inter_bandwidth * c.inter_efficiency / 8);
  GroupLinks across = group_links(c, 4, 16, 1);
  EXPECT_TRUE(across.tp.crosses_nodes);
  GroupLinks dp_in_node = group_links(c, 2, 4, 8);  // a dp pair shares a node
  EXPECT_FALSE(dp_in_node.dp.crosses_nodes);
  EXPECT_TRUE(dp_in_node.pp.crosses_nodes);
}

TEST(PlannerScenarios, TopPlansAreRankedAndTheTopIsExact) {
  const Workload w = preset_workload("gpt3-13b");
  const ClusterSpec c = preset("a100-80gb", 64);
  const SearchResult few = search_layouts(w, c, SearchSpace{}, 5);
  const SearchResult many = search_layouts(w, c, SearchSpace{}, 200);
  ASSERT_EQ(few.top.size(), 5u);
  // Fastest first (layouts within 1e-6 of each other count as ties, ranked by simplicity).
  for (size_t i = 1; i < few.top.size(); i++)
    EXPECT_LE(few.top[i - 1].time.step, few.top[i].time.step * (1 + 1e-6));
  // Pruning never changes the answer: the best 5 of a wider search are as fast.
  for (size_t i = 0; i < few.top.size(); i++)
    EXPECT_NEAR(few.top[i].time.step, many.top[i].time.step, 1e-6 * many.top[i].time.step);
  EXPECT_LT(few.timed, few.fitting);
}

TEST(PlannerScenarios, ThousandDevices175BSearchesEveryLayout) {
  const SearchResult r = search_layouts(preset_workload("gpt3-175b"), preset("a100-80gb", 1024), SearchSpace{}, 10);
  ASSERT_EQ(r.top.size(), 10u);
  EXPECT_GT(r.considered, 10000);
  EXPECT_GT(r.top[0].time.mfu, 0.2);
  EXPECT_LT(r.top[0].time.mfu, 0.87);  // never above the GEMM ceiling
}

}  // namespace
}  // namespace loom::planner
