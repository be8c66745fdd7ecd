// The shape-based work model (planner/work_model.h): GEMM efficiency from
// tile and wave quantisation, short reductions and skinny outputs; the
// roofline bound; a block's products as the engine runs them.
#include <gtest/gtest.h>

#include "planner/roomy_cluster.h"
#include "planner/work_model.h"

namespace loom::planner {
namespace {

DeviceRates gpu_like() {
  DeviceRates d;
  d.peak = 312e12, d.ceiling = 0.87, d.units = 108, d.tile_m = 256, d.tile_n = 128;
  d.bandwidth = 1.7e12, d.gemm_bytes = 2;
  return d;
}

TEST(WorkModel, WaveQuantisationChargesThePartlyEmptyLastWave) {
  const DeviceRates d = gpu_like();
  // 108 tiles: one full wave; 109 tiles: a second wave with one tile in it.
  EXPECT_DOUBLE_EQ(gemm_efficiency(d, 256 * 108, 128, 4096), 0.87);
  EXPECT_NEAR(gemm_efficiency(d, 256 * 109, 128, 4096), 0.87 * 109 / 216, 1e-12);
  // A tile that hangs over the edge works on padding: m = 257 costs two rows of tiles.
  EXPECT_NEAR(gemm_efficiency(d, 257, 128 * 108, 4096), 0.87 * 257 / 512, 1e-12);
  // Batched products fill the waves together.
  EXPECT_DOUBLE_EQ(gemm_efficiency(d, 256, 128, 4096, 108), 0.87);
}

TEST(WorkModel, ShortReductionsAndSkinnyOutputsSlowDown) {
  DeviceRates d;
  d.peak = 1e12, d.ceiling = 0.8, d.k_half = 64, d.mn_half = 32, d.bandwidth = 1e12;
  EXPECT_NEAR(gemm_efficiency(d, 4096, 4096, 64), 0.8 * 0.5 * 4096 / 4128, 1e-12);
  EXPECT_NEAR(gemm_efficiency(d, 32, 4096, 4096), 0.8 * 4096 / 4160.0 * 0.5, 1e-12);
  EXPECT_LT(gemm_efficiency(d, 4096, 4096, 128), gemm_efficiency(d, 4096, 4096, 4096));
}

TEST(WorkModel, MemoryBoundProductsTakeTheirBytesOverTheBandwidth) {
  const DeviceRates d = gpu_like();
  // 2048 x 2048 scores from K = 96: 8 MiB written for 0.8 GFLOP, below the ridge.
  const double t = gemm_seconds(d, 2048, 2048, 96, 16);
  EXPECT_DOUBLE_EQ(t, (2048.0 * 96 * 2 + 2048.0 * 2048) * 16 * 2 / 1.7e12);
  // A large square product is compute-bound.
  EXPECT_DOUBLE_EQ(gemm_seconds(d, 27648, 12288, 8192), 2.0 * 27648 * 12288 * 8192 / (312e12 * 0.87));
}

TEST(WorkModel, BlockIsTheEnginesProductsAndItsMemoryBoundWork) {
  ModelConfig m{1000, 4, 4, 64, 32};  // GPT-2: C 64, 4 heads of 16, MLP 256
  BlockShape b;
  b.model = m, b.sequences = 2, b.act_bytes = 4;
  DeviceRates d;
  d.peak = 1e12, d.ceiling = 1, d.bandwidth = 1e30, d.gemm_bytes = 4;
  // Memory free: FLOPs only. Forward 2 x 12 C^2 per token + 4 s C for attention.
  const double tokens = 64, C = 64, s = 32;
  const PassSeconds p = block_seconds(b, d);
  EXPECT_NEAR(p.forward, tokens * (24 * C * C + 4 * s * C) / 1e12, 1e-18);
  EXPECT_NEAR(p.backward_weight, tokens * 24 * C * C / 1e12, 1e-18);
  EXPECT_NEAR(p.backward(), 2 * p.forward, 1e-18);
  // Tensor parallelism splits every product; dropout and the softmax cost bytes.
  b.tp = 2;
  EXPECT_NEAR(block_seconds(b, d).forward, p.forward / 2, 1e-18);
  d.bandwidth = 1e9;
  b.tp = 1;
  const double without = block_seconds(b, d).forward;
  b.dropout = true;
  EXPECT_GT(block_seconds(b, d).forward, without);
}

TEST(WorkModel, ClusterFieldsReachTheRates) {
  ClusterSpec c = roomy_cluster(1);
  c.matmul_efficiency = 0.7, c.gemm_units = 10, c.gemm_tile_m = 64, c.gemm_tile_n = 32, c.gemm_k_half = 8;
  c.memory_efficiency = 0.5;
  const DeviceRates d = device_rates(c, ComputePrecision::bf16, 2);
  EXPECT_DOUBLE_EQ(d.peak, 2 * c.peak_flops_bf16);
  EXPECT_DOUBLE_EQ(d.bandwidth, c.memory_bandwidth);  // 2 cores x half of one's nominal
  EXPECT_EQ(d.units, 10);
  EXPECT_DOUBLE_EQ(d.gemm_bytes, 2);
  // The TOML round trip keeps them.
  const ClusterSpec back = parse_cluster_toml(c.to_toml(), "round trip");
  EXPECT_EQ(back.gemm_units, 10);
  EXPECT_EQ(back.gemm_tile_m, 64);
  EXPECT_DOUBLE_EQ(back.gemm_k_half, 8);
  EXPECT_DOUBLE_EQ(back.memory_efficiency, 0.5);
}

// LoRA (issue 39): the frozen base computes no weight gradient, and each
// adapter adds its rank-r products, priced by their own skinny shapes: at
// rank 16 on LLaMA-7B's widths a few percent of the block, more than their
// FLOPs alone (K = 16 and N = 16 run far below the ceiling). Narrow outputs
// get narrow tiles and, short of a full wave, split-K.
TEST(WorkModel, LoraDropsTheBaseWeightGradientsAndAddsSkinnyAdapterProducts) {
  DeviceRates d = gpu_like();
  d.k_half = 64;  // as the GPU presets
  BlockShape b;
  b.model.family = ModelFamily::llama, b.model.n_layer = 32, b.model.n_head = 32, b.model.d_model = 4096;
  b.model.ffn_hidden = 11008, b.model.vocab_size = 32000, b.model.seq_len = 4096;
  const PassSeconds full = block_seconds(b, d);
  b.model.lora.rank = 16, b.model.lora.alpha = 32;
  b.model.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  const PassSeconds lora = block_seconds(b, d);
  EXPECT_EQ(lora.backward_weight, 0);
  EXPECT_GT(lora.forward, full.forward);
  const double added = (lora.forward + lora.backward()) - (full.forward + full.backward_input);
  const double adapter_flops = 6.0 * 4096 * double(lora_parameters(b.model)) / b.model.n_layer;
  EXPECT_GT(added, adapter_flops / (d.peak * d.ceiling));  // slower than their FLOPs at the ceiling
  EXPECT_LT(added, 0.1 * (full.forward + full.backward()));
  const PassSeconds head = head_seconds(b, d);
  EXPECT_EQ(head.backward_weight, 0);
  // u = x A^T: 16 output columns on a 16-wide tile, 16 tiles split 6 ways along K = 4096.
  EXPECT_NEAR(gemm_efficiency(d, 4096, 16, 4096), 0.87 * (16.0 * 6 / 108) * (4096.0 / 6) / (4096.0 / 6 + 64), 1e-9);
}

}  // namespace
}  // namespace loom::planner
