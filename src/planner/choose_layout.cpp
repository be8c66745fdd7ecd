// --layout auto: every layout the engine runs, predicted; the fastest that fits.
#include <cmath>
#include <string>

#include "core/check.h"
#include "model/split_rules.h"
#include "planner/layout.h"
#include "planner/predict.h"

namespace loom::planner {

double memory_budget_per_rank(const ClusterSpec& cluster, int world_size) {
  const double ranks_per_node = std::ceil(double(world_size) / cluster.nodes);
  return cluster.memory_bytes * cluster.devices_per_node / ranks_per_node;
}

Layout choose_layout(const RunConfig& cfg, int world_size, const ClusterSpec& cluster, LayoutSearch search) {
  LOOM_USER_CHECK(world_size >= 1, "world size must be at least 1 (got %d)", world_size);
  constexpr double kMiB = 1024.0 * 1024.0;
  const ModelConfig& m = cfg.model;
  const double budget = memory_budget_per_rank(cluster, world_size);
  bool found = false;
  double best_step = 0, least_missing = -1;
  std::string refused;  // why the engine would refuse the last layout it refuses
  const Layout base = layout_of(cfg, world_size);  // chunks, sequence parallelism, precision
  Layout best = base;
  for (int tp = 1; tp <= world_size; tp++) {
    if (world_size % tp || !tp_split_problem(m, tp).empty()) continue;
    for (int cp = 1; cp <= world_size / tp; cp++) {
      // Context parallelism: two equal chunks per rank, on the tiled attention.
      if ((world_size / tp) % cp || !cp_split_problem(m, cp).empty()) continue;
      for (int pp = 1; pp <= std::min(m.n_layer, world_size / (tp * cp)); pp++) {
        if ((world_size / (tp * cp)) % pp) continue;
        const int dp = world_size / (tp * cp * pp);
        if (cfg.train.batch_size % dp) continue;
        const int rows = cfg.train.batch_size / dp;
        for (int micro = 1; micro <= rows; micro++) {
          if (rows % micro) continue;
          if (cfg.train.micro_batch_size > 0 && micro != cfg.train.micro_batch_size) continue;
          // Simplest first: on equal predicted times the earlier one stays.
          for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
            // Expert parallelism: every ep dividing the data group and the experts.
            for (int ep = 1; ep <= (m.is_moe() ? dp * cp : 1); ep++) {
            if ((dp * cp) % ep || (m.is_moe() && m.n_experts % ep)) continue;
            for (int zero = 0; zero <= (dp * cp > 1 ? (search.zero3 ? 3 : 2) : 0); zero++) {
              Layout l = base;
              l.dp = dp, l.tp = tp, l.pp = pp, l.cp = cp, l.zero = zero, l.recompute = recompute, l.ep = ep;
              l.micro_batch = micro, l.micro_batches = rows / micro;
              RunPrediction p;
              try {
                p = predict_loom_run(with_layout(cfg, l), world_size, cluster);
              } catch (const UserError& e) {
                refused = e.what();  // a layout the engine refuses (the schedule's or the partition's rules)
                continue;
              }
              if (p.peak_memory_bytes > budget) {
                const double missing = p.peak_memory_bytes - budget;
                if (least_missing < 0 || missing < least_missing) least_missing = missing;
                continue;
              }
              // Equal predicted times: the larger micro-batch (bigger matrix
              // products run closer to peak than the model assumes).
              const bool better = !found || p.step_seconds < best_step * (1 - 1e-9) ||
                                  (p.step_seconds <= best_step * (1 + 1e-9) && micro > best.micro_batch);
              if (better) found = true, best_step = p.step_seconds, best = l;
            }
            }  // ep
          }
        }
      }
    }
  }
  LOOM_USER_CHECK(found || least_missing >= 0 || refused.empty(), "no layout of %d ranks runs this config: %s",
                  world_size, refused.c_str());
  LOOM_USER_CHECK(found || least_missing >= 0,
                  "no layout of %d ranks divides train.batch_size %d over its replicas (dp must divide it)",
                  world_size, cfg.train.batch_size);
  LOOM_USER_CHECK(found,
                  "no layout of %d ranks fits: the closest needs %.1f MiB more per rank than the %.1f MiB each has "
                  "(%s); use more ranks, a smaller model or a smaller batch",
                  world_size, least_missing / kMiB, budget / kMiB, cluster.name.c_str());
  return best;
}

}  // namespace loom::planner
