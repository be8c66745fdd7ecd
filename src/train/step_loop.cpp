#include "train/step_loop.h"

#include <algorithm>
#include <cmath>

#include "comm/rank_sum.h"
#include "core/check.h"
#include "optim/grad_clip.h"
#include "train/evaluation.h"
#include "train/rank_stats.h"

namespace loom {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A mixture of experts' routing in the step just reduced (every rank alike).
obs::MoeStepMetrics moe_metrics(const ModelConfig& model, const Replica& replica, int ep) {
  obs::MoeStepMetrics m;
  if (!model.is_moe()) return m;
  const Replica::RouterStep& s = replica.router_step();
  m.experts = model.n_experts, m.top_k = model.top_k;
  m.load_max = s.load_max(), m.load_min = s.load_min();
  m.aux_loss = s.balance_loss, m.z_loss = s.z_loss, m.bias_max = s.bias_max;
  if (ep > 1)
    m.ep = ep, m.a2a_ms = 1e3 * s.exchange_s, m.a2a_hidden_ms = 1e3 * s.hidden_s, m.rank_load_max = s.rank_load_max;
  return m;
}

bool listed(const std::vector<int>& steps, int64_t step) { return std::count(steps.begin(), steps.end(), step) > 0; }

}  // namespace

struct StepLoop::Step {
  int step = 0;
  bool timed = false, last = false;
  Clock::time_point t0;
  double data_s = 0, busy_s = 0, optimizer_s = 0, dt = 0, comm_s = 0;
  float scale_used = 1, loss = NAN, clip = 1, lr = 0, val = NAN;
  double norm = 0;
  bool empty = false, overflow = false, scaler_skip = false;
  LossVerdict verdict = LossVerdict::Ok;
  obs::MoeStepMetrics moe;
};

StepLoop::StepLoop(const Parts& p, TrainPosition position, double flops_per_step, TrainResult& result, FILE* log)
    : run_(p),
      result_(result),
      log_(log),
      flops_per_step_(flops_per_step),
      position_(std::move(position)),
      batch_(p.shape, p.data.packs(), p.options),
      guard_(LossGuardConfig{p.cfg.train.guard_window, p.cfg.train.guard_z, p.cfg.train.guard_warmup,
                             p.cfg.train.guard_max_skips}),
      schedule_{p.cfg.train.lr, p.cfg.train.min_lr, p.cfg.train.warmup_steps, p.cfg.train.steps},
      stragglers_(p.ctx.grid().world_size(), p.cfg.train.straggler_factor, p.cfg.train.straggler_window),
      pass_times_(p.replica.pipeline()) {
  guard_.restore(position_.guard);
  times_.bubble_sum.assign(size_t(run_.ctx.grid().pp()), 0.0);
  first_step_ = int(position_.next_step);
  end_step_ =
      run_.options.stop_after > 0 ? std::min(run_.options.stop_after, run_.cfg.train.steps) : run_.cfg.train.steps;
}

void StepLoop::run() {
  if (log_ && first_step_ >= end_step_)
    std::fprintf(log_, "nothing to do: the checkpoint is at step %d of %d\n", first_step_, run_.cfg.train.steps);
  for (int step = first_step_; step < end_step_;) step = run_step(step);
}

int StepLoop::run_step(int step) {
  Step s;
  s.step = step;
  s.timed = step > first_step_ || end_step_ - first_step_ == 1;
  s.last = step + 1 == run_.cfg.train.steps;
  if (FlightRecorder* flight = run_.recorder.flight()) flight->note_step(step + 1);
  run_.options.faults.at_step_begin(step, run_.ctx.rank());
  s.t0 = Clock::now();
  obs::ScopedSpan step_span(run_.recorder.trace(), "step", obs::SpanKind::step, obs::CommGroup::none, step);
  read_batch(s);
  forward_backward(s);
  judge(s);
  apply(s);
  account(s);
  print_step(s);
  evaluate_if_due(s);
  int next = step + 1;
  if (s.verdict == LossVerdict::Rollback && roll_back(s, next)) return next;
  if (run_.cfg.train.checkpoint_every > 0 && ((step + 1) % run_.cfg.train.checkpoint_every == 0 || s.last))
    run_.checkpoints.save(TrainPosition{step + 1, position_.data_skip, guard_.state()}, run_.replica,
                          run_.options.faults, log_);
  record(s);
  return next;
}

