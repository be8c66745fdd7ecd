// Replica: this rank's part of one data-parallel replica as the train loop
// drives it — its pipeline stage (one or, interleaved, several model chunks,
// each a tensor-parallel shard), the stage's parameter groups (each with its
// buffers, bucketed reducer and (ZeRO-sharded) optimizer, or frozen:
// train/param_group.h) and the pipeline executor, wired together. parallel/
// knows nothing of the model: this is where the model's gradient hook meets
// the groups' reducers and the chunks meet the executor.
//
// A step: forward_backward() runs every micro-batch through the pipeline
// schedule (gradients accumulate; only each chunk's last micro-batch starts
// reductions, bucket by bucket); reduce() waits for them and returns the
// global gradient norm; update() runs AdamW (and, under ZeRO, the all-gather
// of parameters). Without pipeline parallelism the schedule is 1F1B on one
// stage: forward and backward of each micro-batch in turn.
#pragma once

#include <memory>
#include <vector>

#include "config/run_pipeline.h"
#include "kernels/backend.h"
#include "config/run_config.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/tensor_piece.h"
#include "model/stage_module.h"
#include "obs/trace_recorder.h"
#include "parallel/cp/sequence_split.h"
#include "parallel/dp/grad_reducer.h"
#include "parallel/grid/parallel_context.h"
#include "parallel/pp/executor.h"
#include "parallel/pp/schedule.h"
#include "precision/loss_scaler.h"
#include "train/chunk_params.h"
#include "train/param_group.h"
#include "train/stage_adapter.h"

namespace loom {

// The model chunks of this rank's stage (chunk_shards in config/run_pipeline.h,
// where the pipeline plan comes from).
std::vector<ModelShard> stage_shards(const RunConfig& cfg, const ParallelContext& ctx, const PipelinePlan& plan);
// Where chunk c's tensors start in the stage's buffers (floats): chunk v-1
// first, since its backward finishes first.
std::vector<int64_t> chunk_offsets(const ModelConfig& model, const std::vector<ModelShard>& shards);
// ZeRO-3's segments of the stage's flat layout (tensor index ranges): each
// block's tensors together, every other tensor alone.
std::vector<std::pair<int, int>> zero3_segments(const ModelConfig& model, const std::vector<ModelShard>& shards);

class Replica {
 public:
  // micro_batch rows per forward/backward, micro_batches of them per step;
  // ops: the process's backend, which every chunk, group, optimizer and
  // reducer of the replica computes and allocates with.
  Replica(Backend& ops, const RunConfig& cfg, const ParallelContext& ctx, int micro_batch, int micro_batches)
      : Replica(nullptr, &ops, cfg, ctx, micro_batch, micro_batches) {}
  // Standalone (tests, tools): with a backend of its own.
  Replica(const RunConfig& cfg, const ParallelContext& ctx, int micro_batch, int micro_batches)
      : Replica(std::make_unique<Backend>(), nullptr, cfg, ctx, micro_batch, micro_batches) {}
  ~Replica();

  Backend& backend() { return ops_; }

  void init_parameters(uint64_t seed);
  // The stage's parameter groups (the trained one over the data group first).
  const std::vector<std::unique_ptr<ParamGroup>>& groups() const { return groups_; }
  const std::vector<ParamLayout>& layouts() const { return layouts_; }  // per chunk
  // Gradient buckets over every trained group, and the largest one's floats.
  int buckets() const;
  int64_t largest_bucket() const;
  // Floats of every trained group's gradient buffer / of the frozen groups' parameters.
  int64_t grad_floats() const;
  // Of them, what one rank owns of each group's ZeRO shards (over its own ranks).
  int64_t grad_shard_floats() const;
  int64_t frozen_floats() const;
  int zero_stage() const { return zero_; }
  const PipelinePlan& pipeline() const { return pipeline_; }

