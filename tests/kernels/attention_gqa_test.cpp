// Grouped-query causal attention (NKV < NH kv heads; NKV = 1: multi-query):
// the fp32 kernel vs the double reference, the reference's backward vs
// finite differences, GQA vs multi-head attention on the kv heads repeated
// (the kv gradient of GQA is the sum over the repeated heads'), and the
// 16-bit kernels vs the fp32 one on the same, widened, inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/attention.h"
#include "test_util.h"

namespace loom {
namespace {

using test::all_close;
using test::random_vec;
using test::widen_vec;

struct Shape {
  int B, T, C, NH, NKV;
  int hs() const { return C / NH; }
  int row() const { return C + 2 * NKV * hs(); }  // qkv row: NH query, NKV key, NKV value heads
  size_t nqkv() const { return size_t(B) * T * row(); }
  size_t nout() const { return size_t(B) * T * C; }
  size_t natt() const { return size_t(B) * NH * T * T; }
  Shape mha() const { return {B, T, C, NH, NH}; }
};

testing::Message describe(const Shape& s) {
  return testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH << " NKV=" << s.NKV;
}

// hs = 12, 16, 16, 16, 4, 32; query heads per kv head 2, 3, 2, 4, 2, 2;
// T below, around and above the 64-row tile.
const Shape kGqaShapes[] = {{2, 37, 48, 4, 2}, {1, 100, 96, 6, 2}, {2, 70, 64, 4, 2}, {1, 130, 128, 8, 2}};
// NKV = 1: one kv head for all query heads.
const Shape kMqaShapes[] = {{2, 70, 64, 4, 1}, {1, 1, 8, 2, 1}, {2, 65, 64, 2, 1}};

// The same batch for multi-head attention: kv head h / group repeated as
// kv head h. [B,T,row] -> [B,T,3C]
template <class F>
std::vector<F> repeat_kv(const std::vector<F>& qkv, const Shape& s) {
  const int hs = s.hs(), group = s.NH / s.NKV;
  std::vector<F> r(s.mha().nqkv());
  for (size_t bt = 0; bt < size_t(s.B) * s.T; bt++) {
    const F* x = &qkv[bt * s.row()];
    F* y = &r[bt * 3 * s.C];
    for (int c = 0; c < s.C; c++) y[c] = x[c];
    for (int h = 0; h < s.NH; h++)
      for (int part = 1; part <= 2; part++)  // key, value
        for (int d = 0; d < hs; d++) y[part * s.C + h * hs + d] = x[s.C + ((part - 1) * s.NKV + h / group) * hs + d];
  }
  return r;
}

// The adjoint of repeat_kv: the multi-head gradient [B,T,3C] folded back to
// the GQA layout, each kv head's gradient summed (in double) over its heads.
template <class F>
std::vector<double> fold_kv(const std::vector<F>& dqkv, const Shape& s) {
  const int hs = s.hs(), group = s.NH / s.NKV;
  std::vector<double> r(s.nqkv(), 0.0);
  for (size_t bt = 0; bt < size_t(s.B) * s.T; bt++) {
    const F* x = &dqkv[bt * 3 * s.C];
    double* y = &r[bt * s.row()];
    for (int c = 0; c < s.C; c++) y[c] = x[c];
    for (int h = 0; h < s.NH; h++)
      for (int part = 1; part <= 2; part++)
        for (int d = 0; d < hs; d++) y[s.C + ((part - 1) * s.NKV + h / group) * hs + d] += x[part * s.C + h * hs + d];
  }
  return r;
}

struct Fp32Run {
  std::vector<float> out, att, dqkv;
};

// The fp32 kernel, forward and backward, with `threads` OpenMP threads;
// outputs and scratch start as NaN: the kernel must overwrite, not read them.
Fp32Run run_fp32(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout, int threads = 2) {
  test::ScopedThreads scoped(threads);
  const float nan = std::nanf("");
  Fp32Run r{std::vector<float>(s.nout(), nan), std::vector<float>(s.natt(), nan), std::vector<float>(s.nqkv(), nan)};
  std::vector<float> scratch(s.natt(), nan);
  cpu::attention_forward(r.out.data(), r.att.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
  cpu::attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.att.data(), s.B, s.T, s.C, s.NH,
                          s.NKV);
  return r;
}

void check_fp32_vs_reference(const Shape& s) {
  SCOPED_TRACE(describe(s));
  // Range 2 makes the softmax peaky enough to matter.
  const auto qkv = random_vec<float>(s.nqkv(), 1, -2, 2), dout = random_vec<float>(s.nout(), 2);
  const Fp32Run r = run_fp32(s, qkv, dout);

  const auto qkv_d = test::cast_vec<double>(qkv), dout_d = test::cast_vec<double>(dout);
  std::vector<double> out_d(s.nout()), att_d(s.natt()), dqkv_d(s.nqkv()), scr_d(s.natt());
  ref::attention_forward(out_d.data(), att_d.data(), qkv_d.data(), s.B, s.T, s.C, s.NH, s.NKV);
  ref::attention_backward(dqkv_d.data(), scr_d.data(), dout_d.data(), qkv_d.data(), att_d.data(), s.B, s.T, s.C, s.NH,
                          s.NKV);
  EXPECT_TRUE(all_close(r.out, out_d, 2e-6, 2e-6));
  EXPECT_TRUE(all_close(r.att, att_d, 2e-6, 2e-7));
  // A kv head sums NH / NKV heads' contributions: a little more rounding.
  EXPECT_TRUE(all_close(r.dqkv, dqkv_d, 1e-5, 1e-5));

  // One, two or three threads: the same bits.
  for (int threads : {1, 3}) {
    const Fp32Run r2 = run_fp32(s, qkv, dout, threads);
    EXPECT_TRUE(test::bitwise_equal(r2.out, r.out)) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(r2.att, r.att)) << threads << " threads";
    EXPECT_TRUE(test::bitwise_equal(r2.dqkv, r.dqkv)) << threads << " threads";
  }
}

TEST(AttentionGqaTest, GroupedQueryMatchesReference) {
  for (const Shape& s : kGqaShapes) check_fp32_vs_reference(s);
}

TEST(AttentionGqaTest, MultiQueryMatchesReference) {
  for (const Shape& s : kMqaShapes) check_fp32_vs_reference(s);
}

TEST(AttentionGqaTest, RefBackwardMatchesFiniteDifferences) {
  for (const Shape s : {Shape{2, 5, 12, 4, 2}, Shape{1, 6, 12, 4, 1}}) {  // hs = 3
    SCOPED_TRACE(describe(s));
    auto qkv = random_vec<double>(s.nqkv(), 3, -1.5, 1.5);
    const auto w = random_vec<double>(s.nout(), 4);  // loss = sum(out * w), so dout = w
    std::vector<double> out(s.nout()), att(s.natt()), scratch(s.natt()), dqkv(s.nqkv());
    auto loss = [&] {
      ref::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
      return test::weighted_sum(out, w);
    };
    loss();
    ref::attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, s.NKV);
    EXPECT_TRUE(test::check_fd(qkv, dqkv, loss));
    // q, k and v all receive gradient.
    const int hs = s.hs();
    for (int part = 0; part < 3; part++) {
      const int c0 = part == 0 ? 0 : s.C + (part - 1) * s.NKV * hs, width = part == 0 ? s.C : s.NKV * hs;
      double m = 0;
      for (size_t bt = 0; bt < size_t(s.B) * s.T; bt++)
        for (int c = c0; c < c0 + width; c++) m = std::max(m, std::abs(dqkv[bt * s.row() + c]));
      EXPECT_GT(m, 1e-3) << "part " << part;
    }
  }
}

