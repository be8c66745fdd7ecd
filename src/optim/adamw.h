// AdamW over the flat parameter buffer: fp32 moments in one allocation each,
// decoupled weight decay only on tensors marked for it (2-D matrices).
#pragma once

#include <cstdint>

#include "core/arena.h"
#include "model/param_layout.h"

namespace loom {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWConfig& cfg);
  // One update with learning rate lr; grad_scale multiplies every gradient
  // first (global-norm clipping).
  void step(float* params, const float* grads, float lr, float grad_scale);
  int steps_taken() const { return t_; }
  size_t state_bytes() const { return m_.size() + v_.size(); }

 private:
  const ParamLayout& layout_;
  AdamWConfig cfg_;
  Arena m_, v_;
  int t_ = 0;
};

}  // namespace loom