  // One step's forward and backward over micro_batches micro-batches:
  // tokens/targets hold them one after another (micro_batch x T each; a
  // target < 0 is not counted). The loss and its gradients are normalised by
  // the valid targets of the whole global batch, counted first and summed
  // over the data group (dp x cp), so a mask weighs every token alike in any
  // layout. Returns this replica's share of the batch's mean loss (its
  // losses' sum over the global count; the same on every rank of the
  // replica): the sum of the shares over the data group is the mean.
  // positions (packed rows; empty: none): each token's position in its
  // document, laid out as tokens. injected_delay_ms (fault injection only:
  // an injected straggler) is spent after the batch's target count, where
  // slower compute would be, so that the other ranks wait for it in the
  // gradient reduction as they would for a slower machine.
  float forward_backward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int T,
                         const std::vector<int32_t>& positions = {}, int injected_delay_ms = 0);
  // Valid targets in the last forward_backward's global batch: 0 means the
  // step has no loss and its gradients are zero (the train loop skips it).
  int64_t step_targets() const { return step_targets_; }
  // Forward only, one micro-batch: the sum of its counted targets' losses
  // and their count (this rank's part of the sequences under cp), the same
  // on every rank of the replica.
  struct LossSum {
    double sum = 0;
    int64_t targets = 0;
  };
  LossSum evaluate(const int32_t* tokens, const int32_t* targets, int T, const int32_t* positions = nullptr);
  // Waits for the reductions (and sums the tied embedding's two copies over
  // the first and last stage, and with sequence parallelism the norms'
  // partial gradients over the tp group); returns the L2 norm of the whole
  // mean gradient over every rank of the model.
  // Mixed precision: the loss was multiplied by the loss scale, so the
  // gradients are first divided by it and checked for inf/NaN in the same
  // pass; every rank learns whether any rank found one (overflowed()), the
  // scaler takes its step (scaler_decision()), and an overflowing step
  // returns NaN without computing the norm.
  double reduce();
  bool overflowed() const { return overflowed_; }
  // A mixture of experts, after reduce(): the step's routing over the whole
  // global batch (every rank holds the same).
  struct RouterStep {
    int experts = 0;
    std::vector<int> layers;       // the model's MoE layers
    std::vector<int64_t> counts;   // [layers, experts]: (token, expert) pairs routed
    double balance_loss = 0;       // moe_aux_coef x the balancing loss (sequence, switch), mean over the batch
    double z_loss = 0;             // moe_z_coef x mean logsumexp^2 over the batch's tokens, summed over layers
    float bias_max = 0;            // aux_free: the largest |bias| the step routed with
    // Expert parallelism: the slowest rank's seconds waiting on the token
    // all-to-alls, and the busiest rank's received rows over the mean.
    float exchange_s = 0, hidden_s = 0;  // (hidden: the largest on any rank)
    double rank_load_max = 0;
    // Over the layers: the busiest expert's and the idlest's load over the mean.
    double load_max() const;
    double load_min() const;
  };
  const RouterStep& router_step() const { return router_step_; }

  const ScalerDecision& scaler_decision() const { return decision_; }
  LossScaler& scaler() { return scaler_; }
  const LossScaler& scaler() const { return scaler_; }
  // Test fault injection: the next reduce() finds an inf in this rank's
  // gradients (as if its backward had overflowed).
  void inject_inf() { inject_inf_ = true; }
  // AdamW with learning rate lr on the gradients scaled by grad_scale (then,
  // in bf16 / fp16, the weights' 16-bit copies are refreshed).
  void update(float lr, float grad_scale);
  ComputePrecision compute() const { return compute_; }

  // This stage's whole mean gradient after reduce(), in stage-buffer order
  // (tests), and where each chunk's tensors sit in it.
  std::vector<float> gather_grads() const;
  // The stage's fp32 parameters, laid out as gather_grads() (every rank of a
  // sharded group's communicator calls it: it gathers).
  std::vector<float> gather_params();
  struct ChunkPlace {
    const ParamLayout* layout;
    int64_t offset;  // of the chunk's tensors in the stage buffer
  };
  std::vector<ChunkPlace> chunk_places() const;

