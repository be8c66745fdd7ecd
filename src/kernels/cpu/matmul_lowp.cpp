#include "kernels/cpu/matmul_lowp.h"

#include <dnnl.hpp>
#include <algorithm>
#include <map>
#include <type_traits>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/check.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/isa.h"

namespace loom::cpu {

using dnnl::memory;

namespace {
struct Key {
  int64_t M, N, K;
  bool trans_a, trans_b, bias, accumulate, bf16_out;
  auto tie() const { return std::tie(M, N, K, trans_a, trans_b, bias, accumulate, bf16_out); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};
// A primitive with its memory objects made once; each call swaps pointers.
struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  std::string impl;
  memory a, b, c, bias, scratchpad;
  std::unordered_map<int, memory> args;
};
}  // namespace

struct LowpMatmulEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
  std::vector<uint8_t> scratch_bytes;  // shared: primitives run one at a time

  Entry& get(const Key& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    const auto bf16 = memory::data_type::bf16, f32 = memory::data_type::f32;
    // Strides express the transposes: no data is copied by us.
    memory::desc a_md({k.M, k.K}, bf16, k.trans_a ? memory::dims{1, k.M} : memory::dims{k.K, 1});
    memory::desc b_md({k.K, k.N}, bf16, k.trans_b ? memory::dims{1, k.K} : memory::dims{k.N, 1});
    memory::desc c_md({k.M, k.N}, k.bf16_out ? bf16 : f32, memory::dims{k.N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (k.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd;
    if (k.bias) {
      memory::desc bias_md({1, k.N}, f32, memory::dims{k.N, 1});
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, engine);
    } else {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    }
    Entry e{pd, dnnl::matmul(pd), pd.impl_info_str(), {}, {}, {}, {}, {}, {}};
    e.a = memory(pd.src_desc(), engine, nullptr);
    e.b = memory(pd.weights_desc(), engine, nullptr);
    e.c = memory(pd.dst_desc(), engine, nullptr);
    e.scratchpad = memory(pd.scratchpad_desc(), engine, nullptr);
    e.args = {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}, {DNNL_ARG_SCRATCHPAD, e.scratchpad}};
    if (k.bias) {
      e.bias = memory(pd.bias_desc(), engine, nullptr);
      e.args.emplace(DNNL_ARG_BIAS, e.bias);
    }
    size_t need = pd.scratchpad_desc().get_size();
    if (need > scratch_bytes.size()) scratch_bytes.resize(need);
    return cache.emplace(k, std::move(e)).first->second;
  }

  void run(const Key& k, void* c, const void* a, const void* b, const float* bias) {
    Entry& e = get(k);
    e.a.set_data_handle(const_cast<void*>(a));
    e.b.set_data_handle(const_cast<void*>(b));
    e.c.set_data_handle(c);
    if (bias) e.bias.set_data_handle(const_cast<float*>(bias));
    e.scratchpad.set_data_handle(scratch_bytes.data());
    e.prim.execute(stream, e.args);
    stream.wait();
  }
};

namespace {

// dst[rows, cols] (packed) = rows [r0, r0 + rows), columns [c0, c0 + cols) of
// a row-major 16-bit matrix with row stride ld, widened exactly.
template <class H>
void widen_block(float* dst, const H* src, int64_t ld, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t(1) << 15))
  for (int64_t r = 0; r < rows; r++) widen(dst + r * cols, src + (r0 + r) * ld + c0, size_t(cols));
}

// The tile size that cuts n into the fewest tiles of at most max, evenly.
int64_t tile_size(int64_t n, int64_t max) {
  const int64_t count = (n + max - 1) / max;
  return count > 0 ? (n + count - 1) / count : 0;
}

float* grown(std::vector<float>& buf, int64_t n) {
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}