// GQA is multi-head attention on the kv heads repeated: the same out, att and
// dq, and each kv head's gradient is the sum of its repeats'. For the
// reference in double (to rounding) and the fp32 kernel.
TEST(AttentionGqaTest, EqualsMhaWithRepeatedKvHeads) {
  for (const Shape& s : {kGqaShapes[0], kGqaShapes[1], kMqaShapes[0]}) {
    SCOPED_TRACE(describe(s));
    const Shape m = s.mha();
    const auto qkv = random_vec<double>(s.nqkv(), 5, -2, 2), dout = random_vec<double>(s.nout(), 6);
    const auto qkv_m = repeat_kv(qkv, s);

    std::vector<double> out(s.nout()), att(s.natt()), dqkv(s.nqkv()), scr(s.natt());
    std::vector<double> out_m(s.nout()), att_m(s.natt()), dqkv_m(m.nqkv());
    ref::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NKV);
    ref::attention_backward(dqkv.data(), scr.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH, s.NKV);
    ref::attention_forward(out_m.data(), att_m.data(), qkv_m.data(), s.B, s.T, s.C, s.NH);
    ref::attention_backward(dqkv_m.data(), scr.data(), dout.data(), qkv_m.data(), att_m.data(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(all_close(out, out_m, 1e-13, 1e-13));
    EXPECT_TRUE(all_close(att, att_m, 1e-13, 1e-13));
    EXPECT_TRUE(all_close(dqkv, fold_kv(dqkv_m, s), 1e-12, 1e-12));

    const auto qkv32 = test::cast_vec<float>(qkv), dout32 = test::cast_vec<float>(dout);
    const Fp32Run g = run_fp32(s, qkv32, dout32), h = run_fp32(m, repeat_kv(qkv32, s), dout32);
    EXPECT_TRUE(all_close(g.out, h.out, 1e-6, 1e-7));
    EXPECT_TRUE(all_close(g.att, h.att, 1e-6, 1e-8));
    EXPECT_TRUE(all_close(g.dqkv, fold_kv(h.dqkv, s), 1e-5, 1e-6));
  }
}

// ---- 16-bit storage ----

// ||a - b|| / ||b|| over columns [c0, c0 + w) of rows of width `row`.
double rel_err_cols(const std::vector<float>& a, const std::vector<double>& b, int row, int c0, int w) {
  double num = 0, den = 0;
  for (size_t base = 0; base < a.size(); base += row)
    for (size_t i = base + c0; i < base + c0 + w; i++) {
      num += (a[i] - b[i]) * (a[i] - b[i]);
      den += b[i] * b[i];
    }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);  // dq, dk at T = 1: exactly 0
}