  size_t optimizer_state_bytes() const;
  // Gradient memory this rank holds now: each trained group's full
  // buffer's resident pages plus its shard buffer.
  size_t grad_bytes_resident() const;
  // Parameter memory, over the groups: a whole fp32 buffer; with sharded
  // masters the master shard plus the fp32 values the model reads (resident
  // pages), and under ZeRO-3 the most gathered at once (fp32 and 16-bit).
  size_t param_bytes() const;
  bool sharded_masters() const { return sharded_masters_; }
  size_t activation_bytes() const;
  size_t compute_weight_bytes() const;  // the 16-bit weight copies (bf16 / fp16; 0 in fp32)
  // The trained group's over the data group (zeros when this stage trains nothing).
  const ReduceTimes& reduce_times() const;
  double tp_comm_seconds() const;
  // ZeRO-3: seconds spent waiting for parameter gathers, so far.
  double gather_wait_seconds() const;
  // Checkpoints (src/checkpoint/): this rank's pieces of the global
  // tensors — its stage's parameters (written by dp rank 0) and the AdamW
  // moments it holds ("adam.m." / "adam.v."; its ZeRO shard) — and the
  // reverse, from a checkpoint of any layout. load() also restores the
  // AdamW step count.
  bool writes_checkpoint() const;
  // The whole model's fp32 parameters (the layout of the full model) after
  // gather_whole_params(), when this rank holds all of it (tp = pp = 1, not
  // ZeRO-3), else nullptr.
  const float* whole_model_params() const;
  // Assembles them from the groups (a sharded group is gathered: every dp
  // rank calls it).
  void gather_whole_params();
  std::vector<CheckpointPiece> checkpoint_pieces();
  int adam_steps() const;
  void load(const Checkpoint& checkpoint, int adam_steps);
  // The parameters alone, from any global tensors (train.init_from), each
  // rank reading its own pieces; the optimizer state stays fresh.
  // absent_ok: tensors the source lacks keep their values (LoRA's adapters
  // beside a Hugging Face base; a PEFT adapter beside the base).
  void load_parameters(const GlobalTensors& tensors, bool absent_ok = false);

  const pp::StageTimeline& timeline() const { return executor_->timeline(); }
  // Forward and backward spans of each micro-batch go here (nullptr: none).
  void set_trace(obs::TraceRecorder* trace) { stage_->set_trace(trace); }

 private:
  Replica(std::unique_ptr<Backend> own, Backend* ops, const RunConfig& cfg, const ParallelContext& ctx,
          int micro_batch, int micro_batches);
  void combine_router_step();
  void load_router_biases(const GlobalTensors& tensors);
  static std::vector<CheckpointPiece> without_repeats(std::vector<CheckpointPiece> pieces);

  std::unique_ptr<Backend> own_ops_;  // standalone only
  Backend& ops_;
  const ParallelContext& ctx_;
  int zero_, micro_batch_, micro_batches_;
  // LoRA: the frozen base is the run's starting point (train.init_from or
  // the seed), not written to checkpoints or read back from them.
  bool base_outside_checkpoints_ = false;
  bool sharded_masters_;  // ZeRO 3, or ZeRO 1 / 2 in bf16 / fp16
  // Per step: valid targets in the global batch (each one's loss weighs the
  // loss scaler's scale over that count in backward).
  int64_t step_targets_ = 0;
  int64_t step_tokens_ = 0;  // tokens in the global batch (the router losses' normaliser)
  SequenceSplit split_;  // context parallelism: this rank's chunks of each sequence
  std::vector<int32_t> local_tokens_, local_targets_, local_positions_;  // a step's batch cut to them (cp > 1)
  ComputePrecision compute_;
  LossScaler scaler_;
  ScalerDecision decision_;
  bool overflowed_ = false, inject_inf_ = false;
  RouterStep router_step_;
  std::vector<float> router_buf_;  // combine_router_step's all-reduce
  PipelinePlan pipeline_;
  pp::StageSchedule schedule_;
  std::vector<ModelShard> shards_;     // chunk c holds virtual stage c x pp + stage
  std::vector<int64_t> chunk_offset_;  // floats into the stage buffers (chunk v-1 first: backward order)
  std::vector<ParamLayout> layouts_;  // per chunk (the groups' members point into them)
  std::vector<std::unique_ptr<ParamGroup>> groups_;
  std::vector<std::vector<GroupPlace>> places_;  // per chunk, per layout tensor
  std::vector<std::unique_ptr<ChunkParams>> chunk_sources_;
  std::vector<float> whole_;  // gather_whole_params()
  ReduceTimes no_reductions_;
  std::vector<std::unique_ptr<StageModule>> chunks_;
  std::unique_ptr<SharedActivations> shared_acts_;  // several chunks per stage: their activation sets
  std::unique_ptr<pp::PipelineExecutor> executor_;
  std::unique_ptr<StageAdapter> stage_;
};

}  // namespace loom
