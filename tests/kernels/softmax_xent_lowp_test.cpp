// Cross-entropy on bf16 / fp16 logits: the fp32 kernels run on the widened
// logits give the losses (within fp32 rounding of the same arithmetic) and
// the gradient, which the 16-bit kernels must return rounded once (each
// element within one 16-bit rounding of the fp32 gradient), for the whole
// vocabulary and for vocabulary slices with padding columns.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/softmax_xent.h"

namespace {

using namespace loom;

float widen(bf16 x) { return bf16_to_float(x); }
float widen(f16 x) { return f16_to_float(x); }
void narrow(bf16* o, float x) { *o = float_to_bf16(x); }
void narrow(f16* o, float x) { *o = float_to_f16(x); }
template <class L>
double unit();  // relative size of one rounding
template <>
double unit<bf16>() { return 1.0 / 256; }
template <>
double unit<f16>() { return 1.0 / 2048; }

template <class L>
void check_shape(int N, int V, int valid, int64_t vocab_begin, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<L> logits(size_t(N) * V);
  std::vector<float> wide(logits.size());
  for (size_t i = 0; i < logits.size(); i++) narrow(&logits[i], dist(gen)), wide[i] = widen(logits[i]);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int n = 0; n < N; n++) targets[size_t(n)] = n % 7 == 3 ? -1 : int32_t(vocab_begin + gen() % uint32_t(valid));
  const float dloss = 1.f / float(N);
  std::vector<float> loss(static_cast<size_t>(N)), loss32(static_cast<size_t>(N));
  if (valid == V && vocab_begin == 0) {
    cpu::softmax_xent_forward(loss.data(), logits.data(), targets.data(), N, V);
    cpu::softmax_xent_forward(loss32.data(), wide.data(), targets.data(), N, V);
    for (int n = 0; n < N; n++) EXPECT_NEAR(loss[size_t(n)], loss32[size_t(n)], 1e-6 * (1 + loss32[size_t(n)]));
    cpu::softmax_xent_fused(loss.data(), logits.data(), targets.data(), dloss, N, V);
    cpu::softmax_xent_fused(loss32.data(), wide.data(), targets.data(), dloss, N, V);
  } else {
    // One rank's slice: the partial passes, with one "rank" (no reductions).
    std::vector<float> mx(static_cast<size_t>(N)), mx32(static_cast<size_t>(N)), sums(2 * size_t(N)), sums32(2 * size_t(N));
    cpu::xent_partial_max(mx.data(), logits.data(), N, V, valid);
    cpu::xent_partial_max(mx32.data(), wide.data(), N, V, valid);
    EXPECT_EQ(mx, mx32);
    cpu::xent_partial_sums(sums.data(), logits.data(), mx.data(), targets.data(), vocab_begin, N, V, valid);
    cpu::xent_partial_sums(sums32.data(), wide.data(), mx32.data(), targets.data(), vocab_begin, N, V, valid);
    for (size_t i = 0; i < sums.size(); i++) EXPECT_NEAR(sums[i], sums32[i], 1e-6 * (1 + std::abs(sums32[i])));
    cpu::xent_finish(loss.data(), logits.data(), mx.data(), sums.data(), targets.data(), vocab_begin, dloss, N, V,
                     valid);
    cpu::xent_finish(loss32.data(), wide.data(), mx32.data(), sums32.data(), targets.data(), vocab_begin, dloss, N,
                     V, valid);
  }
  for (int n = 0; n < N; n++) EXPECT_NEAR(loss[size_t(n)], loss32[size_t(n)], 1e-6 * (1 + loss32[size_t(n)]));
  // Gradient: one rounding of the fp32 value (plus fp32 noise), exact zeros
  // for ignored rows and padding columns.
  for (int n = 0; n < N; n++)
    for (int v = 0; v < V; v++) {
      const size_t i = size_t(n) * V + size_t(v);
      const float got = widen(logits[i]), want = wide[i];
      if (targets[size_t(n)] < 0 || v >= valid) {
        ASSERT_EQ(got, 0.f) << "row " << n << " col " << v;
        continue;
      }
      ASSERT_NEAR(got, want, unit<L>() * std::abs(want) + 1e-6 * dloss) << "row " << n << " col " << v;
    }
}

template <class L>
class SoftmaxXentLowp : public testing::Test {};
using LowpTypes = testing::Types<bf16, f16>;
TYPED_TEST_SUITE(SoftmaxXentLowp, LowpTypes);

TYPED_TEST(SoftmaxXentLowp, WholeVocabularyIsTheRoundedFp32Kernel) {
  check_shape<TypeParam>(13, 300, 300, 0, 1);
  check_shape<TypeParam>(4, 1000, 1000, 0, 2);
  check_shape<TypeParam>(3, 70000, 70000, 0, 5);  // longer than the row whose exp() is kept: recomputed
}

TYPED_TEST(SoftmaxXentLowp, VocabularySliceWithPaddingIsTheRoundedFp32Kernel) {
  check_shape<TypeParam>(9, 320, 257, 320, 3);
  check_shape<TypeParam>(5, 64, 40, 0, 4);
}

}  // namespace
