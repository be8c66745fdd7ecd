// ParamGroup: one parameter group of this rank's pipeline stage
// (model/param_groups.h declares the groups) with everything it owns: the
// flat layout of its tensors, its bucket plan, and
//   trained: the gradient buffer, the bucketed reducer over its
//            communicator, the (ZeRO-sharded) AdamW state and, with
//            sharded masters, the fp32 master shard;
//   frozen:  the parameters only (no gradients, masters or moments),
//            sharded and gathered like ZeRO-3 parameters under ZeRO-3.
// Parameters are stored as the ZeRO stage wants them: the whole fp32 buffer
// (and its 16-bit copy in bf16 / fp16), the fp32 values the model reads
// beside a master shard (ZeRO 1 / 2 in bf16 / fp16), or only a shard that
// ParamGather gathers block by block (ZeRO-3).
//
// The group's tensors are a subset of the stage's chunks' tensors, kept in
// stage order (chunk v-1 first, each chunk in its layout's backward order),
// each 64-byte aligned: a group holding every tensor has exactly the
// stage's one flat layout of before groups existed.
#pragma once

#include <memory>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/tensor_piece.h"
#include "comm/communicator.h"
#include "core/arena.h"
#include "core/memory_resource.h"
#include "model/param_groups.h"
#include "optim/adamw.h"
#include "parallel/dp/bucket_plan.h"
#include "parallel/dp/grad_reducer.h"
#include "parallel/zero/param_gather.h"
#include "parallel/zero/sharded_optimizer.h"
#include "precision/policy.h"

namespace loom {

class ParamGroup {
 public:
  // A group tensor: tensor `tensor` of chunk `chunk`'s layout.
  struct Member {
    int chunk = 0, tensor = 0;
  };
  struct Options {
    int zero = 0;
    ComputePrecision compute = ComputePrecision::fp32;
    double bucket_bytes = 0;
    DType grad_wire = DType::f32;
    AdamWConfig adamw;
  };
  // members: in stage order; chunks: every chunk's layout (by chunk index).
  // ops: the process's backend (kernels and memory).
  ParamGroup(Backend& ops, ParamGroupSpec spec, std::vector<Member> members,
             const std::vector<const ParamLayout*>& chunks, Communicator& ranks, const Options& options);
  ~ParamGroup();

  const ParamGroupSpec& spec() const { return spec_; }
  bool frozen() const { return spec_.frozen; }
  const std::vector<Member>& members() const { return members_; }
  const FlatLayout& flat() const { return flat_; }
  const BucketPlan& plan() const { return plan_; }
  bool sharded_masters() const { return sharded_masters_; }

  // Per member: where the model reads its fp32 values and its 16-bit copy
  // (under ZeRO-3 while gathered) and adds its gradient (nullptr: frozen).
  float* param_at(int j) const;
  void* weight_at(int j) const;
  float* grad_at(int j) const;
  ParamGather* gather() const { return gather_.get(); }
  // The whole fp32 buffer laid out as flat() when the group keeps one (not
  // sharded), else nullptr.
  const float* whole_buffer() const { return sharded_storage() || weights_only_ ? nullptr : params_.at<float>(0); }

  // Fills the parameters (each rank its part: its shard when sharded).
  void init(uint64_t seed);

  // --- A step (trained groups; no-ops for a frozen one). ---
  void begin_step();  // the gradient buffer zeroed (ZeRO 2 / 3: handed back)
  void on_grad_ready(int j) {
    if (reducer_) reducer_->on_grad_ready(j);
  }
  void finish_reduction() {
    if (reducer_) reducer_->finish();
  }
  // What this rank holds after the reduction (the whole buffer or its ZeRO
  // shard, packed as owned()) and how many floats; nullptr / 0 when frozen.
  float* reduced() const { return reducer_ ? reducer_->reduced() : nullptr; }
  int64_t held() const;
  const std::vector<FlatRange>& owned() const;
  // The group's sum of squares over its ranks (0 when frozen).
  double grad_sum_of_squares();
  void update(float lr, float grad_scale);
  // The whole reduced gradient (tests): plan().padded_total() floats, zeros when frozen.
  std::vector<float> gather_grads() const;

