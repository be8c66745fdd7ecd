// Replica: one data-parallel replica as the train loop drives it — the model,
// its gradient buffer, the bucketed reducer and the (ZeRO-sharded) optimizer,
// wired together (parallel/ knows nothing of the model; this is where the
// model's gradient hook meets the reducer).
//
// A step: zero_grads(); forward_backward() for each micro-batch (gradients
// accumulate; only the last one's backward starts reductions, bucket by
// bucket); reduce() waits for them and returns the global gradient norm;
// update() runs AdamW (and, under ZeRO, the all-gather of parameters).
#pragma once

#include <memory>
#include <vector>

#include "config/run_config.h"
#include "model/gpt.h"
#include "parallel/dp/bucket_plan.h"
#include "parallel/dp/grad_buffer.h"
#include "parallel/dp/grad_reducer.h"
#include "parallel/grid/parallel_context.h"
#include "parallel/zero/sharded_optimizer.h"

namespace loom {

class Replica {
 public:
  // micro_batch rows per forward/backward, `accumulation` of them per step.
  Replica(const RunConfig& cfg, const ParallelContext& ctx, int micro_batch, int accumulation);

  GPT& model() { return *model_; }
  const BucketPlan& plan() const { return plan_; }
  int zero_stage() const { return zero_; }

  void zero_grads();
  // Mean loss of this micro-batch (micro_batch x T tokens); its gradient,
  // scaled by 1 / (replicas x accumulation), is added to the buffer.
  float forward_backward(const int32_t* tokens, const int32_t* targets, int T, bool last_micro_batch);
  // Waits for the reductions (and, with sequence parallelism, sums the norms'
  // partial gradients over the tp group); returns the L2 norm of the whole
  // mean gradient over every rank of the model.
  double reduce();
  // AdamW with learning rate lr on the gradients scaled by grad_scale.
  void update(float lr, float grad_scale);

  // The whole mean gradient of the last reduce(), in layout order (tests).
  std::vector<float> gather_grads() const;
  size_t optimizer_state_bytes() const { return optimizer_->state_bytes(); }
  // Gradient memory this rank holds now: the full buffer's resident pages
  // plus the shard buffer.
  size_t grad_bytes_resident() const { return grads_.resident_bytes() + reducer_->shard_bytes(); }
  const ReduceTimes& reduce_times() const { return reducer_->times(); }

 private:
  void reduce_sequence_partial_grads();

  const ParallelContext& ctx_;
  int zero_, micro_batch_;
  float loss_scale_;
  ModelShard shard_;
  BucketPlan plan_;
  GradBuffer grads_;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<ShardedOptimizer> optimizer_;
};

}  // namespace loom
