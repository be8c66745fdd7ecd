// A communication thread per process that drives MPI's non-blocking
// operations to completion while the compute threads work.
//
// MPI over TCP (and often over shared memory) moves a non-blocking operation
// only while some thread is inside MPI. Without this engine that thread is
// the training thread, which enters MPI only between kernels ("pokes"); with
// it, the engine's thread polls every request it holds (MPI_Testsome) every
// `poll_us` microseconds and sleeps in between, so the transfer moves during
// a long product and the compute threads keep their cores. The calling
// thread starts each operation the program asks for (so the order in which
// collectives are issued on a communicator stays the program's order, as MPI
// requires); the engine completes them, and a Work handle's test()/wait()
// read the flag it sets. The one exception, drivers (add_driver): a chain of
// operations whose next one starts when the one before completes (the
// hierarchical sum's stages) is moved on by the engine's polls too, under
// the chain's own lock, which keeps each of its communicators' order. MPI
// must be initialised with MPI_THREAD_MULTIPLE (the engine's calls run
// beside the training thread's).
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <functional>
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

  // Work the engine's thread also drives on each poll: a chain of operations
  // whose next one starts when the one before completes (the hierarchical
  // sum's stages). Called on the engine's thread, never while it holds its
  // own lock; returns true while it has work in flight, which keeps the
  // engine polling. remove_driver waits for a call in progress to return.
  using Driver = std::function<bool()>;
  int add_driver(Driver driver);
  void remove_driver(int id);

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
  bool drive();  // runs every driver; true if any has work in flight

  Options options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<MPI_Request, Done>> incoming_;  // under mutex_
  std::mutex drivers_mutex_;  // held while the drivers run
  std::vector<std::pair<int, Driver>> drivers_;  // under drivers_mutex_
  int next_driver_ = 0;                          // under drivers_mutex_
  bool stop_ = false;                                   // under mutex_
  std::atomic<long> polls_{0};
  std::atomic<long long> ns_in_mpi_{0};
  std::atomic<long> tid_{0};
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace loom
