// Predictions for loom's own runs: memory as loom allocates it, and the
// layout chooser `loom train --layout auto` relies on.
#include <gtest/gtest.h>

#include "config/layout_rules.h"
#include "config/run_config.h"
#include "core/check.h"
#include "model/stage_module.h"
#include "planner/comm_cost.h"
#include "planner/predict.h"

namespace loom::planner {
namespace {

ClusterSpec test_machine(int cores, double gib_per_core) {
  ClusterSpec c;
  c.name = "test-machine";
  c.nodes = 1, c.devices_per_node = cores;
  c.memory_bytes = gib_per_core * (1 << 30);
  c.peak_flops_fp32 = 50e9, c.matmul_efficiency = 0.3, c.memory_bandwidth = 10e9;
  c.overhead_bytes = 150.0 * (1 << 20);
  c.intra_bandwidth = 4e9, c.intra_latency = 2e-6, c.inter_bandwidth = 1e9, c.inter_latency = 1e-5;
  return c;
}

RunConfig small_run() {
  RunConfig cfg;
  cfg.model = ModelConfig{512, 4, 4, 128, 128};
  cfg.train.batch_size = 8;
  return cfg;
}

TEST(PlannerPredict, MemoryIsLoomsOwnAllocations) {
  RunConfig cfg = small_run();
  const ClusterSpec c = test_machine(2, 4);
  RunPrediction p = predict_loom_run(cfg, 1, c);
  auto model_owner = make_model(cfg.model, cfg.train.batch_size, cfg.model.seq_len);
  StageModule& model = *model_owner;
  EXPECT_DOUBLE_EQ(p.params_bytes, 4.0 * cfg.model.num_parameters());
  EXPECT_DOUBLE_EQ(p.grads_bytes, 4.0 * cfg.model.num_parameters());
  EXPECT_DOUBLE_EQ(p.optimizer_bytes, 8.0 * cfg.model.num_parameters());
  // Every activation buffer the model plans (alignment padding aside).
  EXPECT_NEAR(p.activation_bytes, double(model.activation_bytes()), 0.001 * model.activation_bytes());
  EXPECT_DOUBLE_EQ(p.peak_memory_bytes,
                   p.params_bytes + p.grads_bytes + p.optimizer_bytes + p.activation_bytes + c.overhead_bytes);
  EXPECT_GT(p.step_seconds, 0);
  EXPECT_NE(p.describe().find("MiB"), std::string::npos);
}

TEST(PlannerPredict, DataParallelAndZeroShrinkWhatEachRankHolds) {
  RunConfig cfg = small_run();
  const ClusterSpec c = test_machine(4, 4);
  const double n = double(cfg.model.num_parameters());
  cfg.parallel.zero = 1;
  RunPrediction z1 = predict_loom_run(cfg, 4, c);
  EXPECT_DOUBLE_EQ(z1.optimizer_bytes, 8 * n / 4);
  cfg.parallel.zero = 2;
  RunPrediction z2 = predict_loom_run(cfg, 4, c);
  EXPECT_LE(z2.grads_bytes, 4 * n);
  // Each replica runs 2 of the 8 rows: a quarter of the activations.
  RunConfig one = small_run();
  EXPECT_NEAR(z1.activation_bytes, predict_loom_run(one, 1, c).activation_bytes / 4, 1e-6 * z1.activation_bytes);
  // Four ranks on four cores: each computes a quarter of the batch on a quarter of the machine.
  EXPECT_GT(z1.compute_seconds, 0);
}

TEST(PlannerPredict, LayoutsLoomCannotRunAreRefused) {
  RunConfig cfg = small_run();
  cfg.parallel.tp = 3;
  EXPECT_THROW(predict_loom_run(cfg, 3, test_machine(2, 4)), UserError);
  cfg = small_run();
  cfg.train.batch_size = 6;
  EXPECT_THROW(predict_loom_run(cfg, 4, test_machine(2, 4)), UserError);
}

TEST(PlannerPredict, ChooseLayoutFollowsLoomsRules) {
  RunConfig cfg = small_run();
  for (int world : {1, 2, 4, 8}) {
    const Layout p = choose_layout(cfg, world, test_machine(2, 4));
    EXPECT_EQ(p.dp * p.tp * p.pp * p.cp, world);
    EXPECT_EQ(cfg.model.n_head % p.tp, 0);
    EXPECT_LE(p.pp, cfg.model.n_layer);
    EXPECT_EQ(cfg.train.batch_size % (p.dp * p.micro_batch), 0);
    EXPECT_LE(p.zero, kEngineRunsZero3 ? 3 : 2);
    // Plenty of memory: no recomputation (it only costs time).
    EXPECT_EQ(p.recompute, Recompute::none);
    EXPECT_EQ(with_layout(cfg, p).train.batch_size, cfg.train.batch_size);
  }
}

// One source for the layout rules (config/layout_rules.h): whatever
// --layout auto proposes, the engine's own check accepts, for models whose
// heads, key/value heads and MLP width allow different tensor-parallel sizes.
TEST(PlannerPredict, ChosenLayoutsPassTheEnginesLayoutCheck) {
  std::vector<RunConfig> runs;
  runs.push_back(small_run());  // 4 heads
  RunConfig llama = small_run();
  llama.model = ModelConfig{1000, 4, 8, 64, 32};
  llama.model.family = ModelFamily::llama, llama.model.n_kv_head = 2, llama.model.ffn_hidden = 160;
  runs.push_back(llama);  // 8 heads, 2 key/value heads: tp 4 and 8 split no key/value head
  RunConfig six = small_run();
  six.model = ModelConfig{512, 3, 6, 96, 64};
  six.train.batch_size = 12;
  runs.push_back(six);  // 6 heads: tp 4 does not divide them
  int checked = 0;
  for (const RunConfig& cfg : runs)
    for (int world = 1; world <= 8; world++) {
      Layout p;
      try {
        p = choose_layout(cfg, world, test_machine(8, 4));
      } catch (const UserError&) {
        continue;  // nothing fits: nothing proposed
      }
      EXPECT_EQ(layout_problem(with_layout(cfg, p), LayoutSizes{world, p.dp, p.tp, p.pp, p.cp}), "")
          << p.describe() << " on " << world << " ranks";
      EXPECT_EQ(p.dp * p.tp * p.pp * p.cp, world);
      checked++;
    }
  EXPECT_GE(checked, 12);
  // And the check refuses what the rules forbid, in the planner's prediction too.
  RunConfig bad = llama;
  bad.parallel.tp = 4;  // 2 key/value heads
  EXPECT_NE(layout_problem(bad, LayoutSizes{4, 0, 4, 1, 1}).find("model.n_kv_head"), std::string::npos);
  EXPECT_THROW(predict_loom_run(bad, 4, test_machine(8, 4)), UserError);
}

// planner::Layout and a run's config: one conversion each way.
TEST(PlannerPredict, LayoutAndConfigConvertBothWays) {
  RunConfig cfg = small_run();
  cfg.parallel.tp = 2, cfg.parallel.pp = 2, cfg.parallel.zero = 1, cfg.parallel.sequence_parallel = true;
  cfg.parallel.schedule = "interleaved", cfg.parallel.virtual_stages = 2;
  cfg.train.micro_batch_size = 1, cfg.train.recompute = "selective", cfg.precision.compute = "bf16";
  const Layout l = layout_of(cfg, 8);
  EXPECT_EQ(l.describe(), "dp 2 tp 2 pp 2 v 2 | micro-batch 1 x 4 | zero 1 | bf16 | recompute selective | seq-parallel");
  const RunConfig back = with_layout(RunConfig{}, l);
  EXPECT_EQ(back.parallel.dp, 2);
  EXPECT_EQ(back.parallel.tp, 2);
  EXPECT_EQ(back.parallel.pp, 2);
  EXPECT_EQ(back.parallel.zero, 1);
  EXPECT_EQ(back.parallel.schedule, "interleaved");
  EXPECT_EQ(back.parallel.virtual_stages, 2);
  EXPECT_TRUE(back.parallel.sequence_parallel);
  EXPECT_EQ(back.train.batch_size, 8);
  EXPECT_EQ(back.train.micro_batch_size, 1);
  EXPECT_EQ(back.train.recompute, "selective");
  EXPECT_EQ(back.precision.compute, "bf16");
  EXPECT_EQ(layout_of(back, 8).describe(), l.describe());
}

TEST(PlannerPredict, ChooseLayoutSaysHowMuchMemoryIsMissing) {
  RunConfig cfg = small_run();
  cfg.model = ModelConfig{50304, 48, 16, 2048, 1024};  // 2.5B parameters: 40 GB of fp32 state
  try {
    choose_layout(cfg, 2, test_machine(2, 1));
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("MiB more per rank"), std::string::npos) << e.what();
  }
}

TEST(PlannerPredict, LocalClusterIsUsable) {
  ClusterSpec c = local_cluster_or_default();
  c.validate("local");
  EXPECT_GT(c.peak_flops_fp32, 0);
  RunPrediction p = predict_loom_run(RunConfig{}, 1, c);
  EXPECT_GT(p.peak_memory_bytes, 150.0 * (1 << 20));
}

// Two nodes of two ranks joined by a slow link, as `loom bench cluster`
// emulates them.
ClusterSpec two_nodes(double inter_bytes_per_s) {
  ClusterSpec c = test_machine(2, 4);
  c.nodes = 2;
  c.inter_bandwidth = inter_bytes_per_s, c.inter_latency = 5e-5;
  return c;
}

TEST(PlannerPredict, TheRankOrderDecidesWhichGroupCrossesTheNodes) {
  RunConfig cfg = small_run();
  cfg.parallel.tp = 2;
  const ClusterSpec c = two_nodes(125e6);
  GroupLinks inside = group_links(c, 2, 2, 1, 1, "tp-dp-pp");
  EXPECT_FALSE(inside.tp.crosses_nodes);
  EXPECT_TRUE(inside.dp.crosses_nodes);
  GroupLinks across = group_links(c, 2, 2, 1, 1, "dp-tp-pp");
  EXPECT_TRUE(across.tp.crosses_nodes);
  EXPECT_FALSE(across.dp.crosses_nodes);
  // Two tp groups leave each node at once: each gets half its link.
  EXPECT_DOUBLE_EQ(across.tp.bandwidth, 125e6 / 2);
  // tp's all-reduces in every layer cost more over the slow link than one
  // gradient reduction: tp across is predicted slower, and by its communication.
  const RunPrediction p_in = predict_loom_run(cfg, 4, c);
  cfg.parallel.order = "dp-tp-pp";
  const RunPrediction p_across = predict_loom_run(cfg, 4, c);
  EXPECT_GT(p_across.step_seconds, p_in.step_seconds);
  EXPECT_GT(p_across.comm_seconds, p_in.comm_seconds);
  EXPECT_DOUBLE_EQ(p_across.compute_seconds, p_in.compute_seconds);
}

TEST(PlannerPredict, MoreRanksThanCoresStayOnTheirOneNode) {
  // 4 ranks on a 2-core machine: one node, shared memory for every group.
  const ClusterSpec c = test_machine(2, 4);
  GroupLinks l = group_links(c, 4, 1, 1);
  EXPECT_FALSE(l.dp.crosses_nodes);
  EXPECT_DOUBLE_EQ(l.dp.bandwidth, c.intra_bandwidth);
}

TEST(PlannerPredict, AReductionAcrossNodesIsNotHiddenBehindBackward) {
  // The same bytes over a link as fast as the node's own: inside a node the
  // buckets overlap backward, across nodes (MPI over TCP, progress only in
  // MPI calls) none of it is hidden.
  RunConfig cfg = small_run();
  ClusterSpec one = test_machine(4, 4);
  ClusterSpec two = two_nodes(2 * one.intra_bandwidth);  // shared by the 2 rings of each node: the same per ring
  two.inter_latency = one.intra_latency;
  cfg.parallel.tp = 2;
  cfg.parallel.bucket_mb = 0.25f;  // 7 buckets: inside a node all but the last hide
  const RunPrediction in_node = predict_loom_run(cfg, 4, one), across = predict_loom_run(cfg, 4, two);
  EXPECT_GT(across.comm_seconds, in_node.comm_seconds);
  // Across: all of the reduction of the stage's 4 n / 2 bytes (n parameters over tp 2).
  const double n = double(cfg.model.num_parameters()) / 2;  // about: replicated norms aside
  EXPECT_GT(across.comm_seconds - in_node.comm_seconds, 0.5 * 4 * n / two.intra_bandwidth);
}

// A measured inter_overlap (loom bench cluster) hides that share of
// backward's window, no more: the exposed reduction falls with it, the
// reduction's own time does not, and it round-trips through the file.
TEST(PlannerPredict, TheMeasuredOverlapAcrossNodesHidesItsShare) {
  RunConfig cfg = small_run();
  cfg.parallel.bucket_mb = 0.25f;
  ClusterSpec two = two_nodes(50e6);
  cfg.parallel.dp_reduce = "flat";
  const RunPrediction none = predict_loom_run(cfg, 4, two);
  two.inter_overlap = 0.5;
  const RunPrediction half = predict_loom_run(cfg, 4, two);
  two.inter_overlap = 1;
  const RunPrediction all = predict_loom_run(cfg, 4, two);
  EXPECT_DOUBLE_EQ(none.reduce_seconds, all.reduce_seconds);
  EXPECT_DOUBLE_EQ(none.reduce_hidden(), 0);
  EXPECT_LT(half.reduce_exposed_seconds, none.reduce_exposed_seconds);
  EXPECT_LT(all.reduce_exposed_seconds, half.reduce_exposed_seconds);
  EXPECT_GT(all.reduce_hidden(), half.reduce_hidden());
  two.inter_overlap = 0.37;
  EXPECT_DOUBLE_EQ(parse_cluster_toml(two.to_toml(), "test").inter_overlap, 0.37);
  two.inter_overlap = 1.5;
  EXPECT_THROW(two.validate("test"), UserError);
}

// A run with the progress thread hides the share measured with the thread
// (inter_overlap_progress), one without it the other; both round-trip
// through the file, and a share outside [0, 1] names its field.
TEST(PlannerPredict, TheProgressThreadHidesTheShareMeasuredWithIt) {
  RunConfig cfg = small_run();
  cfg.parallel.bucket_mb = 0.25f;
  cfg.parallel.dp_reduce = "flat";
  ClusterSpec two = two_nodes(50e6);
  two.inter_overlap = 0;
  two.inter_overlap_progress = 1;
  const RunPrediction without = predict_loom_run(cfg, 4, two);
  cfg.runtime.progress_thread = true;
  const RunPrediction with = predict_loom_run(cfg, 4, two);
  EXPECT_DOUBLE_EQ(without.reduce_hidden(), 0);
  EXPECT_GT(with.reduce_hidden(), 0);
  EXPECT_LT(with.step_seconds, without.step_seconds);
  two.inter_overlap_progress = 0.42;
  EXPECT_DOUBLE_EQ(parse_cluster_toml(two.to_toml(), "test").inter_overlap_progress, 0.42);
  two.inter_overlap_progress = -0.1;
  try {
    two.validate("test");
    ADD_FAILURE() << "a negative share passed";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap_progress_thread"), std::string::npos) << e.what();
  }
}

// dp 4 over 2 nodes of 2: the hierarchical sum crosses the link with 2 (N-1)/N
// = 1 of the buffer where the flat ring of 4 sends 1.5; "auto" predicts the
// faster (the run times both), "flat" the flat one.
TEST(PlannerPredict, TheHierarchicalReductionSendsLessOverTheLink) {
  const ClusterSpec two = two_nodes(10e6);
  const GroupLinks l = group_links(two, 4, 1, 1);
  ASSERT_TRUE(l.dp.crosses_nodes);
  EXPECT_EQ(l.dp.on_node, 2);
  const double bytes = 64e6;
  EXPECT_LT(hierarchical_all_reduce_seconds(bytes, 4, l.dp), 0.75 * all_reduce_seconds(bytes, 4, l.dp));
  // One rank per node: nothing to gather inside, the flat ring.
  const GroupLinks tp2 = group_links(two, 2, 2, 1);
  EXPECT_DOUBLE_EQ(hierarchical_all_reduce_seconds(bytes, 2, tp2.dp), all_reduce_seconds(bytes, 2, tp2.dp));
  RunConfig cfg = small_run();
  cfg.parallel.dp_reduce = "flat";
  const RunPrediction flat = predict_loom_run(cfg, 4, two);
  cfg.parallel.dp_reduce = "auto";
  const RunPrediction chosen = predict_loom_run(cfg, 4, two);
  EXPECT_LT(chosen.reduce_seconds, flat.reduce_seconds);
}

// The measured overlap across nodes is the flat sum's: the hierarchical one
// hides none of its time (its stages start at polls; bench cluster measured
// 0%), so with inter_overlap = 1 the flat sum hides some and it none.
TEST(PlannerPredict, TheHierarchicalReductionAcrossNodesIsNotHidden) {
  ClusterSpec two = two_nodes(10e6);
  two.inter_overlap = 1;
  RunConfig cfg = small_run();
  cfg.parallel.bucket_mb = 0.25f;
  cfg.parallel.dp_reduce = "flat";
  const RunPrediction flat = predict_loom_run(cfg, 4, two);
  cfg.parallel.dp_reduce = "hierarchical";
  const RunPrediction hierarchical = predict_loom_run(cfg, 4, two);
  EXPECT_GT(flat.reduce_hidden(), 0.05);
  EXPECT_DOUBLE_EQ(hierarchical.reduce_hidden(), 0);
  EXPECT_DOUBLE_EQ(hierarchical.reduce_exposed_seconds, hierarchical.reduce_seconds);
}

TEST(PlannerPredict, ARunsClusterIsItsFileOrThisMachineAsManyNodesAsFound) {
  const ClusterSpec local = local_cluster_or_default();
  ASSERT_EQ(local.nodes, 1);  // this machine, calibrated or not
  const ClusterSpec one = cluster_for_run("", 1), three = cluster_for_run("", 3);
  EXPECT_EQ(one.nodes, 1);
  EXPECT_EQ(three.nodes, 3);
  EXPECT_EQ(three.devices_per_node, local.devices_per_node);  // each node this machine's cores
  EXPECT_DOUBLE_EQ(three.inter_bandwidth, local.inter_bandwidth);
  // 2 ranks on each of those 3 nodes: a tp pair stays inside one, dp crosses.
  const GroupLinks l = group_links(three, 3, 2, 1);
  EXPECT_FALSE(l.tp.crosses_nodes);
  EXPECT_TRUE(l.dp.crosses_nodes);
  EXPECT_EQ(cluster_for_run("a100-80gb", 4).name, "a100-80gb");  // a file is taken as it is
  EXPECT_THROW(cluster_for_run("no-such-cluster", 1), UserError);
}

}  // namespace
}  // namespace loom::planner
