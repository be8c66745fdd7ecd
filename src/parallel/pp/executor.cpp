#include "parallel/pp/executor.h"

#include <algorithm>

#include "core/check.h"
#include "parallel/pp/pipeline_plan.h"

namespace loom::pp {

PipelineExecutor::PipelineExecutor(Communicator& pp, std::vector<int> slots, ChunkMap map, bool shared_slots)
    : pp_(pp), v_(int(slots.size())), map_(map), shared_(shared_slots), slots_(std::move(slots)) {
  for (int n : slots_)
    LOOM_CHECK(!shared_ || n == slots_[0], "pipeline executor: chunks sharing slots need as many each");
  LOOM_CHECK(map_.v == v_ && map_.pp == pp.size(), "pipeline executor: chunk map of %d x %d for %d stages x %d chunks",
             map_.pp, map_.v, pp.size(), v_);
  for (int n : slots_) holder_.push_back(std::vector<int>(size_t(n), -1));
  auto works = [&] {
    std::vector<std::vector<std::unique_ptr<Work>>> w(slots_.size());
    for (size_t c = 0; c < w.size(); c++) w[c].resize(size_t(slots_[c]));
    return w;
  };
  recv_ = works(), send_out_ = works(), send_grad_ = works();
}

int PipelineExecutor::slot_of(int microbatch, int chunk, bool allocate) {
  auto& holders = holder_[size_t(chunk)];
  const int slots = slots_[size_t(chunk)];
  for (int s = 0; s < slots; s++)
    if (holders[size_t(s)] == microbatch) return s;
  LOOM_CHECK(allocate, "micro-batch %d of chunk %d has no activation slot", microbatch, chunk);
  // Shared slots: slot s is the same memory in every chunk, except the
  // buffers messages use (each chunk's own).
  auto free_slot = [&](int s) {
    for (int c = shared_ ? 0 : chunk; c < (shared_ ? v_ : chunk + 1); c++)
      if (holder_[size_t(c)][size_t(s)] != -1) return false;
    return true;
  };
  for (int s = 0; s < slots; s++) {
    if (!free_slot(s)) continue;
    // A slot's last sends must be done before it is reused (an activation
    // send from the shared part was received before its backward came
    // back). Shared slots: the chunk's own gradient buffer is waited on only
    // when it is next written (reuse_grad_buffer), as the peer may post its
    // receive after this stage needs the slot for another chunk.
    if (!shared_)
      if (auto& w = send_grad_[size_t(chunk)][size_t(s)]) w->wait(), w.reset();
    for (int c = shared_ ? 0 : chunk; c < (shared_ ? v_ : chunk + 1); c++)
      if (auto& w = send_out_[size_t(c)][size_t(s)]) w->wait(), w.reset();
    holders[size_t(s)] = microbatch;
    int held = 0;
    for (const auto& chunk : holder_)
      for (int h : chunk) held += h != -1;
    timeline_.peak_in_flight = std::max(timeline_.peak_in_flight, held);
    return s;
  }
  LOOM_CHECK(false, "chunk %d needs more than %d activation slots (micro-batch %d)", chunk, slots, microbatch);
  return -1;
}

void PipelineExecutor::reuse_grad_buffer(int chunk, int slot) {
  if (auto& w = send_grad_[size_t(chunk)][size_t(slot)]) w->wait(), w.reset();
}

void PipelineExecutor::release(int microbatch, int chunk) {
  holder_[size_t(chunk)][size_t(slot_of(microbatch, chunk, false))] = -1;
}

std::vector<int> PipelineExecutor::slots_needed(const StageSchedule& actions, int v) {
  return pp::slots_needed(actions, v);
}

// Messages are matched by (micro-batch, receiving chunk, direction).
int PipelineExecutor::tag(int microbatch, int chunk, bool grad) const {
  return (microbatch * v_ + chunk) * 2 + (grad ? 1 : 0);
}

void PipelineExecutor::run(const StageSchedule& actions, StageModel& model) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const int stage = pp_.rank(), pp = pp_.size();
  const size_t n = model.activation_floats();
  // The virtual stage before / after (mb, chunk c) here: its stage and chunk.
  auto neighbour = [&](int c, int step) {
    const int vs = map_.virtual_stage(stage, c) + step;
    return std::pair<int, int>{map_.stage_of(vs), map_.chunk_of(vs)};
  };
  timeline_ = {};
  // A (micro-batch, chunk)'s slot is free after its last action: the send
  // of its gradient (waited on before its buffer is written again) or its
  // (weight-)backward.
  const auto last = last_actions(actions);
  for (size_t i = 0; i < actions.size(); i++) {
    const Action& a = actions[i];
    if (a.kind == ActionKind::ReduceGrads || a.kind == ActionKind::OptimizerStep) break;
    const int mb = a.microbatch, c = a.chunk;
    switch (a.kind) {
      case ActionKind::RecvActivation: {
        // From the previous virtual stage (ChunkMap: another stage, or this one's other chunk in a V).
        const int s = slot_of(mb, c, true), from = neighbour(c, -1).first;
        recv_[size_t(c)][size_t(s)] = pp_.recv_async(model.activation_in(c, s), n, DType::f32, from, tag(mb, c, false));
        break;
      }
      case ActionKind::RecvGrad: {
        const int s = slot_of(mb, c, false), from = neighbour(c, +1).first;
        reuse_grad_buffer(c, s);
        recv_[size_t(c)][size_t(s)] = pp_.recv_async(model.grad(c, s), n, DType::f32, from, tag(mb, c, true));
        break;
      }
      case ActionKind::Forward:
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
      case ActionKind::BackwardWeight: {
        const bool forward = a.kind == ActionKind::Forward;
        const int s = slot_of(mb, c, forward);
        if (a.kind == ActionKind::Backward || a.kind == ActionKind::BackwardInput) {
          reuse_grad_buffer(c, s);
          // The split backward keeps a gradient where the chunk's output
          // was: its send is done (the peer's gradient came back after it).
          if (auto& w = send_out_[size_t(c)][size_t(s)]) w->wait(), w.reset();
        }
        if (auto& w = recv_[size_t(c)][size_t(s)]) {
          model.waiting(true);
          w->wait(), w.reset();
          model.waiting(false);
        }
        TimedAction timed{a, seconds(), 0};
        if (forward) model.forward(mb, c, s);
        else if (a.kind == ActionKind::Backward) model.backward(mb, c, s);
        else if (a.kind == ActionKind::BackwardInput) model.backward_input(mb, c, s);
        else model.backward_weight(mb, c, s);
        timed.end = seconds();
        timeline_.actions.push_back(timed);
        timeline_.compute += timed.end - timed.start;
        break;
      }
      case ActionKind::SendActivation: {
        const int s = slot_of(mb, c, false);
        const auto [to, to_chunk] = neighbour(c, +1);
        send_out_[size_t(c)][size_t(s)] =
            pp_.send_async(model.activation_out(c, s), n, DType::f32, to, tag(mb, to_chunk, false));
        break;
      }
      case ActionKind::SendGrad: {
        const int s = slot_of(mb, c, false);
        const auto [to, to_chunk] = neighbour(c, -1);
        send_grad_[size_t(c)][size_t(s)] = pp_.send_async(model.grad(c, s), n, DType::f32, to, tag(mb, to_chunk, true));
        break;
      }
      default: break;
    }
    if (mb >= 0 && last.at({mb, c}) == i) release(mb, c);
  }
  // Every transfer done before the step ends.
  for (auto* works : {&recv_, &send_out_, &send_grad_})
    for (auto& chunk : *works)
      for (auto& w : chunk)
        if (w) w->wait(), w.reset();
  // From the step's start (a later stage's wait for its first activation is
  // bubble) to the end of the last stage to finish (so is an early finish).
  float span = timeline_.actions.empty() ? 0.f : float(timeline_.actions.back().end);
  if (pp > 1) pp_.all_reduce(&span, 1, DType::f32, ReduceOp::Max);
  timeline_.span = span;
}

}  // namespace loom::pp
