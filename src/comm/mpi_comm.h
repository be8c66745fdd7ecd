// Communicator over MPI (OpenMPI), and the process-wide MPI lifetime.
//
// 16-bit reductions: MPI has no bf16/f16 types, so all_reduce and
// reduce_scatter of bf16/f16 convert to an fp32 buffer, reduce that in fp32
// and convert back (the sum is fp32-exact as MPI's; the wire carries fp32).
// all_gather, broadcast, send and recv move 16-bit data as it is.
//
// No silent hangs: every operation has a deadline (MpiOptions::timeout_s):
// non-blocking ones poll against it, blocking ones run under a Watchdog. A
// rank whose operation does not finish in time prints what it was waiting
// on (operation, group, member ranks, size), waits a short grace period so
// the other stuck ranks can print theirs, then ends the whole job.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/watchdog.h"

namespace loom {

class ProgressEngine;

struct MpiOptions {
  double timeout_s = 300;  // per operation; <= 0 waits forever
  // The communication thread that completes non-blocking operations
  // (comm/progress_engine.h; MpiRuntime::progress_engine); nullptr: the
  // caller's test() and wait() drive them, as MPI's own calls.
  ProgressEngine* engine = nullptr;
};

// MPI_Init_thread on construction, MPI_Finalize on destruction. Works under
// mpirun/srun and as a singleton (a plain `loom train`).
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Started by a launcher (mpirun, srun: its rank variable was set before
  // MPI started), not as a singleton; even with one rank.
  bool launched() const { return launched_; }
  // Ends every rank of the job (MPI_Abort on the world) with `code`.
  [[noreturn]] static void abort_job(int code);

  // MPI was started with MPI_THREAD_MULTIPLE (a progress engine may run).
  bool threads_multiple() const { return multiple_; }
  // The job's ranks sit on more than one node (MPI's shared-memory split
  // of the world, taken at start-up; the same answer on every rank).
  bool world_spans_nodes() const { return world_spans_nodes_; }
  // Starts the process's progress engine on first use (nullptr when MPI
  // gives no MPI_THREAD_MULTIPLE); it stops before MPI_Finalize. Its thread
  // asks for a short scheduler slice only when the world spans nodes
  // (ProgressEngine::Options::slice_us; mpi_comm.cpp says why).
  ProgressEngine* progress_engine(int poll_us = 50);
  bool progress_engine_started() const { return engine_ != nullptr; }

 private:
  int rank_ = 0, size_ = 1;
  bool launched_ = false;
  bool multiple_ = false;
  bool world_spans_nodes_ = false;
  std::unique_ptr<ProgressEngine> engine_;
};

class MpiComm final : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD: every world rank calls it with the color
  // of its own group; `members` are that group's world ranks, in group-rank
  // order (the key of the split is the position in `members`). A rank in no
  // group of this split passes color < 0 and gets nullptr.
  static std::unique_ptr<MpiComm> split(const std::string& name, int color, const std::vector<int>& members,
                                        const MpiOptions& opts);
  // A communicator over every rank (a duplicate of MPI_COMM_WORLD).
  static std::unique_ptr<MpiComm> world(const MpiOptions& opts);
  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Whether the group's ranks sit on more than one node (MPI's shared-memory
  // split); the same answer on every member.
  bool spans_nodes() const { return spans_nodes_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return members_; }

  std::unique_ptr<Work> all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) override;
  std::unique_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                             ReduceOp op) override;
  std::unique_ptr<Work> all_gather_async(const void* send, void* recv, size_t count, DType dtype) override;
  std::unique_ptr<Work> broadcast_async(void* buf, size_t count, DType dtype, int root) override;
  std::unique_ptr<Work> send_async(const void* buf, size_t count, DType dtype, int peer, int tag) override;
  std::unique_ptr<Work> recv_async(void* buf, size_t count, DType dtype, int peer, int tag) override;
  // MPI_UINT16_T buffers reduced by a user-defined MPI_Op (fp32 add, round).
  std::unique_ptr<Work> all_reduce_sum_16bit_async(void* buf, size_t count, DType dtype) override;
  std::unique_ptr<Work> reduce_scatter_sum_16bit_async(const void* send, void* recv, size_t count,
                                                       DType dtype) override;
  std::unique_ptr<Work> reduce_async(void* buf, size_t count, DType dtype, ReduceOp op, int root) override;
  std::unique_ptr<Work> reduce_sum_16bit_async(void* buf, size_t count, DType dtype, int root) override;
  // Blocking forms use MPI's blocking collectives under a Watchdog
  // deadline, except all_reduce from this many bytes up on a group that
  // spans nodes: it starts the non-blocking one and waits (mpi_comm.cpp
  // says why).
  static constexpr size_t kNonBlockingAllReduceBytes = size_t(64) << 10;
  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* buf, size_t count, DType dtype, int root) override;
  void barrier() override;
  // MPI_Ialltoallv over a contiguous type of one row.
  std::unique_ptr<Work> all_to_all_rows_async(const void* send, const int* send_rows, const int* send_first,
                                              void* recv, const int* recv_rows, const int* recv_first, size_t row,
                                              DType dtype) override;
  void set_flight_recorder(FlightRecorder* recorder) override;

  MPI_Comm handle() const { return comm_; }

 private:
  MpiComm(MPI_Comm comm, std::string name, std::vector<int> members, const MpiOptions& opts);
  // Throws loom::Error naming the rank, the group and the MPI error.
  void check(int mpi_result, const char* what) const;
  std::string describe(const char* op, size_t count, DType dtype) const;
  Watchdog& watchdog();  // started on first blocking use
  // The flight recorder's entry for a collective (seq 0 when none), and the
  // watchdog's explanation of collective #seq.
  uint64_t enter_collective(const char* op, size_t count, DType dtype);
  std::function<std::string(const std::string&)> explain_collective(uint64_t seq);
  // A reduce-scatter's requests: one MPI_Ireduce per rank (block r onto rank r).
  std::vector<MPI_Request> rooted_reduces(const void* send, void* recv, size_t count, MPI_Datatype type, MPI_Op op);

  MPI_Comm comm_;
  std::string name_;
  std::vector<int> members_;
  MpiOptions opts_;
  int rank_ = 0, size_ = 1;
  bool spans_nodes_ = false;
  std::unique_ptr<Watchdog> watchdog_;
  FlightRecorder* flight_ = nullptr;
  int flight_slot_ = -1;
  MPI_Op sum_bf16_ = MPI_OP_NULL, sum_f16_ = MPI_OP_NULL;  // made on first use, freed with the group
  MPI_Op sum_16bit_op(DType dtype);
};

}  // namespace loom
