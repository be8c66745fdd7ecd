// 16-bit causal attention (kernels/cpu/attention_lowp) against the fp32
// kernel run on the same, widened, inputs; plus the properties the 16-bit
// kernels promise exactly: causal zeros in att, O computed from the stored
// (rounded) P, and results independent of the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/isa.h"
#include "test_util.h"

namespace loom {
namespace {

using test::random_vec;

float widen(bf16 x) { return bf16_to_float(x); }
float widen(f16 x) { return f16_to_float(x); }
bf16 narrow(float x, bf16) { return float_to_bf16(x); }
f16 narrow(float x, f16) { return float_to_f16(x); }

template <class A>
std::vector<float> widen_vec(const std::vector<A>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = widen(v[i]);
  return r;
}

// ||a - b|| / ||b|| (Frobenius), over elements [begin, end) of every `period`
// block starting at `first` (to look at q, k and v of qkv separately).
double rel_frobenius(const std::vector<float>& a, const std::vector<float>& b, size_t period, size_t first,
                     size_t len) {
  double num = 0, den = 0;
  for (size_t base = 0; base < a.size(); base += period)
    for (size_t i = base + first; i < base + first + len; i++) {
      const double d = double(a[i]) - b[i];
      num += d * d;
      den += double(b[i]) * b[i];
    }
  if (den == 0) return num == 0 ? 0 : INFINITY;  // e.g. dq, dk at T = 1: exactly 0
  return std::sqrt(num / den);
}

struct Shape {
  int B, T, C, NH;
};

// Per 16-bit type: unit roundoff u (2^-8 bf16, 2^-11 fp16: a rounding is off
// by <= u relative, an ulp is <= 2u), and the relative Frobenius errors
// allowed against the fp32 kernel. Forward, P is rounded (<= u per entry)
// and O once more (<= u); the two kernels' fp32 sums differ by ~1e-7. So
// ||O - O32|| / ||O32|| is below u: measured 2.2e-3 bf16, 2.8e-4 fp16.
// Backward, bf16 also rounds dO and dS before its products, and every dq,
// dk, dv is rounded: a few u/2 in all (measured 3.3e-3 bf16, 2.9e-4 fp16,
// T = 70..130). The limits sit about 3x above the measurements and far below
// what a wrong index, tile bound or missing term gives (O(1)).
template <class A>
struct Tol;
template <>
struct Tol<bf16> {
  static constexpr double u = 1.0 / 256, fwd = 1e-2, bwd = 1e-2;
  static constexpr uint16_t nan = 0x7fff;
};
template <>
struct Tol<f16> {
  static constexpr double u = 1.0 / 2048, fwd = 1e-3, bwd = 1e-3;
  static constexpr uint16_t nan = 0x7fff;
};

// Which implementation runs: what the CPU chooses, or one path forced.
enum class Path { dispatch, native, widened };

template <class A>
void forward(Path path, A* out, A* att, const A* qkv, float* work, const Shape& s) {
  if (path == Path::widened) cpu::attention_forward_widened(out, att, qkv, work, s.B, s.T, s.C, s.NH);
  else if constexpr (std::is_same_v<A, bf16>)
    if (path == Path::native) return cpu::attention_forward_native(out, att, qkv, work, s.B, s.T, s.C, s.NH);
  if (path == Path::dispatch) cpu::attention_forward(out, att, qkv, work, s.B, s.T, s.C, s.NH);
}
template <class A>
void backward(Path path, A* dqkv, float* scratch, float* work, const float* dout, const A* qkv, const A* att,
              const Shape& s) {
  if (path == Path::widened)
    cpu::attention_backward_widened(dqkv, scratch, work, dout, qkv, att, s.B, s.T, s.C, s.NH);
  else if constexpr (std::is_same_v<A, bf16>)
    if (path == Path::native)
      return cpu::attention_backward_native(dqkv, scratch, work, dout, qkv, att, s.B, s.T, s.C, s.NH);
  if (path == Path::dispatch) cpu::attention_backward(dqkv, scratch, work, dout, qkv, att, s.B, s.T, s.C, s.NH);
}

template <class A>
struct Run {
  std::vector<A> out, att, dqkv;
};

// Runs forward and backward with `threads` OpenMP threads, work space sized
// for them (with a guard zone after it that must stay untouched); outputs and
// work space start as NaN: the kernels must overwrite, not read, them.
template <class A>
Run<A> run_lowp(Path path, const Shape& s, const std::vector<A>& qkv, const std::vector<float>& dout, int threads) {
  test::ScopedThreads scoped(threads);
  const size_t nqkv = qkv.size(), nout = dout.size(), natt = size_t(s.B) * s.NH * s.T * s.T;
  const float nanf = std::nanf("");
  const size_t nwork = cpu::attention_lowp_work_floats(s.T, s.C, s.NH), guard = 1024;
  std::vector<float> work(nwork + guard, nanf), scratch(natt, nanf);
  Run<A> r{std::vector<A>(nout, A{Tol<A>::nan}), std::vector<A>(natt, A{Tol<A>::nan}),
           std::vector<A>(nqkv, A{Tol<A>::nan})};
  forward(path, r.out.data(), r.att.data(), qkv.data(), work.data(), s);
  backward(path, r.dqkv.data(), scratch.data(), work.data(), dout.data(), qkv.data(), r.att.data(), s);
  for (size_t i = nwork; i < work.size(); i++) EXPECT_TRUE(std::isnan(work[i])) << "work overrun at " << i - nwork;
  return r;
}

template <class A>
void check_attention(Path path) {
  // hs = 16, 32, 64, 4; T around and not a multiple of the 64-row tile.
  for (const Shape s : {Shape{2, 70, 64, 4}, Shape{2, 128, 96, 3}, Shape{2, 130, 128, 2}, Shape{1, 1, 8, 2}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
    const int B = s.B, T = s.T, C = s.C, NH = s.NH, hs = C / NH;
    const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C, natt = size_t(B) * NH * T * T;
    // Range 2 makes the softmax peaky enough to matter.
    std::vector<A> qkv(nqkv);
    const auto q32 = random_vec<float>(nqkv, 1, -2, 2);
    for (size_t i = 0; i < nqkv; i++) qkv[i] = narrow(q32[i], A{});
    const auto dout = random_vec<float>(nout, 2);

    // The fp32 kernel on the widened inputs.
    const auto qkv32 = widen_vec(qkv);
    std::vector<float> out32(nout), att32(natt), dqkv32(nqkv), scr32(natt);
    cpu::attention_forward(out32.data(), att32.data(), qkv32.data(), B, T, C, NH);
    cpu::attention_backward(dqkv32.data(), scr32.data(), dout.data(), qkv32.data(), att32.data(), B, T, C, NH);

    const Run<A> r = run_lowp(path, s, qkv, dout, 2);
    const auto out = widen_vec(r.out), att = widen_vec(r.att), dqkv = widen_vec(r.dqkv);

    // P: the fp32 probabilities rounded (up to a neighbour where fp32 sums of
    // the two kernels differ by an ulp near a rounding tie), exact zeros above
    // the diagonal.
    EXPECT_TRUE(test::all_close(att, att32, Tol<A>::u, 1e-7));
    for (int bh = 0; bh < B * NH; bh++)
      for (int i = 0; i < T; i++)
        for (int j = i + 1; j < T; j++)
          ASSERT_EQ(r.att[(size_t(bh) * T + i) * T + j].bits, 0) << "bh=" << bh << " [" << i << "," << j << "]";

    // O is the stored P times V, rounded once: compare with that product in
    // double, rounded. The kernel's fp32 sums may land an ulp away from a
    // rounding midpoint, so allow rare 1-ulp differences; had O been made
    // from the unrounded P, most elements would differ.
    size_t mismatches = 0;
    std::vector<float> o_exp(nout);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++)
        for (int t = 0; t < T; t++)
          for (int d = 0; d < hs; d++) {
            double acc = 0;
            for (int j = 0; j <= t; j++)
              acc += double(att[((size_t(b) * NH + h) * T + t) * T + j]) * qkv32[(size_t(b) * T + j) * 3 * C + 2 * C + h * hs + d];
            const size_t o = (size_t(b) * T + t) * C + h * hs + d;
            const A e = narrow(float(acc), A{});
            o_exp[o] = widen(e);
            mismatches += r.out[o].bits != e.bits;
          }
    EXPECT_LE(mismatches, nout / 100) << "of " << nout;
    EXPECT_TRUE(test::all_close(out, o_exp, 2 * Tol<A>::u, 1e-6));  // an ulp is <= 2u relative

    EXPECT_LT(rel_frobenius(out, out32, nout, 0, nout), Tol<A>::fwd);
    for (int part = 0; part < 3; part++)  // q, k, v gradients separately
      EXPECT_LT(rel_frobenius(dqkv, dqkv32, 3 * C, part * C, C), Tol<A>::bwd) << "part " << part;

    // One thread or two: the same bits.
    const Run<A> r1 = run_lowp(path, s, qkv, dout, 1);
    EXPECT_EQ(0, std::memcmp(r1.out.data(), r.out.data(), nout * sizeof(A)));
    EXPECT_EQ(0, std::memcmp(r1.att.data(), r.att.data(), natt * sizeof(A)));
    EXPECT_EQ(0, std::memcmp(r1.dqkv.data(), r.dqkv.data(), nqkv * sizeof(A)));
  }
}

TEST(AttentionLowpTest, Bf16MatchesFp32) { check_attention<bf16>(Path::dispatch); }
TEST(AttentionLowpTest, Bf16NativeMatchesFp32) {
  if (!cpu::native_bf16_products())
    GTEST_SKIP() << "native bf16 products need avx512_bf16; kernels run at " << cpu::isa_name(cpu::kernel_isa());
  check_attention<bf16>(Path::native);
}
TEST(AttentionLowpTest, Bf16WidenedMatchesFp32) { check_attention<bf16>(Path::widened); }
TEST(AttentionLowpTest, F16MatchesFp32) { check_attention<f16>(Path::dispatch); }

}  // namespace
}  // namespace loom
