// The precision policy (parsing and its bad-input messages), the non-finite
// kernels, and why fp16 needs loss scaling: small gradients underflow to
// zero in fp16 unless scaled first.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/cast.h"
#include "kernels/test_util.h"
#include "precision/loss_scaler.h"
#include "kernels/cpu/non_finite.h"
#include "precision/policy.h"

namespace {

using namespace loom;
using loom::cpu::has_non_finite;
using loom::cpu::unscale_and_check;

template <class Fn>
std::string user_error(Fn fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

TEST(PrecisionPolicy, ParsesEveryComputeName) {
  EXPECT_EQ(parse_compute_precision("fp32"), ComputePrecision::fp32);
  EXPECT_EQ(parse_compute_precision("bf16"), ComputePrecision::bf16);
  EXPECT_EQ(parse_compute_precision("bfloat16"), ComputePrecision::bf16);
  EXPECT_EQ(parse_compute_precision("fp16"), ComputePrecision::fp16);
  EXPECT_EQ(compute_dtype(ComputePrecision::bf16), DType::bf16);
  EXPECT_EQ(compute_dtype(ComputePrecision::fp16), DType::f16);
  EXPECT_STREQ(compute_precision_name(ComputePrecision::fp16), "fp16");
  EXPECT_EQ(parse_loss_scale_mode("static"), LossScaleMode::fixed);
  EXPECT_EQ(parse_loss_scale_mode("dynamic"), LossScaleMode::dynamic);
}

TEST(PrecisionPolicy, UnknownNamesAreUserErrorsNamingTheField) {
  std::string msg = user_error([] { parse_compute_precision("fp8"); });
  EXPECT_NE(msg.find("precision.compute"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'fp8'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;  // lists the choices
  msg = user_error([] { parse_loss_scale_mode("sometimes"); });
  EXPECT_NE(msg.find("precision.loss_scale"), std::string::npos) << msg;
}

TEST(PrecisionPolicy, Fp16WithoutLossScalingNeedsAnExplicitOverride) {
  EXPECT_EQ(default_loss_scale_mode(ComputePrecision::fp16), LossScaleMode::dynamic);
  EXPECT_EQ(default_loss_scale_mode(ComputePrecision::bf16), LossScaleMode::off);
  const std::string msg = user_error([] { check_loss_scaling(ComputePrecision::fp16, LossScaleMode::off, false); });
  EXPECT_NE(msg.find("precision.loss_scale"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allow_unscaled_fp16"), std::string::npos) << msg;
  EXPECT_NO_THROW(check_loss_scaling(ComputePrecision::fp16, LossScaleMode::off, true));
  EXPECT_NO_THROW(check_loss_scaling(ComputePrecision::fp16, LossScaleMode::dynamic, false));
  EXPECT_NO_THROW(check_loss_scaling(ComputePrecision::bf16, LossScaleMode::off, false));
}

TEST(PrecisionNonFinite, FindsAnyInfOrNanAnywhere) {
  loom::test::ScopedThreads two(2);
  const float specials[] = {INFINITY, -INFINITY, NAN, -NAN, std::numeric_limits<float>::signaling_NaN()};
  for (size_t n : {size_t(1), size_t(17), size_t(1) << 18}) {  // serial, tail, threaded
    std::vector<float> x(n, 1.0f);
    x[n / 2] = std::numeric_limits<float>::max();  // large but finite
    x[0] = std::numeric_limits<float>::denorm_min();
    EXPECT_FALSE(has_non_finite(x.data(), n));
    for (float bad : specials)
      for (size_t at : {size_t(0), n / 3, n - 1}) {
        std::vector<float> y = x;
        y[at] = bad;
        ASSERT_TRUE(has_non_finite(y.data(), n)) << "n " << n << " at " << at << " value " << bad;
        ASSERT_TRUE(unscale_and_check(y.data(), n, 0.25f)) << "n " << n << " at " << at;
      }
  }
}

TEST(PrecisionNonFinite, UnscaleMultipliesEveryElement) {
  loom::test::ScopedThreads two(2);
  auto x = loom::test::random_vec<float>((1 << 17) + 5, 21, -1e4, 1e4);
  auto want = x;
  for (auto& v : want) v *= 1.0f / 1024.0f;
  EXPECT_FALSE(unscale_and_check(x.data(), x.size(), 1.0f / 1024.0f));
  EXPECT_TRUE(loom::test::bitwise_equal(x, want));
}

// Gradients of magnitude ~1e-8..1e-7, as deep layers and small learning
// signals produce. fp16's smallest subnormal is 2^-24 = 6e-8: below half of
// it a value flushes to zero, and every value below 2^-14 = 6e-5 keeps fewer
// than 11 significant bits. Scaling the loss (so the gradients) by 2^16
// lifts them into fp16's normal range; unscaling in fp32 gives them back.
TEST(PrecisionUnderflow, Fp16LosesSmallGradientsThatLossScalingRecovers) {
  const size_t n = 100000;
  std::mt19937 gen(5);
  std::normal_distribution<float> dist(0.0f, 1e-7f);
  std::vector<float> grads(n);
  for (auto& g : grads) g = dist(gen);

  // What survives a trip through fp16 (the dtype backward stores gradients
  // in under fp16 compute), scaled by `scale` before and unscaled after.
  auto through_fp16 = [&](float scale) {
    std::vector<float> scaled(n), back(n);
    std::vector<f16> half(n);
    for (size_t i = 0; i < n; i++) scaled[i] = grads[i] * scale;
    cpu::cast_f32_to_f16(half.data(), scaled.data(), n);
    cpu::cast_f16_to_f32(back.data(), half.data(), n);
    EXPECT_FALSE(unscale_and_check(back.data(), n, 1.0f / scale));
    return back;
  };
  struct Loss {
    double flushed = 0, imprecise = 0;  // fractions: became 0; relative error > 2^-11
  };
  auto measure = [&](const std::vector<float>& back) {
    Loss l;
    for (size_t i = 0; i < n; i++) {
      if (back[i] == 0.0f) l.flushed += 1.0 / n;
      if (std::abs(back[i] - grads[i]) > std::ldexp(1.0, -11) * std::abs(grads[i])) l.imprecise += 1.0 / n;
    }
    return l;
  };
  const Loss unscaled = measure(through_fp16(1.0f));
  LossScaler scaler;  // the default dynamic scaler: 2^16
  const Loss scaled = measure(through_fp16(scaler.scale()));

  // Without scaling, |g| < 2^-25 (~0.23 of a N(0, 1e-7)) is lost outright,
  // and nearly all the rest keeps only a few bits.
  EXPECT_GT(unscaled.flushed, 0.2) << "fraction flushed to zero without scaling";
  EXPECT_GT(unscaled.imprecise, 0.9);
  // With 2^16, nothing is lost and all but the tiniest values (|g| below
  // 2^-30, about 1% here, still fp16 subnormals) keep full fp16 precision.
  EXPECT_EQ(scaled.flushed, 0.0) << "fraction flushed to zero with scaling";
  EXPECT_LT(scaled.imprecise, 0.02);
  std::printf("fp16 round trip of N(0, 1e-7) gradients: flushed to zero %.1f%% unscaled, %.3f%% scaled by 2^16; "
              "relative error > 2^-11: %.1f%% vs %.2f%%\n",
              100 * unscaled.flushed, 100 * scaled.flushed, 100 * unscaled.imprecise, 100 * scaled.imprecise);
}

// The other side of scaling: a large gradient times 2^16 overflows fp16's
// 65504; the check catches it and the scaler backs off until it fits.
TEST(PrecisionUnderflow, ScaledOverflowIsCaughtAndTheScalerBacksOffUntilItFits) {
  std::vector<float> grads = {4.0f, -1e-3f, 2e-7f};
  LossScaler scaler;
  int skipped = 0;
  for (int step = 0; step < 20; step++) {
    std::vector<float> scaled(grads.size()), back(grads.size());
    std::vector<f16> half(grads.size());
    for (size_t i = 0; i < grads.size(); i++) scaled[i] = grads[i] * scaler.scale();
    cpu::cast_f32_to_f16(half.data(), scaled.data(), grads.size());
    cpu::cast_f16_to_f32(back.data(), half.data(), grads.size());
    const ScalerDecision d = scaler.update(unscale_and_check(back.data(), back.size(), scaler.inv_scale()));
    if (!d.skip_step) break;
    skipped++;
  }
  // 4 * 2^16 and 4 * 2^15 overflow (hysteresis 2: the first overflow keeps
  // 2^16), 4 * 2^14 = 65536 still rounds to inf, 4 * 2^13 = 32768 fits.
  EXPECT_EQ(skipped, 4);
  EXPECT_EQ(scaler.scale(), 8192.0f);
}

}  // namespace