// dbias[OC] += column sums of dout[N,OC] in fp32, parallel over output
// features so the order is fixed (the fp32 layer's loop, on widened rows).
template <class H>
void bias_backward(float* dbias, const H* dout, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int o0 = 0; o0 < OC; o0 += 64) {
    const int o1 = o0 + 64 < OC ? o0 + 64 : OC;
    float acc[64] = {0}, row[64];
    for (int n = 0; n < N; n++) {
      widen(row, dout + int64_t(n) * OC + o0, size_t(o1 - o0));
#pragma omp simd
      for (int o = 0; o < o1 - o0; o++) acc[o] += row[o];
    }
    for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
  }
}

}  // namespace

LowpMatmulEngine::LowpMatmulEngine(Bf16Path bf16)
    : impl_(std::make_unique<Impl>()),
      bf16_native_(bf16 == Bf16Path::native || (bf16 == Bf16Path::automatic && native_bf16_products())) {
  LOOM_USER_CHECK(bf16 != Bf16Path::native || native_bf16_products(),
                  "native bf16 products need avx512_bf16; the kernels run at %s", isa_name(kernel_isa()));
}
LowpMatmulEngine::~LowpMatmulEngine() = default;

// Panel by panel: for each [mt, nt] block of C, sum over K in
// kt steps the product of the widened A and B panels on the fp32 engine. A
// 16-bit C is summed in an fp32 panel and rounded once at the end. A panel
// still holding the block it needs is not widened again: with one K step,
// taking C's blocks row by row widens each A panel once (and B once if C has
// one column of blocks), column by column the reverse; the order that widens
// fewer elements is taken (the head's dW: its vocabulary rows of the
// gradient once, the activations once).
template <class H, class Out>
void LowpMatmulEngine::widened_gemm(Out* c, const H* a, const H* b, const float* bias, int64_t M, int64_t N,
                                    int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  constexpr bool fp32_out = std::is_same_v<Out, float>;
  const int64_t mt = tile_size(M, kPanelM), nt = tile_size(N, kPanelN), kt = tile_size(K, kPanelK);
  float* pa = grown(panel_a_, mt * kt);
  float* pb = grown(panel_b_, kt * nt);
  float* pc = fp32_out ? nullptr : grown(panel_c_, mt * nt);
  // Elements widened in all, blocks of C taken row by row or column by
  // column (a panel is reused only while the next block needs the same one).
  const int64_t tiles_m = (M + mt - 1) / mt, tiles_n = (N + nt - 1) / nt, one_k = K <= kt;
  const int64_t by_rows = M * K * (one_k ? 1 : tiles_n) + K * N * (tiles_n == 1 && one_k ? 1 : tiles_m);
  const int64_t by_columns = K * N * (one_k ? 1 : tiles_m) + M * K * (tiles_m == 1 && one_k ? 1 : tiles_n);
  const bool rows_outer = by_rows <= by_columns;
  int64_t a_at[2] = {-1, -1}, b_at[2] = {-1, -1};  // (row, k) of A's panel, (k, column) of B's
  for (int64_t outer = 0; outer < (rows_outer ? tiles_m : tiles_n); outer++) {
    for (int64_t inner = 0; inner < (rows_outer ? tiles_n : tiles_m); inner++) {
      const int64_t m0 = (rows_outer ? outer : inner) * mt, n0 = (rows_outer ? inner : outer) * nt;
      const int64_t m = std::min(mt, M - m0), n = std::min(nt, N - n0);
      for (int64_t k0 = 0; k0 < K; k0 += kt) {
        const int64_t k = std::min(kt, K - k0);
        // The panels keep the stored layout, so the transposes carry over.
        if (a_at[0] != m0 || a_at[1] != k0) {
          if (trans_a) widen_block(pa, a, M, k0, k, m0, m);  // [k, m]
          else widen_block(pa, a, K, m0, m, k0, k);          // [m, k]
          a_at[0] = m0, a_at[1] = k0;
        }
        if (b_at[0] != k0 || b_at[1] != n0) {
          if (trans_b) widen_block(pb, b, K, n0, n, k0, k);  // [n, k]
          else widen_block(pb, b, N, k0, k, n0, n);          // [k, n]
          b_at[0] = k0, b_at[1] = n0;
        }
        const float* bias_panel = (bias && k0 == 0) ? bias + n0 : nullptr;
        if constexpr (fp32_out) {
          fp32_.gemm(c + m0 * N + n0, pa, pb, bias_panel, m, n, k, trans_a, trans_b, accumulate || k0 > 0, N);
        } else {
          fp32_.gemm(pc, pa, pb, bias_panel, m, n, k, trans_a, trans_b, k0 > 0);
        }
      }
      if constexpr (!fp32_out) {
#pragma omp parallel for schedule(static) if (m * n >= (int64_t(1) << 15))
        for (int64_t r = 0; r < m; r++) narrow(c + (m0 + r) * N + n0, pc + r * n, size_t(n));
      }
    }
  }
}

