#include "train/stage_adapter.h"

namespace loom {

// Only each chunk's last micro-batch reports gradients (each tensor when its
// last write of the step is done: in B or in W).
class StageAdapter::ReportReady {
 public:
  ReportReady(StageAdapter& s, int mb, int c) : chunk_(s.chunk(c)) {
    if (mb + 1 != s.micro_batches_) return;
    chunk_.set_grad_ready_hook([&s, c](int i) { s.ready_(c, i); });
  }
  ~ReportReady() { chunk_.set_grad_ready_hook(nullptr); }

 private:
  StageModule& chunk_;
};

StageAdapter::StageAdapter(const std::vector<std::unique_ptr<StageModule>>& chunks, int micro_batch,
                           int micro_batches, ReadyHook ready)
    : chunks_(chunks), micro_batch_(micro_batch), micro_batches_(micro_batches), ready_(std::move(ready)) {}

void StageAdapter::set_batch(const int32_t* tokens, const int32_t* targets, const int32_t* positions, int T,
                             float target_weight) {
  tokens_ = tokens, targets_ = targets, positions_ = positions, T_ = T, target_weight_ = target_weight, loss_sum_ = 0;
}

void StageAdapter::forward(int mb, int c, int slot) {
  obs::ScopedSpan span(trace_, "forward", obs::SpanKind::forward, obs::CommGroup::none, mb);
  chunk(c).set_documents(slot, pos(mb), micro_batch_, T_);
  chunk(c).forward_stage(slot, tok(mb), micro_batch_, T_);
}

void StageAdapter::backward(int mb, int c, int slot) {
  obs::ScopedSpan span(trace_, "backward", obs::SpanKind::backward, obs::CommGroup::none, mb);
  ReportReady report(*this, mb, c);
  loss_sum_ += chunk(c).backward_stage(slot, tok(mb), tgt(mb), micro_batch_, T_, target_weight_);
}

void StageAdapter::backward_input(int mb, int c, int slot) {
  obs::ScopedSpan span(trace_, "backward input", obs::SpanKind::backward, obs::CommGroup::none, mb);
  ReportReady report(*this, mb, c);
  loss_sum_ += chunk(c).backward_input(slot, tok(mb), tgt(mb), micro_batch_, T_, target_weight_);
}

void StageAdapter::backward_weight(int mb, int c, int slot) {
  obs::ScopedSpan span(trace_, "backward weight", obs::SpanKind::backward_weight, obs::CommGroup::none, mb);
  ReportReady report(*this, mb, c);
  chunk(c).backward_weight(slot, micro_batch_, T_);
}

void StageAdapter::waiting(bool begins) {
  if (!trace_) return;
  if (begins) trace_->begin("wait for neighbour stage", obs::SpanKind::bubble, obs::CommGroup::pp);
  else trace_->end();
}

size_t StageAdapter::activation_floats() const {
  return size_t(chunks_[0]->local_rows(int64_t(micro_batch_) * T_)) * size_t(chunks_[0]->config().d_model);
}

}  // namespace loom
