#include "optim/adamw.h"

#include "kernels/backend.h"

namespace loom {

AdamW::AdamW(Backend& ops, const FlatLayout& layout, const AdamWConfig& cfg)
    : AdamW(ops, layout, {{0, layout.total}}, cfg) {}

AdamW::AdamW(Backend& ops, const FlatLayout& layout, const std::vector<FlatRange>& owned, const AdamWConfig& cfg)
    : ops_(ops), pieces_(pieces_of(layout, owned)), cfg_(cfg) {
  for (const auto& p : pieces_) {
    decay_.push_back(layout.tensors[p.tensor].weight_decay);
    weight_.push_back(1.0 / layout.tensors[p.tensor].copies);
  }
  const size_t bytes = size_t(total_size(owned)) * sizeof(float);
  m_.reserve(bytes);
  v_.reserve(bytes);
  m_.allocate(ops_.memory());
  v_.allocate(ops_.memory());
}

void AdamW::step(float* params, const float* grads, float lr, float grad_scale, const WeightCopy& copy_in,
                 bool packed_params) {
  const WeightCopy copy = packed_params ? WeightCopy{} : copy_in;
  t_++;
  AdamWStep s{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, t_};
  float* m = m_.at<float>(0);
  float* v = v_.at<float>(0);
  for (size_t i = 0; i < pieces_.size(); i++) {
    const FlatPiece& p = pieces_[i];
    float wd = decay_[i] ? cfg_.weight_decay : 0.f;
    const size_t n = size_t(p.numel);
    if (packed_params)
      ops_.adamw_update(params + p.packed, m + p.packed, v + p.packed, grads + p.packed, n, grad_scale, wd, s);
    else if (!copy.data)
      ops_.adamw_update(params + p.offset, m + p.packed, v + p.packed, grads + p.packed, n, grad_scale, wd, s);
    else if (copy.dtype == DType::bf16)
      ops_.adamw_update(params + p.offset, static_cast<bf16*>(copy.data) + p.offset, m + p.packed, v + p.packed,
                        grads + p.packed, n, grad_scale, wd, s);
    else
      ops_.adamw_update(params + p.offset, static_cast<f16*>(copy.data) + p.offset, m + p.packed, v + p.packed,
                        grads + p.packed, n, grad_scale, wd, s);
  }
}

double AdamW::grad_sum_of_squares(const float* grads) const {
  double sum = 0;
  for (size_t i = 0; i < pieces_.size(); i++)
    sum += weight_[i] * ops_.sum_of_squares(grads + pieces_[i].packed, size_t(pieces_[i].numel));
  return sum;
}

}  // namespace loom
