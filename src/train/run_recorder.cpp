#include "train/run_recorder.h"

#include <algorithm>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "comm/broadcast_text.h"
#include "obs/chrome_trace.h"
#include "core/check.h"
#include "obs/trace_analysis.h"

namespace loom {

namespace {
// runtime.heartbeat_stale_s, at most half the deadline.
double stale_after(const RuntimeConfig& r) {
  const double stale = double(r.heartbeat_stale_s);
  return r.comm_timeout_s > 0 ? std::min(stale, 0.5 * double(r.comm_timeout_s)) : stale;
}
}  // namespace

RunRecorder::RunRecorder(const std::string& dir, const RunConfig& cfg, const ParallelContext& ctx,
                         int micro_batches, bool resuming)
    : ctx_(ctx), steps_(cfg.train.steps), resuming_(resuming) {
  // Every rank learns whether rank 0 records.
  float on = ctx.is_logging_rank() && !dir.empty() ? 1.f : 0.f;
  ctx.world().all_reduce(&on, 1, DType::f32, ReduceOp::Max);
  active_ = on > 0;
  if (!active_) return;
  trace_ = std::make_unique<obs::TraceRecorder>(
      ctx.rank(), obs::GridPlace{ctx.coord().dp, ctx.coord().tp, ctx.coord().pp}, size_t(1) << 18);
  // Flight records: every rank's beside rank 0's run directory (its path
  // travels from rank 0; a stale hang.json from an earlier run goes first).
  const std::string run_path = broadcast_text(ctx.world(), ctx.is_logging_rank() ? dir : std::string());
  if (ctx.is_logging_rank()) {
    for (const char* stale : {"/flight/hang.json", "/flight/hang.claim", "/trace.json"})
      std::remove((run_path + stale).c_str());
    std::error_code ec;
    std::filesystem::remove_all(run_path + "/trace", ec);  // an earlier attempt's ranks (this run starts its own)
  }
  ctx.world().barrier();
  flight_ = std::make_unique<FlightRecorder>(run_path + "/flight", ctx.rank(),
                                             FlightOptions{0.5, stale_after(cfg.runtime), ctx.grid().world_size()});
  for (GroupKind kind : kAllGroupKinds) ctx.group(kind).set_flight_recorder(flight_.get());
  trace_->set_flight(flight_.get());
  trace_flush_every_ = cfg.train.trace_flush_every;
  if (trace_flush_every_ > 0) {
    // A rank that cannot write its file goes on without it (throwing here
    // would leave the others at the barrier below).
    try {
      trace_file_ = std::make_unique<obs::RankTraceFile>(run_path + "/trace", ctx.rank(), ctx.coord().dp,
                                                         ctx.coord().tp, ctx.coord().pp);
    } catch (const UserError& e) {
      std::fprintf(stderr, "loom: rank %d: warning: %s; its spans reach only trace.json\n", ctx.rank(), e.what());
    }
  }
  ctx.world().barrier();
  trace_->set_origin_now();
  if (!ctx.is_logging_rank()) return;
  dir_ = dir;
  run_ = std::make_unique<obs::RunDir>(dir, resuming, cfg.train.tensorboard);
  run_->write_config(cfg.to_toml());
  const ParallelGrid& g = ctx.grid();
  obs::RunLayout layout;
  layout.world_size = g.world_size(), layout.dp = g.dp(), layout.tp = g.tp(), layout.pp = g.pp(), layout.cp = g.cp();
  layout.ep = g.ep();
  if (g.ep() > 1) layout.ep_groups = g.groups(GroupKind::ep);
  layout.zero = cfg.parallel.zero, layout.order = cfg.parallel.order;
  layout.schedule = g.pp() > 1 ? cfg.parallel.schedule : "none";
  layout.micro_batches = micro_batches, layout.virtual_stages = cfg.parallel.virtual_stages;
  layout.micro_batch_size = cfg.train.batch_size / g.dp() / micro_batches;
  layout.seq_len = cfg.model.seq_len, layout.batch_size = cfg.train.batch_size;
  layout.ranks_per_node = ctx.nodes().max_ranks_per_node(), layout.nodes = ctx.nodes().nodes();
  layout.dp_reduce = ctx.dp_reduce().hierarchical ? "hierarchical" : "flat";
  if (ctx.dp_reduce().applies) layout.dp_reduce_why = ctx.dp_reduce().line();
  layout.dtype = cfg.precision.compute;  // what ran: diagnose's numerics rules read it
  layout.loss_scaling = cfg.precision.loss_scale_mode() != LossScaleMode::off;
  run_->write_layout(layout);
  progress_ = std::make_unique<obs::Progress>("train", cfg.train.steps);
}

RunRecorder::~RunRecorder() {
  if (flight_)
    for (GroupKind kind : kAllGroupKinds) ctx_.group(kind).set_flight_recorder(nullptr);
}

void RunRecorder::resumed_at(int64_t step) {
  if (run_ && resuming_) run_->append_resume_mark(step);
}

void RunRecorder::step(const obs::StepMetrics& metrics) {
  if (trace_file_ && metrics.step % trace_flush_every_ == 0) trace_file_->append(trace_->take_finished());
  if (!run_) return;
  run_->append_step(metrics);
  char extra[64];
  std::snprintf(extra, sizeof extra, "loss %.4f", metrics.loss);
  progress_->update(metrics.step, extra);
}

void RunRecorder::finish(obs::RunSummary summary) {
  if (!active_) return;
  if (trace_file_) trace_file_->append(trace_->take_finished());
  std::vector<obs::RankTrace> ranks = obs::gather_chrome_trace(ctx_.world(), *trace_, dir_ + "/trace.json");
  if (!run_) return;
  progress_->finish();
  obs::fill_summary_from_trace(obs::analyze_trace(ranks), summary);
  run_->write_summary(summary);
}

}  // namespace loom
