#include "kernels/cpu/matmul_lowp.h"

#include <dnnl.hpp>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/check.h"
#include "kernels/cpu/cast.h"

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

LowpMatmulEngine::LowpMatmulEngine() : impl_(std::make_unique<Impl>()) {}
LowpMatmulEngine::~LowpMatmulEngine() = default;

void LowpMatmulEngine::gemm(float* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N,
                            int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  impl_->run(Key{M, N, K, trans_a, trans_b, bias != nullptr, accumulate, false}, c, a, b, bias);
}

void LowpMatmulEngine::gemm(bf16* c, const bf16* a, const bf16* b, const float* bias, int64_t M, int64_t N,
                            int64_t K, bool trans_a, bool trans_b) {
  impl_->run(Key{M, N, K, trans_a, trans_b, bias != nullptr, false, true}, c, a, b, bias);
}

void LowpMatmulEngine::gemm(float* c, const f16* a, const f16* b, const float* bias, int64_t M, int64_t N,
                            int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  // Widening keeps the stored layout, so the transposes carry over.
  const float* a32 = widen(0, a, size_t(M) * size_t(K));
  const float* b32 = widen(1, b, size_t(K) * size_t(N));
  fp32_.gemm(c, a32, b32, bias, M, N, K, trans_a, trans_b, accumulate);
}

const char* LowpMatmulEngine::implementation(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool bias,
                                             bool accumulate, bool bf16_out) {
  return impl_->get(Key{M, N, K, trans_a, trans_b, bias, accumulate, bf16_out}).impl.c_str();
}

float* LowpMatmulEngine::widen(int slot, const f16* x, size_t n) {
  LOOM_CHECK(slot >= 0 && slot < 3, "widening slot %d", slot);
  std::vector<float>& buf = wide_[slot];
  if (buf.size() < n) buf.resize(n);
  cast_f16_to_f32(buf.data(), x, n);
  return buf.data();
}

float* LowpMatmulEngine::buffer(int slot, size_t n) {
  LOOM_CHECK(slot >= 0 && slot < 3, "widening slot %d", slot);
  std::vector<float>& buf = wide_[slot];
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

void matmul_forward(LowpMatmulEngine& eng, float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true, /*accumulate=*/false);
}

void matmul_forward(LowpMatmulEngine& eng, bf16* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true);
}

void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC) {
  // dinp[N,C] = dout[N,OC] @ weight[OC,C]
  if (dinp) eng.gemm(dinp, dout, weight, nullptr, N, C, OC, false, false, false);
  // dweight[OC,C] += dout[N,OC]^T @ inp[N,C]
  if (dweight) eng.gemm(dweight, dout, inp, nullptr, OC, C, N, /*trans_a=*/true, false, /*accumulate=*/true);
  if (dbias) {
    // Column sums in fp32, parallel over output features so the order is
    // fixed (the same loop as the fp32 matmul_backward).
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += 64) {
      const int o1 = o0 + 64 < OC ? o0 + 64 : OC;
      float acc[64] = {0};
      for (int n = 0; n < N; n++) {
        const bf16* row = dout + int64_t(n) * OC;
#pragma omp simd
        for (int o = o0; o < o1; o++) acc[o - o0] += bf16_to_float(row[o]);
      }
      for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
    }
  }
}

void matmul_forward(LowpMatmulEngine& eng, float* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true, /*accumulate=*/false);
}

void matmul_backward(LowpMatmulEngine& eng, float* dinp, float* dweight, float* dbias, const f16* dout,
                     const f16* inp, const f16* weight, int N, int C, int OC) {
  // Widen each operand once (dout feeds all three products), then run the
  // fp32 layer backward: its dbias loop gives the same sums as fp32 data.
  const float* dout32 = eng.widen(0, dout, size_t(N) * OC);
  const float* inp32 = dweight ? eng.widen(1, inp, size_t(N) * C) : nullptr;
  const float* weight32 = dinp ? eng.widen(2, weight, size_t(OC) * C) : nullptr;
  matmul_backward(eng.fp32(), dinp, dweight, dbias, dout32, inp32, weight32, N, C, OC);
}

void matmul_forward(LowpMatmulEngine& eng, f16* out, const f16* inp, const f16* weight, const float* bias, int N,
                    int C, int OC) {
  // Slots 0 and 1 hold the widened operands; slot 2 the fp32 product.
  float* product = eng.buffer(2, size_t(N) * OC);
  matmul_forward(eng, product, inp, weight, bias, N, C, OC);
  cast_f32_to_f16(out, product, size_t(N) * OC);
}

}  // namespace loom::cpu
