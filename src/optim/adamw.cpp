#include "optim/adamw.h"

#include "kernels/cpu/adamw.h"

namespace loom {

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& cfg) : layout_(layout), cfg_(cfg) {
  m_.reserve(size_t(layout.total) * sizeof(float));
  v_.reserve(size_t(layout.total) * sizeof(float));
  m_.allocate();
  v_.allocate();
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale) {
  t_++;
  cpu::AdamWStep s{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, t_};
  float* m = m_.at<float>(0);
  float* v = v_.at<float>(0);
  for (const auto& p : layout_.params) {
    float wd = p.weight_decay ? cfg_.weight_decay : 0.f;
    cpu::adamw_update(params + p.offset, m + p.offset, v + p.offset, grads + p.offset, size_t(p.numel), grad_scale,
                      wd, s);
  }
}

}  // namespace loom