void StepLoop::read_batch(Step& s) {
  obs::TraceRecorder* trace = run_.recorder.trace();
  const auto t = Clock::now();
  if (trace) trace->begin("data", obs::SpanKind::data);
  batch_.read(run_.data, uint64_t(run_.cfg.train.seed), s.step + position_.data_skip);
  if (trace) trace->end();
  s.data_s = seconds_since(t);
  times_.data_s += s.data_s;
}

// Forward, backward and the gradients' reduction; the busy time is this
// rank's own compute, without its waits for tensor-parallel peers (the
// straggler monitor compares ranks).
void StepLoop::forward_backward(Step& s) {
  s.scale_used = run_.replica.scaler().scale();
  result_.loss_scales.push_back(s.scale_used);
  if ((run_.options.inf_rank < 0 || run_.ctx.rank() == run_.options.inf_rank) && listed(run_.options.inf_steps, s.step))
    run_.replica.inject_inf();
  const double tp_wait_before = run_.replica.tp_comm_seconds();
  // An injected straggler: the replica sleeps where slower compute would be.
  const int slow_ms = run_.options.faults.slow_ms(s.step, run_.ctx.rank());
  s.loss = run_.replica.forward_backward(batch_.tokens, batch_.targets, run_.shape.T, batch_.positions, slow_ms);
  const pp::StageTimeline& tl = run_.replica.timeline();
  s.busy_s = 1e-3 * slow_ms + std::max(0.0, tl.compute - (run_.replica.tp_comm_seconds() - tp_wait_before));
  if (s.timed) {
    times_.bubble_sum[size_t(run_.ctx.coord().pp)] += tl.bubble();
    if (run_.ctx.grid().pp() > 1) pass_times_.add(tl, run_.ctx.coord().pp);
  }
  result_.peak_in_flight = std::max(result_.peak_in_flight, tl.peak_in_flight);
  obs::ScopedSpan wait(run_.recorder.trace(), "gradient reduction", obs::SpanKind::wait, obs::CommGroup::dp);
  s.norm = run_.replica.reduce();
}

// Every rank holds the same loss and the same overflow flag, so every rank
// decides alike. An overflow (mixed precision) that the dynamic scaler
// answers by backing off is its business: the step is skipped without
// judging the loss. One it cannot answer (no dynamic scaling, or the scale at
// its minimum: a diverged model, not a too-large scale) is a bad step for
// the loss guard, which skips and then rolls back.
void StepLoop::judge(Step& s) {
  // Each replica (and cp rank) holds its share of the batch's mean loss.
  s.loss = float(sum_over_ranks(run_.ctx.dp(), double(s.loss)));
  // A batch with no valid target has no loss and zero gradients: nothing
  // is updated, in every layout alike.
  s.empty = run_.replica.step_targets() == 0;
  if (s.empty) s.loss = NAN, result_.empty_steps++;
  if (s.step == first_step_ && run_.options.keep_first_step_grads)
    result_.first_step_grads = run_.replica.gather_grads();
  s.moe = moe_metrics(run_.cfg.model, run_.replica, run_.ctx.grid().ep());
  s.clip = clip_scale(s.norm, run_.cfg.train.grad_clip);
  s.lr = schedule_.at(s.step);
  if (listed(run_.options.poison_steps, s.step + position_.data_skip)) s.loss = NAN;
  s.overflow = run_.replica.overflowed();
  const LossScalerOptions& scaling = run_.replica.scaler().options();
  s.scaler_skip = s.overflow && scaling.mode == LossScaleMode::dynamic && s.scale_used > scaling.min_scale;
  s.verdict = s.scaler_skip || s.empty ? LossVerdict::Skip : guard_.observe(s.overflow ? NAN : s.loss);
  if (s.overflow) result_.overflow_steps++;
}

