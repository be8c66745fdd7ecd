// LossScaler: the factor the loss is multiplied by before backward, so that
// fp16 gradients stay above fp16's underflow threshold, and its update rule.
//
// Use, once per optimizer step (every rank the same way):
//   loss *= scaler.scale();  backward ...
//   bool inf = unscale_and_check(grads, n, scaler.inv_scale());  // non_finite.h
//   inf = any_rank_found_inf(ctx.world(), inf);                  // found_inf.h
//   ScalerDecision d = scaler.update(inf);
//   if (!d.skip_step) optimizer.step(); else log "skipped step, scale -> d.scale"
//
// Dynamic mode follows Megatron-LM's DynamicGradScaler: an overflowing step is
// always skipped; the scale backs off only once `hysteresis` overflowing steps
// have been seen since the last growth (then on every further overflow until
// it grows again); after `growth_interval` consecutive clean steps it grows
// and the hysteresis budget is restored. Fixed and off modes never change the
// scale, but still skip a step whose gradients are not finite.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "precision/policy.h"

namespace loom {

struct LossScalerOptions {
  LossScaleMode mode = LossScaleMode::dynamic;
  float initial_scale = 65536.0f;  // 2^16; in fixed mode, the scale
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int growth_interval = 1000;  // clean steps in a row before growing
  int hysteresis = 2;          // overflowing steps tolerated before backing off
  float min_scale = 1.0f;      // backoff never goes below this

  // Throws UserError naming the bad field (as "precision.<name>").
  void validate() const;
};

// What update() decided for the step just finished.
struct ScalerDecision {
  bool skip_step = false;  // gradients were not finite: do not apply them
  bool backed_off = false; // the scale was reduced
  bool grew = false;       // the scale was increased
  float scale = 1.0f;      // the scale for the next step
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  // Multiply the loss by scale(); multiply the gradients by inv_scale().
  // Both are exact powers of two when the options are (the defaults are).
  float scale() const { return scale_; }
  float inv_scale() const { return 1.0f / scale_; }
  LossScaleMode mode() const { return options_.mode; }
  const LossScalerOptions& options() const { return options_; }

  // found_inf must already be the same on every rank (any_rank_found_inf).
  ScalerDecision update(bool found_inf);

  int growth_tracker() const { return growth_tracker_; }   // clean steps since the last change
  int hysteresis_left() const { return hysteresis_left_; } // overflows still tolerated
  int64_t skipped_steps() const { return skipped_steps_; } // total, for logs

  // Training state for checkpoints: {"mode", "scale", "growth_tracker",
  // "hysteresis_left", "skipped_steps"}. load_state() restores the counters;
  // the scale is restored only in dynamic mode (fixed and off keep their
  // configured scale, so a run may change mode on resume). A missing or
  // mistyped field throws UserError naming it ("loss_scaler.scale ...").
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  LossScalerOptions options_;
  float scale_;
  int growth_tracker_ = 0;
  int hysteresis_left_;
  int64_t skipped_steps_ = 0;
};

}  // namespace loom
