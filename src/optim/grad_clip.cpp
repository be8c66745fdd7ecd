#include "optim/grad_clip.h"

#include <cmath>

#include "kernels/cpu/grad_norm.h"

namespace loom {

double global_grad_norm(const FlatLayout& layout, const float* grads) {
  double sum = 0;
  for (const auto& t : layout.tensors) sum += cpu::sum_of_squares(grads + t.offset, size_t(t.numel));
  return std::sqrt(sum);
}

}  // namespace loom
