#include "planner/predict.h"

#include <algorithm>
#include <cmath>

#include "config/layout_rules.h"
#include "config/run_pipeline.h"
#include "core/check.h"
#include "kernels/cpu/isa.h"
#include "model/param_groups.h"
#include "model/param_layout.h"
#include "model/stage_module.h"
#include "planner/comm_cost.h"
#include "planner/work_model.h"
#include "planner/memory_model.h"
#include "planner/pipeline_sim.h"

namespace loom::planner {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The run as the engine lays it out: the grid, the micro-batches and the
// pipeline plan the trainer builds (config/run_pipeline.h).
struct LoomRun {
  int dp, tp, pp, zero, micro, accumulation, world;
  int cp;  // context parallelism: dp x cp ranks form the data group (gradients, ZeRO shards)
  int data() const { return dp * cp; }
  int ep = 1;  // expert parallelism: the experts' gradients and shards over data() / ep
  int expert_data() const { return data() / ep; }
  ComputePrecision compute;
  Recompute recompute;
  PipelinePlan plan;
  bool lowp() const { return compute != ComputePrecision::fp32; }
};

LoomRun loom_run(const RunConfig& cfg, int world) {
  LOOM_USER_CHECK(world >= 1, "world size must be at least 1 (got %d)", world);
  const ParallelConfig& p = cfg.parallel;
  check_layout(cfg, LayoutSizes{world, p.dp, p.tp, p.pp, p.cp, p.ep});  // the engine's own rules
  const int dp = p.dp > 0 ? p.dp : world / (p.tp * p.pp * p.cp);
  const int rows = cfg.train.batch_size / dp;
  const int micro = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : rows;
  return {dp,
          p.tp,
          p.pp,
          p.zero,
          micro,
          rows / micro,
          world,
          p.cp,
          std::max(1, p.ep),
          cfg.precision.compute_precision(),
          cfg.train.recompute_mode(),
          plan_pipeline(cfg, p.pp, rows / micro)};
}

// What one rank of a pipeline stage holds, from the engine's own plans: each
// chunk's parameter layout (ParamLayout::for_model) and activation plan
// (planned_activation_bytes, with the slots the executor gives the chunk).
struct StagePlan {
  std::vector<double> chunk_params;  // floats per chunk
  double params = 0;                 // floats, every chunk
  double frozen = 0;                 // floats of them in the frozen group (train.freeze, LoRA's base)
  double frozen_products = 0;        // of which read by products only
  std::vector<double> chunk_frozen_products;  // per chunk: frozen product-only floats (no weight gradient)
  double read_fp32 = 0;              // floats the model reads in fp32 (not products_only), in whole pages
  double experts = 0;                // trained floats in the expert groups (ep > 1: over data() / ep)
  double frozen_experts = 0;         // frozen floats in the expert groups (sharded over data() / ep)
  double gathered = 0;               // ZeRO-3: most floats gathered at once (see zero3_gathered)
  double activations = 0;            // bytes
};

// ZeRO-3 gathers a block's tensors together and every other tensor on its
// own, just before use, with the next unit's gather started ahead (model/
// transformer_stage.cpp, block_stage.h): the embedding and the first block,
// a block and the next, the final norm and head with the last block. In a
// layout the final norm and an untied head come before the blocks, the
// position and token tables after them (the tied head is the token table).
double zero3_gathered(const ModelConfig& model, const ParamLayout& lay) {
  double block = 0, before = 0, after = 0, table = 0;
  std::vector<double> blocks(size_t(model.n_layer), 0.0);
  bool seen_block = false;
  for (const ParamSpec& p : lay.params) {
    const double n = double(p.numel);
    if (p.block >= 0) blocks[size_t(p.block)] += n, seen_block = true;
    else if (!seen_block) before += n;
    else after += n, table = std::max(table, n);
  }
  for (double b : blocks) block = std::max(block, b);
  const double embed = lay.shard.embedding ? after : 0;
  const double head = lay.shard.head ? before + (model.tied() ? table : 0) : 0;
  return block + std::max({block, embed, head});
}

StagePlan stage_plan(const RunConfig& cfg, const LoomRun& r, int stage, int threads) {
  constexpr int64_t kPage = 4096 / 4;  // floats
  StagePlan s;
  const std::vector<ModelShard> chunks = chunk_shards(cfg, r.plan, stage, 0, r.tp, 0, r.ep);
  s.chunk_params.resize(chunks.size());
  s.chunk_frozen_products.resize(chunks.size());
  // The trained group's buffers hold the stage's trained tensors, chunk v-1
  // first (train/replica.cpp, train/param_group.cpp), each 64-byte aligned;
  // the fp32 values read are the pages their tensors touch. Frozen tensors
  // (train.freeze) live in a group of their own.
  const std::vector<ParamGroupSpec> groups = param_groups(cfg.model, cfg.train.freeze, cfg.parallel.ep);
  int64_t base = 0, pages = 0, last_page = -1;
  for (int c = int(chunks.size()) - 1; c >= 0; c--) {
    const ParamLayout lay = ParamLayout::for_model(cfg.model, chunks[size_t(c)]);
    const std::vector<int> group = group_of_tensors(groups, lay);
    for (size_t i = 0; i < lay.params.size(); i++) {
      const ParamSpec& p = lay.params[i];
      const int64_t aligned = (p.numel + 15) / 16 * 16;
      if (groups[size_t(group[i])].frozen) {
        s.frozen += double(aligned);
        if (groups[size_t(group[i])].ranks == GroupKind::expert_data) s.frozen_experts += double(aligned);
        // (LoRA's base: the work model already leaves out its weight gradients.)
        if (p.products_only && !cfg.model.lora.enabled()) s.chunk_frozen_products[size_t(c)] += double(p.numel);
        if (p.products_only) s.frozen_products += double(aligned);
        continue;
      }
      const int64_t at = base;
      base += aligned;
      if (groups[size_t(group[i])].ranks == GroupKind::expert_data) s.experts += double(aligned);
      if (p.products_only || p.numel == 0) continue;
      const int64_t first = std::max(at / kPage, last_page + 1);
      const int64_t last = (at + p.numel - 1) / kPage;
      if (first <= last) pages += last - first + 1, last_page = last;
    }
    s.chunk_params[size_t(c)] = double(lay.total);
    s.params += double(lay.total);
    s.gathered = std::max(s.gathered, zero3_gathered(cfg.model, lay));
    if (!r.plan.shares_slots())
      s.activations += double(planned_activation_bytes(cfg.model, chunks[size_t(c)], r.micro,
                                                       cfg.model.seq_len / r.cp,
                                                       r.plan.slots[size_t(stage)][size_t(c)], r.compute,
                                                       r.recompute, threads, r.cp));
  }
  if (r.plan.shares_slots())  // the chunks share their activation sets (train/replica.cpp)
    s.activations = double(planned_shared_activation_bytes(cfg.model, chunks, r.micro, cfg.model.seq_len / r.cp,
                                                           r.plan.shared_slots[size_t(stage)], r.compute,
                                                           r.recompute, threads, r.cp));
  s.read_fp32 = double(pages * kPage);
  return s;
}

struct StageFigures {
  double params, grads, optimizer, activations;
  double checkpoint = 0;  // the asynchronous save's copy (train/background_save.h)
};

// Model states of a rank holding n parameters (floats), by ZeRO stage, as
// train/replica.cpp and parallel/zero/ allocate them:
//   parameters  ZeRO 0: fp32 4n (+ the 16-bit compute copy 2n);
//               ZeRO 1, 2 in fp32: 4n, the fp32 parameters are the compute
//               weights; in bf16 / fp16 (sharded master weights, as
//               Megatron's distributed optimizer): the fp32 master of the
//               rank's shard 4n / dp, the whole 16-bit compute copy 2n and
//               the fp32 values of the tensors the model reads in fp32
//               (norms, biases, embeddings: not products_only);
//               ZeRO 3: the fp32 master shard 4n / dp and the most
//               gathered at once, fp32 (+ 16-bit copy): 4 (6) B each;
//   gradients   the fp32 buffer 4n (ZeRO >= 1 also the reduced shard 4n / dp;
//               ZeRO 2, 3 without accumulation keep only the shard and the
//               buckets in flight outside backward); bf16 reduction adds
//               its 16-bit copies;
//   AdamW       two fp32 moments, 8n, / dp under ZeRO >= 1.
//   frozen      (train.freeze) parameters only: fp32 4n (+ the 16-bit copy
//               2n), under ZeRO 3 a shard 4n / dp gathered as the rest is;
//               no gradients, masters or moments. LoRA's base in 16 bits
//               below ZeRO-3 keeps its product-only tensors in the compute
//               type alone (2 B), and is not in checkpoints.
//   experts     (ep > 1) trained like the rest, their shards over data() / ep.
StageFigures stage_memory(const RunConfig& cfg, const LoomRun& r, const StagePlan& s) {
  const double n = s.params - s.frozen, nf = s.frozen, dp = r.data();
  // What a rank holds of a ZeRO shard of every trained float: the dense
  // ones over the data group, the experts' over the expert-data group.
  const double shard = (n - s.experts) / dp + s.experts / r.expert_data();
  const double frozen_shard = (nf - s.frozen_experts) / dp + s.frozen_experts / r.expert_data();
  StageFigures f;
  if (r.zero == 0) f.params = 4 * n + (r.lowp() ? 2 * n : 0);
  else if (r.zero <= 2) f.params = r.lowp() ? 4 * shard + 2 * n + 4 * s.read_fp32 : 4 * n;
  else f.params = 4 * shard + (r.lowp() ? 6 : 4) * s.gathered;
  const bool compute_type_base = cfg.model.lora.enabled() && r.lowp() && r.zero < 3;
  if (compute_type_base) f.params += 2 * s.frozen_products + 6 * (nf - s.frozen_products);
  else f.params += r.zero == 3 ? 4 * frozen_shard : 4 * nf + (r.lowp() ? 2 * nf : 0);
  if (r.zero == 0) f.grads = 4 * n;
  else if (r.zero == 1 || r.accumulation > 1) f.grads = 4 * n + 4 * shard;
  else f.grads = std::min(4 * n, 4 * shard + 2 * double(cfg.parallel.bucket_mb) * kMiB);
  if (cfg.precision.grad_reduce == "bf16" && r.data() > 1) f.grads += 2 * n + (r.zero >= 1 ? 2 * shard : 0);
  f.optimizer = 8 * (r.zero >= 1 ? shard : n);
  f.activations = s.activations;
  // An asynchronous save keeps a copy of what the rank writes
  // (Replica::checkpoint_pieces, fp32): dp rank 0 the parameters and its
  // moments; with sharded masters (ZeRO-3, or 1 and 2 in 16 bits) every rank
  // its shard of both.
  if (cfg.train.checkpoint_every > 0 && cfg.train.async_checkpoint) {
    const bool sharded_masters = r.zero == 3 || (r.zero >= 1 && r.lowp());
    f.checkpoint = sharded_masters ? 12 * shard : 4 * n + f.optimizer;
    if (!cfg.model.lora.enabled())  // LoRA's base is not written
      f.checkpoint += r.zero == 3 ? 4 * frozen_shard : 4 * nf;  // dp rank 0 (ZeRO-3: every rank its shard)
  }
  return f;
}

// Threads a rank runs (as the trainer sets them: runtime.threads, or the
// node's cores over its ranks), and the cores it computes on (ranks beyond
// the cores share them).
int rank_threads(const RunConfig& cfg, const LoomRun& r, const ClusterSpec& c) {
  const double ranks_per_node = std::ceil(double(r.world) / c.nodes);
  return cfg.runtime.threads > 0 ? cfg.runtime.threads
                                 : std::max(1, int(std::floor(c.devices_per_node / ranks_per_node)));
}
double rank_cores(const RunConfig& cfg, const LoomRun& r, const ClusterSpec& c) {
  const double ranks_per_node = std::ceil(double(r.world) / c.nodes);
  return std::min(double(rank_threads(cfg, r, c)), c.devices_per_node / ranks_per_node);
}

// Seconds of one (micro-batch, virtual stage) pass, split by kind.
struct PassCost {
  double f_compute = 0, b_compute = 0;  // backward includes the recomputation
  double f_tp = 0, b_tp = 0;            // tensor-parallel collectives
  double f_zero3 = 0, b_zero3 = 0;      // ZeRO-3 gathers not hidden behind compute
  double f_cp = 0, b_cp = 0;            // the ring's transfers not hidden behind attention
  double f_ep = 0, b_ep = 0;            // expert parallelism's token all-to-alls
  double forward() const { return f_compute + f_tp + f_zero3 + f_cp + f_ep; }
  double backward() const { return b_compute + b_tp + b_zero3 + b_cp + b_ep; }
};

}  // namespace

