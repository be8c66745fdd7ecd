// The single-process pieces of ZeRO-3 and sharded master weights: bucket
// cuts at segment starts, a shard's initialization by range, and the
// gather of segments into windows of their own on one rank.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/backend.h"
#include "comm/self_comm.h"
#include "model/stage_module.h"
#include "parallel/dp/bucket_plan.h"
#include "parallel/zero/param_gather.h"
#include "train/replica.h"

namespace {

// A one-chunk model's ZeRO-3 segments and the flat offsets they start at.
struct Segments {
  loom::FlatLayout flat;
  std::vector<std::pair<int, int>> runs;
  std::vector<int64_t> starts;
  explicit Segments(const loom::ModelConfig& cfg)
      : flat(loom::ParamLayout::for_model(cfg).flat()), runs(loom::zero3_segments(cfg, {loom::ModelShard{}})) {
    for (auto [first, end] : runs) starts.push_back(flat.tensors[size_t(first)].offset);
  }
};

// Every break starts a bucket, or lies inside a one-unit bucket between two cuts.
TEST(BucketPlan, BreaksCutBucketsAtSegmentStarts) {
  loom::ModelConfig cfg{300, 3, 2, 64, 32};
  const Segments seg(cfg);
  const auto& flat = seg.flat;
  const auto& segments = seg.runs;
  const auto& breaks = seg.starts;
  for (int shards : {1, 2, 3, 4}) {
    const loom::BucketPlan plan(flat, 1e9, shards, breaks);
    const int64_t unit = loom::BucketPlan::kAlignFloats * shards;
    for (int64_t x : breaks) {
      bool found = false;
      for (const auto& b : plan.buckets()) {
        EXPECT_EQ(b.range.size() % unit, 0);
        if (b.range.begin == x || (b.range.begin < x && x < b.range.end && b.range.size() == unit)) found = true;
      }
      EXPECT_TRUE(found) << "break " << x << " with " << shards << " shards";
    }
    EXPECT_GE(plan.buckets().size(), segments.size()) << "one bucket at least per segment";
  }
  // Blocks are one segment each; the embeddings and the final norm tensors one each.
  int block_segments = 0;
  const auto lay = loom::ParamLayout::for_model(cfg);
  for (auto [first, end] : segments)
    if (lay.params[size_t(first)].block >= 0) {
      block_segments++;
      for (int t = first; t < end; t++) EXPECT_EQ(lay.params[size_t(t)].block, lay.params[size_t(first)].block);
    } else {
      EXPECT_EQ(end - first, 1);
    }
  EXPECT_EQ(block_segments, cfg.n_layer);
}

// init_range of any range equals that range of the whole initialization,
// for both families and a tensor-parallel slice.
TEST(ParamLayout, InitRangeMatchesTheWholeInitialization) {
  loom::ModelConfig gpt{300, 2, 4, 64, 32};
  loom::ModelConfig llama = gpt;
  llama.family = loom::ModelFamily::llama, llama.n_kv_head = 2, llama.ffn_hidden = 96;
  for (const auto& cfg : {gpt, llama})
    for (int tp_rank : {0, 1}) {
      loom::ModelShard shard;
      shard.tp_rank = tp_rank, shard.tp_size = 2;
      const auto lay = loom::ParamLayout::for_model(cfg, shard);
      std::vector<float> whole(size_t(lay.total));
      lay.init_parameters(whole.data(), 99);
      for (int64_t step : {int64_t(1000), int64_t(777), lay.total}) {
        for (int64_t begin = 0; begin < lay.total; begin += step) {
          const int64_t end = std::min(lay.total, begin + step);
          std::vector<float> part(size_t(end - begin), -1.f);
          lay.init_range(part.data(), begin, end, 99);
          ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + begin, part.size() * sizeof(float)))
              << "range [" << begin << ", " << end << ") tp rank " << tp_rank;
        }
      }
    }
}

// On one rank the gather is a copy of the master into the segment's window;
// released windows leave memory, and 16-bit copies are the rounded values.
TEST(ParamGather, OneRankGathersSegmentsIntoTheirWindows) {
  const Segments seg(loom::ModelConfig{300, 3, 2, 64, 32});
  const auto& flat = seg.flat;
  const auto& segments = seg.runs;
  const loom::BucketPlan plan(flat, 4096, 1, seg.starts);
  std::vector<float> master(size_t(plan.shard_total()));
  for (size_t i = 0; i < master.size(); i++) master[i] = float(i % 1000) * 0.25f;
  loom::SelfComm self("dp");
  loom::CpuBackend ops;
  loom::ParamGather gather(ops, flat, segments, plan, self, master.data(), loom::DType::bf16);
  EXPECT_EQ(gather.resident_bytes(), 0u);
  const auto [first, end] = segments[1];
  std::vector<int> tensors;
  for (int t = first; t < end; t++) tensors.push_back(t);
  gather.acquire(tensors, {});
  for (int t : tensors) {
    const auto& x = flat.tensors[size_t(t)];
    EXPECT_EQ(0, std::memcmp(gather.tensor_params()[size_t(t)], master.data() + x.offset, size_t(x.numel) * 4));
    const auto* w = static_cast<const uint16_t*>(gather.tensor_weights()[size_t(t)]);
    uint32_t bits;
    std::memcpy(&bits, master.data() + x.offset, 4);
    EXPECT_EQ(w[0], uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)) << "round to nearest even";
  }
  EXPECT_GT(gather.resident_bytes(), 0u);
  gather.release(tensors);
  EXPECT_EQ(gather.resident_bytes(), 0u);
  EXPECT_GT(gather.peak_bytes(), 0u);
}

}  // namespace
