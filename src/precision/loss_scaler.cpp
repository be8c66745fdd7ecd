#include "precision/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace loom {

void LossScalerOptions::validate() const {
  auto positive_finite = [](float v) { return std::isfinite(v) && v > 0.0f; };
  LOOM_USER_CHECK(positive_finite(initial_scale), "precision.initial_scale must be a positive number, got %g",
                  double(initial_scale));
  LOOM_USER_CHECK(positive_finite(growth_factor) && growth_factor >= 1.0f,
                  "precision.growth_factor must be >= 1, got %g", double(growth_factor));
  LOOM_USER_CHECK(positive_finite(backoff_factor) && backoff_factor < 1.0f,
                  "precision.backoff_factor must be in (0, 1), got %g", double(backoff_factor));
  LOOM_USER_CHECK(growth_interval >= 1, "precision.growth_interval must be >= 1, got %d", growth_interval);
  LOOM_USER_CHECK(hysteresis >= 1, "precision.hysteresis must be >= 1, got %d", hysteresis);
  LOOM_USER_CHECK(positive_finite(min_scale), "precision.min_scale must be a positive number, got %g",
                  double(min_scale));
  LOOM_USER_CHECK(mode != LossScaleMode::dynamic || initial_scale >= min_scale,
                  "precision.initial_scale (%g) is below precision.min_scale (%g)", double(initial_scale),
                  double(min_scale));
}

namespace {
float starting_scale(const LossScalerOptions& o) { return o.mode == LossScaleMode::off ? 1.0f : o.initial_scale; }
}  // namespace

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options), scale_(starting_scale(options)), hysteresis_left_(options.hysteresis) {
  options_.validate();
}

ScalerDecision LossScaler::update(bool found_inf) {
  ScalerDecision d;
  d.skip_step = found_inf;
  if (found_inf) skipped_steps_++;
  if (options_.mode == LossScaleMode::dynamic) {
    if (found_inf) {
      growth_tracker_ = 0;
      hysteresis_left_ = std::max(hysteresis_left_ - 1, 0);
      if (hysteresis_left_ == 0) {
        const float next = std::max(scale_ * options_.backoff_factor, options_.min_scale);
        d.backed_off = next < scale_;
        scale_ = next;
      }
    } else if (++growth_tracker_ == options_.growth_interval) {
      growth_tracker_ = 0;
      hysteresis_left_ = options_.hysteresis;
      const float next = scale_ * options_.growth_factor;
      // Never grow into inf: the loss times the scale must stay finite.
      if (std::isfinite(next)) {
        d.grew = next > scale_;
        scale_ = next;
      }
    }
  }
  d.scale = scale_;
  return d;
}

nlohmann::json LossScaler::state() const {
  return {{"mode", loss_scale_mode_name(options_.mode)},
          {"scale", scale_},
          {"growth_tracker", growth_tracker_},
          {"hysteresis_left", hysteresis_left_},
          {"skipped_steps", skipped_steps_}};
}

namespace {
const nlohmann::json& field(const nlohmann::json& j, const char* name, bool (nlohmann::json::*is_type)() const,
                            const char* type) {
  LOOM_USER_CHECK(j.is_object(), "loss_scaler: state is not a JSON object");
  auto it = j.find(name);
  LOOM_USER_CHECK(it != j.end(), "loss_scaler.%s: missing", name);
  LOOM_USER_CHECK(((*it).*is_type)(), "loss_scaler.%s: expected %s, got %s", name, type, it->dump().c_str());
  return *it;
}
}  // namespace

void LossScaler::load_state(const nlohmann::json& j) {
  const float scale = field(j, "scale", &nlohmann::json::is_number, "a number").get<float>();
  const int growth = field(j, "growth_tracker", &nlohmann::json::is_number_integer, "an integer").get<int>();
  const int hyst = field(j, "hysteresis_left", &nlohmann::json::is_number_integer, "an integer").get<int>();
  const int64_t skipped = field(j, "skipped_steps", &nlohmann::json::is_number_integer, "an integer").get<int64_t>();
  LOOM_USER_CHECK(std::isfinite(scale) && scale > 0.0f, "loss_scaler.scale: expected a positive number, got %g",
                  double(scale));
  LOOM_USER_CHECK(growth >= 0, "loss_scaler.growth_tracker: %d is negative", growth);
  LOOM_USER_CHECK(hyst >= 0, "loss_scaler.hysteresis_left: %d is negative", hyst);
  LOOM_USER_CHECK(skipped >= 0, "loss_scaler.skipped_steps: %lld is negative", (long long)skipped);
  if (options_.mode == LossScaleMode::dynamic) scale_ = std::max(scale, options_.min_scale);
  // A resumed run may have shortened the interval or the hysteresis: clamp.
  growth_tracker_ = std::min(growth, options_.growth_interval - 1);
  hysteresis_left_ = std::min(hyst, options_.hysteresis);
  skipped_steps_ = skipped;
}

}  // namespace loom
