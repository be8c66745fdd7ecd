#include "comm/watchdog.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace loom {

// A deadline beyond ~115 days (or not finite) would overflow the clock's
// duration: treat it as "never".
Watchdog::Watchdog(double timeout_s) : timeout_s_(std::isfinite(timeout_s) && timeout_s <= 1e7 ? timeout_s : 0) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::arm(std::string what, std::function<std::string(const std::string& what)> explain) {
  if (timeout_s_ <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = std::move(what);
    explain_ = std::move(explain);
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s_));
    armed_ = true;
  }
  cv_.notify_all();
}

void Watchdog::disarm() {
  if (timeout_s_ <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    auto deadline = deadline_;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && armed_ && deadline_ == deadline) {
      std::fprintf(stderr, "loom: %s: no completion after %.0f s; aborting the job\n", what_.c_str(), timeout_s_);
      std::fflush(stderr);
      if (explain_) {
        try {
          const std::string text = explain_(what_);
          if (!text.empty()) std::fprintf(stderr, "loom: %s\n", text.c_str());
        } catch (const std::exception&) {
        }
        std::fflush(stderr);
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::seconds(2));
      std::_Exit(3);
    }
  }
}

}  // namespace loom