// The errors allowed, as in attention_lowp_test.cpp: u is the unit roundoff;
// relative Frobenius errors against the fp32 kernel are a few u/2 (P, O and
// every gradient are rounded; native bf16 also rounds dO and dS), far below
// what a wrong head, index or missing term gives (O(1)).
template <class A>
struct Tol;
template <>
struct Tol<bf16> {
  static constexpr double u = 1.0 / 256, err = 1e-2;
};
template <>
struct Tol<f16> {
  static constexpr double u = 1.0 / 2048, err = 1e-3;
};

enum class Path { dispatch, native, widened };

template <class A>
struct LowpRun {
  std::vector<float> out, att, dqkv;  // widened
};

// Forward and backward on `path` with `threads` threads; outputs and work
// space start as NaN, and a guard zone after the work space must stay so.
template <class A>
LowpRun<A> run_lowp(Path path, const Shape& s, const std::vector<A>& qkv, const std::vector<float>& dout,
                    int threads = 2) {
  test::ScopedThreads scoped(threads);
  const float nan = std::nanf("");
  const A nan16{0x7fff};
  const size_t nwork = cpu::attention_lowp_work_floats(s.T, s.C, s.NH, s.NKV), guard = 1024;
  std::vector<float> work(nwork + guard, nan), scratch(s.natt(), nan);
  std::vector<A> out(s.nout(), nan16), att(s.natt(), nan16), dqkv(s.nqkv(), nan16);
  const int B = s.B, T = s.T, C = s.C, NH = s.NH, NKV = s.NKV;
  if constexpr (std::is_same_v<A, bf16>) {
    if (path == Path::native) {
      cpu::attention_forward_native(out.data(), att.data(), qkv.data(), work.data(), B, T, C, NH, NKV);
      cpu::attention_backward_native(dqkv.data(), scratch.data(), work.data(), dout.data(), qkv.data(), att.data(), B,
                                     T, C, NH, NKV);
    }
  }
  if (path == Path::widened) {
    cpu::attention_forward_widened(out.data(), att.data(), qkv.data(), work.data(), B, T, C, NH, NKV);
    cpu::attention_backward_widened(dqkv.data(), scratch.data(), work.data(), dout.data(), qkv.data(), att.data(), B,
                                    T, C, NH, NKV);
  } else if (path == Path::dispatch) {
    cpu::attention_forward(out.data(), att.data(), qkv.data(), work.data(), B, T, C, NH, NKV);
    cpu::attention_backward(dqkv.data(), scratch.data(), work.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                            NH, NKV);
  }
  for (size_t i = nwork; i < work.size(); i++) EXPECT_TRUE(std::isnan(work[i])) << "work overrun at " << i - nwork;
  return {widen_vec(out), widen_vec(att), widen_vec(dqkv)};
}

