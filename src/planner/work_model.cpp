#include "planner/work_model.h"

#include <string>
#include <vector>

#include <algorithm>
#include <cmath>

namespace loom::planner {

DeviceRates device_rates(const ClusterSpec& c, ComputePrecision p, double cores) {
  DeviceRates d;
  d.peak = c.peak_flops(p) * cores;
  d.ceiling = c.matmul_efficiency;
  d.units = c.gemm_units;
  d.tile_m = std::max(1, c.gemm_tile_m), d.tile_n = std::max(1, c.gemm_tile_n);
  d.k_half = c.gemm_k_half, d.mn_half = c.gemm_mn_half;
  d.tiled_attention = c.tiled_attention_efficiency;
  d.bandwidth = c.memory_bandwidth * c.memory_efficiency * cores;
  d.gemm_bytes = p == ComputePrecision::fp32 ? 4 : 2;
  return d;
}

double gemm_efficiency(const DeviceRates& d, double m, double n, double k, double batch) {
  double eff = d.ceiling;
  if (d.units > 0) {
    // The output in tiles, the tiles in waves over the units: a last wave
    // that is partly empty and tiles that hang over the edge do no work. A
    // side shorter than the tile gets a tile its size (a multiple of 16:
    // libraries keep narrow kernels), and an output of fewer tiles than
    // units with a long reduction is split along K over the idle units
    // (split-K, each part at least 256 deep): LoRA's rank-r products.
    const double tm = std::min<double>(d.tile_m, 16 * std::ceil(m / 16)), tn = std::min<double>(d.tile_n, 16 * std::ceil(n / 16));
    double tiles = std::ceil(m / tm) * std::ceil(n / tn) * batch;
    const double split = std::max(1.0, std::min(std::floor(d.units / tiles), std::floor(k / 256)));
    tiles *= split, k /= split;
    const double waves = std::ceil(tiles / d.units);
    eff *= m * n * batch * split / (waves * d.units * tm * tn);
  }
  if (d.k_half > 0) eff *= k / (k + d.k_half);
  if (d.mn_half > 0) eff *= std::min(m, n) / (std::min(m, n) + d.mn_half);
  return eff;
}

double gemm_seconds(const DeviceRates& d, double m, double n, double k, double batch) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  const double compute = 2 * m * n * k * batch / (d.peak * gemm_efficiency(d, m, n, k, batch));
  // Each operand read once and the output written once, at best.
  const double traffic = (m * k + k * n + m * n) * batch * d.gemm_bytes / d.bandwidth;
  return std::max(compute, traffic);
}

namespace {

// A weight product Y[rows, out] = X[rows, in] W^T: forward, then backward's
// dX = dY W (rows x in x out) and dW = dY^T X (out x in x rows).
void add_linear(PassSeconds& s, const DeviceRates& d, double rows, double out, double in) {
  s.forward += gemm_seconds(d, rows, out, in);
  s.backward_input += gemm_seconds(d, rows, in, out);
  s.backward_weight += gemm_seconds(d, out, in, rows);
}

// A LoRA adapter of rank r on a product [out, in] (this rank's widths), as
// model/lora/lora_product.cpp runs it: forward u = x A^T, y += s u B^T;
// backward du = s dy B, dx += du A, dA += du^T x, dB += s dy^T u with u
// recomputed. The engine computes the factors' gradients with the input
// gradient (model/lora/lora_block.h), so all of it is backward_input.
void add_adapter(PassSeconds& s, const DeviceRates& d, double rows, double out, double in, double r) {
  s.forward += gemm_seconds(d, rows, r, in) + gemm_seconds(d, rows, out, r);
  s.backward_input += gemm_seconds(d, rows, r, out) + gemm_seconds(d, rows, in, r) + gemm_seconds(d, r, in, rows) +
                      gemm_seconds(d, rows, r, in) + gemm_seconds(d, out, r, rows);
}

// Backward of the memory-bound kernels: each reads what it saved and the
// incoming gradient and writes one gradient, about 1.5 x its forward traffic
// (a norm, an activation, a softmax: 3 tensors against 2).
constexpr double kBackwardTraffic = 1.5;

}  // namespace