void StepLoop::apply(Step& s) {
  const auto t = Clock::now();
  const int n = s.step + 1, steps = run_.cfg.train.steps;
  if (s.verdict == LossVerdict::Ok) {
    obs::ScopedSpan optimizer(run_.recorder.trace(), "optimizer", obs::SpanKind::optimizer);
    run_.replica.update(s.lr, s.clip);
  } else if (s.empty) {
    if (log_) std::fprintf(log_, "step %5d/%d | skipped: no valid target in the batch\n", n, steps);
  } else if (s.scaler_skip) {
    if (log_)
      std::fprintf(log_, "step %5d/%d | skipped: inf/NaN in the gradients; loss scale %g -> %g\n", n, steps,
                   double(s.scale_used), double(run_.replica.scaler().scale()));
  } else {
    result_.skipped_steps++;
    if (log_)
      std::fprintf(log_, "step %5d/%d | skipped: %s%s\n", n, steps, s.overflow ? "inf/NaN in the gradients; " : "",
                   guard_.reason().c_str());
  }
  s.optimizer_s = seconds_since(t);
  if (s.timed) times_.optimizer_s += s.optimizer_s;
}

void StepLoop::account(Step& s) {
  s.dt = seconds_since(s.t0);
  if (s.step == first_step_)
    times_.warm_up = run_.replica.reduce_times(), times_.tp_comm_warm_up = run_.replica.tp_comm_seconds(),
    times_.gather_warm_up = run_.replica.gather_wait_seconds();
  result_.train_losses.push_back(s.loss);
  result_.grad_norms.push_back(float(s.norm));
  if (s.moe.experts > 0) result_.moe_steps.push_back(s.moe);
  if (s.timed) times_.timed_s += s.dt, times_.timed_steps++;
  window_s_ += s.dt, window_steps_++;
  times_.step_s += s.dt;
}

// One line per logged step: the window since the last logged step.
void StepLoop::print_step(const Step& s) {
  const bool logged = s.step % run_.cfg.train.log_every == 0 || s.last;
  if (log_ && logged) {
    const double tok_s = run_.shape.tokens_per_step() * window_steps_ / window_s_;
    const double gflops = flops_per_step_ * window_steps_ / window_s_ * 1e-9;
    const std::string scale =
        run_.replica.scaler().mode() == LossScaleMode::off ? "" : strprintf(" | scale %g", double(s.scale_used));
    // Instruction data: how many of the batch's tokens are learned from.
    const std::string targets = run_.replica.step_targets() < int64_t(run_.shape.tokens_per_step())
                                    ? strprintf(" | targets %lld", (long long)run_.replica.step_targets())
                                    : "";
    // A mixture of experts: the busiest and idlest expert's load over the
    // mean; expert parallelism: the token all-to-alls' exposed time.
    std::string experts =
        s.moe.experts > 0 ? strprintf(" | experts %.2f-%.2f", s.moe.load_min, s.moe.load_max) : std::string();
    if (s.moe.ep > 1) experts += strprintf(" | all-to-all %.1f ms (%.1f hidden)", s.moe.a2a_ms, s.moe.a2a_hidden_ms);
    std::fprintf(log_,
                 "step %5d/%d | loss %.4f%s | lr %.2e | grad norm %.3f%s%s | %.0f tok/s | %.1f GFLOP/s (%.1f%% of "
                 "peak)\n",
                 s.step + 1, run_.cfg.train.steps, s.loss, targets.c_str(), s.lr, s.norm, scale.c_str(),
                 experts.c_str(), tok_s, gflops, 100.0 * gflops / result_.peak_gflops);
    std::fflush(log_);
  }
  if (logged) window_s_ = 0, window_steps_ = 0;
}

