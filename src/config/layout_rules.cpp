#include "config/layout_rules.h"

#include <algorithm>

#include "config/run_pipeline.h"
#include "core/check.h"
#include "model/split_rules.h"

namespace loom {
namespace {

void require(const std::string& problem) { LOOM_USER_CHECK(problem.empty(), "%s", problem.c_str()); }

}  // namespace

void check_layout(const RunConfig& cfg, const LayoutSizes& sizes) {
  require(world_problem(sizes.world, sizes.dp, sizes.tp, sizes.pp, sizes.cp));
  const int tp = sizes.tp, dp = sizes.dp > 0 ? sizes.dp : sizes.world / (sizes.tp * sizes.pp * sizes.cp);
  require(tp_split_problem(cfg.model, tp));
  require(cp_split_problem(cfg.model, sizes.cp));
  require(ep_problem(dp, sizes.cp, sizes.ep));
  LOOM_USER_CHECK(sizes.ep == 1 || (cfg.model.is_moe() && cfg.model.n_experts % sizes.ep == 0),
                  "parallel.ep = %d needs a mixtral model whose model.n_experts (%d) it divides", sizes.ep,
                  cfg.model.n_experts);
  LOOM_USER_CHECK(cfg.train.batch_size % dp == 0,
                  "config field 'train.batch_size' (%d) must be divisible by the data-parallel size %d",
                  cfg.train.batch_size, dp);
  const int micro = cfg.train.micro_batch_size;
  const int rows = micro > 0 ? micro : cfg.train.batch_size / dp;
  LOOM_USER_CHECK(sizes.cp == cfg.parallel.cp, "parallel.cp = %d but the grid has cp = %d", cfg.parallel.cp,
                  sizes.cp);
  const int local_seq = cfg.model.seq_len / sizes.cp;  // a rank's tokens of each sequence
  if (cfg.parallel.sequence_parallel) require(sequence_parallel_problem(rows, local_seq, tp));
  LOOM_USER_CHECK(!cfg.model.is_moe() || cfg.model.moe_balance != MoeBalance::switch_ || sizes.pp == 1,
                  "config field 'model.moe_balance': \"switch\" sums every MoE layer's routing of a micro-batch "
                  "before any layer's backward, which a pipeline split over %d stages cannot do; use \"aux_free\" or "
                  "\"sequence\" (exact in every layout) or parallel.pp = 1",
                  sizes.pp);
  LOOM_USER_CHECK(cfg.model.moe_shared_ffn % tp == 0,
                  "config field 'model.moe_shared_ffn' (%d) must be divisible by parallel.tp (%d): the shared "
                  "expert's width is split over the tp ranks",
                  cfg.model.moe_shared_ffn, tp);
  LOOM_USER_CHECK(!cfg.model.is_moe() || cfg.model.expert_ffn() % tp == 0,
                  "config field 'model.moe_ffn_hidden' (%d) must be divisible by parallel.tp (%d): each expert's "
                  "width is split over the tp ranks",
                  cfg.model.expert_ffn(), tp);
  LOOM_USER_CHECK(micro == 0 || cfg.train.batch_size % (dp * micro) == 0,
                  "config field 'train.batch_size' (%d) must be divisible by parallel.dp (%d) x "
                  "train.micro_batch_size (%d) = %d: the global batch is replicas x micro-batch x accumulation steps",
                  cfg.train.batch_size, dp, micro, dp * micro);
  // Pipeline: enough blocks for the chunks, and micro-batches for the schedule.
  const int pp = sizes.pp, v = cfg.parallel.virtual_stages;
  LOOM_USER_CHECK(v == 1 || pp > 1, "parallel.virtual_stages = %d interleaves pipeline stages: it needs parallel.pp > 1",
                  v);
  plan_pipeline(cfg, pp);  // checks model.n_layer >= pp x v and parallel.pp_layers
  const int micro_batches = cfg.train.batch_size / dp / std::max(1, rows);
  LOOM_USER_CHECK(cfg.parallel.schedule != "interleaved" || micro_batches % pp == 0,
                  "the interleaved schedule needs the micro-batches per step (%d = train.batch_size / (parallel.dp x "
                  "train.micro_batch_size)) to be a multiple of parallel.pp (%d)",
                  micro_batches, pp);
  // Fewer micro-batches than stages leave nothing to fill the bubble with.
  const bool zero_bubble = cfg.parallel.schedule == "zb-h1" || cfg.parallel.schedule == "zb-v";
  LOOM_USER_CHECK(!zero_bubble || pp == 1 || micro_batches >= pp,
                  "parallel.schedule = \"%s\" needs at least parallel.pp = %d micro-batches per step; got %d = "
                  "train.batch_size / (parallel.dp x train.micro_batch_size): raise train.batch_size or lower "
                  "train.micro_batch_size",
                  cfg.parallel.schedule.c_str(), pp, micro_batches);
}

void check_layout(const RunConfig& cfg, const ParallelGrid& grid) {
  check_layout(cfg, LayoutSizes{grid.world_size(), grid.dp(), grid.tp(), grid.pp(), grid.cp(), grid.ep()});
}

std::string layout_problem(const RunConfig& cfg, const LayoutSizes& sizes) {
  try {
    check_layout(cfg, sizes);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace loom
