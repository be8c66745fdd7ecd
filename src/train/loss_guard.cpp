#include "train/loss_guard.h"

#include <cmath>

#include "core/check.h"

namespace loom {

void LossGuardConfig::validate() const {
  LOOM_USER_CHECK(window >= 2, "config field 'guard.window' must be >= 2");
  LOOM_USER_CHECK(std::isfinite(z_threshold), "config field 'guard.z_threshold' must be finite (<= 0 turns spikes off)");
  LOOM_USER_CHECK(warmup >= 2 && warmup <= window, "config field 'guard.warmup' must be in [2, guard.window]");
  LOOM_USER_CHECK(max_skips >= 1, "config field 'guard.max_skips' must be >= 1");
  LOOM_USER_CHECK(min_std >= 0 && std::isfinite(min_std), "config field 'guard.min_std' must be >= 0");
}

const char* verdict_name(LossVerdict v) {
  switch (v) {
    case LossVerdict::Ok: return "ok";
    case LossVerdict::Skip: return "skip";
    case LossVerdict::Rollback: return "rollback";
  }
  return "?";
}

LossGuard::LossGuard(LossGuardConfig cfg) : cfg_(cfg) { cfg_.validate(); }

double LossGuard::mean() const { return accepted_.empty() ? 0 : sum_ / double(accepted_.size()); }

double LossGuard::stddev() const {
  if (accepted_.size() < 2) return 0;
  // Recomputed from the window (not from running sums) so that rounding
  // cannot accumulate over a long run.
  double m = mean(), ss = 0;
  for (double x : accepted_) ss += (x - m) * (x - m);
  return std::sqrt(ss / double(accepted_.size() - 1));
}

nlohmann::json LossGuard::state() const {
  return {{"accepted", std::vector<double>(accepted_.begin(), accepted_.end())},
          {"sum", sum_},
          {"skips_in_row", skips_in_row_},
          {"total_skips", total_skips_}};
}

void LossGuard::restore(const nlohmann::json& state) {
  if (state.is_null() || state.empty()) return;
  std::vector<double> accepted;
  try {
    accepted = state.at("accepted").get<std::vector<double>>();
    sum_ = state.at("sum").get<double>();
    skips_in_row_ = state.at("skips_in_row").get<int>();
    total_skips_ = state.at("total_skips").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    throw UserError("checkpoint manifest: the loss guard's state (extra.loss_guard: accepted, sum, skips_in_row, "
                    "total_skips) is missing a field or has the wrong type: " + state.dump().substr(0, 80));
  }
  LOOM_USER_CHECK(skips_in_row_ >= 0 && total_skips_ >= skips_in_row_ && std::isfinite(sum_),
                  "checkpoint manifest: the loss guard's state is inconsistent (skips_in_row %d, total_skips %lld, "
                  "sum %g)",
                  skips_in_row_, (long long)total_skips_, sum_);
  accepted_.assign(accepted.begin(), accepted.end());
}

LossVerdict LossGuard::observe(double loss) {
  bool bad = false;
  if (!std::isfinite(loss)) {
    bad = true;
    reason_ = strprintf("loss is %s", std::isnan(loss) ? "NaN" : "infinite");
  } else if (cfg_.z_threshold > 0 && int(accepted_.size()) >= cfg_.warmup) {
    double m = mean(), s = std::max(stddev(), cfg_.min_std);
    double z = (loss - m) / s;
    if (z > cfg_.z_threshold) {
      bad = true;
      reason_ = strprintf("loss %.4g is %.1f sigma above the mean %.4g of the last %zu steps (threshold %.1f)", loss, z,
                          m, accepted_.size(), cfg_.z_threshold);
    }
  }
  if (bad) {
    total_skips_++;
    if (++skips_in_row_ >= cfg_.max_skips) {
      reason_ += strprintf("; %d bad steps in a row", skips_in_row_);
      return LossVerdict::Rollback;
    }
    return LossVerdict::Skip;
  }
  skips_in_row_ = 0;
  reason_.clear();
  accepted_.push_back(loss);
  sum_ += loss;
  if (int(accepted_.size()) > cfg_.window) {
    sum_ -= accepted_.front();
    accepted_.pop_front();
  }
  return LossVerdict::Ok;
}

}  // namespace loom
