#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/isa.h"

namespace loom::cpu {

using dnnl::memory;

namespace {
constexpr int64_t kWideColumns = 1536, kColumnBlock = 768;

struct Key {
  int64_t M, N, K;
  bool trans_a, trans_b, bias, accumulate;
  int64_t ldb, ldc;
  auto tie() const { return std::tie(M, N, K, trans_a, trans_b, bias, accumulate, ldb, ldc); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};
// A primitive with its memory objects made once; each call only swaps the
// data pointers, so a training step allocates nothing here.
struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  std::string impl;
  memory a, b, c, bias, scratchpad;
  std::unordered_map<int, memory> args;
};
}  // namespace

struct MatmulEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
  // One scratchpad shared by all primitives (they run one at a time), grown
  // when a primitive that needs more is created.
  std::vector<uint8_t> scratch_bytes;
  const bool wide_in_blocks = kernel_isa() >= Isa::avx512;

  Entry& get(const Key& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    // Strides express the transposes: no data is copied by us.
    memory::desc a_md({k.M, k.K}, memory::data_type::f32,
                      k.trans_a ? memory::dims{1, k.M} : memory::dims{k.K, 1});
    memory::desc b_md({k.K, k.N}, memory::data_type::f32,
                      k.trans_b ? memory::dims{1, k.ldb} : memory::dims{k.ldb, 1});
    memory::desc c_md({k.M, k.N}, memory::data_type::f32, memory::dims{k.ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (k.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd;
    if (k.bias) {
      memory::desc bias_md({1, k.N}, memory::data_type::f32, memory::dims{k.N, 1});
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
};

MatmulEngine::MatmulEngine() : impl_(std::make_unique<Impl>()) {}
MatmulEngine::~MatmulEngine() = default;

void MatmulEngine::gemm(float* c, const float* a, const float* b, const float* bias, int64_t M, int64_t N,
                        int64_t K, bool trans_a, bool trans_b, bool accumulate, int64_t ldc, int64_t ldb) {
  // oneDNN 2.6's AVX-512 fp32 matmul runs a product whose B is untransposed
  // and wide (N >= 1536 columns: the MLP's down-projection backward) at
  // 35-45% of the FMA peak, and the same work as column blocks of at most 768
  // at 70-90% (bench/README.md, "Where the step's time goes"); its AVX2
  // kernels do not gain (3-7% slower on a capped Xeon), so they keep one call.
  // Each output element's sum over K stays within one block.
  if (impl_->wide_in_blocks && !trans_b && N >= kWideColumns && ldb <= 0 && ldc <= 0) {
    const int64_t blocks = (N + kColumnBlock - 1) / kColumnBlock;
    const int64_t nb = ((N + blocks - 1) / blocks + 15) / 16 * 16;
    for (int64_t j0 = 0; j0 < N; j0 += nb)
      gemm(c + j0, a, b + j0, bias ? bias + j0 : nullptr, M, std::min(nb, N - j0), K, trans_a, false, accumulate, N,
           N);
    return;
  }
  Key k{M, N, K, trans_a, trans_b, bias != nullptr, accumulate, ldb > 0 ? ldb : (trans_b ? K : N), ldc > 0 ? ldc : N};
  Entry& e = impl_->get(k);
  e.a.set_data_handle(const_cast<float*>(a));
  e.b.set_data_handle(const_cast<float*>(b));
  e.c.set_data_handle(c);
  if (bias) e.bias.set_data_handle(const_cast<float*>(bias));
  e.scratchpad.set_data_handle(impl_->scratch_bytes.data());
  e.prim.execute(impl_->stream, e.args);
  impl_->stream.wait();
}

const char* MatmulEngine::implementation(int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b, bool bias,
                                         bool accumulate) {
  return impl_->get(Key{M, N, K, trans_a, trans_b, bias, accumulate, trans_b ? K : N, N}).impl.c_str();
}

void matmul_forward(MatmulEngine& eng, float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  eng.gemm(out, inp, weight, bias, N, OC, C, /*trans_a=*/false, /*trans_b=*/true, /*accumulate=*/false);
}

void matmul_backward(MatmulEngine& eng, float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
  // dinp[N,C] = dout[N,OC] @ weight[OC,C]
  if (dinp) eng.gemm(dinp, dout, weight, nullptr, N, C, OC, false, false, false);
  // dweight[OC,C] += dout[N,OC]^T @ inp[N,C]
  if (dweight) eng.gemm(dweight, dout, inp, nullptr, OC, C, N, /*trans_a=*/true, false, /*accumulate=*/true);
  if (dbias) {
    // Column sums, parallel over output features so the order is fixed.
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += 64) {
      int o1 = o0 + 64 < OC ? o0 + 64 : OC;
      float acc[64] = {0};
      for (int n = 0; n < N; n++) {
        const float* row = dout + int64_t(n) * OC;
#pragma omp simd
        for (int o = o0; o < o1; o++) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
    }
  }
}

}  // namespace loom::cpu