  // --- Checkpoints: pieces named by the global tensors; writes_params:
  // this rank writes the parameters it holds whole (data rank 0). ---
  std::vector<CheckpointPiece> checkpoint_pieces(bool writes_params, bool writes_state) const;
  void load(const Checkpoint& checkpoint);
  // The parameters alone from any global tensors (a Hugging Face
  // checkpoint: train.init_from); the optimizer state stays fresh.
  void load_params(const GlobalTensors& tensors, bool absent_ok = false);
  // The whole fp32 values into per-member destinations (every rank of the
  // group calls it when sharded: it gathers).
  void copy_whole_params(const std::vector<float*>& into);

  // Parameter memory without ZeRO-3's gathered windows (the replica counts
  // those over every group at once).
  size_t param_bytes() const;
  size_t compute_weight_bytes() const { return weights16_.size(); }
  size_t grad_bytes_resident() const;
  size_t optimizer_state_bytes() const { return optimizer_ ? optimizer_->state_bytes() : 0; }
  const ReduceTimes* reduce_times() const { return reducer_ ? &reducer_->times() : nullptr; }
  int adam_steps() const { return optimizer_ ? optimizer_->adamw().steps_taken() : 0; }
  void set_adam_steps(int steps) {
    if (optimizer_) optimizer_->adamw().set_steps_taken(steps);
  }

 private:
  // f(member, layout, begin, end, at): member j's part [begin, end) in its
  // chunk layout's offsets, whose values are at `at` floats into the
  // storage (the packed shard when sharded, else the whole buffer).
  template <class F>
  void for_held_parts(bool sharded, F&& f) const;
  float* shard_values() const;  // sharded storage: the master (trained) or frozen shard
  float* whole_values() const;  // the whole fp32 buffer (not sharded) or the read copy
  void publish();               // the model's copies from the shards / fp32 values
  void fill_params(const GlobalTensors& tensors, bool absent_ok = false);
  bool sharded_storage() const { return sharded_masters_ || (frozen() && zero_ == 3); }
  // Compute-type storage (ParamGroupSpec::compute_type_storage): the values
  // of member j, flat range [at, at + n), into the 16-bit copy and, where
  // the member keeps fp32 values, those.
  void store(size_t j, int64_t at, const float* values, int64_t n);

  Backend& ops_;
  ParamGroupSpec spec_;
  std::vector<Member> members_;
  std::vector<const ParamLayout*> chunks_;
  Communicator& ranks_;
  int zero_;
  ComputePrecision compute_;
  bool sharded_masters_;  // trained: ZeRO 3, or ZeRO 1 / 2 in bf16 / fp16
  FlatLayout flat_;
  std::vector<std::pair<int, int>> segments_;  // ZeRO-3
  BucketPlan plan_;
  std::unique_ptr<ReleasableBuffer> grads_;        // trained
  Arena params_;                              // the whole fp32 buffer (not sharded); compact: see fp32_at_
  // Compute-type storage: per member, its fp32 values' offset in params_
  // (-1: read by products only, kept in 16 bits alone).
  bool weights_only_ = false;
  std::vector<int64_t> fp32_at_;
  std::unique_ptr<ReleasableBuffer> read_params_;  // ZeRO 1 / 2 sharded masters: the fp32 values the model reads
  Arena weights16_;                           // bf16 / fp16 below ZeRO 3: laid out as the flat buffer
  Arena frozen_shard_;                        // frozen under ZeRO-3: this rank's shard
  std::vector<FlatRange> frozen_owned_;
  std::unique_ptr<ShardedOptimizer> optimizer_;  // trained
  std::unique_ptr<GradReducer> reducer_;         // trained
  std::unique_ptr<ParamGather> gather_;          // ZeRO 3
};

}  // namespace loom
