// Causal attention, forward + backward, at the GPT-2 124M shape (B=4, T=256,
// C=768, NH=12; T and B from the second and third arguments): fp32 kernel
// (kernels/cpu/attention) vs the 16-bit kernels (kernels/cpu/attention_lowp;
// bf16 runs natively, fp16 via fp32 sgemm) and the tiled kernels, fp32 and
// bf16 storage (kernels/cpu/attention_tiled: no T x T matrix kept), with the memory each
// keeps for backward. Medians over reps (default 20); fwd and bwd medians
// are separate, so they need not add up to the total.
// Usage: OMP_NUM_THREADS=2 build/bench/attention_bench [reps] [T] [B]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/attention_tiled.h"
#include "kernels/cpu/isa.h"

namespace {

using namespace loom;

// The 2 cores are shared: each rep runs every variant once, interleaved, and
// the table shows the median and the minimum over reps per variant.
struct Stat {
  std::vector<double> ms;
  double median() {
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
  double min() { return *std::min_element(ms.begin(), ms.end()); }
};

template <class Fn>
void time_ms(Stat& st, Fn fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  st.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

int main(int argc, char** argv) {
  loom::cpu::cap_isa(std::nullopt);  // LOOM_MAX_CPU_ISA, as for loom itself
  std::printf("%s\n", loom::cpu::describe_dispatch().line().c_str());
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const int T = argc > 2 ? std::max(1, std::atoi(argv[2])) : 256, B = argc > 3 ? std::max(1, std::atoi(argv[3])) : 4;
  const int C = 768, NH = 12;
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C, natt = size_t(B) * NH * T * T;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> qkv(nqkv), dout(nout), out(nout), att(natt), dqkv(nqkv), scratch(natt);
  for (auto& x : qkv) x = dist(gen);
  for (auto& x : dout) x = 0.5f * dist(gen);
  std::vector<bf16> qkv_b(nqkv), out_b(nout), att_b(natt), dqkv_b(nqkv);
  std::vector<f16> qkv_h(nqkv), out_h(nout), att_h(natt), dqkv_h(nqkv);
  for (size_t i = 0; i < nqkv; i++) qkv_b[i] = float_to_bf16(qkv[i]), qkv_h[i] = float_to_f16(qkv[i]);
  std::vector<float> work(cpu::attention_lowp_work_floats(T, C, NH));
  std::vector<float> out_t(nout), lse(size_t(B) * NH * T), dqkv_t(nqkv);
  std::vector<float> tiled_work(cpu::attention_tiled_work_floats(omp_get_max_threads()));
  std::vector<float> wide(cpu::attention_tiled_wide_floats(B, T, C, NH));  // tiled bf16's fp32 copies
  std::vector<bf16> out_tb(nout), dqkv_tb(nqkv);

  constexpr int kRows = 5;
  Stat fwd[kRows], bwd[kRows], tot[kRows];  // fp32, bf16, fp16, fp32 tiled, bf16 tiled
  for (int rep = -1; rep < reps; rep++) {  // rep -1: warm-up, not recorded
    Stat f[kRows], g[kRows];
    time_ms(f[0], [&] { cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH); });
    time_ms(g[0], [&] {
      cpu::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    });
    time_ms(f[1], [&] { cpu::attention_forward(out_b.data(), att_b.data(), qkv_b.data(), work.data(), B, T, C, NH); });
    time_ms(g[1], [&] {
      cpu::attention_backward(dqkv_b.data(), scratch.data(), work.data(), dout.data(), qkv_b.data(), att_b.data(), B,
                              T, C, NH);
    });
    time_ms(f[2], [&] { cpu::attention_forward(out_h.data(), att_h.data(), qkv_h.data(), work.data(), B, T, C, NH); });
    time_ms(g[2], [&] {
      cpu::attention_backward(dqkv_h.data(), scratch.data(), work.data(), dout.data(), qkv_h.data(), att_h.data(), B,
                              T, C, NH);
    });
    time_ms(f[3], [&] {
      cpu::attention_tiled_forward(out_t.data(), lse.data(), qkv.data(), tiled_work.data(), B, T, C, NH);
    });
    time_ms(g[3], [&] {
      cpu::attention_tiled_backward(dqkv_t.data(), tiled_work.data(), dout.data(), qkv.data(), out_t.data(),
                                    lse.data(), B, T, C, NH);
    });
    time_ms(f[4], [&] {
      cpu::attention_tiled_forward(out_tb.data(), lse.data(), qkv_b.data(), wide.data(), tiled_work.data(), B, T, C,
                                   NH);
    });
    time_ms(g[4], [&] {
      cpu::attention_tiled_backward(dqkv_tb.data(), wide.data(), tiled_work.data(), dout.data(), qkv_b.data(),
                                    out_tb.data(), lse.data(), B, T, C, NH);
    });
    if (rep < 0) continue;
    for (int i = 0; i < kRows; i++) {
      fwd[i].ms.push_back(f[i].ms[0]);
      bwd[i].ms.push_back(g[i].ms[0]);
      tot[i].ms.push_back(f[i].ms[0] + g[i].ms[0]);
    }
  }

  std::printf("attention fwd+bwd, B=%d T=%d C=%d NH=%d, %d threads, %d reps\n", B, T, C, NH, omp_get_max_threads(),
              reps);
  std::printf("%-6s %9s %9s %9s %9s  %-13s %s\n", "type", "fwd ms", "bwd ms", "total ms", "min ms",
              "fp32/this", "kept for backward (beside q/k/v and the output)");
  const char* names[kRows] = {"fp32", "bf16", "fp16", "tiled", "tiled16"};
  const double mib = 1024.0 * 1024.0;
  const double kept[kRows] = {4.0 * double(natt) / mib, 2.0 * double(natt) / mib, 2.0 * double(natt) / mib,
                              4.0 * double(lse.size()) / mib, 4.0 * double(lse.size()) / mib};
  for (int i = 0; i < kRows; i++)
    std::printf("%-6s %9.2f %9.2f %9.2f %9.2f  %.2fx %.2fx  %9.2f MiB%s\n", names[i], fwd[i].median(),
                bwd[i].median(), tot[i].median(), tot[i].min(), tot[0].median() / tot[i].median(),
                tot[0].min() / tot[i].min(), kept[i], i >= 3 ? " (row log-sum-exps)" : " (probabilities)");
  std::printf("tiled: fp32, work space %.2f MiB for %d threads; tiled16: bf16 storage, fp32 math on copies "
              "(%.2f MiB, shared by every layer)\n",
              4.0 * double(tiled_work.size()) / mib, omp_get_max_threads(), 4.0 * double(wide.size()) / mib);
  return 0;
}
