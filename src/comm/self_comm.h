// A communicator over a group of one rank, with no MPI underneath: every
// collective is a copy (or nothing). Lets single-process code and tests use
// the same code path as a distributed run without initializing MPI.
#pragma once

#include <cstring>

#include "comm/communicator.h"
#include "core/check.h"

namespace loom {

class SelfComm final : public Communicator {
 public:
  explicit SelfComm(std::string name, int world_rank = 0) : name_(std::move(name)), members_{world_rank} {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return members_; }

  std::unique_ptr<Work> all_reduce_async(void*, size_t, DType, ReduceOp) override { return done(); }
  std::unique_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                             ReduceOp) override {
    if (send != recv) std::memmove(recv, send, count * dtype_size(dtype));
    return done();
  }
  std::unique_ptr<Work> all_gather_async(const void* send, void* recv, size_t count, DType dtype) override {
    if (send != recv) std::memmove(recv, send, count * dtype_size(dtype));
    return done();
  }
  std::unique_ptr<Work> broadcast_async(void*, size_t, DType, int root) override {
    LOOM_CHECK(root == 0, "broadcast root %d in a group of one", root);
    return done();
  }
  std::unique_ptr<Work> send_async(const void*, size_t, DType, int peer, int) override {
    throw Error(strprintf("send to rank %d in a group of one (%s)", peer, name_.c_str()));
  }
  std::unique_ptr<Work> recv_async(void*, size_t, DType, int peer, int) override {
    throw Error(strprintf("recv from rank %d in a group of one (%s)", peer, name_.c_str()));
  }
  void barrier() override {}
  std::unique_ptr<Work> all_to_all_rows_async(const void* send, const int* send_rows, const int* send_first,
                                              void* recv, const int* recv_rows, const int* recv_first, size_t row,
                                              DType dtype) override {
    LOOM_CHECK(send_rows[0] == recv_rows[0], "all_to_all of %d rows receiving %d in a group of one", send_rows[0],
               recv_rows[0]);
    const size_t bytes = row * dtype_size(dtype);
    std::memmove(static_cast<char*>(recv) + size_t(recv_first[0]) * bytes,
                 static_cast<const char*>(send) + size_t(send_first[0]) * bytes, size_t(send_rows[0]) * bytes);
    return done();
  }

 private:
  struct Done final : Work {
    bool test() override { return true; }
    void wait() override {}
  };
  static std::unique_ptr<Work> done() { return std::make_unique<Done>(); }
  std::string name_;
  std::vector<int> members_;
};

}  // namespace loom
