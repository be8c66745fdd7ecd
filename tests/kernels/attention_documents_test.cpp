// Packed rows (issue 37): several documents in one row, none attending to
// another. Every attention kernel given the rows' document starts computes,
// for each document, what it computes on that document alone as its own
// row: outputs and every input gradient (fp32 within 1e-5; 16-bit storage
// within a rounding of the 16-bit type). Documents cross the 64-row tiles,
// and a document of one token is among them.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/attention_tiled.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/isa.h"

namespace loom::cpu {
namespace {

struct Shape {
  int NH, NKV, hs;
  std::vector<std::vector<int>> rows;  // document lengths per row (each row sums to T)
  int B() const { return int(rows.size()); }
  int T() const {
    int t = 0;
    for (int len : rows[0]) t += len;
    return t;
  }
  int C() const { return NH * hs; }
  int width() const { return C() + 2 * NKV * hs; }
};

// out[B,T,C] and dqkv[B,T,width] of one kernel, in fp32, from fp32 qkv and dout.
struct Result {
  std::vector<float> out, dqkv;
};
using Kernel = std::function<Result(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                                    int C, int NH, int NKV, const int32_t* doc)>;

Result materialized_fp32(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int C, int NH,
                         int NKV, const int32_t* doc) {
  Result r{std::vector<float>(dout.size()), std::vector<float>(qkv.size())};
  std::vector<float> att(size_t(B) * NH * T * T), scratch(att.size());
  attention_forward(r.out.data(), att.data(), qkv.data(), B, T, C, NH, NKV, doc);
  attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, NKV);
  return r;
}

Result tiled_fp32(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int C, int NH, int NKV,
                  const int32_t* doc) {
  Result r{std::vector<float>(dout.size()), std::vector<float>(qkv.size())};
  std::vector<float> work(attention_tiled_work_floats(omp_get_max_threads())), lse(size_t(B) * NH * T);
  attention_tiled_forward(r.out.data(), lse.data(), qkv.data(), work.data(), B, T, C, NH, NKV, doc);
  attention_tiled_backward(r.dqkv.data(), work.data(), dout.data(), qkv.data(), r.out.data(), lse.data(), B, T, C, NH,
                           NKV, doc);
  return r;
}

// 16-bit storage: qkv rounded to H, results widened back.
template <class H, bool kTiled>
Result lowp(const std::vector<float>& qkv32, const std::vector<float>& dout, int B, int T, int C, int NH, int NKV,
            const int32_t* doc) {
  std::vector<H> qkv(qkv32.size()), out(dout.size()), dqkv(qkv32.size());
  narrow(qkv.data(), qkv32.data(), qkv.size());
  if constexpr (kTiled) {
    std::vector<float> work(attention_tiled_work_floats(omp_get_max_threads())), lse(size_t(B) * NH * T);
    std::vector<float> wide(attention_tiled_wide_floats(B, T, C, NH, NKV));
    attention_tiled_forward(out.data(), lse.data(), qkv.data(), wide.data(), work.data(), B, T, C, NH, NKV, doc);
    attention_tiled_backward(dqkv.data(), wide.data(), work.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                             B, T, C, NH, NKV, doc);
  } else {
    std::vector<float> work(attention_lowp_work_floats(T, C, NH, NKV));
    std::vector<H> att(size_t(B) * NH * T * T);
    std::vector<float> scratch(att.size());
    attention_forward(out.data(), att.data(), qkv.data(), work.data(), B, T, C, NH, NKV, doc);
    attention_backward(dqkv.data(), scratch.data(), work.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH,
                       NKV);
  }
  Result r{std::vector<float>(dout.size()), std::vector<float>(qkv.size())};
  widen(r.out.data(), out.data(), out.size());
  widen(r.dqkv.data(), dqkv.data(), dqkv.size());
  return r;
}

// Runs `kernel` on the packed rows and on each document alone; the largest
// difference, relative to the largest magnitude of each result.
void expect_documents_apart(const Kernel& kernel, const Shape& s, double tol) {
  const int B = s.B(), T = s.T(), C = s.C(), W = s.width();
  std::mt19937 rng(uint32_t(T * 7 + s.NKV));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> qkv(size_t(B) * T * W), dout(size_t(B) * T * C);
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  std::vector<int32_t> doc(size_t(B) * T);
  for (int b = 0; b < B; b++) {
    int start = 0;
    for (int len : s.rows[size_t(b)]) {
      for (int i = 0; i < len; i++) doc[size_t(b) * T + start + i] = start;
      start += len;
    }
    ASSERT_EQ(start, T) << "row " << b;
  }
  const Result packed = kernel(qkv, dout, B, T, C, s.NH, s.NKV, doc.data());
  double worst_out = 0, worst_grad = 0, max_out = 0, max_grad = 0;
  for (int b = 0; b < B; b++) {
    int start = 0;
    for (int len : s.rows[size_t(b)]) {
      const size_t q0 = (size_t(b) * T + start) * W, o0 = (size_t(b) * T + start) * C;
      const std::vector<float> q1(qkv.begin() + long(q0), qkv.begin() + long(q0 + size_t(len) * W));
      const std::vector<float> d1(dout.begin() + long(o0), dout.begin() + long(o0 + size_t(len) * C));
      const Result alone = kernel(q1, d1, 1, len, C, s.NH, s.NKV, nullptr);
      for (size_t i = 0; i < alone.out.size(); i++) {
        worst_out = std::max(worst_out, std::abs(double(alone.out[i]) - packed.out[o0 + i]));
        max_out = std::max(max_out, std::abs(double(alone.out[i])));
      }
      for (size_t i = 0; i < alone.dqkv.size(); i++) {
        worst_grad = std::max(worst_grad, std::abs(double(alone.dqkv[i]) - packed.dqkv[q0 + i]));
        max_grad = std::max(max_grad, std::abs(double(alone.dqkv[i])));
      }
      start += len;
    }
  }
  EXPECT_LE(worst_out, tol * max_out) << "output";
  EXPECT_LE(worst_grad, tol * max_grad) << "input gradient";
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {4, 4, 16, {{37, 70, 1, 52}, {160}}},          // multi-head; crossing the 64-row tiles
      {4, 2, 8, {{100, 60}, {1, 1, 150, 8}}},        // grouped-query
      {2, 1, 32, {{64, 64, 2}, {20, 20, 20, 20, 50}}},  // multi-query; a document on a tile boundary
  };
  return s;
}

