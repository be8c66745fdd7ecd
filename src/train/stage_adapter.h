// StageAdapter: the pipeline executor's view of this rank's stage
// (pp::StageModel): chunk c's stage module, one micro-batch at a time, with
// the step's batch, the weight of each counted target's loss, and the trace.
// During each chunk's last micro-batch it passes the model's gradient-ready
// reports on (the reductions start from them).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/stage_module.h"
#include "obs/trace_recorder.h"
#include "parallel/pp/executor.h"

namespace loom {

class StageAdapter : public pp::StageModel {
 public:
  // ready(chunk, tensor): that tensor's gradient is final for the step.
  using ReadyHook = std::function<void(int chunk, int tensor)>;
  StageAdapter(const std::vector<std::unique_ptr<StageModule>>& chunks, int micro_batch, int micro_batches,
               ReadyHook ready);

  // The step's micro-batches one after another (micro_batch x T each), and
  // the weight of each counted target's loss in backward; positions: packed
  // rows' positions in their documents, laid out the same (or nullptr).
  void set_batch(const int32_t* tokens, const int32_t* targets, const int32_t* positions, int T,
                 float target_weight);
  // The sum of the counted targets' losses so far this step (the last stage's).
  double loss_sum() const { return loss_sum_; }
  void set_trace(obs::TraceRecorder* trace) { trace_ = trace; }

  void forward(int mb, int c, int slot) override;
  void backward(int mb, int c, int slot) override;
  void backward_input(int mb, int c, int slot) override;
  void backward_weight(int mb, int c, int slot) override;
  float* activation_in(int c, int slot) override { return chunk(c).stage_input(slot); }
  const float* activation_out(int c, int slot) override { return chunk(c).stage_output(slot); }
  float* grad(int c, int slot) override { return chunk(c).stage_grad(slot); }
  void waiting(bool begins) override;
  size_t activation_floats() const override;

 private:
  class ReportReady;
  StageModule& chunk(int c) const { return *chunks_[size_t(c)]; }
  const int32_t* tok(int mb) const { return tokens_ + size_t(mb) * size_t(micro_batch_) * size_t(T_); }
  const int32_t* tgt(int mb) const { return targets_ + size_t(mb) * size_t(micro_batch_) * size_t(T_); }
  const int32_t* pos(int mb) const {
    return positions_ ? positions_ + size_t(mb) * size_t(micro_batch_) * size_t(T_) : nullptr;
  }

  const std::vector<std::unique_ptr<StageModule>>& chunks_;
  int micro_batch_, micro_batches_;
  ReadyHook ready_;
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
  const int32_t* positions_ = nullptr;
  int T_ = 0;
  float target_weight_ = 0;
  double loss_sum_ = 0;
  obs::TraceRecorder* trace_ = nullptr;
};

}  // namespace loom
