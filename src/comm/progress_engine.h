// A communication thread per process that drives MPI's non-blocking
// operations to completion while the compute threads work.
//
// MPI over TCP (and often over shared memory) moves a non-blocking operation
// only while some thread is inside MPI. Without this engine that thread is
// the training thread, which enters MPI only between kernels ("pokes"); with
// it, the engine's thread polls every request it holds (MPI_Testsome) every
// `poll_us` microseconds and sleeps in between, so the transfer moves during
// a long product and the compute threads keep their cores. The calling
// thread still starts each operation (so the order in which collectives are
// issued on a communicator stays the program's order, as MPI requires); the
// engine only completes them, and a Work handle's test()/wait() read the
// flag it sets. MPI must be initialised with MPI_THREAD_MULTIPLE (the
// engine's MPI_Testsome runs beside the training thread's MPI calls).
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace loom {

class ProgressEngine {
 public:
  struct Options {
    int poll_us = 50;  // sleep between polls while requests are pending
    // The scheduler slice the engine's thread asks for (Linux 6.12+ EEVDF:
    // sched_setattr's sched_runtime on a normal thread, no privilege needed;
    // older kernels ignore it); 0 leaves the default. A short slice lets the
    // thread's wake-ups preempt a compute thread that holds the core instead
    // of waiting out the compute thread's slice: each of an MPI transfer's
    // steps needs the engine on the core of a rank that computes.
    int slice_us = 100;
  };
  explicit ProgressEngine(Options options);
  // Stops at once, even with requests in flight (a dead peer must not hang
  // the exit); their owners no longer wait on them then.
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Takes a started request: from now on only the engine touches it. The
  // flag turns true (release order) once MPI has completed it.
  using Done = std::shared_ptr<std::atomic<bool>>;
  Done adopt(MPI_Request request);

  // For benchmarks: polls made and seconds the engine's thread spent inside
  // MPI_Testsome since the start.
  long polls() const { return polls_.load(std::memory_order_relaxed); }
  double seconds_in_mpi() const { return 1e-9 * double(ns_in_mpi_.load(std::memory_order_relaxed)); }
  const Options& options() const { return options_; }
  // The engine thread's kernel thread id, once it runs (0 before): for tests
  // that read what the scheduler gave it.
  long thread_id() const { return tid_.load(std::memory_order_acquire); }

 private:
  void run();

  Options options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<MPI_Request, Done>> incoming_;  // under mutex_
  bool stop_ = false;                                   // under mutex_
  std::atomic<long> polls_{0};
  std::atomic<long long> ns_in_mpi_{0};
  std::atomic<long> tid_{0};
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace loom
