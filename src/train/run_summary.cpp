#include "train/run_summary.h"

#include <algorithm>

#include "train/rank_stats.h"

namespace loom {

namespace {

// Each stage's mean bubble, to every rank (stage s fills entry s).
void gather_bubble(TrainResult& result, const StepLoop& loop, const ParallelContext& ctx) {
  const int pp = ctx.grid().pp();
  const LoopTimes& t = loop.times();
  if (pp <= 1 || t.timed_steps == 0) return;
  std::vector<float> bubble(size_t(pp), 0.f);
  bubble[size_t(ctx.coord().pp)] = float(t.bubble_sum[size_t(ctx.coord().pp)] / t.timed_steps);
  ctx.pp().all_reduce(bubble.data(), bubble.size(), DType::f32, ReduceOp::Sum);
  result.bubble.assign(bubble.begin(), bubble.end());
  result.simulated_bubble = loop.pass_times().simulated_bubble(ctx.pp());
}

// The per-step minimum of the data ranks' waits (Max of the negated waits).
void gather_reduce_tail(TrainResult& result, const StepLoop& loop, const ParallelContext& ctx) {
  const std::vector<float>& own = loop.times().reduce_wait_s;
  if (ctx.dp().size() <= 1) return;
  float steps[2] = {float(own.size()), -float(own.size())};  // every rank must hold the same steps
  ctx.dp().all_reduce(steps, 2, DType::f32, ReduceOp::Max);
  if (own.empty() || steps[0] != -steps[1]) return;
  std::vector<float> least(own.size());
  for (size_t i = 0; i < own.size(); i++) least[i] = -own[i];
  ctx.dp().all_reduce(least.data(), least.size(), DType::f32, ReduceOp::Max);
  double sum = 0;
  for (float w : least) sum -= w;
  result.reduce_tail_ms = 1e3 * sum / double(least.size());
}

void print_bubble(const RunConfig& cfg, const Replica& replica, const TrainResult& result, int pp, int m, FILE* log) {
  if (pp <= 1 || result.bubble.empty()) return;
  std::fprintf(log, "pipeline bubble per stage (measured, %s, m = %d):", cfg.parallel.schedule.c_str(), m);
  for (int s = 0; s < pp; s++) std::fprintf(log, " %.1f%%", 100.0 * result.bubble[size_t(s)]);
  std::fprintf(log, "; simulated from the measured pass times:");
  for (float b : result.simulated_bubble) std::fprintf(log, " %.1f%%", 100.0 * b);
  std::fprintf(log, "; 1F1B/GPipe theory (pp-1)/(m+pp-1) = %.1f%%%s\n", 100.0 * (pp - 1) / (m + pp - 1),
               replica.pipeline().v > 1 ? " (before interleaving)" : "");
}

void write_summary(const RunConfig& cfg, const ParallelContext& ctx, const TrainResult& result, const RunEnd& end,
                   RunRecorder& recorder) {
  obs::RunSummary summary;
  if (end.prediction) {
    summary.predicted_mem_bytes = end.prediction->peak_memory_bytes;
    summary.predicted_step_s = end.prediction->step_seconds;
  }
  summary.finished = true;
  const DeviceInfo& d = end.device;
  summary.cpu = {{"model", d.cpu.model},           {"flags", d.cpu.flags()},     {"isa", isa_name(d.in_use)},
                 {"fp32_gemm", d.fp32_gemm},       {"bf16_gemm", d.bf16_gemm},   {"fp16_gemm", d.fp16_gemm},
                 {"line", d.line()}};
  summary.steps = cfg.train.steps;
  summary.wall_s = end.wall_s;
  summary.tokens_per_s = result.tokens_per_s;
  summary.mfu = result.gflops / result.peak_gflops;
  summary.measured_step_s = result.step_ms * 1e-3;
  summary.measured_mem_bytes = result.peak_rss_bytes;
  for (float b : result.bubble) summary.bubble_fraction_per_stage.push_back(b);
  if (ctx.grid().tp() > 1) summary.exposed_comm_s["tp"] = result.tp_comm_ms * 1e-3;
  if (ctx.dp().size() > 1) {  // replicas and cp ranks
    summary.exposed_comm_s["dp"] = (result.reduce_wait_ms + result.gather_wait_ms) * 1e-3;
    summary.waited_for_slower_s["dp"] = std::max(0.0, result.reduce_wait_ms - result.reduce_tail_ms) * 1e-3;
    summary.overlap["dp"] = result.reduce_overlap;
  }
  recorder.finish(summary);
}

}  // namespace

void fill_result(TrainResult& result, const StepLoop& loop, const RunShape& shape, double flops_per_step,
                 Replica& replica, const ParallelContext& ctx) {
  const LoopTimes& t = loop.times();
  if (t.timed_steps > 0) {
    result.tokens_per_s = shape.tokens_per_step() * t.timed_steps / t.timed_s;
    result.gflops = flops_per_step * t.timed_steps / t.timed_s * 1e-9;
    result.optimizer_ms = 1e3 * t.optimizer_s / t.timed_steps;
    result.step_ms = 1e3 * t.timed_s / t.timed_steps;
    result.tp_comm_ms = 1e3 * (replica.tp_comm_seconds() - t.tp_comm_warm_up - t.tp_comm_eval) / t.timed_steps;
    result.gather_wait_ms =
        1e3 * (replica.gather_wait_seconds() - t.gather_warm_up - t.gather_eval) / t.timed_steps;
  }
  const ReduceTimes& all = replica.reduce_times();
  if (const int reduced_steps = all.steps - t.warm_up.steps; reduced_steps > 0) {
    const double in_flight = all.in_flight_s - t.warm_up.in_flight_s;
    const double overlapped = all.overlapped_s - t.warm_up.overlapped_s;
    result.reduce_overlap = in_flight > 0 ? overlapped / in_flight : 0;
    result.reduce_wait_ms = 1e3 * (all.wait_s - t.warm_up.wait_s) / reduced_steps;
    result.reduce_calls_ms = 1e3 * (all.calls_s - t.warm_up.calls_s) / reduced_steps;
  }
  result.param_bytes = replica.param_bytes();
  result.activation_bytes = replica.activation_bytes();
  result.buckets = replica.buckets();
  result.optimizer_state_bytes = replica.optimizer_state_bytes();
  result.grad_bytes = replica.grad_bytes_resident();
  gather_bubble(result, loop, ctx);
  gather_reduce_tail(result, loop, ctx);
  result.peak_rss_bytes = max_peak_rss_bytes(ctx);
}

void report_run_end(const RunConfig& cfg, const ParallelContext& ctx, const Replica& replica, const TrainResult& result,
                    const StepLoop& loop, RunRecorder& recorder, const RunEnd& end, FILE* log) {
  if (log) print_bubble(cfg, replica, result, ctx.grid().pp(), end.micro_batches, log);
  if (log && end.prediction && loop.times().timed_steps > 0) {
    const double mem = end.prediction->peak_memory_bytes, step_s = result.step_ms * 1e-3;
    std::fprintf(log,
                 "plan vs measured: peak memory per rank %.0f MiB predicted, %.0f MiB measured (%+.0f%%); step time "
                 "%.3f s predicted, %.3f s measured (%+.0f%%)\n",
                 mem / (1 << 20), result.peak_rss_bytes / (1 << 20), 100.0 * (mem / result.peak_rss_bytes - 1),
                 end.prediction->step_seconds, step_s, 100.0 * (end.prediction->step_seconds / step_s - 1));
  }
  if (recorder.active()) {
    write_summary(cfg, ctx, result, end, recorder);
    if (log) std::fprintf(log, "run directory: %s (loom report / loom diagnose read it)\n", recorder.dir().c_str());
  }
  if (!log) return;
  if (ctx.grid().tp() > 1)
    std::fprintf(log, "tensor-parallel communication: %.1f ms per step waited (%.1f%% of the step time)\n",
                 result.tp_comm_ms, 100.0 * result.tp_comm_ms / std::max(result.step_ms, 1e-9));
  if (ctx.dp().size() > 1)
    std::fprintf(log, "gradient reduction: %d buckets, %.0f%% of its time overlapped with backward, %.1f ms per step "
                 "waited after backward (%.1f ms the reduction's own tail, the rest waiting for a slower rank)\n",
                 result.buckets, 100.0 * result.reduce_overlap, result.reduce_wait_ms, result.reduce_tail_ms);
  if (cfg.parallel.zero == 3 && ctx.dp().size() > 1)
    std::fprintf(log, "ZeRO-3 parameter gathers: %.1f ms per step waited (each segment's gather starts while the one "
                 "before computes)\n", result.gather_wait_ms);
  const LoopTimes& t = loop.times();
  std::fprintf(log,
               "done: %d steps, %.0f tok/s, %.1f GFLOP/s (%.1f%% of the measured peak); reading batches took "
               "%.2f%% of the step time\n",
               cfg.train.steps, result.tokens_per_s, result.gflops, 100.0 * result.gflops / result.peak_gflops,
               100.0 * t.data_s / t.step_s);
}

}  // namespace loom