PassSeconds block_seconds(const BlockShape& b, const DeviceRates& d) {
  const ModelConfig& m = b.model;
  const double t = b.tp, h = m.d_model, hd = m.head_dim(), F = m.ffn(), e = b.act_bytes;
  const double s_q = double(m.seq_len) / b.cp, s_k = m.seq_len;
  const double rows = b.sequences * s_q;                       // tokens on this rank
  const double rows_rep = b.seq_parallel && b.tp > 1 ? rows / t : rows;  // rows of norms and residuals
  const double heads = double(m.n_head) / t, kv = double(m.kv_heads()) / t;
  PassSeconds s;
  // The weight products, as the engine runs them (fused q/k/v; LLaMA's gate
  // and up fused).
  add_linear(s, d, rows, (heads + 2 * kv) * hd, h);
  add_linear(s, d, rows, h, heads * hd);
  if (m.is_moe()) {
    // Dense and MoE blocks mixed by moe_every. An MoE block: the router
    // (rows x E x h, fp32) and each expert's gate/up and down over its share
    // of the rows x k pairs (balanced: rows k / E each, E products), its
    // width split over tp; the permute, combine and SwiGLU by their bytes.
    const double f = 1.0 / m.moe_every, E = m.n_experts, k = m.top_k, Fe = m.expert_ffn();
    PassSeconds dense, moe;
    add_linear(dense, d, rows, 2 * F / t, h);
    add_linear(dense, d, rows, h, F / t);
    DeviceRates router = d;
    router.gemm_bytes = 4;
    add_linear(moe, router, rows, E, h);
    const double pairs = rows * k / E;
    moe.forward += gemm_seconds(d, pairs, 2 * Fe / t, h, E) + gemm_seconds(d, pairs, h, Fe / t, E);
    moe.backward_input += gemm_seconds(d, pairs, h, 2 * Fe / t, E) + gemm_seconds(d, pairs, Fe / t, h, E);
    moe.backward_weight += gemm_seconds(d, 2 * Fe / t, h, pairs, E) + gemm_seconds(d, h, Fe / t, pairs, E);
    const double bytes = rows * k * (2 * h * b.act_bytes + 3 * Fe / t * b.act_bytes + 4 * h) / d.bandwidth;
    moe.forward += bytes, moe.backward_input += kBackwardTraffic * bytes;
    s.forward += (1 - f) * dense.forward + f * moe.forward;
    s.backward_input += (1 - f) * dense.backward_input + f * moe.backward_input;
    s.backward_weight += (1 - f) * dense.backward_weight + f * moe.backward_weight;
  } else if (m.is_llama()) {
    add_linear(s, d, rows, 2 * F / t, h);
    add_linear(s, d, rows, h, F / t);
  } else {
    add_linear(s, d, rows, F / t, h);
    add_linear(s, d, rows, h, F / t);
  }
  if (m.lora.enabled()) {
    // The frozen base computes no weight gradient; each target's adapter
    // (column products: B split over tp; row products: A split).
    s.backward_weight = 0;
    for (const BlockLinear& l : adapted_linears(m))
      add_adapter(s, d, rows, l.column ? double(l.out) / t : double(l.out), l.column ? double(l.in) : double(l.in) / t,
                  m.lora.rank);
  }
  // The attention core over sequences x heads: scores S = Q K^T [s_q, s_k]
  // (K = head_dim) and context P V [s_q, hd] (K = s_k). Materialized: whole
  // score matrices written, softmaxed and read back; backward two products
  // each. Tiled: causal tiles only (half), nothing s^2 in memory, and the
  // backward recomputes the scores.
  const double batch = b.sequences * heads;
  const bool tiled = m.tiled_attention(m.seq_len, b.cp);
  const double kcols = tiled ? s_k / 2 : s_k;  // key columns worked per query
  double attn_f = gemm_seconds(d, s_q, kcols, hd, batch) + gemm_seconds(d, s_q, hd, kcols, batch);
  double attn_b = 2 * attn_f + (tiled ? gemm_seconds(d, s_q, kcols, hd, batch) : 0);
  if (tiled && d.tiled_attention > 0) {
    // A measured kernel: its causal FLOPs (forward two products, backward
    // five with the recomputed scores) at its measured share of peak.
    attn_f = 4 * s_q * kcols * hd * batch / (d.peak * d.tiled_attention);
    attn_b = 2.5 * attn_f;
  }
  double bytes_f = 0;
  if (!tiled) {
    const double scores = batch * s_q * s_k;
    bytes_f += 2 * scores * e;                            // softmax: read scores, write probabilities
    if (b.dropout) bytes_f += (2 * e + 1) * scores;       // attention dropout (1-byte mask)
  }
  if (m.is_llama()) bytes_f += 2 * rows * (heads + kv) * hd * e;  // rope on q and k
  // Two norms, two residual adds, the MLP's activation.
  bytes_f += 2 * 2 * rows_rep * h * e + 2 * 3 * rows_rep * h * e;
  if (!m.is_moe()) bytes_f += m.is_llama() ? 3 * rows * F / t * e : 2 * rows * F / t * e;
  if (b.dropout) bytes_f += 2 * (2 * e + 1) * rows_rep * h;
  const double mem_f = bytes_f / d.bandwidth;
  s.attention_forward = attn_f + (tiled ? 0 : 2 * batch * s_q * s_k * e / d.bandwidth);
  s.forward += attn_f + mem_f;
  s.backward_input += attn_b + kBackwardTraffic * mem_f;
  return s;
}

PassSeconds head_seconds(const BlockShape& b, const DeviceRates& d) {
  const ModelConfig& m = b.model;
  const double rows = b.sequences * double(m.seq_len) / b.cp, h = m.d_model, V = double(m.vocab_size) / b.tp;
  PassSeconds s;
  add_linear(s, d, rows, V, h);
  if (m.lora.enabled()) s.backward_weight = 0;  // the head is part of the frozen base
  // Final norm; cross-entropy reads the fp32 logits and writes their
  // gradient in the same pass.
  const double mem = (2 * rows * h * b.act_bytes + 2 * rows * V * 4) / d.bandwidth;
  s.forward += mem;
  s.backward_input += kBackwardTraffic * 2 * rows * h * b.act_bytes / d.bandwidth;
  return s;
}

}  // namespace loom::planner
