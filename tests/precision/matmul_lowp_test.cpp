// bf16 and fp16 linear layers against an fp64 reference computed on the same
// 16-bit inputs (the rounding to 16 bits is the caller's, not the kernel's).
//
// Tolerance: products of two bf16 (8-bit significands) or two fp16 (11-bit)
// values are exact in fp32, so the only error is fp32 summation. Summing K
// terms in any order (blocked, split over threads, fused pairs as in
// vdpbf16ps) puts each term through at most K-1 roundings, so
//   |got - exact| <= gamma(K + 1) * (sum |a_k b_k| + |bias| + |old value|),
// gamma(n) = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and Stability,
// 3.1); one more term covers the bias or the accumulated value. A bf16
// output adds one rounding: 2^-8 of the result. The check is per element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_lowp.h"

namespace {

using namespace loom;

template <class H>
H to_half(float x);
template <>
bf16 to_half<bf16>(float x) { return float_to_bf16(x); }
template <>
f16 to_half<f16>(float x) { return float_to_f16(x); }
inline double widen(bf16 h) { return bf16_to_float(h); }
inline double widen(f16 h) { return f16_to_float(h); }

template <class H>
std::vector<H> random_half(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<H> v(n);
  for (auto& x : v) x = to_half<H>(dist(gen));
  return v;
}

std::vector<float> random_f32(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// An exact value (fp64) with the sum of |terms| that bounds its fp32 error.
struct Exact {
  double value = 0, magnitude = 0;
  void add(double t) { value += t, magnitude += std::abs(t); }
};

double gamma(int terms) {
  const double u = std::ldexp(1.0, -24), nu = terms * u;
  return nu / (1 - nu);
}

// Every element within the fp32-summation bound of its exact value.
::testing::AssertionResult within_bound(const std::vector<float>& got, const std::vector<Exact>& want, int terms,
                                        double output_rounding = 0) {
  const double g = gamma(terms + 1);
  for (size_t i = 0; i < got.size(); i++) {
    const double allowed = g * want[i].magnitude + output_rounding * (std::abs(want[i].value) + g * want[i].magnitude);
    const double err = std::abs(double(got[i]) - want[i].value);
    if (!(err <= allowed))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs exact " << want[i].value
                                           << ", error " << err << " > bound " << allowed;
  }
  return ::testing::AssertionSuccess();
}

struct Shape {
  int N, C, OC;
};
std::string shape_name(const ::testing::TestParamInfo<Shape>& p) {
  return std::to_string(p.param.N) + "x" + std::to_string(p.param.C) + "x" + std::to_string(p.param.OC);
}
// The last two cut every product into several panels of the widened path
// (LowpMatmulEngine::kPanel*): rows and reduction, then columns.
const auto kShapes = ::testing::Values(Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{64, 32, 96}, Shape{37, 129, 67},
                                       Shape{128, 256, 192}, Shape{2100, 4200, 5}, Shape{3, 4200, 4110});

// Skips the test (with the reason) where native bf16 products are missing.
#define SKIP_UNLESS_NATIVE_BF16()                                                                          \
  if (!cpu::native_bf16_products())                                                                       \
  GTEST_SKIP() << "native bf16 products need avx512_bf16; the kernels run at "                            \
               << cpu::isa_name(cpu::kernel_isa())

// The whole layer (forward, dinp, dweight +=, dbias +=) for one 16-bit type.
template <class H>
void check_layer(const Shape& s, cpu::Bf16Path path = cpu::Bf16Path::automatic) {
  const auto [N, C, OC] = s;
  auto inp = random_half<H>(size_t(N) * C, 1), weight = random_half<H>(size_t(OC) * C, 2);
  auto dout = random_half<H>(size_t(N) * OC, 4);
  auto bias = random_f32(OC, 3), dweight = random_f32(size_t(OC) * C, 5), dbias = random_f32(OC, 6);
  std::vector<Exact> out_x(size_t(N) * OC), dinp_x(size_t(N) * C), dw_x(dweight.size()), db_x(OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      Exact& e = out_x[size_t(n) * OC + o];
      for (int c = 0; c < C; c++) e.add(widen(inp[size_t(n) * C + c]) * widen(weight[size_t(o) * C + c]));
      e.add(bias[o]);
    }
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int o = 0; o < OC; o++)
        dinp_x[size_t(n) * C + c].add(widen(dout[size_t(n) * OC + o]) * widen(weight[size_t(o) * C + c]));
  for (int o = 0; o < OC; o++) {
    for (int c = 0; c < C; c++) {
      Exact& e = dw_x[size_t(o) * C + c];
      e.add(dweight[size_t(o) * C + c]);
      for (int n = 0; n < N; n++) e.add(widen(dout[size_t(n) * OC + o]) * widen(inp[size_t(n) * C + c]));
    }
    db_x[o].add(dbias[o]);
    for (int n = 0; n < N; n++) db_x[o].add(widen(dout[size_t(n) * OC + o]));
  }

  cpu::LowpMatmulEngine eng(path);
  std::vector<float> out(out_x.size()), dinp(dinp_x.size(), 7.f);
  cpu::matmul_forward(eng, out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  cpu::matmul_backward(eng, dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N, C,
                       OC);
  EXPECT_TRUE(within_bound(out, out_x, C)) << "forward";
  EXPECT_TRUE(within_bound(dinp, dinp_x, OC)) << "dinp";
  EXPECT_TRUE(within_bound(dweight, dw_x, N)) << "dweight";
  EXPECT_TRUE(within_bound(dbias, db_x, N)) << "dbias";

  // Again: the cached primitives and widening buffers give the same bits.
  std::vector<float> again(out.size());
  cpu::matmul_forward(eng, again.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  EXPECT_EQ(0, std::memcmp(again.data(), out.data(), out.size() * sizeof(float)));
}

class MatmulBf16 : public ::testing::TestWithParam<Shape> {};
TEST_P(MatmulBf16, LayerWithinFp32SummationBoundOfExact) { check_layer<bf16>(GetParam()); }
TEST_P(MatmulBf16, NativeLayerWithinFp32SummationBoundOfExact) {
  SKIP_UNLESS_NATIVE_BF16();
  check_layer<bf16>(GetParam(), cpu::Bf16Path::native);
}
TEST_P(MatmulBf16, WidenedLayerWithinFp32SummationBoundOfExact) {
  check_layer<bf16>(GetParam(), cpu::Bf16Path::widened);
}
INSTANTIATE_TEST_SUITE_P(MatmulBf16Shapes, MatmulBf16, kShapes, shape_name);

class MatmulF16 : public ::testing::TestWithParam<Shape> {};
TEST_P(MatmulF16, LayerWithinFp32SummationBoundOfExact) { check_layer<f16>(GetParam()); }
INSTANTIATE_TEST_SUITE_P(MatmulF16Shapes, MatmulF16, kShapes, shape_name);

// A 16-bit output is the fp32 sum rounded once (one more 2^-8 or 2^-11).
// 520 x 1030 x 6 and 3 x 6 x 1100 cut the widened path into panels of rows,
// of the reduction and of columns.
template <class H>
void check_16bit_output(cpu::Bf16Path path, int N, int C, int OC) {
  auto inp = random_half<H>(size_t(N) * C, 8), weight = random_half<H>(size_t(OC) * C, 9);
  auto bias = random_f32(OC, 10);
  cpu::LowpMatmulEngine eng(path);
  std::vector<H> out(size_t(N) * OC);
  cpu::matmul_forward(eng, out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  std::vector<float> got(out.size());
  std::vector<Exact> want(out.size());
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      got[size_t(n) * OC + o] = float(widen(out[size_t(n) * OC + o]));
      Exact& e = want[size_t(n) * OC + o];
      for (int c = 0; c < C; c++) e.add(widen(inp[size_t(n) * C + c]) * widen(weight[size_t(o) * C + c]));
      e.add(bias[o]);
    }
  const double rounding = std::ldexp(1.0, std::is_same_v<H, bf16> ? -8 : -11);
  EXPECT_TRUE(within_bound(got, want, C, rounding));
}

TEST(MatmulBf16Output, RoundsTheFp32ResultOnce) { check_16bit_output<bf16>(cpu::Bf16Path::automatic, 33, 70, 45); }
TEST(MatmulBf16Output, NativeRoundsTheFp32ResultOnce) {
  SKIP_UNLESS_NATIVE_BF16();
  check_16bit_output<bf16>(cpu::Bf16Path::native, 33, 70, 45);
}
TEST(MatmulBf16Output, WidenedRoundsTheFp32ResultOnceInPanels) {
  check_16bit_output<bf16>(cpu::Bf16Path::widened, 33, 70, 45);
  check_16bit_output<bf16>(cpu::Bf16Path::widened, 520, 1030, 6);
  check_16bit_output<bf16>(cpu::Bf16Path::widened, 3, 6, 1100);
}
TEST(MatmulF16Output, RoundsTheFp32ResultOnceInPanels) {
  check_16bit_output<f16>(cpu::Bf16Path::automatic, 33, 70, 45);
  check_16bit_output<f16>(cpu::Bf16Path::automatic, 520, 1030, 6);
  check_16bit_output<f16>(cpu::Bf16Path::automatic, 3, 6, 1100);
}

TEST(MatmulBf16Output, NoProductFallsBackToTheReferenceLoop) {
  // forward, dinp, dweight: their layouts at a small shape. A "ref"
  // implementation would be orders of magnitude slower.
  cpu::LowpMatmulEngine eng;  // the path this CPU chooses: native bf16 or widened to fp32
  for (std::string impl : {eng.implementation(64, 96, 32, false, true, true, false),
                           eng.implementation(64, 32, 96, false, false, false, false),
                           eng.implementation(96, 32, 64, true, false, false, true),
                           eng.implementation(64, 96, 32, false, true, true, false, /*bf16_out=*/true)}) {
    EXPECT_FALSE(impl.empty());
    EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
  }
}

}  // namespace
