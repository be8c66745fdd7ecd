#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/cpu/grad_norm.h"

namespace loom {

double global_grad_norm(const ParamLayout& layout, const float* grads) {
  double sum = 0;
  for (const auto& p : layout.params) sum += cpu::sum_of_squares(grads + p.offset, size_t(p.numel));
  return std::sqrt(sum);
}

}  // namespace loom
