// Reference causal self-attention: plain loops, any float type; multi-head
// (GPT-2) or grouped-query (LLaMA).
//
// Same layout and semantics as loom::cpu::attention_* (kernels/cpu/attention.h):
// qkv[B,T,(NH + 2 NKV) x hs] with hs = C / NH: per row NH query heads, then
// NKV key heads, then NKV value heads (NKV == NH: q, k, v side by side, each
// [NH, hs]; NKV = 0 means NKV = NH); query head h reads kv head h / (NH / NKV).
// out[B,T,C]; att[B,NH,T,T] softmax probabilities, zero above the diagonal.
// Written for clarity, not speed; tests instantiate it with double.
#pragma once

#include <cmath>

namespace loom::ref {

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH, int NKV = 0) {
  if (NKV == 0) NKV = NH;
  const int hs = C / NH;
  const int R = C + 2 * NKV * hs;  // qkv row stride
  const T scale = T(1) / std::sqrt(T(hs));
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int g = h / (NH / NKV);  // kv head
      for (int t = 0; t < T_; t++) {
        const T* q = qkv + (b * T_ + t) * R + h * hs;  // [hs]
        T* p = att + ((b * NH + h) * T_ + t) * T_;      // [T]
        // Scores for positions 0..t, and their max for a stable softmax.
        T maxval = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const T* k = qkv + (b * T_ + t2) * R + C + g * hs;  // [hs]
          T s = 0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          p[t2] = s * scale;
          if (p[t2] > maxval) maxval = p[t2];
        }
        T sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          p[t2] = std::exp(p[t2] - maxval);
          sum += p[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) p[t2] /= sum;
        for (int t2 = t + 1; t2 < T_; t2++) p[t2] = 0;  // masked (future) positions
        // out[b,t,h*hs:(h+1)*hs] = sum_t2 p[t2] * v[t2]
        T* o = out + (b * T_ + t) * C + h * hs;  // [hs]
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const T* v = qkv + (b * T_ + t2) * R + C + (NKV + g) * hs;  // [hs]
          for (int i = 0; i < hs; i++) o[i] += p[t2] * v[i];
        }
      }
    }
  }
}

// dqkv[B,T,(NH + 2 NKV) x hs] is overwritten; a kv head's gradient sums over
// its query heads. scratch[B,NH,T,T] holds dL/datt.
template <class T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int T_, int C, int NH,
                        int NKV = 0) {
  if (NKV == 0) NKV = NH;
  const int hs = C / NH;
  const int R = C + 2 * NKV * hs;  // qkv row stride
  const T scale = T(1) / std::sqrt(T(hs));
  for (int i = 0; i < B * T_ * R; i++) dqkv[i] = 0;
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int g = h / (NH / NKV);  // kv head
      for (int t = 0; t < T_; t++) {
        const T* p = att + ((b * NH + h) * T_ + t) * T_;    // [T]
        T* dp = scratch + ((b * NH + h) * T_ + t) * T_;     // [T]
        const T* dO = dout + (b * T_ + t) * C + h * hs;      // [hs]
        const T* q = qkv + (b * T_ + t) * R + h * hs;        // [hs]
        T* dq = dqkv + (b * T_ + t) * R + h * hs;            // [hs]
        // out = P V:  dP[t2] = dO . v[t2],  dv[t2] += P[t2] * dO
        for (int t2 = 0; t2 <= t; t2++) {
          const T* v = qkv + (b * T_ + t2) * R + C + (NKV + g) * hs;
          T* dv = dqkv + (b * T_ + t2) * R + C + (NKV + g) * hs;
          T s = 0;
          for (int i = 0; i < hs; i++) {
            s += dO[i] * v[i];
            dv[i] += p[t2] * dO[i];
          }
          dp[t2] = s;
        }
        // Softmax backward: dS = P * (dP - sum_t2 P dP), then through the scale.
        T dot = 0;
        for (int t2 = 0; t2 <= t; t2++) dot += p[t2] * dp[t2];
        for (int t2 = 0; t2 <= t; t2++) {
          const T ds = p[t2] * (dp[t2] - dot) * scale;
          const T* k = qkv + (b * T_ + t2) * R + C + g * hs;
          T* dk = dqkv + (b * T_ + t2) * R + C + g * hs;
          // S = scale * q . k:  dq += dS * k[t2],  dk[t2] += dS * q
          for (int i = 0; i < hs; i++) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  }
}

}  // namespace loom::ref