std::string RunPrediction::describe() const {
  const std::string copy =
      checkpoint_bytes > 0 ? strprintf(", checkpoint copy %.1f", checkpoint_bytes / kMiB) : std::string();
  return strprintf("peak memory per rank %.1f MiB (parameters %.1f, gradients %.1f, AdamW %.1f, activations %.1f%s, "
                   "overhead %.1f), step %.3f s (compute %.3f, bubble %.3f, communication %.3f, optimizer %.3f)",
                   peak_memory_bytes / kMiB, params_bytes / kMiB, grads_bytes / kMiB, optimizer_bytes / kMiB,
                   activation_bytes / kMiB, copy.c_str(), overhead_bytes / kMiB, step_seconds, compute_seconds,
                   bubble_seconds, comm_seconds, optimizer_seconds);
}

RunPrediction predict_loom_run(const RunConfig& cfg, int world_size, const ClusterSpec& cluster) {
  const LoomRun r = loom_run(cfg, world_size);
  const int threads = rank_threads(cfg, r, cluster);
  std::vector<StagePlan> stages;
  for (int s = 0; s < r.pp; s++) stages.push_back(stage_plan(cfg, r, s, threads));

  RunPrediction out;
  // fp16 products (and bf16 ones on CPUs without avx512_bf16) widen their
  // operands to fp32 one panel at a time (kernels/cpu/matmul_lowp.h): at most
  // 512 x 1024 of A, 1024 x 1024 of B and a 512 x 1024 fp32 output panel,
  // 8 MiB, once per process. Native bf16 products (this CPU's) allocate none.
  const bool widened = r.compute == ComputePrecision::fp16 ||
                       (r.compute == ComputePrecision::bf16 && !cpu::native_bf16_products());
  out.overhead_bytes = cluster.overhead_bytes + (widened ? 4.0 * (512 * 1024 + 1024 * 1024 + 512 * 1024) : 0);
  // MPI's reduction of a gradient bucket works in a temporary of about the
  // bucket's size (measured with OpenMPI here: a 2-rank run's peak RSS grows
  // by 0.75 MiB per MiB of parallel.bucket_mb, 144 MiB at 1 MiB to 154 at
  // one 14 MiB bucket); the calibration's single process has none.
  if (r.data() > 1) out.overhead_bytes += double(cfg.parallel.bucket_mb) * kMiB;
  // Sharded masters (ZeRO 1 and 2 in 16 bits) publish the updated weights
  // bucket by bucket through two fp32 staging buffers of the largest bucket
  // (ShardedOptimizer::publish), every step.
  if ((r.zero == 1 || r.zero == 2) && r.lowp()) {
    double trained = 0;
    for (const StagePlan& sp : stages) trained = std::max(trained, sp.params - sp.frozen);
    out.overhead_bytes += 2 * std::min(4 * trained, double(cfg.parallel.bucket_mb) * kMiB);
  }
  for (int s = 0; s < r.pp; s++) {
    const StageFigures f = stage_memory(cfg, r, stages[size_t(s)]);
    const double total = f.params + f.grads + f.optimizer + f.activations + f.checkpoint + out.overhead_bytes;
    out.stages.push_back({f.params, f.grads, f.optimizer, f.activations, total});
    if (total > out.peak_memory_bytes) {
      out.peak_memory_bytes = total;
      out.params_bytes = f.params, out.grads_bytes = f.grads, out.optimizer_bytes = f.optimizer;
      out.activation_bytes = f.activations, out.checkpoint_bytes = f.checkpoint;
    }
  }

  // Work from the shapes of the products (planner/work_model.h) on the
  // rank's cores. bf16 products run at the cluster's bf16 rate when it
  // names one (loom bench calibrate measures it); otherwise at 1.8x the
  // fp32 rate, what bench/matmul_bench measured with avx512_bf16. fp16 has
  // no arithmetic here: without a measured rate its products run at fp32's.
  const double cores = rank_cores(cfg, r, cluster);
  DeviceRates rates = device_rates(cluster, r.compute, cores);
  if (rates.peak <= 0) rates.peak = cluster.peak_flops_fp32 * cores * (r.compute == ComputePrecision::bf16 ? 1.8 : 1);
  const double mem_bw = cluster.memory_bandwidth * cores;
  const GroupLinks links = group_links(cluster, r.dp, r.tp, r.pp, r.cp, cfg.parallel.order, r.ep);

  // One micro-batch's block on one rank: its products by shape, the
  // attention core by its kernel, norms, activations and residuals by
  // bytes (16-bit activations under bf16/fp16); the head's V x C product,
  // final norm and cross-entropy on the last virtual stage. Recomputation
  // adds to backward what it runs again: full the block's whole forward
  // (and its two tensor-parallel all-reduces), selective the attention core.
  const ModelConfig& m = cfg.model;
  const ParameterCounts pc = parameter_counts(m);
  // Context parallelism: a rank's queries are T / cp of each sequence, its
  // attention still reads all T keys.
  const double C = m.d_model, T = m.seq_len, tokens = double(r.micro) * T / r.cp;
  BlockShape shape;
  shape.model = m, shape.sequences = r.micro, shape.cp = r.cp, shape.tp = r.tp;
  shape.seq_parallel = r.tp > 1 && cfg.parallel.sequence_parallel, shape.act_bytes = r.lowp() ? 2 : 4;
  const PassSeconds block = block_seconds(shape, rates), head = head_seconds(shape, rates);
  const double f_block = block.forward, f_head = head.forward;
  const double rate = rates.peak * rates.ceiling;  // for the frozen products' share
  // Context parallelism: the ring's fp32 key/value blocks.
  const RingSeconds ring = ring_attention_seconds(4 * tokens * 2 * double(m.kv_heads() / r.tp) * m.head_dim(),
                                                  block.attention_forward, r.cp, links.cp);
  // (The tiled attention keeps no probabilities: selective recomputes nothing.)
  const bool tiled = m.tiled_attention(m.seq_len, r.cp);
  const double redo = r.recompute == Recompute::full                  ? f_block
                      : r.recompute == Recompute::selective && !tiled ? block.attention_forward
                                                                      : 0;
  // Two all-reduces of a block's fp32 output per pass (attention, MLP), or
  // with sequence parallelism an all-gather + reduce-scatter pair moving the same.
  const double tp_ar = all_reduce_seconds(4 * tokens * C, r.tp, links.tp);
  const int tp_per_block_b = r.recompute == Recompute::full ? 4 : 2;
  // Expert parallelism, per MoE block (model/moe/moe_block.h): forward sends
  // the routed pairs out (compute type) and their fp32 outputs back;
  // backward the output gradients out and the fp32 input gradients back; a
  // full recomputation repeats the forward's. Blocking: none is hidden.
  double a2a_f = 0, a2a_b = 0;
  if (m.is_moe() && r.ep > 1) {
    const double pairs = tokens * m.top_k, share = 1.0 / m.moe_every;
    const double one = all_to_all_seconds(pairs * C * (r.lowp() ? 2 : 4), r.ep, links.ep) +
                       all_to_all_seconds(pairs * C * 4, r.ep, links.ep);
    a2a_f = share * one, a2a_b = share * one * (r.recompute == Recompute::full ? 2 : 1);
  }

  const int n_vs = r.plan.virtual_stages();
  std::vector<PassCost> pass(static_cast<size_t>(n_vs));
  StageDurations d;
  const double rows = r.tp > 1 && cfg.parallel.sequence_parallel ? tokens / r.tp : tokens;
  d.p2p_seconds = r.pp > 1 ? p2p_seconds(4 * rows * C, links.pp) : 0;  // one fp32 activation (or gradient)
  for (int vs = 0; vs < n_vs; vs++) {
    PassCost& k = pass[size_t(vs)];
    const double layers = r.plan.layers[size_t(vs)];
    k.f_compute = layers * f_block + (vs == n_vs - 1 ? f_head : 0);
    // Frozen matrices (train.freeze) take no weight-gradient product.
    const StagePlan& owner = stages[size_t(r.plan.map().stage_of(vs))];
    const double w_frozen =
        tokens * 2 * owner.chunk_frozen_products[size_t(r.plan.map().chunk_of(vs))] / rate;
    k.b_compute = layers * (block.backward() + redo) + (vs == n_vs - 1 ? head.backward() : 0) - w_frozen;
    k.f_tp = 2 * layers * tp_ar;
    k.b_tp = tp_per_block_b * layers * tp_ar;
    k.f_cp = layers * ring.forward, k.b_cp = layers * ring.backward;
    k.f_ep = layers * a2a_f, k.b_ep = layers * a2a_b;
    if (r.zero == 3) {
      // Each pass all-gathers the chunk's fp32 weights block by block (one
      // collective per block and one for the embeddings / head). The engine
      // starts the next block's gather before the current block computes,
      // but MPI's non-blocking collectives progress inside MPI calls, which
      // a block's compute does not make: the gather mostly completes at the
      // next acquire, so all of it is counted. (ZeRO-3 thus never wins on
      // time here; --layout auto picks it only to fit.)
      const StagePlan& sp = stages[size_t(r.plan.map().stage_of(vs))];
      const double n = sp.chunk_params[size_t(r.plan.map().chunk_of(vs))];
      const double g = all_gather_seconds(4 * n, r.data(), links.dp) + layers * (r.data() - 1) * links.dp.latency;
      k.f_zero3 = g, k.b_zero3 = g;
    }
    d.forward.push_back(k.forward());
    d.backward.push_back(k.backward());
    // A split backward (zero-bubble schedules): W is the blocks' weight
    // products, as many FLOPs as their forward products; B is the rest.
    const double w = layers * block.backward_weight - w_frozen;
    d.backward_weight.push_back(w);
    d.backward_input.push_back(k.backward() - w);
  }
  // The configured schedule's own action lists (the ones the executor runs).
  const PipelineTiming timing = simulate_pipeline(r.plan.actions, r.plan.map(), d);
  // Ranks that outnumber the cores time-share them: the durations above give
  // each rank its share of the cores all the time, but a rank idle in the
  // pipeline's bubble leaves its share to the others. The cores then finish
  // the node's work (every stage's busy time at that share, averaged over the
  // stages) unless the critical path at full speed is longer.
  const double share = std::min(1.0, cores / rank_threads(cfg, r, cluster));
  double mean_busy = 0;
  for (int s = 0; s < r.pp; s++) mean_busy += timing.stage_busy[size_t(s)] / r.pp;
  auto finish_of = [&](int s) {
    const double f = timing.stage_finish[size_t(s)];
    return share < 1 ? std::max(f * share, mean_busy) : f;
  };

  for (int s = 0; s < r.pp; s++) {
    // Only the trained parameters are reduced, gathered and updated.
    const double n = stages[size_t(s)].params - stages[size_t(s)].frozen, dp = r.data();
    const double grad_bytes = (cfg.precision.grad_reduce == "bf16" && r.data() > 1 ? 2 : 4) * n;
    // Gradients: all-reduced (ZeRO 0) or reduce-scattered, bucket by bucket
    // while the last micro-batch's backward computes (ZeRO-3's gathers use
    // the same link, so they hide nothing). ZeRO 1 and 2 then all-gather
    // the updated fp32 parameters (or masters); ZeRO 3 keeps them sharded.
    // The buckets (parallel.bucket_mb of fp32 gradients each) fill evenly
    // over that backward, and the link takes them one at a time: the last
    // is never hidden, and a slow link queues the others behind it.
    const double buckets = std::max(1.0, std::ceil(4 * n / (double(cfg.parallel.bucket_mb) * kMiB)));
    const double bucket = grad_bytes / buckets;
    // Expert parallelism: the experts' share over the expert-data group.
    const double experts = n > 0 ? stages[size_t(s)].experts / n : 0;
    auto over_groups = [&](auto collective, double bytes) {
      return collective(bytes * (1 - experts), r.data(), links.dp) +
             (experts > 0 ? collective(bytes * experts, r.expert_data(), links.expert_dp) : 0.0);
    };
    // parallel.dp_reduce: the run times both at start-up under "auto" and
    // keeps the faster (parallel/grid/dp_hierarchy.h), so the faster is predicted.
    const std::string& how = cfg.parallel.dp_reduce;
    // (The hierarchical sum exists across nodes only: elsewhere it is the flat one.)
    auto takes_hierarchical = [&](double bytes, int members, const Link& link) {
      if (how == "flat" || &link != &links.dp) return false;
      const double flat = all_reduce_seconds(bytes, members, link);
      const double hierarchical = hierarchical_all_reduce_seconds(bytes, members, link);
      return hierarchical != flat && (how == "hierarchical" || hierarchical < flat);
    };
    auto data_sum = [&](double bytes, int members, const Link& link) {
      return takes_hierarchical(bytes, members, link) ? hierarchical_all_reduce_seconds(bytes, members, link)
                                                      : all_reduce_seconds(bytes, members, link);
    };
    const double reduce = r.zero == 0 ? over_groups(data_sum, bucket) : over_groups(reduce_scatter_seconds, bucket);
    const bool hierarchical = r.zero == 0 && takes_hierarchical(bucket * (1 - experts), r.data(), links.dp);
    const double gather = r.zero == 1 || r.zero == 2 ? over_groups(all_gather_seconds, 4 * n) : 0;
    double window = 0;
    for (int c = 0; c < r.plan.v; c++) {
      const PassCost& k = pass[size_t(r.plan.map().virtual_stage(s, c))];
      window += k.b_compute + k.b_tp;
    }
    // Across nodes (MPI over TCP) a non-blocking reduction moves mainly
    // while its rank is inside an MPI call, and backward makes one between
    // blocks only: the share of backward that hides it is the cluster's
    // measured inter_overlap (loom bench cluster; 0 unless measured), or with
    // the progress thread the share measured with it. The hierarchical sum
    // hides none of it: each of its three stages starts only when a poll
    // finds the one before done (bench cluster measured 0% hidden on a
    // first-generation Zen and on Zen 4, where the flat sum hid 19-37%; with
    // the progress thread issuing the stages too, 0% in 4 of 5 runs on 4
    // ranks sharing 2 cores).
    const double overlap = cfg.runtime.progress_thread ? cluster.inter_overlap_progress : cluster.inter_overlap;
    const double hidden = !links.dp.crosses_nodes ? window : hierarchical ? 0.0 : overlap * window;
    // Bucket i of b is ready at hidden i / b into that window and the link
    // ends the last one at the latest of ready_i + (b - i + 1) reduce: i = 1
    // or i = b, whichever is later.
    const double exposed = std::max(reduce, buckets * reduce - hidden * (buckets - 1) / buckets) + gather;
    // zero_grads writes 4 B, the norm reads 4 B, AdamW moves about 28 B per parameter it updates.
    const double updated = r.zero >= 1 ? (n - stages[size_t(s)].experts) / dp + stages[size_t(s)].experts / r.expert_data() : n;
    const double opt = (4 * n + 32 * updated) / mem_bw;
    const double end = finish_of(s) + exposed + opt;
    if (end > out.step_seconds) {
      out.step_seconds = end;
      out.compute_seconds = 0, out.comm_seconds = exposed;
      for (int c = 0; c < r.plan.v; c++) {
        const PassCost& k = pass[size_t(r.plan.map().virtual_stage(s, c))];
        out.compute_seconds += r.accumulation * (k.f_compute + k.b_compute);
        out.comm_seconds += r.accumulation * (k.f_tp + k.b_tp + k.f_zero3 + k.b_zero3 + k.f_cp + k.b_cp + k.f_ep + k.b_ep);
      }
      out.optimizer_seconds = opt;
      out.reduce_seconds = buckets * reduce, out.reduce_exposed_seconds = exposed - gather;
      out.bubble_seconds = std::max(0.0, (share < 1 ? finish_of(s) : timing.makespan) - timing.stage_busy[size_t(s)]);
    }
  }
  out.plan = r.plan;
  return out;
}

}  // namespace loom::planner
