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
#include <vector>

#include "core/dtype.h"
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
const auto kShapes = ::testing::Values(Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{64, 32, 96}, Shape{37, 129, 67},
                                       Shape{128, 256, 192});

// The whole layer (forward, dinp, dweight +=, dbias +=) for one 16-bit type.
template <class H>
void check_layer(const Shape& s) {
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

  cpu::LowpMatmulEngine eng;
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
INSTANTIATE_TEST_SUITE_P(MatmulBf16Shapes, MatmulBf16, kShapes, shape_name);

class MatmulF16 : public ::testing::TestWithParam<Shape> {};
TEST_P(MatmulF16, LayerWithinFp32SummationBoundOfExact) { check_layer<f16>(GetParam()); }
INSTANTIATE_TEST_SUITE_P(MatmulF16Shapes, MatmulF16, kShapes, shape_name);

TEST(MatmulBf16Output, RoundsTheFp32ResultOnce) {
  const int N = 33, C = 70, OC = 45;
  auto inp = random_half<bf16>(size_t(N) * C, 8), weight = random_half<bf16>(size_t(OC) * C, 9);
  auto bias = random_f32(OC, 10);
  cpu::LowpMatmulEngine eng;
  std::vector<bf16> out(size_t(N) * OC);
  cpu::matmul_forward(eng, out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  std::vector<float> got(out.size());
  std::vector<Exact> want(out.size());
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      got[size_t(n) * OC + o] = bf16_to_float(out[size_t(n) * OC + o]);
      Exact& e = want[size_t(n) * OC + o];
      for (int c = 0; c < C; c++) e.add(widen(inp[size_t(n) * C + c]) * widen(weight[size_t(o) * C + c]));
      e.add(bias[o]);
    }
  EXPECT_TRUE(within_bound(got, want, C, /*output_rounding=*/std::ldexp(1.0, -8)));
}

TEST(MatmulBf16Output, NoProductFallsBackToTheReferenceLoop) {
  // forward, dinp, dweight: their layouts at a small shape. A "ref"
  // implementation would be orders of magnitude slower.
  cpu::LowpMatmulEngine eng;
  for (std::string impl : {eng.implementation(64, 96, 32, false, true, true, false),
                           eng.implementation(64, 32, 96, false, false, false, false),
                           eng.implementation(96, 32, 64, true, false, false, true),
                           eng.implementation(64, 96, 32, false, true, true, false, /*bf16_out=*/true)}) {
    EXPECT_FALSE(impl.empty());
    EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
  }
}

}  // namespace
