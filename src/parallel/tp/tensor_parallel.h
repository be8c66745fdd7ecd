// TensorParallel: the communication at the edges of Megatron-LM's
// tensor-parallel regions, over one tp group.
//
// Inside a region (from a column-parallel linear through the row-parallel one
// after it) each rank computes with its slice of the weights on every row of
// the activations. At the edges:
//   entering  forward: identity, or all-gather of the rows (sequence parallel)
//             backward: all-reduce of the input gradient, or reduce-scatter
//   leaving   forward: all-reduce of the partial sums, or reduce-scatter
//             backward: identity, or all-gather of the rows
// With sequence parallelism the activations between regions (layernorms,
// residual stream) hold only this rank's share of the B x T token rows: the
// contiguous rows [rank x rows / tp, (rank + 1) x rows / tp).
//
// One rank (comm == nullptr or a group of 1): every call is free.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/communicator.h"

namespace loom {

class TensorParallel {
 public:
  explicit TensorParallel(Communicator* comm = nullptr, bool sequence_parallel = false);
  // A group's shape without its communicator, for plans (sizes) only:
  // calls that would communicate must not be made.
  static TensorParallel shape_only(int rank, int size, bool sequence_parallel);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool sequence_parallel() const { return sp_; }
  Communicator* comm() const { return comm_; }

  // Rows of a [rows, *] activation this rank holds outside the regions, and
  // the first of them.
  int64_t local_rows(int64_t rows) const { return sp_ ? rows / size_ : rows; }
  int64_t first_row(int64_t rows) const { return sp_ ? local_rows(rows) * rank_ : 0; }

  // Entering a region: every row. Sequence parallel: all-gathers
  // local[local_rows, width] into full[rows, width] and returns full;
  // otherwise returns local (it already holds every row).
  // T: float, bf16 or f16 (16-bit activations travel as they are stored).
  template <class T>
  const T* gather_rows(const T* local, T* full, int64_t rows, int64_t width) const {
    if (!sp_) return local;
    wait(gather_rows_async(local, full, rows, width).get());
    return full;
  }
  // The same, started now (nullptr when nothing needs to travel).
  template <class T>
  std::unique_ptr<Work> gather_rows_async(const T* local, T* full, int64_t rows, int64_t width) const {
    return gather_rows_async(local, full, rows, width, dtype_of<T>());
  }
  std::unique_ptr<Work> gather_rows_async(const void* local, void* full, int64_t rows, int64_t width,
                                          DType dtype) const;

  // Leaving a region: partial[rows, width] summed over the ranks, this rank's
  // rows into out[local_rows, width]. Sequence parallel: reduce-scatter;
  // otherwise an all-reduce in place (out must be partial). nullptr when
  // nothing needs to travel.
  std::unique_ptr<Work> reduce_rows_async(float* partial, float* out, int64_t rows, int64_t width) const;
  void reduce_rows(float* partial, float* out, int64_t rows, int64_t width) const;

  // buf[count] reduced over the group in place (no-op on one rank).
  void all_reduce(float* buf, size_t count, ReduceOp op) const;

  // Waits for work started above (nullptr: nothing to wait for).
  void wait(Work* work) const;
  // Seconds spent inside this group's blocking calls and waits so far: the
  // tensor-parallel communication that computation did not hide.
  double exposed_seconds() const { return exposed_s_; }

 private:
  Communicator* comm_;
  int rank_ = 0, size_ = 1;
  bool sp_;
  mutable double exposed_s_ = 0;
};

}  // namespace loom
