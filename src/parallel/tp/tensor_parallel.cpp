#include "parallel/tp/tensor_parallel.h"

#include <chrono>

#include "core/check.h"

namespace loom {

TensorParallel::TensorParallel(Communicator* comm, bool sequence_parallel) : comm_(comm) {
  if (comm_) rank_ = comm_->rank(), size_ = comm_->size();
  if (size_ == 1) comm_ = nullptr;
  sp_ = sequence_parallel && size_ > 1;
}

TensorParallel TensorParallel::shape_only(int rank, int size, bool sequence_parallel) {
  TensorParallel tp;
  tp.rank_ = rank, tp.size_ = size, tp.sp_ = sequence_parallel && size > 1;
  return tp;
}

namespace {

// Adds the time until `f` returns to *total.
template <class F>
void timed(double* total, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  *total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void TensorParallel::wait(Work* work) const {
  if (work) timed(&exposed_s_, [&] { work->wait(); });
}

std::unique_ptr<Work> TensorParallel::gather_rows_async(const void* local, void* full, int64_t rows, int64_t width,
                                                        DType dtype) const {
  if (!sp_) return nullptr;
  LOOM_CHECK(rows % size_ == 0, "%lld rows do not split over %d sequence-parallel ranks", (long long)rows, size_);
  return comm_->all_gather_async(local, full, size_t(local_rows(rows) * width), dtype);
}

std::unique_ptr<Work> TensorParallel::reduce_rows_async(float* partial, float* out, int64_t rows,
                                                        int64_t width) const {
  if (!comm_) {
    LOOM_CHECK(out == partial, "one rank reduces in place");
    return nullptr;
  }
  if (sp_) return comm_->reduce_scatter_async(partial, out, size_t(local_rows(rows) * width), DType::f32, ReduceOp::Sum);
  LOOM_CHECK(out == partial, "without sequence parallelism the reduction is in place");
  return comm_->all_reduce_async(partial, size_t(rows * width), DType::f32, ReduceOp::Sum);
}

void TensorParallel::reduce_rows(float* partial, float* out, int64_t rows, int64_t width) const {
  auto w = reduce_rows_async(partial, out, rows, width);
  wait(w.get());
}

void TensorParallel::all_reduce(float* buf, size_t count, ReduceOp op) const {
  if (comm_) timed(&exposed_s_, [&] { comm_->all_reduce(buf, count, DType::f32, op); });
}

}  // namespace loom
