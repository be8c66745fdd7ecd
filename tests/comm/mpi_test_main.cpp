// main() of the multi-rank tests: MPI around GoogleTest. Every rank runs
// every test; only rank 0 prints; the job fails if any rank fails.
//
// Fault drills (used by faults_test.sh, not by plain runs):
//   --fault=kill   rank 1 kills itself while the others wait in an all_reduce
//   --fault=stuck  rank 1 skips a blocking all_reduce; the others time out after 3 s
//   --fault=stuck-async  the same with a non-blocking all_reduce, waited on
//   --fault=stuck-async-engine  the same, completed by a progress engine
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <thread>

#include "comm/mpi_comm.h"
#include "comm/progress_engine.h"
#include "kernels/cpu/isa.h"

namespace {

int run_fault_drill(const std::string& kind, int rank) {
  std::unique_ptr<loom::ProgressEngine> engine;
  if (kind == "stuck-async-engine") engine = std::make_unique<loom::ProgressEngine>(loom::ProgressEngine::Options{20});
  auto world = loom::MpiComm::world(loom::MpiOptions{kind == "kill" ? 120.0 : 3.0, engine.get()});
  float x = 1.f;
  world->barrier();
  if (rank == 1) {
    if (kind == "kill") std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(60));  // "stuck": never joins
    return 0;
  }
  if (kind == "stuck-async" || kind == "stuck-async-engine") world->all_reduce_async(&x, 1, loom::DType::f32, loom::ReduceOp::Sum)->wait();
  else world->all_reduce(&x, 1, loom::DType::f32, loom::ReduceOp::Sum);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  loom::MpiRuntime mpi(&argc, &argv);
  for (int i = 1; i < argc; i++)
    if (std::strncmp(argv[i], "--fault=", 8) == 0) return run_fault_drill(argv[i] + 8, mpi.world_rank());

  ::testing::InitGoogleTest(&argc, argv);
  loom::cpu::cap_isa(std::nullopt);  // LOOM_MAX_CPU_ISA: the portable paths on any CPU
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (mpi.world_rank() != 0) delete listeners.Release(listeners.default_result_printer());
  int failed = RUN_ALL_TESTS() != 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed) std::fprintf(stderr, "rank %d: tests failed\n", mpi.world_rank());
  return any_failed;
}
