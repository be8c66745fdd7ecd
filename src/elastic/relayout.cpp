#include "elastic/relayout.h"

#include "core/check.h"
#include "parallel/grid/parallel_grid.h"
#include "planner/predict.h"
#include "train/trainer.h"

namespace loom::elastic {
namespace {

// The user's tp x pp (x cp) on `world` ranks with the same global batch, if
// the engine runs it there and it fits memory; else why not.
bool users_layout(const RunConfig& cfg, int world, const planner::ClusterSpec& cluster, planner::Layout& out,
                  std::string& why) {
  const int tp = cfg.parallel.tp, pp = cfg.parallel.pp, cp = cfg.parallel.cp;
  if (world % (tp * pp * cp))
    return why = strprintf("tp %d x pp %d x cp %d does not divide %d ranks", tp, pp, cp, world), false;
  const int dp = world / (tp * pp * cp), batch = cfg.train.batch_size;
  if (batch % dp) return why = strprintf("dp %d does not divide train.batch_size %d", dp, batch), false;
  // The user's micro-batch where it still divides a replica's rows, else
  // the largest that does (more accumulation steps, same global batch).
  const int rows = batch / dp;
  int micro = cfg.train.micro_batch_size > 0 ? std::min(cfg.train.micro_batch_size, rows) : rows;
  while (rows % micro) micro--;
  RunConfig c = cfg;
  c.parallel.dp = dp;
  c.train.micro_batch_size = micro;
  // Expert parallelism: the user's ep where it still divides the data
  // group, else the largest that does (a checkpoint reshards over ep).
  while ((dp * cp) % c.parallel.ep || (c.parallel.ep > 1 && c.model.n_experts % c.parallel.ep)) c.parallel.ep--;
  if (dp * cp == 1 && c.parallel.zero > 0) c.parallel.zero = 0;  // nothing to shard over
  try {
    check_layout(c, ParallelGrid::for_world(world, dp, tp, pp, c.parallel.order, c.parallel.cp, c.parallel.ep));
    const planner::RunPrediction p = planner::predict_loom_run(c, world, cluster);
    const double budget = planner::memory_budget_per_rank(cluster, world);
    if (p.peak_memory_bytes > budget)
      return why = strprintf("needs %.1f MiB per rank, %.1f MiB there", p.peak_memory_bytes / (1 << 20),
                             budget / (1 << 20)),
             false;
  } catch (const UserError& e) {
    return why = e.what(), false;
  }
  out = planner::layout_of(c, world);
  return true;
}

}  // namespace

std::vector<std::string> layout_overrides(const RunConfig& cfg, const planner::Layout& l) {
  const RunConfig c = planner::with_layout(cfg, l);
  std::vector<std::string> o = {
      strprintf("parallel.dp=%d", l.dp),
      strprintf("parallel.tp=%d", l.tp),
      strprintf("parallel.pp=%d", l.pp),
      strprintf("parallel.cp=%d", l.cp),
      strprintf("parallel.ep=%d", l.ep),
      strprintf("parallel.zero=%d", l.zero),
      strprintf("parallel.virtual_stages=%d", l.v),
      strprintf("train.micro_batch_size=%d", l.micro_batch),
      "train.recompute=" + c.train.recompute,
  };
  if (l.v > 1) o.push_back("parallel.schedule=interleaved");
  // A hand-made stage split was for the old number of stages.
  if (l.pp != cfg.parallel.pp && !cfg.parallel.pp_layers.empty()) o.push_back("parallel.pp_layers=[]");
  return o;
}


std::string describe_layout(int world, const planner::Layout& l) {
  std::string d = l.describe();  // "dp 2 tp 1 pp 1 v 1 | micro-batch 4 x 1 | ..."
  for (size_t at; (at = d.find(" | ")) != std::string::npos;) d.replace(at, 3, ", ");
  return strprintf("%d rank%s: %s", world, world == 1 ? "" : "s", d.c_str());
}

std::string Relayout::describe() const {
  return strprintf("%s (%s)", describe_layout(world, layout).c_str(),
                   users ? "your tp x pp, fewer replicas" : "the planner's choice");
}

Relayout relayout(const RunConfig& cfg, int survivors, int min_world, const planner::ClusterSpec& cluster,
                  bool planner_only) {
  std::string reasons;
  for (int world = survivors; world >= std::max(1, min_world); world--) {
    Relayout r;
    r.world = world;
    std::string why = "--layout auto";
    r.users = !planner_only && users_layout(cfg, world, cluster, r.layout, why);
    if (!r.users) {
      RunConfig c = cfg;
      c.parallel.dp = 0;
      c.train.micro_batch_size = 0;  // any micro-batch; the global batch stays
      try {
        r.layout = planner::choose_layout(c, world, cluster);
      } catch (const UserError& e) {
        reasons += strprintf("\n  %d ranks: yours: %s; planner: %s", world, why.c_str(), e.what());
        continue;
      }
    }
    r.overrides = layout_overrides(cfg, r.layout);
    return r;
  }
  throw UserError(strprintf("no layout runs on %d to %d ranks:%s", std::max(1, min_world), survivors,
                            reasons.c_str()));
}

}  // namespace loom::elastic
