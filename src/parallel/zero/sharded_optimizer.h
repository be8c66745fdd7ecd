// ShardedOptimizer: the optimizer step of one data-parallel rank, given its
// reduced gradients (see GradReducer).
//
// ZeRO 0: every rank owns the whole buffer; the update is replicated.
// ZeRO 1, 2: rank r owns shard r of every bucket (BucketPlan): AdamW keeps
//   moments for those elements only and updates those parameters only.
//   fp32: the parameter buffer is both the master and the compute copy; the
//   ranks all-gather the updated shards, bucket by bucket, in place.
//   bf16 / fp16 (sharded masters, as Megatron's distributed optimizer): the
//   fp32 masters of the shard live packed in master(); after the update the
//   ranks all-gather them bucket by bucket through a small staging buffer,
//   from which each rank writes the whole 16-bit compute copy and the fp32
//   values of the tensors the model reads in fp32 (norms, biases,
//   embeddings: all but FlatTensor::products_only). The fp32 values of the
//   product-only matrices exist only in the owners' shards.
// ZeRO 3: the masters are sharded as above and nothing is gathered after
//   the update: ParamGather gathers each block when the model reads it.
//
// Global-norm clipping counts every gradient element exactly once: each
// rank sums the squares of what it owns; under ZeRO the partial sums are
// combined in double precision, in rank order, identically on every rank;
// then the same over the model-parallel ranks (a tensor replicated over them
// counts once: FlatTensor::copies).
#pragma once

#include <cmath>
#include <memory>

#include "comm/communicator.h"
#include "core/arena.h"
#include "optim/adamw.h"
#include "parallel/dp/bucket_plan.h"

namespace loom {

class ShardedOptimizer {
 public:
  // sharded: ZeRO 1 or 2 (plan.shards() must be dp.size()).
  // model_parallel: the ranks that hold the other parts of the model (tensor
  // and pipeline parallel), whose squares join the global norm; nullptr: none.
  // sharded_masters: keep the fp32 masters of the shard packed in master()
  // (needs sharded); with publish, step() then writes the whole compute copy
  // and the fp32 values the model reads (ZeRO 1, 2 in mixed precision);
  // without, nothing (ZeRO 3).
  ShardedOptimizer(Backend& ops, const FlatLayout& layout, const BucketPlan& plan, Communicator& dp, bool sharded,
                   const AdamWConfig& cfg, Communicator* model_parallel = nullptr, bool sharded_masters = false,
                   bool publish = false);

  // The sum of squares of this group's whole gradient over the data ranks
  // (not yet over the model-parallel ranks); `reduced` as
  // GradReducer::reduced() gives it.
  double grad_sum_of_squares(const float* reduced);
  // Over the model-parallel ranks too: the sum of squares of every group's
  // whole gradient, each group's from grad_sum_of_squares.
  double over_model_ranks(double sum_of_squares);
  // L2 norm of the whole gradient (one group).
  double grad_norm(const float* reduced) { return std::sqrt(over_model_ranks(grad_sum_of_squares(reduced))); }
  // AdamW on the owned elements, then (ZeRO) the all-gather of parameters.
  // params: the whole flat buffer, plan.padded_total() floats. `copy` (mixed
  // precision: the 16-bit compute weights, laid out as params) is written
  // for the owned elements by the update itself, for the rest after the
  // all-gather.
  void step(float* params, const float* reduced, float lr, float grad_scale, const WeightCopy& copy = {});
  // Sharded masters: writes `copy` and the fp32 values the model reads into
  // params (both laid out as the flat buffer) from every rank's master shard.
  void publish(float* params, const WeightCopy& copy);
  // The whole fp32 parameters into full[plan.padded_total()] from the shards
  // (blocking; every rank of the group calls it).
  void gather_masters(float* full);
  // This rank's fp32 master shard (packed as the owned ranges), or nullptr
  // when the masters are not sharded.
  float* master() { return sharded_masters_ ? master_.at<float>(0) : nullptr; }
  size_t master_bytes() const { return master_.size(); }

  size_t state_bytes() const { return adamw_.state_bytes(); }  // this rank's AdamW moments
  AdamW& adamw() { return adamw_; }
  // The ranges of the flat buffer whose state this rank holds (the moments
  // are packed in this order).
  const std::vector<FlatRange>& owned() const { return owned_; }

 private:
  Backend& ops_;
  const BucketPlan& plan_;
  Communicator& dp_;
  Communicator* model_parallel_;
  bool sharded_, sharded_masters_, publish_;
  std::vector<FlatRange> owned_;
  AdamW adamw_;
  Arena master_;
  // Per bucket: the ranges of tensors the model reads in fp32 (publish).
  std::vector<std::vector<FlatRange>> fp32_read_;
};

}  // namespace loom
