// Watchdog: a deadline for a blocking call that cannot poll (a blocking MPI
// collective). arm() before the call, disarm() after; if the deadline passes
// first, the watchdog thread prints what was being waited on, waits a short
// grace period (so other stuck ranks can print theirs), and ends the process
// with exit code 3 — mpirun then ends every other rank of the job.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace loom {

class Watchdog {
 public:
  explicit Watchdog(double timeout_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `explain`, if given, runs on a timeout and its text is printed after
  // `what` (the flight recorder's account of the other ranks).
  void arm(std::string what, std::function<std::string(const std::string& what)> explain = {});
  void disarm();

 private:
  void run();
  double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, stop_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::string what_;
  std::function<std::string(const std::string& what)> explain_;
  std::thread thread_;
};

// Arms on construction, disarms on destruction (also when the call throws).
class WatchdogScope {
 public:
  WatchdogScope(Watchdog& w, std::string what, std::function<std::string(const std::string& what)> explain = {}) : w_(w) {
    w_.arm(std::move(what), std::move(explain));
  }
  ~WatchdogScope() { w_.disarm(); }

 private:
  Watchdog& w_;
};

}  // namespace loom
