#include "obs/straggler_monitor.h"

#include <algorithm>

#include "core/check.h"

namespace loom::obs {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  if (v.size() % 2) return v[mid];
  const double upper = v[mid];
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + long(mid)));
}

}  // namespace

std::string StragglerEvent::text() const {
  if (!started)
    return strprintf("straggler: rank %d caught up (%.2fx the median rank's compute over the last steps)", who.rank,
                     who.ratio);
  return strprintf("straggler: rank %d computes %.2fx the median rank (%.3f s vs %.3f s per step over the last "
                   "steps); every step waits for it",
                   who.rank, who.ratio, who.busy_s, who.median_s);
}

StragglerMonitor::StragglerMonitor(int world_size, double factor, int window)
    : world_(world_size), factor_(factor), window_(size_t(std::max(1, window))), flagged_(size_t(world_size)) {}

std::vector<StragglerEvent> StragglerMonitor::observe(const std::vector<double>& busy_s) {
  std::vector<StragglerEvent> events;
  if (!enabled() || busy_s.size() != size_t(world_)) return events;
  const double mid = median(busy_s);
  if (!(mid > 0)) return events;
  std::vector<double> ratio(busy_s.size());
  for (size_t r = 0; r < busy_s.size(); r++) ratio[r] = busy_s[r] / mid;
  ratios_.push_back(std::move(ratio));
  busy_.push_back(busy_s);
  if (ratios_.size() > window_) ratios_.pop_front(), busy_.pop_front();
  current_.clear();
  // Judge only a full window: one slow step is not a straggler.
  if (ratios_.size() < window_) return events;
  std::vector<double> medians(busy_.size());
  for (size_t s = 0; s < busy_.size(); s++) medians[s] = median(busy_[s]);
  const double median_s = [&] {
    double sum = 0;
    for (double m : medians) sum += m;
    return sum / double(medians.size());
  }();
  for (int r = 0; r < world_; r++) {
    std::vector<double> mine, excess;
    double busy_sum = 0;
    for (size_t s = 0; s < ratios_.size(); s++) {
      mine.push_back(ratios_[s][size_t(r)]);
      excess.push_back(busy_[s][size_t(r)] - medians[s]);
      busy_sum += busy_[s][size_t(r)];
    }
    const double ratio = median(mine);
    // Both relative and absolute: timer noise on millisecond steps is not a straggler.
    const bool slow = ratio > factor_ && median(excess) > kMinExcessSeconds;
    // Named as soon as most of the window is slow: say how slow those steps
    // are, not the window's median, which still counts the steps before.
    std::vector<double> slow_ratios;
    double slow_busy = 0, slow_median = 0;
    for (size_t s = 0; s < mine.size(); s++)
      if (mine[s] > factor_ && excess[s] > kMinExcessSeconds)
        slow_ratios.push_back(mine[s]), slow_busy += busy_[s][size_t(r)], slow_median += medians[s];
    const double n_slow = double(std::max<size_t>(1, slow_ratios.size()));
    const Straggler who = slow ? Straggler{r, median(slow_ratios), slow_busy / n_slow, slow_median / n_slow}
                               : Straggler{r, ratio, busy_sum / double(mine.size()), median_s};
    if (slow) current_.push_back(who);
    if (slow != flagged_[size_t(r)]) {
      flagged_[size_t(r)] = slow;
      events.push_back(StragglerEvent{slow, who});
    }
  }
  return events;
}

}  // namespace loom::obs
