// StragglerMonitor: names the rank that drags every step.
//
// Every step each rank's busy time (its own forward and backward compute,
// not the time it waited on others) is gathered; a rank whose busy time,
// divided by the median over the ranks, has a median over the last `window`
// steps above `factor` (and which loses more than 5 ms per step) is a
// straggler. It is named once when it starts to
// lag and once when it catches up. The median over a window ignores a single
// slow step (a page fault, a checkpoint); a rank slow on most steps of the
// window is named within `window` steps.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "obs/run_records.h"

namespace loom::obs {


struct StragglerEvent {
  bool started = true;  // false: the rank caught up
  Straggler who;
  std::string text() const;  // for the log
};

class StragglerMonitor {
 public:
  // A straggler also loses at least this much per step (median over the
  // window): below it, scheduling noise on millisecond steps would be named.
  static constexpr double kMinExcessSeconds = 0.005;

  // factor <= 1 turns it off; window >= 1.
  StragglerMonitor(int world_size, double factor, int window);

  bool enabled() const { return factor_ > 1 && world_ > 1; }
  // One step's busy seconds per world rank. Returns what changed.
  std::vector<StragglerEvent> observe(const std::vector<double>& busy_s);
  // The ranks straggling now (after the last observe).
  const std::vector<Straggler>& current() const { return current_; }

 private:
  int world_;
  double factor_;
  size_t window_;
  std::deque<std::vector<double>> ratios_, busy_;  // per step, per rank
  std::vector<bool> flagged_;
  std::vector<Straggler> current_;
};

}  // namespace loom::obs
