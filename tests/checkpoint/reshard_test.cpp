#include <gtest/gtest.h>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/layout_pieces.h"
#include "checkpoint_test_util.h"
#include "core/check.h"
#include "model/param_layout.h"

namespace loom {
namespace {

ParamLayout tp_layout(const ModelConfig& cfg, int tp, int rank) {
  ModelShard shard;
  shard.tp_rank = rank;
  shard.tp_size = tp;
  return ParamLayout::for_model(cfg, shard);
}

std::vector<float> init_buffer(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> b(size_t(layout.total), 0.f);
  layout.init_parameters(b.data(), seed);
  return b;
}

// Written by tp = 2 x dp = 2 under ZeRO: parameters whole per tp rank (dp
// rank 0 writes them), "master." copies as ZeRO shards that cut through
// tensors. Read back into tp = 1, 3-way ZeRO shards of tp = 4, and tp = 4:
// exactly the values those layouts initialise to (initialisation does not
// depend on the layout), padding rows untouched.
TEST(CheckpointReshard, TensorParallelAndZeroShardsReloadIntoOtherLayouts) {
  const std::string root = test::ckpt_dir("reshard");
  const ModelConfig cfg{100, 2, 4, 32, 16};  // vocabulary padded under tp
  const uint64_t seed = 17;
  const int tp = 2, dp = 2;
  CheckpointWriter w(root, 9);
  std::vector<int> writers;
  std::vector<std::vector<float>> buffers;
  for (int t = 0; t < tp; t++) {
    ParamLayout layout = tp_layout(cfg, tp, t);
    std::vector<float> buf = init_buffer(layout, seed);
    for (int d = 0; d < dp; d++) {
      const int64_t begin = layout.total * d / dp, end = layout.total * (d + 1) / dp;
      std::vector<CheckpointPiece> pieces = layout_pieces(layout, buf.data() + begin, "master.", begin, end);
      if (d == 0) {
        std::vector<CheckpointPiece> params = layout_pieces(layout, buf.data());
        pieces.insert(pieces.end(), params.begin(), params.end());
      }
      const int rank = t + tp * d;
      w.write_rank_file(rank, pieces);
      writers.push_back(rank);
    }
  }
  Checkpoint ckpt = Checkpoint::open(w.commit(test::test_manifest(9, {dp, tp, 1, 1, "tp-dp-pp", dp * tp}), writers, 1).dir, true);
  // Some ZeRO shard really cut a tensor.
  bool cut = false;
  for (const auto& [name, t] : ckpt.manifest().tensors.items())
    for (const auto& piece : t["pieces"]) cut |= piece.contains("flat_range");
  EXPECT_TRUE(cut);

  for (int new_tp : {1, 4}) {
    for (int r = 0; r < new_tp; r++) {
      ParamLayout layout = tp_layout(cfg, new_tp, r);
      const std::vector<float> want = init_buffer(layout, seed);
      std::vector<float> got(want.size(), 0.f);
      fill_from_checkpoint(ckpt.tensors(), layout, got.data());
      ASSERT_EQ(got, want) << "tp " << new_tp << " rank " << r;
      // A 3-way ZeRO shard of the master copy, cutting elsewhere than the writers did.
      for (int d = 0; d < 3; d++) {
        const int64_t begin = layout.total * d / 3, end = layout.total * (d + 1) / 3;
        std::vector<float> shard(size_t(end - begin), 0.f);
        fill_from_checkpoint(ckpt.tensors(), layout, shard.data(), "master.", begin, end);
        ASSERT_TRUE(std::equal(shard.begin(), shard.end(), want.begin() + begin)) << "tp " << new_tp << " shard " << d;
      }
    }
  }
  // A different model cannot be filled from it.
  ParamLayout other = ParamLayout::for_model(ModelConfig{100, 2, 4, 64, 16});
  std::vector<float> buf(size_t(other.total));
  EXPECT_THROW(fill_from_checkpoint(ckpt.tensors(), other, buf.data()), UserError);
}

}  // namespace
}  // namespace loom