// This step's exposed communication (tensor-parallel waits and the
// data-parallel wait after backward) is taken before an evaluation adds its own.
void StepLoop::evaluate_if_due(Step& s) {
  const double tp_now = run_.replica.tp_comm_seconds(), wait_now = run_.replica.reduce_times().wait_s;
  s.comm_s = (tp_now - tp_comm_before_) + (wait_now - wait_before_);
  if (s.timed) times_.reduce_wait_s.push_back(float(wait_now - wait_before_));
  const bool due = run_.cfg.train.eval_every > 0 && ((s.step + 1) % run_.cfg.train.eval_every == 0 || s.last);
  if (due) {
    const double tp_before = run_.replica.tp_comm_seconds(), gather_before = run_.replica.gather_wait_seconds();
    s.val = evaluate(run_.replica, run_.data, run_.cfg.train.eval_batches, run_.shape, run_.ctx);
    if (s.timed) {
      times_.tp_comm_eval += run_.replica.tp_comm_seconds() - tp_before;
      times_.gather_eval += run_.replica.gather_wait_seconds() - gather_before;
    }
    result_.val_losses.push_back(s.val);
    if (log_)
      std::fprintf(log_, "step %5d/%d | val loss %.4f\n", s.step + 1, run_.cfg.train.steps, s.val), std::fflush(log_);
  }
  tp_comm_before_ = run_.replica.tp_comm_seconds(), wait_before_ = run_.replica.reduce_times().wait_s;
}

// Back to the last checkpoint, past the data window that went bad; with no
// checkpoint the run goes on (false).
bool StepLoop::roll_back(Step& s, int& next) {
  guard_.after_rollback();
  if (run_.checkpoints.last().empty()) {
    if (log_)
      std::fprintf(log_, "step %5d/%d | %d bad steps in a row and no checkpoint to roll back to: going on\n",
                   s.step + 1, run_.cfg.train.steps, run_.cfg.train.guard_max_skips);
    return false;
  }
  const int64_t skip = position_.data_skip;
  const TrainPosition back = run_.checkpoints.resume(run_.checkpoints.last(), run_.replica, log_);
  LOOM_CHECK(back.next_step <= s.step + 1, "rolled back to step %lld, after step %d", (long long)back.next_step,
             s.step + 1);
  position_.data_skip = skip + (s.step + 1 - back.next_step);
  result_.rollbacks++;
  if (log_)
    std::fprintf(log_, "step %5d/%d | rolled back to step %lld; skipping %lld steps of data\n", s.step + 1,
                 run_.cfg.train.steps, (long long)back.next_step, (long long)(s.step + 1 - back.next_step));
  next = int(back.next_step);
  return true;
}

// Stragglers (after the first step, which warms up) and metrics.jsonl.
void StepLoop::record(const Step& s) {
  RankStats stats;
  if (run_.recorder.active() || stragglers_.enabled()) stats = gather_rank_stats(run_.ctx, s.busy_s);
  if (s.step > first_step_)
    for (const obs::StragglerEvent& e : stragglers_.observe(stats.busy_s))
      if (log_)
        std::fprintf(log_, "step %5d/%d | %s\n", s.step + 1, run_.cfg.train.steps, e.text().c_str()), std::fflush(log_);
  if (!run_.recorder.active()) return;
  obs::StepMetrics m;
  m.skipped = s.verdict != LossVerdict::Ok;
  m.loss_scale = s.scale_used;
  m.step = s.step + 1, m.loss = s.loss, m.val_loss = s.val, m.lr = s.lr, m.grad_norm = s.norm;
  m.step_time_s = s.dt, m.tokens_per_s = run_.shape.tokens_per_step() / s.dt;
  m.target_tokens = run_.replica.step_targets();
  m.mfu = flops_per_step_ / s.dt / (result_.peak_gflops * 1e9);
  m.peak_mem_bytes = stats.peak_mem_bytes;
  if (run_.ctx.grid().world_size() > 1) m.busy_s = stats.busy_s;
  m.stragglers = stragglers_.current();
  const pp::StageTimeline& tl = run_.replica.timeline();
  m.time.compute = tl.compute;
  m.time.bubble = run_.ctx.grid().pp() > 1 ? std::max(0.0, tl.span - tl.compute) : 0;
  m.time.comm_exposed = s.comm_s, m.time.optimizer = s.optimizer_s, m.time.data = s.data_s;
  m.checkpoint_stall_s = run_.checkpoints.stall_s(s.step + 1);
  m.moe = s.moe;
  run_.recorder.step(m);
}

}  // namespace loom
