// Communicator: the collectives and point-to-point transfers every parallel
// feature uses, over one group of ranks.
//
// Every operation has a non-blocking form returning a Work handle, and a
// blocking form (the same, waited on). Buffers are fp32, bf16 or f16.
// Reductions of 16-bit data accumulate in fp32 (see MpiComm for how).
// MpiComm implements this over MPI; an NCCL implementation on GPUs plugs in
// behind the same interface (its ids bootstrapped over MPI).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace loom {

class FlightRecorder;

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

// A pending operation. wait() blocks until it is done (and finishes any
// post-processing, such as the division of an average); test() polls.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // within this group
  virtual int size() const = 0;
  // The group's name ("dp", "tp", ...) and its members as world ranks.
  virtual const std::string& name() const = 0;
  virtual const std::vector<int>& world_ranks() const = 0;

  // In place: buf[count] becomes op over every rank's buf.
  virtual std::unique_ptr<Work> all_reduce_async(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  // send[count * size()] reduced; rank r receives block r into recv[count].
  virtual std::unique_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                                     ReduceOp op) = 0;
  // recv[count * size()] = every rank's send[count], in rank order. In place
  // when send is this rank's own block of recv (recv + rank() * count).
  virtual std::unique_ptr<Work> all_gather_async(const void* send, void* recv, size_t count, DType dtype) = 0;
  // buf[count] of rank `root` (a rank of this group) copied to every rank.
  virtual std::unique_ptr<Work> broadcast_async(void* buf, size_t count, DType dtype, int root) = 0;
  virtual std::unique_ptr<Work> send_async(const void* buf, size_t count, DType dtype, int peer, int tag) = 0;
  virtual std::unique_ptr<Work> recv_async(void* buf, size_t count, DType dtype, int peer, int tag) = 0;
  virtual void barrier() = 0;
  // All-to-all of rows (`row` elements each; bytes moved as they are, so
  // int32 data may travel as f32): to group rank r go send_rows[r] rows
  // starting send_first[r] rows into send; from rank r come recv_rows[r]
  // rows, stored recv_first[r] rows into recv. Each array holds size()
  // entries (copied: they may change once this returns); counting in rows
  // keeps a step's exchange far below MPI's int count. The expert
  // all-to-all of expert parallelism (model/moe/expert_exchange.h).
  virtual std::unique_ptr<Work> all_to_all_rows_async(const void* send, const int* send_rows, const int* send_first,
                                                      void* recv, const int* recv_rows, const int* recv_first,
                                                      size_t row, DType dtype);

  // Records every operation from now on in `recorder` (which outlives this
  // group or is detached with nullptr), so that a timeout names the member
  // that never arrived. Groups without a transport to wait on ignore it.
  virtual void set_flight_recorder(FlightRecorder* /*recorder*/) {}

  // Sums of bf16 / f16 data that travel as 16 bits: every partial sum is
  // formed in fp32 from two 16-bit values and rounded back, so half the bytes
  // of the reductions above cross the wire, and the result carries one
  // rounding per partial sum (the error grows with the group's size). For
  // gradient reductions that trade precision for bandwidth
  // (precision.grad_reduce = "bf16"). Same buffers as all_reduce_async /
  // reduce_scatter_async with ReduceOp::Sum. By default (an implementation
  // without a 16-bit wire) the fp32-accumulating reductions run instead.
  virtual std::unique_ptr<Work> all_reduce_sum_16bit_async(void* buf, size_t count, DType dtype) {
    return all_reduce_async(buf, count, dtype, ReduceOp::Sum);
  }
  virtual std::unique_ptr<Work> reduce_scatter_sum_16bit_async(const void* send, void* recv, size_t count,
                                                               DType dtype) {
    return reduce_scatter_async(send, recv, count, dtype, ReduceOp::Sum);
  }

  // buf[count] of every rank reduced into `root`'s buf (in place there; the
  // other ranks' buffers are left as they were, or hold the result). By
  // default an all-reduce, which gives root the same sum.
  virtual std::unique_ptr<Work> reduce_async(void* buf, size_t count, DType dtype, ReduceOp op, int /*root*/) {
    return all_reduce_async(buf, count, dtype, op);
  }
  // reduce_async's sum with the 16-bit wire of all_reduce_sum_16bit_async.
  virtual std::unique_ptr<Work> reduce_sum_16bit_async(void* buf, size_t count, DType dtype, int /*root*/) {
    return all_reduce_sum_16bit_async(buf, count, dtype);
  }

  // Blocking forms. By default the non-blocking operation, waited on; an
  // implementation may override them with a faster blocking path.
  virtual void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
    all_reduce_async(buf, count, dtype, op)->wait();
  }
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
    reduce_scatter_async(send, recv, count, dtype, op)->wait();
  }
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype) {
    all_gather_async(send, recv, count, dtype)->wait();
  }
  virtual void broadcast(void* buf, size_t count, DType dtype, int root) {
    broadcast_async(buf, count, dtype, root)->wait();
  }
  void send(const void* buf, size_t count, DType dtype, int peer, int tag = 0) {
    send_async(buf, count, dtype, peer, tag)->wait();
  }
  void recv(void* buf, size_t count, DType dtype, int peer, int tag = 0) {
    recv_async(buf, count, dtype, peer, tag)->wait();
  }
};

}  // namespace loom
