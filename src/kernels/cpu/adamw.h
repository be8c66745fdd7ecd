// AdamW with decoupled weight decay, exactly as torch.optim.AdamW:
//   p  -= lr * weight_decay * p
//   m   = beta1 m + (1 - beta1) g
//   v   = beta2 v + (1 - beta2) g^2
//   p  -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// with g = grad_scale * grad (grad_scale carries global-norm clipping).
#pragma once
#include <cstddef>

#include "core/dtype.h"

namespace loom::cpu {

struct AdamWStep {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  int t = 1;  // 1-based step number, for bias correction
};

// param[n], m[n], v[n] updated in place; grad[n] read.
void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step);
// The same update (bit for bit), also writing the new parameters rounded to
// 16 bits into copy[n] in the same pass: the compute weights of mixed
// precision, without a second read of the fp32 masters.
void adamw_update(float* param, bf16* copy, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step);
void adamw_update(float* param, f16* copy, float* m, float* v, const float* grad, size_t n, float grad_scale,
                  float weight_decay, const AdamWStep& step);

}  // namespace loom::cpu
