// Decides, step by step, whether a loss is usable.
//
//   Ok        apply the step
//   Skip      do not apply it (the loss is not finite, or it spikes: more
//             than z_threshold standard deviations above the mean of the
//             last `window` accepted losses, once `warmup` have been seen)
//   Rollback  max_skips skips in a row: go back to the last checkpoint and
//             skip past that data window
//
// Pure logic, no I/O: the training loop logs reason().
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include <nlohmann/json.hpp>

namespace loom {

struct LossGuardConfig {
  int window = 50;            // accepted losses the statistics are taken over
  double z_threshold = 6.0;   // a loss this many standard deviations above the mean is a spike; <= 0: off
  int warmup = 20;            // accepted losses before spikes are judged (non-finite ones always are)
  int max_skips = 3;          // skips in a row that trigger a rollback
  double min_std = 1e-3;      // floor of the standard deviation (a flat loss curve is not all spikes)

  // Throws UserError naming the field ("guard.window").
  void validate() const;
};

enum class LossVerdict { Ok, Skip, Rollback };
const char* verdict_name(LossVerdict v);

class LossGuard {
 public:
  explicit LossGuard(LossGuardConfig cfg);

  LossVerdict observe(double loss);
  // Why the last verdict was what it was, e.g. "loss 9.12 is 7.3 sigma above the mean 3.01 of 50 steps".
  const std::string& reason() const { return reason_; }
  // After the caller has rolled back: the skip count starts over; the
  // accepted history is kept (the losses before the checkpoint stand).
  void after_rollback() { skips_in_row_ = 0; }

  int skips_in_row() const { return skips_in_row_; }
  int64_t total_skips() const { return total_skips_; }
  double mean() const;
  double stddev() const;
  // The history, for checkpoints (a resumed run judges losses as the
  // uninterrupted one would). Doubles round-trip exactly through JSON.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  LossGuardConfig cfg_;
  std::deque<double> accepted_;
  double sum_ = 0;
  int skips_in_row_ = 0;
  int64_t total_skips_ = 0;
  std::string reason_;
};

}  // namespace loom
