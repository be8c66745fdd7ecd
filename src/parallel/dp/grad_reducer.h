// GradReducer: sums the gradient buffer over the data-parallel group bucket
// by bucket, overlapped with backward.
//
// Backward reports each tensor whose gradient is final (on_grad_ready, from
// the model's hook); once every tensor of the next bucket is, that bucket's
// non-blocking reduction starts while backward goes on. Buckets start in
// buffer order, which is the same on every rank. OpenMPI moves data only
// inside MPI calls, so every report also polls the reductions in flight.
// finish(), called when backward returns, waits for the rest.
//
//   AllReduce      (ZeRO 0): every rank ends with the summed buffer in place.
//   ReduceScatter  (ZeRO 1, 2): rank r receives the sum of shard r of every
//                  bucket into its shard buffer (packed in bucket order).
//                  With release_reduced (ZeRO 2) the buffer's pages are
//                  handed back as soon as every bucket over them is reduced
//                  (buckets finish in order, so the reduced part is a prefix),
//                  and outside backward a rank holds only its shard.
//
// The reduction is a plain sum: the caller scales the loss by
// 1 / (replicas x micro-batches), so the sum is the mean gradient and the
// average is taken exactly once.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/arena.h"
#include "parallel/dp/bucket_plan.h"
#include "core/memory_resource.h"
#include "kernels/backend_fwd.h"

namespace loom {

// Timers of the reductions, summed over the steps that reduced.
//
// MPI moves and adds the data inside MPI calls, on this rank's own core, so
// time spent in the calls that start and poll reductions during backward is
// not time backward computed: it counts as reduction time, not overlapped.
struct ReduceTimes {
  int steps = 0;
  double in_flight_s = 0;   // time with at least one bucket between its start and its completion
  double overlapped_s = 0;  // the part of in_flight_s before backward ended, less calls_s
  double calls_s = 0;       // during backward, inside the calls that start and poll reductions
  double wait_s = 0;        // in finish(): waiting after backward for the rest
  // The share of reduction time that ran while backward was still computing.
  double overlap() const { return in_flight_s > 0 ? overlapped_s / in_flight_s : 0; }
};

class GradReducer {
 public:
  enum class Mode { AllReduce, ReduceScatter };

  // wire: the dtype the reduction sends. f32 (the default) reduces the fp32
  // gradients as they are; bf16 rounds each bucket to bf16 first, reduces
  // that as 16 bits on the wire (Communicator::all_reduce_sum_16bit_async:
  // half the bytes; each partial sum is added in fp32 and rounded back to
  // bf16, so precision falls with the rank count), and widens the result
  // back into fp32. docs/precision.md gives the risk.
  // grads: a releasable buffer of the backend's memory (release_reduced
  // hands back the reduced prefix where the resource can).
  GradReducer(Backend& ops, const BucketPlan& plan, Communicator& dp, ReleasableBuffer& grads, Mode mode,
              bool release_reduced, DType wire = DType::f32);

  // Before the backward whose gradients are to be reduced.
  void begin();
  // Tensor `tensor` (an index of the flat layout) has its final gradient.
  void on_grad_ready(int tensor);
  // After that backward: waits until every bucket is reduced.
  void finish();

  // The reduced gradients: the whole buffer (AllReduce) or this rank's shard.
  const float* reduced() const { return mode_ == Mode::AllReduce ? grads_.data() : shard_.at<float>(0); }
  float* reduced() { return mode_ == Mode::AllReduce ? grads_.data() : shard_.at<float>(0); }
  size_t shard_bytes() const { return shard_.size(); }
  // The whole reduced gradient into full[plan.padded_total()] (all-gathers the
  // shards; blocking; for tests and diagnostics).
  void gather(float* full) const;
  const ReduceTimes& times() const { return times_; }

 private:
  using Clock = std::chrono::steady_clock;
  void launch_ready();
  void poll();
  void complete(size_t b);
  void release_reduced_prefix();

  Backend& ops_;
  const BucketPlan& plan_;
  Communicator& dp_;
  ReleasableBuffer& grads_;
  Mode mode_;
  bool release_reduced_;
  DType wire_;
  Arena shard_;
  Arena wire_buf_;  // bf16 wire: the rounded buckets, then (reduce-scatter) the reduced shards after them
  std::vector<std::pair<int, int>> tensor_buckets_;  // per tensor: the buckets [first, end) it overlaps

  // Per step.
  bool active_ = false;
  std::vector<int> pending_;  // per bucket: tensors not yet final
  std::vector<std::unique_ptr<Work>> work_;
  std::vector<Clock::time_point> started_, done_at_;
  std::vector<bool> done_;
  size_t next_launch_ = 0, first_unfinished_ = 0;
  double calls_s_ = 0;  // this step's share of times_.calls_s
  int64_t released_until_ = 0;  // floats of the buffer handed back this step
  ReduceTimes times_;
};

}  // namespace loom
