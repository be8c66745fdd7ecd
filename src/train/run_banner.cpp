#include "train/run_banner.h"

#include "core/check.h"
#include "model/lora/lora_layout.h"
#include "model/param_groups.h"
#include "parallel/pp/partition.h"

namespace loom {

namespace {

void print_model(const ModelConfig& m, int T, FILE* log) {
  const std::string mlp =
      m.is_moe()
          ? strprintf("MoE MLP: %d experts of width %d, top %d%s%s, %s%s, balance %s", m.n_experts, m.expert_ffn(),
                      m.top_k, m.moe_sigmoid ? " by sigmoid scores" : "",
                      m.moe_renormalize ? "" : " (weights not renormalised)",
                      m.moe_every == 1 ? "in every block"
                                       : strprintf("in every %d-th block (else MLP %d)", m.moe_every, m.ffn()).c_str(),
                      m.moe_shared_ffn > 0 ? strprintf(", a shared expert of width %d", m.moe_shared_ffn).c_str()
                                           : "",
                      moe_balance_name(m.moe_balance))
          : strprintf("MLP %d", m.ffn());
  std::fprintf(log, "model: %s, %d layers, d_model %d, %d heads (%d key/value), %s, vocab %d, seq_len %d%s: "
               "%.2fM parameters\n",
               m.is_moe() ? "Mixtral" : m.is_llama() ? "LLaMA" : "GPT-2", m.n_layer, m.d_model, m.n_head,
               m.kv_heads(), mlp.c_str(), m.vocab_size, T, m.tied() ? ", tied head" : ", untied head",
               double(m.num_parameters()) / 1e6);
}

// "[0,1] [2,3] ...": the ep groups, cut short past 60 characters.
std::string ep_groups(const ParallelGrid& grid) {
  std::string groups;
  for (const auto& g : grid.groups(GroupKind::ep)) {
    if (groups.size() > 60) return groups + " ...";
    groups += groups.empty() ? "[" : " [";
    for (size_t i = 0; i < g.size(); i++) groups += (i ? "," : "") + std::to_string(g[i]);
    groups += "]";
  }
  return groups;
}

void print_parallelism(const RunConfig& cfg, const ParallelContext& ctx, const Replica& replica,
                       const RunShape& shape, FILE* log) {
  const ParallelGrid& grid = ctx.grid();
  const ModelConfig& m = cfg.model;
  const int T = shape.T, cp = grid.cp();
  std::fprintf(log,
               "data parallel: %d replicas x micro-batch %d x %d accumulation steps; ZeRO-%d; gradients in %zu "
               "buckets of %.2f MiB\n",
               grid.dp(), shape.micro, shape.accumulation, replica.zero_stage(), size_t(replica.buckets()),
               double(replica.largest_bucket()) * 4 / (1 << 20));
  std::fprintf(log, "attention: %s%s\n",
               m.tiled_attention(T, cp) ? "tiled (row log-sum-exps kept, tiles recomputed in backward)"
                                        : "materialized (T x T probabilities kept)",
               m.attention == AttentionKind::auto_ ? " (model.attention = auto)" : "");
  if (cp > 1)
    std::fprintf(log, "context parallel: each sequence's %d tokens over %d ranks (%d each, chunks r and %d-r), "
                 "ring attention; gradients summed over dp x cp = %d ranks\n",
                 T, cp, T / cp, 2 * cp - 1, ctx.dp().size());
  if (const int ep = grid.ep(); ep > 1)
    std::fprintf(log,
                 "expert parallel: %d experts over ep = %d ranks (%d each), tokens exchanged by all-to-all in ep "
                 "groups %s; the experts' gradients%s over the %d ranks of each expert-data group\n",
                 m.n_experts, ep, m.n_experts / ep, ep_groups(grid).c_str(),
                 replica.zero_stage() > 0 ? " and ZeRO shards" : "", ctx.group(GroupKind::expert_data).size());
  if (replica.zero_stage() > 0 && ctx.dp().size() == 1)
    std::fprintf(log, "note: parallel.zero = %d with one replica shards nothing (every shard is the whole)\n",
                 replica.zero_stage());
  if (grid.pp() > 1) {
    const PipelinePlan& pl = replica.pipeline();
    std::fprintf(log, "pipeline: %d stages x %d chunks, blocks %s, schedule %s, %d micro-batches per step\n",
                 grid.pp(), pl.v, pp::describe_partition(pl.layers).c_str(), cfg.parallel.schedule.c_str(),
                 shape.accumulation);
  }
  if (grid.tp() > 1) {
    const ModelShard shard{0, grid.tp()};
    std::fprintf(log,
                 "tensor parallel: %d ranks per layer, %d heads and %d MLP features each; vocabulary %d padded to "
                 "%lld; sequence parallel: %s\n",
                 grid.tp(), m.n_head / grid.tp(), m.ffn() / grid.tp(), m.vocab_size,
                 (long long)shard.padded_vocab(m), cfg.parallel.sequence_parallel ? "on" : "off");
  }
}

// LoRA and train.freeze: what is trained, and what the frozen part saves.
void print_frozen(const RunConfig& cfg, const ParallelContext& ctx, const Replica& replica, FILE* log) {
  const double mib = 1 << 20;
  const LoraConfig& lora = cfg.model.lora;
  if (lora.enabled()) {
    std::string targets;
    for (const std::string& t : lora.targets) targets += (targets.empty() ? "" : ", ") + t;
    std::fprintf(log, "LoRA: rank %d, alpha %g (scale %g) on %s: %zu adapters%s; checkpoints hold the adapters "
                 "and their optimizer state, the base is %s\n",
                 lora.rank, lora.alpha, double(lora.scale()), targets.c_str(), lora::adapter_sites(cfg.model).size(),
                 lora.train_biases ? ", biases trained (bias = \"all\")" : "",
                 cfg.train.init_from.empty() ? "loom's initialization from train.seed" : cfg.train.init_from.c_str());
  }
  if (cfg.train.freeze.empty() && !lora.enabled()) return;
  // What a frozen tensor does not keep: its gradient and AdamW moments (each
  // divided over the data ranks where ZeRO shards them; frozen experts over
  // the expert-data group their trained twins would shard over).
  const FrozenShare share = frozen_share(cfg.model, cfg.train.freeze);
  const double f = double(replica.frozen_floats());
  double saved = 0;
  for (const auto& g : replica.groups())
    if (g->frozen()) {
      const double n = double(g->flat().total), d = double(ctx.group(g->spec().ranks).size());
      saved += n * 4 / (replica.zero_stage() >= 2 ? d : 1) + n * 8 / (replica.zero_stage() >= 1 ? d : 1);
    }
  std::fprintf(log, "frozen (%s): %d tensors, %.2fM of %.2fM parameters (%.2fM trained); this rank holds %.1f MiB "
               "of them with no gradient or AdamW state: %.1f MiB saved\n",
               lora.enabled() ? "the LoRA base" : "train.freeze", share.tensors, double(share.frozen) / 1e6,
               double(share.total) / 1e6, double(share.total - share.frozen) / 1e6, f * 4 / mib, saved / mib);
}

void print_memory_and_precision(const Replica& replica, FILE* log) {
  const double mib = 1 << 20, grads_mib = double(replica.grad_floats()) * 4 / mib;
  const char* masters = replica.zero_stage() == 3 ? " (fp32 master shard; blocks gathered as used)"
                        : replica.sharded_masters() ? " (fp32 master shard and the fp32 tensors the model reads)"
                                                    : "";
  std::fprintf(log,
               "memory per rank: parameters %.1f MiB%s, gradients %.1f MiB%s, AdamW state %.1f MiB, activations "
               "%.1f MiB\n",
               double(replica.param_bytes()) / mib, masters,
               replica.zero_stage() >= 2 ? double(replica.grad_shard_floats()) * 4 / mib : grads_mib,
               replica.zero_stage() >= 2 ? " (outside backward)" : "", double(replica.optimizer_state_bytes()) / mib,
               double(replica.activation_bytes()) / mib);
  if (replica.compute() == ComputePrecision::fp32) return;
  const LossScalerOptions& so = replica.scaler().options();
  const std::string scaling =
      so.mode == LossScaleMode::off     ? std::string("off")
      : so.mode == LossScaleMode::fixed ? strprintf("fixed at %g", double(so.initial_scale))
                                        : strprintf("dynamic from %g (x%g after %d clean steps, x%g after %d "
                                                    "overflows, at least %g)",
                                                    double(so.initial_scale), double(so.growth_factor),
                                                    so.growth_interval, double(so.backoff_factor), so.hysteresis,
                                                    double(so.min_scale));
  std::fprintf(log,
               "precision: %s matrix products and stored activations (+%.1f MiB of %s weights); fp32 master "
               "weights, AdamW state, gradients, norms and loss; loss scaling %s\n",
               compute_precision_name(replica.compute()), double(replica.compute_weight_bytes()) / mib,
               compute_precision_name(replica.compute()), scaling.c_str());
}

}  // namespace

void print_run_banner(const RunConfig& cfg, const ParallelContext& ctx, const Replica& replica, const RunShape& shape,
                      const BannerFacts& facts, FILE* log) {
  std::fprintf(log, "layout: %s; this process is rank 0 of %d\n", ctx.grid().describe().c_str(),
               ctx.grid().world_size());
  for (const std::string& line : ctx.nodes().placement_lines(ctx.grid())) std::fprintf(log, "%s\n", line.c_str());
  print_model(cfg.model, shape.T, log);
  std::fprintf(log, "data: %s; global batch %d x %d tokens, %d rows per replica\n", facts.data.c_str(), shape.B,
               shape.T, shape.rows.size());
  print_parallelism(cfg, ctx, replica, shape, log);
  print_frozen(cfg, ctx, replica, log);
  print_memory_and_precision(replica, log);
  std::fprintf(log, "%s\n", facts.dispatch.c_str());
  std::fprintf(log, "threads: %d per rank, measured fp32 peak %.0f GFLOP/s over all ranks\n", shape.threads,
               facts.peak_gflops);
}

}  // namespace loom
