// Learning rate: linear warmup from 0 to max_lr, then cosine decay to min_lr.
#pragma once

namespace loom {

struct LrSchedule {
  float max_lr = 1e-3f;
  float min_lr = 1e-4f;
  int warmup_steps = 0;
  int total_steps = 1;

  // step is 0-based.
  float at(int step) const;
};

}  // namespace loom
