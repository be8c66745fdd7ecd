// ShardedOptimizer: the optimizer step of one data-parallel rank, given its
// reduced gradients (see GradReducer).
//
// ZeRO 0: every rank owns the whole buffer; the update is replicated.
// ZeRO 1, 2: rank r owns shard r of every bucket (BucketPlan): AdamW keeps
//   moments for those elements only and updates those parameters only, then
//   the ranks all-gather the updated shards, bucket by bucket, in place.
//   The fp32 parameter buffer is the master copy and a rank's shard of it is
//   its shard of the master weights; with mixed precision the update also
//   writes the 16-bit compute copy (WeightCopy). Every rank still holds all
//   the fp32 masters after the all-gather (docs/precision.md).
//
// Global-norm clipping counts every gradient element exactly once: each
// rank sums the squares of what it owns; under ZeRO the partial sums are
// combined in double precision, in rank order, identically on every rank;
// then the same over the model-parallel ranks (a tensor replicated over them
// counts once: FlatTensor::copies).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "optim/adamw.h"
#include "parallel/dp/bucket_plan.h"

namespace loom {

class ShardedOptimizer {
 public:
  // sharded: ZeRO 1 or 2 (plan.shards() must be dp.size()).
  // model_parallel: the ranks that hold the other parts of the model (tensor
  // and pipeline parallel), whose squares join the global norm; nullptr: none.
  ShardedOptimizer(const FlatLayout& layout, const BucketPlan& plan, Communicator& dp, bool sharded,
                   const AdamWConfig& cfg, Communicator* model_parallel = nullptr);

  // L2 norm of the whole gradient; `reduced` as GradReducer::reduced() gives it.
  double grad_norm(const float* reduced);
  // AdamW on the owned elements, then (ZeRO) the all-gather of parameters.
  // params: the whole flat buffer, plan.padded_total() floats. `copy` (mixed
  // precision: the 16-bit compute weights, laid out as params) is written
  // for the owned elements by the update itself, for the rest after the
  // all-gather.
  void step(float* params, const float* reduced, float lr, float grad_scale, const WeightCopy& copy = {});

  size_t state_bytes() const { return adamw_.state_bytes(); }  // this rank's AdamW moments
  AdamW& adamw() { return adamw_; }
  // The ranges of the flat buffer whose state this rank holds (the moments
  // are packed in this order).
  const std::vector<FlatRange>& owned() const { return owned_; }

 private:
  const BucketPlan& plan_;
  Communicator& dp_;
  Communicator* model_parallel_;
  bool sharded_;
  std::vector<FlatRange> owned_;
  AdamW adamw_;
};

}  // namespace loom
