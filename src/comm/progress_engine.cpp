#include "comm/progress_engine.h"

#include <chrono>

namespace loom {

ProgressEngine::ProgressEngine(Options options) : options_(options), thread_([this] { run(); }) {}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

ProgressEngine::Done ProgressEngine::adopt(MPI_Request request) {
  Done done = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.emplace_back(request, done);
  }
  wake_.notify_one();
  return done;
}

void ProgressEngine::run() {
  using Clock = std::chrono::steady_clock;
  std::vector<MPI_Request> requests;
  std::vector<Done> flags;
  std::vector<int> completed;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Nothing pending: sleep until a request or the stop arrives.
      if (requests.empty()) wake_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
      if (stop_) return;
      for (auto& [r, f] : incoming_) requests.push_back(r), flags.push_back(std::move(f));
      incoming_.clear();
    }
    completed.resize(requests.size());
    int n = 0;
    const auto t0 = Clock::now();
    MPI_Testsome(int(requests.size()), requests.data(), &n, completed.data(), MPI_STATUSES_IGNORE);
    ns_in_mpi_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count(),
                         std::memory_order_relaxed);
    polls_.fetch_add(1, std::memory_order_relaxed);
    if (n == MPI_UNDEFINED) n = 0;
    for (int i = 0; i < n; i++) flags[size_t(completed[size_t(i)])]->store(true, std::memory_order_release);
    // Completed requests are MPI_REQUEST_NULL now: keep the others, in order.
    size_t kept = 0;
    for (size_t i = 0; i < requests.size(); i++)
      if (requests[i] != MPI_REQUEST_NULL) requests[kept] = requests[i], flags[kept] = std::move(flags[i]), kept++;
    requests.resize(kept), flags.resize(kept);
    if (!requests.empty()) std::this_thread::sleep_for(std::chrono::microseconds(options_.poll_us));
  }
}

}  // namespace loom
