// The single-process parts of tensor parallelism (issue 6):
//   - every tp rank's shard at init equals its slices of the tp=1 weights
//     (DESIGN.md invariant 3), and vocabulary padding rows are zero;
//   - the vocabulary-parallel cross-entropy equals the full softmax loss and
//     gradient for vocabulary sizes that need padding (the per-row max and
//     sums reduced by hand here, as the tp group would);
//   - the split embedding lookups add up to the fused one, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/encoder.h"
#include "kernels/cpu/softmax_xent.h"
#include "kernels/test_util.h"
#include "model/param_layout.h"

namespace loom {
namespace {

// GPT-2, and a LLaMA whose fused q/k/v has unequal parts (8 query heads, 4
// kv heads) and whose MLP is not 4 x d_model.
ModelConfig small_model(int vocab, ModelFamily family = ModelFamily::gpt2) {
  ModelConfig cfg;
  cfg.vocab_size = vocab, cfg.n_layer = 2, cfg.n_head = 4, cfg.d_model = 32, cfg.seq_len = 16;
  if (family == ModelFamily::llama) cfg.family = family, cfg.n_head = 8, cfg.n_kv_head = 4, cfg.ffn_hidden = 96;
  return cfg;
}

class TensorParallelInit : public testing::TestWithParam<ModelFamily> {};

TEST_P(TensorParallelInit, ShardsAreSlicesOfTheSingleProcessWeights) {
  const ModelConfig cfg = small_model(301, GetParam());  // needs padding at every tp > 1
  const ParamLayout whole = ParamLayout::for_model(cfg);
  std::vector<float> global(size_t(whole.total));
  whole.init_parameters(global.data(), 7);
  for (int tp : {2, 4}) {
    for (int rank = 0; rank < tp; rank++) {
      SCOPED_TRACE(testing::Message() << "tp " << tp << " rank " << rank);
      const ParamLayout lay = ParamLayout::for_model(cfg, ModelShard{rank, tp});
      ASSERT_EQ(lay.params.size(), whole.params.size());
      std::vector<float> local(size_t(lay.total), NAN);
      lay.init_parameters(local.data(), 7);
      for (size_t i = 0; i < lay.params.size(); i++) {
        const ParamSpec& p = lay.params[i];
        const ParamSpec& g = *whole.find(p.name);
        const int64_t gcols = g.shape.size() > 1 ? g.shape[1] : 1;
        int64_t covered = 0;
        for (const TensorPiece& piece : lay.pieces(int(i))) {
          const int64_t rows = piece.shape[0], cols = piece.shape.size() > 1 ? piece.shape[1] : 1;
          const int64_t col0 = piece.shape.size() > 1 ? piece.global_offset[1] : 0;
          for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
              ASSERT_EQ(local[size_t(p.offset + piece.local_offset + r * cols + c)],
                        global[size_t(g.offset + (piece.global_offset[0] + r) * gcols + col0 + c)])
                  << p.name << " row " << r << " col " << c;
          covered += rows * cols;
        }
        // Whatever no piece covers is vocabulary padding, and zero.
        for (int64_t k = covered; k < p.numel; k++) ASSERT_EQ(local[size_t(p.offset + k)], 0.f) << p.name;
        if (p.split.dim < 0) EXPECT_EQ(p.local_shape, g.shape) << p.name;
      }
      // Split matrices hold 1/tp each.
      if (cfg.is_llama()) {
        const std::string qkv = "model.layers.0.self_attn.qkv_proj.weight";
        EXPECT_EQ(lay.find(qkv)->numel * tp, whole.find(qkv)->numel);
        EXPECT_EQ(lay.pieces(lay.index_of(qkv)).size(), 3u);  // q, k and v rows
        EXPECT_EQ(lay.find("model.layers.1.mlp.down_proj.weight")->local_shape, (std::vector<int64_t>{32, 96 / tp}));
      } else {
        EXPECT_EQ(lay.find("h.0.attn.c_attn.weight")->numel * tp, whole.find("h.0.attn.c_attn.weight")->numel);
        EXPECT_EQ(lay.find("h.1.mlp.c_proj.weight")->local_shape, (std::vector<int64_t>{32, 128 / tp}));
      }
    }
  }
}

TEST_P(TensorParallelInit, PiecesOfEveryRankTileTheGlobalTensor) {
  const ModelConfig cfg = small_model(301, GetParam());
  for (int tp : {2, 4}) {
    std::vector<int64_t> covered(ParamLayout::for_model(cfg).params.size(), 0);
    for (int rank = 0; rank < tp; rank++) {
      const ParamLayout lay = ParamLayout::for_model(cfg, ModelShard{rank, tp});
      for (size_t i = 0; i < lay.params.size(); i++)
        for (const TensorPiece& piece : lay.pieces(int(i))) {
          int64_t n = 1;
          for (int64_t d : piece.shape) n *= d;
          covered[i] += n;
        }
    }
    const ParamLayout whole = ParamLayout::for_model(cfg);
    for (size_t i = 0; i < whole.params.size(); i++) {
      const ParamSpec& p = whole.params[i];
      const int64_t copies = p.split.dim < 0 ? tp : 1;
      EXPECT_EQ(covered[i], p.numel * copies) << p.name << " tp " << tp;
    }
  }
}

// The three passes, with the tp group's MAX and SUM done by hand.
void vocab_parallel_xent(std::vector<float>& losses, std::vector<std::vector<float>>& slices,
                         const std::vector<int32_t>& targets, int V, int tp, int N, float dloss) {
  const int64_t m = 64 * int64_t(tp), Vp = (V + m - 1) / m * m, Vl = Vp / tp;
  std::vector<float> row_max(size_t(N), -INFINITY), sums(size_t(2 * N), 0.f);
  for (int r = 0; r < tp; r++) {
    const int valid = int(std::clamp<int64_t>(V - r * Vl, 0, Vl));
    std::vector<float> mx(N);
    cpu::xent_partial_max(mx.data(), slices[size_t(r)].data(), N, int(Vl), valid);
    for (int n = 0; n < N; n++) row_max[size_t(n)] = std::max(row_max[size_t(n)], mx[size_t(n)]);
  }
  for (int r = 0; r < tp; r++) {
    const int valid = int(std::clamp<int64_t>(V - r * Vl, 0, Vl));
    std::vector<float> s(size_t(2 * N));
    cpu::xent_partial_sums(s.data(), slices[size_t(r)].data(), row_max.data(), targets.data(), r * Vl, N, int(Vl),
                           valid);
    for (int k = 0; k < 2 * N; k++) sums[size_t(k)] += s[size_t(k)];
  }
  for (int r = 0; r < tp; r++) {
    const int valid = int(std::clamp<int64_t>(V - r * Vl, 0, Vl));
    cpu::xent_finish(losses.data(), slices[size_t(r)].data(), row_max.data(), sums.data(), targets.data(), r * Vl,
                     dloss, N, int(Vl), valid);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TensorParallelInit, testing::Values(ModelFamily::gpt2, ModelFamily::llama),
                         [](const testing::TestParamInfo<ModelFamily>& i) { return model_family_name(i.param); });

TEST(VocabParallelCrossEntropy, EqualsTheFullSoftmaxLossWithPadding) {
  const int N = 13;
  for (int V : {300, 257, 1000, 65}) {
    for (int tp : {1, 2, 3, 4}) {
      SCOPED_TRACE(testing::Message() << "V " << V << " tp " << tp);
      auto logits = test::random_vec<float>(size_t(N) * V, uint32_t(V + tp), -4, 4);
      auto targets = test::random_ints(size_t(N), uint32_t(V), 0, V - 1);
      targets[3] = -1;  // ignored position
      const int64_t m = 64 * int64_t(tp), Vp = (V + m - 1) / m * m, Vl = Vp / tp;
      std::vector<std::vector<float>> slices(size_t(tp), std::vector<float>(size_t(N * Vl), 123.f));
      for (int r = 0; r < tp; r++)
        for (int n = 0; n < N; n++)
          for (int64_t v = 0; v < Vl && r * Vl + v < V; v++)
            slices[size_t(r)][size_t(n * Vl + v)] = logits[size_t(n) * V + size_t(r * Vl + v)];
      // Padding columns hold 123 (larger than any logit): they must not count.
      const float dloss = 1.f / 12;
      std::vector<float> losses(N), want(N);
      vocab_parallel_xent(losses, slices, targets, V, tp, N, dloss);
      std::vector<float> full = logits;
      cpu::softmax_xent_fused(want.data(), full.data(), targets.data(), dloss, N, V);
      for (int n = 0; n < N; n++) EXPECT_NEAR(losses[size_t(n)], want[size_t(n)], 2e-6 * std::abs(want[size_t(n)]) + 1e-7);
      for (int r = 0; r < tp; r++)
        for (int n = 0; n < N; n++)
          for (int64_t v = 0; v < Vl; v++) {
            const float got = slices[size_t(r)][size_t(n * Vl + v)];
            const int64_t col = r * Vl + v;
            if (col >= V) ASSERT_EQ(got, 0.f) << "padding gradient";
            else ASSERT_NEAR(got, full[size_t(n) * V + size_t(col)], 1e-7) << "row " << n << " col " << col;
          }
    }
  }
}

TEST(VocabParallelEmbedding, SplitLookupsAddUpToTheFusedOne) {
  const int B = 3, T = 5, C = 40, V = 70, N = B * T;
  auto tokens = test::random_ints(size_t(N), 1, 0, V - 1);
  auto wte = test::random_vec<float>(size_t(V) * C, 2), wpe = test::random_vec<float>(size_t(T) * C, 3);
  std::vector<float> want(size_t(N) * C);
  cpu::encoder_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for (int tp : {2, 3}) {
    const int per = (V + tp - 1) / tp;
    std::vector<float> sum(size_t(N) * C, 0.f), part(size_t(N) * C);
    for (int r = 0; r < tp; r++) {
      const int begin = r * per, rows = std::min(per, V - begin);
      cpu::token_embedding_forward(part.data(), tokens.data(), wte.data() + size_t(begin) * C, begin, rows, N, C);
      for (size_t i = 0; i < sum.size(); i++) sum[i] += part[i];
    }
    // Sequence parallel: two halves of the rows, each adding its positions.
    for (int half = 0; half < 2; half++) {
      const int first = half * (N / 2), n = half == 0 ? N / 2 : N - N / 2;
      cpu::position_embedding_forward(sum.data() + size_t(first) * C, wpe.data(), first, n, T, C);
    }
    EXPECT_TRUE(test::bitwise_equal(sum, want)) << "tp " << tp;
  }
  // Backward: the split scatters add up to encoder_backward's.
  auto dout = test::random_vec<float>(size_t(N) * C, 4);
  std::vector<float> dwte(size_t(V) * C, 0.f), dwpe(size_t(T) * C, 0.f);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  std::vector<float> dwte2(dwte.size(), 0.f), dwpe2(dwpe.size(), 0.f);
  cpu::token_embedding_backward(dwte2.data(), dout.data(), tokens.data(), 0, 35, N, C);
  cpu::token_embedding_backward(dwte2.data() + 35 * C, dout.data(), tokens.data(), 35, 35, N, C);
  cpu::position_embedding_backward(dwpe2.data(), dout.data(), 0, N, T, C);
  EXPECT_TRUE(test::bitwise_equal(dwte2, dwte));
  EXPECT_TRUE(test::bitwise_equal(dwpe2, dwpe));
}

}  // namespace
}  // namespace loom
