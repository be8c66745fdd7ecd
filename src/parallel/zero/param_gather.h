// ParamGather: ZeRO-3's parameters.
//
// Each data-parallel rank keeps the fp32 master values of its shard of every
// bucket only (packed in bucket order, as ShardedOptimizer owns them). The
// flat layout is cut into segments (a block's tensors; each other tensor on
// its own) whose starts are bucket cuts (BucketPlan's breaks). A segment is
// all-gathered, bucket by bucket, into a window of address space of its own
// (2 MiB aligned, in pages that exist only while used) just before the model
// reads it, rounded there into the 16-bit compute copy in bf16 / fp16, and
// handed back to the OS when released. acquire() also starts the gathers of
// the segments read next, so they travel while the current one computes.
//
// Every rank of the group must call acquire/release in the same order (the
// model's fixed order of blocks does so): the gathers are collectives.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "parallel/dp/bucket_plan.h"
#include "core/memory_resource.h"
#include "kernels/backend_fwd.h"

namespace loom {

class ParamGather {
 public:
  // segments: runs of tensors [first, end) that together cover the layout,
  // in order; plan: made with a break at every segment's first offset.
  // master: this rank's shard (plan.shard_total() floats), read at each gather.
  // compute: f32, or bf16 / f16 for a 16-bit copy beside the fp32 values.
  ParamGather(Backend& ops, const FlatLayout& layout, const std::vector<std::pair<int, int>>& segments, const BucketPlan& plan,
              Communicator& dp, const float* master, DType compute);

  // Makes the segments holding `tensors` present (waiting for their
  // gathers); starts those of `then`.
  void acquire(const std::vector<int>& tensors, const std::vector<int>& then);
  // Each acquire is matched by one release of the same tensors.
  void release(const std::vector<int>& tensors);
  // Waits for gathers started ahead and never acquired, and hands them back.
  void settle();

  // Per tensor: where its fp32 values / 16-bit copy are while present.
  const std::vector<float*>& tensor_params() const { return params_at_; }
  const std::vector<void*>& tensor_weights() const { return weights_at_; }
  // Bytes of gathered parameters in memory now, and the most at once so far.
  size_t resident_bytes() const { return windows_->resident_bytes() + (copy_ ? copy_->resident_bytes() : 0); }
  size_t peak_bytes() const { return peak_bytes_; }
  // Bytes of segments present or in flight now (what peak_bytes() maximises).
  size_t gathered_bytes() const { return gathered_; }
  int64_t segments() const { return int64_t(segs_.size()); }
  // Seconds spent waiting for gathers to complete (started ahead or not), so far.
  double wait_seconds() const { return wait_s_; }

 private:
  enum class State { absent, in_flight, present };
  struct Segment {
    int first_bucket = 0, end_bucket = 0;
    int64_t lo = 0, hi = 0;  // the flat range its buckets cover
    int64_t window = 0;      // floats into the windows
    int refs = 0;
    State state = State::absent;
    std::vector<std::unique_ptr<Work>> gathers;
  };
  void start(Segment& s);
  void finish(Segment& s);
  void drop(Segment& s);
  std::vector<int> segments_of(const std::vector<int>& tensors) const;

  Backend& ops_;
  const BucketPlan& plan_;
  Communicator& dp_;
  const float* master_;
  DType compute_;
  std::vector<Segment> segs_;
  std::vector<int> segment_of_;  // per tensor
  std::unique_ptr<ReleasableBuffer> windows_;  // fp32 values (the backend's releasable memory)
  std::unique_ptr<ReleasableBuffer> copy_;  // bf16 / fp16: the same windows, 16-bit
  std::vector<float*> params_at_;
  std::vector<void*> weights_at_;
  size_t gathered_ = 0, peak_bytes_ = 0;  // bytes of present or in-flight segments
  double wait_s_ = 0;
};

}  // namespace loom