void LowpMatmulEngine::gemm(float* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N,
                            int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  if (bf16_native_) impl_->run(Key{M, N, K, trans_a, trans_b, bias != nullptr, accumulate, false}, c, a, b, bias);
  else widened_gemm(c, a, b, bias, M, N, K, trans_a, trans_b, accumulate);
}

void LowpMatmulEngine::gemm(bf16* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N,
                            int64_t K, bool trans_a, bool trans_b) {
  if (bf16_native_) impl_->run(Key{M, N, K, trans_a, trans_b, bias != nullptr, false, true}, c, a, b, bias);
  else widened_gemm(c, a, b, bias, M, N, K, trans_a, trans_b, false);
}

void LowpMatmulEngine::gemm(float* c, const f16* a, const f16* b, const float* bias, int64_t M, int64_t N,
                            int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  widened_gemm(c, a, b, bias, M, N, K, trans_a, trans_b, accumulate);
}

void LowpMatmulEngine::gemm(f16* c, const f16* a, const f16* b, const float* bias, int64_t M, int64_t N, int64_t K,
                            bool trans_a, bool trans_b) {
  widened_gemm(c, a, b, bias, M, N, K, trans_a, trans_b, false);
}

std::string LowpMatmulEngine::implementation(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool bias,
                                             bool accumulate, bool bf16_out) {
  if (bf16_native_) return impl_->get(Key{M, N, K, trans_a, trans_b, bias, accumulate, bf16_out}).impl;
  const int64_t mt = tile_size(M, kPanelM), nt = tile_size(N, kPanelN), kt = tile_size(K, kPanelK);
  return std::string("widened to fp32, ") +
         fp32_.implementation(mt, nt, kt, trans_a, trans_b, bias, accumulate && !bf16_out);
}

void matmul_forward(LowpMatmulEngine& eng, float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true, /*accumulate=*/false);
}
void matmul_forward(LowpMatmulEngine& eng, float* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true, /*accumulate=*/false);
}
void matmul_forward(LowpMatmulEngine& eng, bf16* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true);
}
void matmul_forward(LowpMatmulEngine& eng, f16* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true);
}

template <class H>
void lowp_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const H* dout, const H* inp,
                   const H* weight, int N, int C, int OC) {
  // dinp[N,C] = dout[N,OC] @ weight[OC,C]
  if (dinp) eng.gemm(dinp, dout, weight, nullptr, N, C, OC, false, false, false);
  // dweight[OC,C] += dout[N,OC]^T @ inp[N,C]
  if (dweight) eng.gemm(dweight, dout, inp, nullptr, OC, C, N, /*trans_a=*/true, false, /*accumulate=*/true);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC) {
  lowp_backward(eng, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const f16* dout,
                     const f16* inp, const f16* weight, int N, int C, int OC) {
  lowp_backward(eng, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

}  // namespace loom::cpu