void expect_all_shapes(const Kernel& kernel, double tol) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE("T " + std::to_string(s.T()) + " NH " + std::to_string(s.NH) + " NKV " + std::to_string(s.NKV));
    expect_documents_apart(kernel, s, tol);
  }
}

TEST(AttentionDocuments, MaterializedFp32KeepsDocumentsApart) { expect_all_shapes(materialized_fp32, 1e-5); }

TEST(AttentionDocuments, TiledFp32KeepsDocumentsApart) { expect_all_shapes(tiled_fp32, 1e-5); }

// 16-bit: the same scores may round to a neighbouring 16-bit value when the
// products are blocked differently, so the bound is a few of its roundings.
TEST(AttentionDocuments, MaterializedSixteenBitKeepsDocumentsApart) {
  expect_all_shapes(lowp<bf16, false>, 3e-2);
  expect_all_shapes(lowp<f16, false>, 4e-3);
}

TEST(AttentionDocuments, TiledSixteenBitKeepsDocumentsApart) {
  expect_all_shapes(lowp<bf16, true>, 3e-2);
  expect_all_shapes(lowp<f16, true>, 4e-3);
}

// A row whose documents are all one token long attends each token to itself
// alone: the output is the token's own value vector.
TEST(AttentionDocuments, OneTokenDocumentsSeeOnlyThemselves) {
  const int T = 70, NH = 2, NKV = 2, hs = 8, C = NH * hs, W = C + 2 * NKV * hs;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> qkv(size_t(T) * W), dout(size_t(T) * C);
  for (float& x : qkv) x = normal(rng);
  std::vector<int32_t> doc(T);
  for (int t = 0; t < T; t++) doc[size_t(t)] = t;
  for (const Kernel& k : {Kernel(materialized_fp32), Kernel(tiled_fp32)}) {
    const Result r = k(qkv, dout, 1, T, C, NH, NKV, doc.data());
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++)
        for (int d = 0; d < hs; d++)
          ASSERT_FLOAT_EQ(r.out[size_t(t) * C + h * hs + d], qkv[size_t(t) * W + C + NKV * hs + h * hs + d])
              << "t " << t << " h " << h;
  }
}

}  // namespace
}  // namespace loom::cpu
