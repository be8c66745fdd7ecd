// The progress engine (comm/progress_engine.h): a communication thread that
// completes non-blocking operations while the calling thread computes, and
// that stops at once even with an operation in flight.
#include <gtest/gtest.h>

#include <sys/utsname.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_comm.h"
#include "comm/progress_engine.h"

namespace {

bool threads_multiple() {
  int provided = 0;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_MULTIPLE;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 16 MiB per rank: large enough to travel in fragments (rendezvous) that
// move only while some thread is inside MPI. The caller makes no MPI call
// while it "computes"; the first test() afterwards must find it done.
TEST(ProgressEngine, CompletesAReductionWhileTheCallerComputes) {
  if (!threads_multiple()) GTEST_SKIP() << "MPI gives no MPI_THREAD_MULTIPLE";
  loom::ProgressEngine engine({20});
  auto world = loom::MpiComm::world(loom::MpiOptions{60, &engine});
  std::vector<float> x(size_t(1) << 22, 1.f);
  world->barrier();
  auto work = world->all_reduce_async(x.data(), x.size(), loom::DType::f32, loom::ReduceOp::Sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_TRUE(work->test()) << "the reduction did not move while the caller computed";
  work->wait();
  EXPECT_EQ(x.front(), float(world->size()));
  EXPECT_EQ(x.back(), float(world->size()));
  EXPECT_GT(engine.polls(), 0);
  world->barrier();
}

// Point-to-point around a ring and a reduce-scatter through the engine give
// MPI's results (the engine changes who completes, not what).
TEST(ProgressEngine, TransfersAndReductionsKeepTheirResults) {
  if (!threads_multiple()) GTEST_SKIP() << "MPI gives no MPI_THREAD_MULTIPLE";
  loom::ProgressEngine engine({20});
  auto world = loom::MpiComm::world(loom::MpiOptions{60, &engine});
  const int n = world->size(), r = world->rank();
  std::vector<float> out(1000, float(r)), in(1000, -1.f);
  auto recv = world->recv_async(in.data(), in.size(), loom::DType::f32, (r + n - 1) % n, 7);
  auto send = world->send_async(out.data(), out.size(), loom::DType::f32, (r + 1) % n, 7);
  send->wait(), recv->wait();
  EXPECT_EQ(in.front(), float((r + n - 1) % n));
  EXPECT_EQ(in.back(), float((r + n - 1) % n));
  std::vector<float> all(size_t(n) * 256, 1.f), mine(256, 0.f);
  world->reduce_scatter_async(all.data(), mine.data(), mine.size(), loom::DType::f32, loom::ReduceOp::Avg)->wait();
  EXPECT_EQ(mine.front(), 1.f);  // the average's division runs on the caller, after the engine's completion
  world->barrier();
}

// A receive nobody will match: the engine holds it, yet stops at once.
TEST(ProgressEngine, StopsAtOnceWithAnOperationInFlight) {
  if (!threads_multiple()) GTEST_SKIP() << "MPI gives no MPI_THREAD_MULTIPLE";
  auto world = loom::MpiComm::world(loom::MpiOptions{60});
  float never = 0;
  MPI_Request request;
  MPI_Irecv(&never, 1, MPI_FLOAT, world->rank(), 9999, world->handle(), &request);
  const auto t0 = std::chrono::steady_clock::now();
  {
    loom::ProgressEngine engine({20});
    loom::ProgressEngine::Done done = engine.adopt(request);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(done->load());
  }
  EXPECT_LT(seconds_since(t0), 2.0) << "the engine did not stop with a receive in flight";
  MPI_Cancel(&request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  world->barrier();
}

// The engine's thread asks for a 100 us scheduler slice, so that its
// wake-ups preempt the compute thread (Linux 6.12+ shows the slice it got
// as se.slice in /proc/self/task/TID/sched; older kernels: skipped).
TEST(ProgressEngine, AsksTheSchedulerForAShortSlice) {
  utsname u{};
  int major = 0, minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2 || major * 100 + minor < 612)
    GTEST_SKIP() << "kernel " << u.release << " has no custom slices (6.12+)";
  loom::ProgressEngine engine({20, 100});
  const auto t0 = std::chrono::steady_clock::now();
  while (engine.thread_id() == 0 && seconds_since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_NE(engine.thread_id(), 0);
  std::ifstream sched("/proc/self/task/" + std::to_string(engine.thread_id()) + "/sched");
  std::string line;
  long slice_ns = -1;
  while (std::getline(sched, line))
    if (line.rfind("se.slice", 0) == 0) {
      std::istringstream(line.substr(line.find(':') + 1)) >> slice_ns;
    }
  if (slice_ns < 0) GTEST_SKIP() << "this kernel's sched file shows no se.slice";
  EXPECT_EQ(slice_ns, 100000);
}

}  // namespace