template <class A>
void check_lowp(Path path) {
  for (const Shape& s : {kGqaShapes[0], kGqaShapes[2], kGqaShapes[3], kMqaShapes[0], kMqaShapes[1]}) {
    SCOPED_TRACE(describe(s));
    const auto qkv = test::round_vec<A>(random_vec<float>(s.nqkv(), 7, -2, 2));
    const auto dout = random_vec<float>(s.nout(), 8);
    const LowpRun<A> r = run_lowp(path, s, qkv, dout);

    // Against the fp32 kernel on the widened inputs: P within a rounding,
    // exact zeros above the diagonal; O and the q, k, v gradients close.
    const Fp32Run f = run_fp32(s, widen_vec(qkv), dout);
    EXPECT_TRUE(all_close(r.att, f.att, Tol<A>::u, 1e-7));
    for (size_t bhi = 0; bhi < size_t(s.B) * s.NH * s.T; bhi++)
      for (int j = bhi % s.T + 1; j < s.T; j++) ASSERT_EQ(r.att[bhi * s.T + j], 0.0f) << "row " << bhi << " col " << j;
    EXPECT_LT(rel_err_cols(r.out, test::cast_vec<double>(f.out), s.C, 0, s.C), Tol<A>::err);
    const auto f_dqkv = test::cast_vec<double>(f.dqkv);
    const int kv = s.NKV * s.hs();
    EXPECT_LT(rel_err_cols(r.dqkv, f_dqkv, s.row(), 0, s.C), Tol<A>::err) << "dq";
    EXPECT_LT(rel_err_cols(r.dqkv, f_dqkv, s.row(), s.C, kv), Tol<A>::err) << "dk";
    EXPECT_LT(rel_err_cols(r.dqkv, f_dqkv, s.row(), s.C + kv, kv), Tol<A>::err) << "dv";

    // Against the same path on the kv heads repeated: the same P, O and dq
    // (up to an ulp where the products' sums differ by one near a rounding
    // tie), and dk, dv the sums of the repeats' (GQA rounds the fp32 sum once,
    // the repeats are rounded each).
    const LowpRun<A> m = run_lowp(path, s.mha(), repeat_kv(qkv, s), dout);
    EXPECT_TRUE(all_close(r.out, m.out, 2 * Tol<A>::u, 1e-7));
    EXPECT_TRUE(all_close(r.att, m.att, 2 * Tol<A>::u, 1e-7));
    const auto folded = fold_kv(m.dqkv, s);
    EXPECT_LT(rel_err_cols(r.dqkv, folded, s.row(), 0, s.C), Tol<A>::u) << "dq";
    EXPECT_LT(rel_err_cols(r.dqkv, folded, s.row(), s.C, 2 * kv), Tol<A>::err) << "dk, dv";

    // One thread or three: the same bits.
    for (int threads : {1, 3}) {
      const LowpRun<A> r2 = run_lowp(path, s, qkv, dout, threads);
      EXPECT_TRUE(test::bitwise_equal(r2.out, r.out)) << threads << " threads";
      EXPECT_TRUE(test::bitwise_equal(r2.att, r.att)) << threads << " threads";
      EXPECT_TRUE(test::bitwise_equal(r2.dqkv, r.dqkv)) << threads << " threads";
    }
  }
}

TEST(AttentionGqaTest, Bf16MatchesFp32) { check_lowp<bf16>(Path::dispatch); }
TEST(AttentionGqaTest, Bf16NativeMatchesFp32) {
  if (!cpu::native_bf16_products())
    GTEST_SKIP() << "native bf16 products need avx512_bf16; kernels run at " << cpu::isa_name(cpu::kernel_isa());
  check_lowp<bf16>(Path::native);
}
TEST(AttentionGqaTest, Bf16WidenedMatchesFp32) { check_lowp<bf16>(Path::widened); }
TEST(AttentionGqaTest, F16MatchesFp32) { check_lowp<f16>(Path::dispatch); }

}  // namespace
}  // namespace loom
