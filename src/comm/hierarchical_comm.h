// HierarchicalComm: a group whose ranks sit on several nodes, with its
// large sums taken in three stages so that each node's data crosses the
// network once:
//
//   1. reduce inside each node onto the node's first member (shared memory),
//   2. all-reduce between those first members, one per node (the network),
//   3. broadcast inside each node from its first member.
//
// A flat ring all-reduce over P ranks spread over N nodes sends 2(P-1)/P of
// the buffer over each of the ring's links, of which N cross nodes; here the
// network carries 2(N-1)/N of it once per node. Whether that wins depends on
// the links (OpenMPI's own algorithms may do better on some): runs choose it
// by measurement (parallel/grid/dp_reduce.h).
//
// Non-blocking sums (all_reduce_async and all_reduce_sum_16bit_async with
// Sum or Max, at least kMinElements elements) return a Work that moves to the
// next stage when it is polled (test(), wait(), or another hierarchical
// operation's poll) and, with a progress engine, whenever the engine's thread
// polls (a driver of the engine: the chain moves while backward computes).
// Each stage has its own communicator, and a stage of one operation is
// issued only after the same stage of every operation started before it, by
// whichever thread holds the group's lock: each communicator then sees its
// operations in the same order on every rank, as MPI requires, however the
// stages' timing differs between ranks. Every other operation (small sums, averages,
// reduce-scatters, gathers, transfers, blocking forms) runs on the flat
// group. Deadlines and flight records are the stage groups' own ("dp.node",
// "dp.nodes", "dp.bcast").
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/progress_engine.h"

namespace loom {

class HierarchicalComm final : public Communicator {
 public:
  // Sums shorter than this run flat: three stages' latency would cost more
  // than the bytes save.
  static constexpr size_t kMinElements = 16384;

  // flat: the whole group (not owned: it stays usable on its own). node: its members on this rank's node (this rank's
  // first member leads). nodes: the leaders of every node, nullptr on ranks
  // that do not lead. bcast: the same members as node, a separate
  // communicator for stage 3. description: for logs ("2 nodes of 2 ranks").
  // engine: the stage groups' progress engine, which then also issues the
  // stages (nullptr: only the caller's polls do).
  HierarchicalComm(Communicator& flat, std::unique_ptr<Communicator> node,
                   std::unique_ptr<Communicator> nodes, std::unique_ptr<Communicator> bcast, std::string description,
                   ProgressEngine* engine = nullptr);
  ~HierarchicalComm() override;

  int rank() const override { return flat_.rank(); }
  int size() const override { return flat_.size(); }
  const std::string& name() const override { return flat_.name(); }
  const std::vector<int>& world_ranks() const override { return flat_.world_ranks(); }
  const std::string& describe() const { return description_; }

  std::unique_ptr<Work> all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) override;
  std::unique_ptr<Work> all_reduce_sum_16bit_async(void* buf, size_t count, DType dtype) override;
  std::unique_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                             ReduceOp op) override {
    return flat_.reduce_scatter_async(send, recv, count, dtype, op);
  }
  std::unique_ptr<Work> reduce_scatter_sum_16bit_async(const void* send, void* recv, size_t count,
                                                       DType dtype) override {
    return flat_.reduce_scatter_sum_16bit_async(send, recv, count, dtype);
  }
  std::unique_ptr<Work> all_gather_async(const void* send, void* recv, size_t count, DType dtype) override {
    return flat_.all_gather_async(send, recv, count, dtype);
  }
  std::unique_ptr<Work> broadcast_async(void* buf, size_t count, DType dtype, int root) override {
    return flat_.broadcast_async(buf, count, dtype, root);
  }
  std::unique_ptr<Work> send_async(const void* buf, size_t count, DType dtype, int peer, int tag) override {
    return flat_.send_async(buf, count, dtype, peer, tag);
  }
  std::unique_ptr<Work> recv_async(void* buf, size_t count, DType dtype, int peer, int tag) override {
    return flat_.recv_async(buf, count, dtype, peer, tag);
  }
  std::unique_ptr<Work> all_to_all_rows_async(const void* send, const int* send_rows, const int* send_first,
                                              void* recv, const int* recv_rows, const int* recv_first, size_t row,
                                              DType dtype) override {
    return flat_.all_to_all_rows_async(send, send_rows, send_first, recv, recv_rows, recv_first, row, dtype);
  }
  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
    flat_.all_reduce(buf, count, dtype, op);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    flat_.reduce_scatter(send, recv, count, dtype, op);
  }
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    flat_.all_gather(send, recv, count, dtype);
  }
  void broadcast(void* buf, size_t count, DType dtype, int root) override { flat_.broadcast(buf, count, dtype, root); }
  void barrier() override { flat_.barrier(); }
  void set_flight_recorder(FlightRecorder* recorder) override;

  // One three-stage sum (defined in the .cpp; public for its Work handle).
  struct Chain;
  // Moves every operation in flight as far as it can go; whether `chain` is done.
  bool poll(const Chain& chain);
  // Blocks until `chain` is done (waiting on the oldest stage in flight).
  void wait_for(const Chain& chain);

 private:
  std::unique_ptr<Work> start(void* buf, size_t count, DType dtype, ReduceOp op, bool wire16);
  std::unique_ptr<Work> issue(Chain& c, int stage);
  void advance();  // in start order, under mutex_
  bool drive();    // the engine's poll: advance() unless the caller holds the lock; true while busy

  Communicator& flat_;
  std::unique_ptr<Communicator> node_, nodes_, bcast_;
  std::string description_;
  std::mutex mutex_;  // over everything below, the chains and the stage groups' calls
  std::deque<std::shared_ptr<Chain>> live_;  // started, not yet done, in start order
  uint64_t started_ = 0;
  uint64_t issued_[3] = {0, 0, 0};  // per stage: how many chains (in start order) have issued it
  ProgressEngine* engine_ = nullptr;
  int driver_ = -1;
};

}  // namespace loom
