#include "optim/lr_schedule.h"

#include <cmath>

namespace loom {

float LrSchedule::at(int step) const {
  if (step < warmup_steps) return max_lr * float(step + 1) / float(warmup_steps);
  if (step >= total_steps) return min_lr;
  int decay_steps = total_steps - warmup_steps;
  double progress = decay_steps > 1 ? double(step - warmup_steps) / double(decay_steps - 1) : 1.0;
  double cosine = 0.5 * (1.0 + std::cos(3.141592653589793 * progress));
  return float(min_lr + (max_lr - min_lr) * cosine);
}

}  // namespace loom
