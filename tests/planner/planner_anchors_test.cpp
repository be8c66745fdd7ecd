// Published figures the planner's models must reproduce.
#include <gtest/gtest.h>

#include "parallel/pp/schedule.h"
#include "planner/memory_model.h"
#include "planner/pipeline_sim.h"
#include "planner/roomy_cluster.h"

namespace loom::planner {
namespace {

// Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", section 3.1 and Figure 1: mixed-precision Adam
// keeps 2 + 2 + 12 = 16 bytes per parameter, so a 7.5B-parameter model needs
// 120 GB of model states; ZeRO-3 (P_os+g+p) over 64 devices needs 1.9 GB each.
TEST(PlannerAnchors, ZeroPaperSixteenBytesPerParameter) {
  Workload w;
  w.model = ModelConfig{50304, 36, 32, 4096, 2048};  // 7.5B (Narayanan et al. 2021, Table 1)
  w.global_batch = 64;
  const double n = stage_parameters(w.model, Layout{}, 0);
  ASSERT_NEAR(n, 7.5e9, 0.05e9);
  Layout replicated{64, 1, 1, 1, 1, 1, 0, Recompute::full, false, ComputePrecision::bf16};
  MemoryBreakdown m = stage_memory(w, replicated, roomy_cluster(64), 0);
  EXPECT_DOUBLE_EQ((m.params + m.grads + m.optimizer) / n, 16.0);
  EXPECT_NEAR((m.params + m.grads + m.optimizer) * 7.5e9 / n, 120e9, 1e6);

  Layout zero3 = replicated;
  zero3.zero = 3;
  m = stage_memory(w, zero3, roomy_cluster(64), 0);
  EXPECT_NEAR((m.params + m.grads + m.optimizer) * 7.5e9 / n, 1.875e9, 1e6);  // the paper rounds to 1.9 GB
  Layout zero1 = replicated;
  zero1.zero = 1;  // P_os: 4 + 12/64 bytes per parameter (31.4 GB in the paper's Figure 1)
  m = stage_memory(w, zero1, roomy_cluster(64), 0);
  EXPECT_NEAR((m.params + m.grads + m.optimizer) * 7.5e9 / n, 31.4e9, 0.1e9);
}

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", equation (1) and Table 2: s b h (34 + 5 a s / h)
// bytes per layer without recomputation or parallelism. GPT-3 175B's layer
// (s 2048, b 1, h 12288, a 96): 5 a s / h = 80, so 2048 * 12288 * 114
// = 2,868,903,936 bytes (by hand).
TEST(PlannerAnchors, KorthikantiActivationsPerLayer) {
  EXPECT_DOUBLE_EQ(layer_activation_bytes(2048, 1, 12288, 96, 1, false, Recompute::none), 2868903936.0);
  // Tensor parallel t = 8: sbh (10 + 24/8 + 80/8) = 2048 * 12288 * 23.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(2048, 1, 12288, 96, 8, false, Recompute::none), 2048.0 * 12288 * 23);
  // + sequence parallelism: everything / t.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(2048, 1, 12288, 96, 8, true, Recompute::none), 2868903936.0 / 8);
  // Selective recomputation with sequence parallelism: 34 s b h / t.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(2048, 1, 12288, 96, 8, true, Recompute::selective),
                   34.0 * 2048 * 12288 / 8);
  // Full recomputation keeps the 2-byte layer input only.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(2048, 4, 12288, 96, 1, false, Recompute::full), 2.0 * 2048 * 4 * 12288);
}

StageDurations uniform(int stages, double f, double b) {
  StageDurations d;
  d.forward.assign(stages, f);
  d.backward.assign(stages, b);
  return d;
}

// Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
// GPU Clusters Using Megatron-LM", section 2.2): the 1F1B bubble is
// (p - 1) / (m + p - 1) of the step; the simulator of the executor's own
// action lists must give it exactly.
TEST(PlannerAnchors, OneFOneBBubbleFromTheSimulator) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 8, 32}) {
      PipelineTiming t = simulate_pipeline(pp::one_f_one_b(p, m), p, 1, uniform(p, 1.0, 2.0));
      EXPECT_NEAR(t.bubble_fraction(), double(p - 1) / (m + p - 1), 1e-12) << "p " << p << " m " << m;
      EXPECT_DOUBLE_EQ(t.makespan, (m + p - 1) * 3.0);
      PipelineTiming g = simulate_pipeline(pp::gpipe(p, m), p, 1, uniform(p, 1.0, 2.0));
      EXPECT_NEAR(g.bubble_fraction(), double(p - 1) / (m + p - 1), 1e-12) << "GPipe p " << p << " m " << m;
    }
  }
}

// Interleaving v chunks shrinks the bubble by v (same paper, section 2.2.2):
// idle time (p - 1)(f + b) / v per stage.
TEST(PlannerAnchors, InterleavingDividesTheBubbleByV) {
  const int p = 4, m = 8;
  for (int v : {2, 4}) {
    // Each chunk does 1/v of a stage's work.
    PipelineTiming t =
        simulate_pipeline(pp::interleaved_1f1b(p, m, v), p, v, uniform(p * v, 1.0 / v, 2.0 / v));
    const double ideal = m * 3.0, idle = (p - 1) * 3.0 / v;
    EXPECT_NEAR(t.makespan, ideal + idle, 1e-9) << "v " << v;
  }
}

// Messages on the critical path lengthen the step.
TEST(PlannerAnchors, PointToPointTimeAddsToThePipeline) {
  StageDurations d = uniform(4, 1.0, 2.0);
  d.p2p_seconds = 0.5;
  PipelineTiming t = simulate_pipeline(pp::one_f_one_b(4, 8), 4, 1, d);
  EXPECT_GT(t.makespan, (8 + 3) * 3.0);
}

}  // namespace
}  // namespace loom::planner
