#include "comm/progress_engine.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>

namespace loom {

namespace {

// Asks the kernel for a scheduler slice of `slice_us` for the calling thread,
// keeping its policy (normal) and nice value. The struct is the kernel's
// sched_attr (glibc 2.36 has no wrapper; <linux/sched/types.h> clashes with
// <sched.h>). Best effort: an error leaves the default slice.
void ask_for_slice(int slice_us) {
#ifdef SYS_sched_setattr
  if (slice_us <= 0 || sched_getscheduler(0) != SCHED_OTHER) return;  // a policy the user chose stays
  struct {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
  } attr{};
  attr.size = sizeof attr;
  attr.sched_policy = 0;  // SCHED_OTHER
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, 0);  // this thread's (Linux: per thread)
  attr.sched_nice = errno == 0 ? nice : 0;
  attr.sched_runtime = uint64_t(slice_us) * 1000;
  (void)syscall(SYS_sched_setattr, 0, &attr, 0);
#else
  (void)slice_us;
#endif
}

}  // namespace

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

int ProgressEngine::add_driver(Driver driver) {
  std::lock_guard<std::mutex> lock(drivers_mutex_);
  drivers_.emplace_back(next_driver_, std::move(driver));
  return next_driver_++;
}

void ProgressEngine::remove_driver(int id) {
  std::lock_guard<std::mutex> lock(drivers_mutex_);
  for (size_t i = 0; i < drivers_.size(); i++)
    if (drivers_[i].first == id) {
      drivers_.erase(drivers_.begin() + std::ptrdiff_t(i));
      return;
    }
}

bool ProgressEngine::drive() {
  std::lock_guard<std::mutex> lock(drivers_mutex_);
  bool busy = false;
  for (auto& [id, driver] : drivers_) busy = driver() || busy;
  return busy;
}

void ProgressEngine::run() {
  using Clock = std::chrono::steady_clock;
  ask_for_slice(options_.slice_us);
  tid_.store(long(syscall(SYS_gettid)), std::memory_order_release);
  std::vector<MPI_Request> requests;
  std::vector<Done> flags;
  std::vector<int> completed;
  bool busy = false;  // a driver has work in flight
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Nothing pending: sleep until a request or the stop arrives.
      if (requests.empty() && !busy) wake_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
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
    busy = drive();  // may adopt the next operations of a chain
    if (!requests.empty() || busy) std::this_thread::sleep_for(std::chrono::microseconds(options_.poll_us));
  }
}

}  // namespace loom
