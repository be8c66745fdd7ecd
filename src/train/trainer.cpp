#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <sys/resource.h>

#include <chrono>
#include <optional>
#include <thread>
#include <cmath>

#include "comm/rank_sum.h"
#include "core/check.h"
#include "data/text_codec.h"
#include "data/token_source.h"
#include "kernels/cpu/grad_norm.h"
#include "optim/grad_clip.h"
#include "kernels/cpu/isa.h"
#include "model/stage_module.h"
#include "model/lora/lora_layout.h"
#include "model/param_groups.h"
#include "model/sampling.h"
#include "obs/peak_flops.h"
#include "obs/straggler_monitor.h"
#include "optim/lr_schedule.h"
#include "parallel/pp/partition.h"
#include "planner/predict.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/peft_adapter.h"
#include "train/loss_guard.h"
#include "train/checkpointing.h"
#include "train/pass_times.h"
#include "train/replica.h"
#include "train/run_recorder.h"

namespace loom {

int set_threads(int requested) {
  int n = requested > 0 ? requested : omp_get_num_procs();
  omp_set_num_threads(n);
  return n;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// rows are read `micro` at a time (the model holds activations for that many).
float evaluate(Replica& replica, const TokenSource& data, int batches, int B, RowRange rows, int micro, int T,
               const ParallelContext& ctx) {
  std::vector<int32_t> tokens(size_t(micro) * T), targets(tokens.size());
  std::vector<int32_t> positions(data.packs() ? tokens.size() : 0);  // packed rows
  int32_t* const pos = positions.empty() ? nullptr : positions.data();
  // The mean over every valid target of the validation batches, as training's.
  double sum = 0, count = 0;
  for (int first = rows.begin; first < rows.end; first += micro) {
    ValidationIterator it(data, B, T, RowRange{first, first + micro});
    for (int i = 0; i < batches; i++) {
      it.next(tokens.data(), targets.data(), pos);
      const Replica::LossSum part = replica.evaluate(tokens.data(), targets.data(), T, pos);
      sum += part.sum, count += double(part.targets);
    }
  }
  sum = sum_over_ranks(ctx.dp(), sum), count = sum_over_ranks(ctx.dp(), count);
  return count > 0 ? float(sum / count) : NAN;
}

// Each rank's peak resident memory and busy seconds this step, to every rank,
// in one small all-reduce (one slot per rank; MiB travel as fp32, exact far
// beyond any machine).
struct RankStats {
  std::vector<int64_t> peak_mem_bytes;
  std::vector<double> busy_s;
};
RankStats gather_rank_stats(const ParallelContext& ctx, double busy_s) {
  const size_t world = size_t(ctx.grid().world_size()), me = size_t(ctx.rank());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::vector<float> slots(2 * world, 0.f);
  slots[me] = float(double(usage.ru_maxrss) / 1024.0);
  slots[world + me] = float(busy_s);
  ctx.world().all_reduce(slots.data(), slots.size(), DType::f32, ReduceOp::Sum);
  RankStats stats;
  for (size_t r = 0; r < world; r++) {
    stats.peak_mem_bytes.push_back(int64_t(double(slots[r]) * (1 << 20)));
    stats.busy_s.push_back(double(slots[world + r]));
  }
  return stats;
}

}  // namespace

namespace {

// train.init_from = "hf:DIR": every rank maps the checkpoint's files and
// reads the boxes of its own pieces (a resumed run then overwrites them
// from its own checkpoint).
void init_from_hf(const RunConfig& cfg, Replica& replica, FILE* log) {
  const std::string dir = cfg.train.init_from.substr(3);
  const HfModelConfig hf = read_hf_config(dir);
  const std::unique_ptr<HfCheckpoint> ck = HfCheckpoint::open(dir, cfg.model);
  replica.load_parameters(*ck, cfg.model.lora.enabled());  // the adapters are not in it
  if (!log) return;
  std::fprintf(log,
               "init from %s (%s): each rank reads its own pieces (this one %.1f of the %.1f MiB of files); "
               "optimizer state and data order fresh\n",
               dir.c_str(), hf.architecture.c_str(), double(ck->bytes_read()) / (1 << 20),
               double(ck->file_bytes()) / (1 << 20));
  for (const std::string& note : hf.notes) std::fprintf(log, "  note: %s\n", note.c_str());
  if (!ck->unused().empty())
    std::fprintf(log, "  note: %zu tensors of the checkpoint are not part of the model (first: %s)\n",
                 ck->unused().size(), ck->unused()[0].c_str());
}

// What the trained model says after train.sample_prompt: a fresh fp32 GPT
// with the replica's parameters, sampled as `loom generate` does.
void print_sample(const RunConfig& cfg, const Replica& replica, FILE* log) {
  const float* params = replica.whole_model_params();
  if (!params) {
    std::fprintf(log, "sample: skipped (%s: no rank holds the whole model; loom generate reads a checkpoint)\n",
                 replica.zero_stage() == 3 ? "ZeRO-3" : "tp, pp or ep > 1");
    return;
  }
  const TextCodec codec = TextCodec::for_data(cfg.data.format, cfg.data.path, "data.path");
  std::vector<int32_t> prompt = codec.encode_prompt(cfg.train.sample_prompt);
  for (int32_t& t : prompt) t = std::min(t, cfg.model.vocab_size - 1);  // a byte codec on a small vocabulary
  auto model_owner = make_model(cfg.model, 1, cfg.model.seq_len);
  StageModule& model = *model_owner;
  std::copy(params, params + model.layout().total, model.params());
  const SamplingOptions opt{cfg.train.sample_tokens, 0.8f, 40, uint64_t(cfg.train.seed), codec.eos()};
  const std::string text = cfg.train.sample_prompt + codec.decode(sample_tokens(model, prompt, opt));
  // Quoted line by line, so that blank lines and indentation show.
  std::fprintf(log, "sample (%d tokens, temperature 0.8, top-k 40):\n", cfg.train.sample_tokens);
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    std::fputs("  | ", log);
    std::fwrite(text.data() + begin, 1, end - begin, log);  // as sampled, NUL bytes included
    std::fputc('\n', log);
    begin = end + 1;
  }
}

// A mixture of experts' routing in the step just reduced (every rank alike).
obs::MoeStepMetrics moe_metrics(const ModelConfig& model, const Replica& replica, int ep) {
  obs::MoeStepMetrics m;
  if (!model.is_moe()) return m;
  const Replica::RouterStep& s = replica.router_step();
  m.experts = model.n_experts, m.top_k = model.top_k;
  m.load_max = s.load_max(), m.load_min = s.load_min();
  m.aux_loss = s.balance_loss, m.z_loss = s.z_loss, m.bias_max = s.bias_max;
  if (ep > 1) m.ep = ep, m.a2a_ms = 1e3 * s.exchange_s, m.a2a_hidden_ms = 1e3 * s.hidden_s, m.rank_load_max = s.rank_load_max;
  return m;
}

}  // namespace

TrainResult train(const RunConfig& cfg, const ParallelContext& ctx, FILE* log, const TrainOptions& options) {
  cfg.validate();
  check_layout(cfg, ctx.grid());
  if (!ctx.is_logging_rank()) log = nullptr;  // rank 0 logs
  const int B = cfg.train.batch_size, T = cfg.model.seq_len, dp = ctx.grid().dp();
  // This replica's rows of the global batch, which is a function of (seed,
  // step) alone: any dp size trains on the same data.
  const RowRange rows = data_parallel_rows(B, ctx.coord().dp, dp);
  auto data = open_token_source(cfg.data, B, T, cfg.model.vocab_size);  // checks the data before any work
  int threads = set_threads(cfg.runtime.threads > 0 ? cfg.runtime.threads
                                                    : std::max(1, omp_get_num_procs() / ctx.ranks_on_node()));

  // Each replica runs `accumulation` micro-batches of `micro` rows per step.
  const int micro = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : rows.size();
  const int accumulation = rows.size() / micro;
  Replica replica(cfg, ctx, micro, accumulation);
  std::vector<float> params_at_start;
  replica.init_parameters(uint64_t(cfg.train.seed));
  if (!cfg.train.init_from.empty()) init_from_hf(cfg, replica, log);
  if (!cfg.train.init_adapter.empty()) {
    // The adapter's factors (and, with bias "all", its biases); the rest stays.
    replica.load_parameters(*PeftAdapter::open(cfg.train.init_adapter, cfg.model), true);
    if (log) std::fprintf(log, "init adapter from %s (PEFT format)\n", cfg.train.init_adapter.c_str());
  }
  if (options.keep_params) params_at_start = replica.gather_params();
  LrSchedule schedule{cfg.train.lr, cfg.train.min_lr, cfg.train.warmup_steps, cfg.train.steps};

  TrainResult result;
  result.initial_params = std::move(params_at_start);
  std::optional<planner::RunPrediction> prediction;  // rank 0
  // Every rank measures at once, so ranks sharing cores see the peak they share.
  ctx.world().barrier();
  float peak = float(measure_peak_gflops(threads));
  ctx.world().all_reduce(&peak, 1, DType::f32, ReduceOp::Sum);
  result.peak_gflops = peak;
  const cpu::Dispatch dispatch = cpu::describe_dispatch();
  const double flops_per_step = cfg.model.train_flops_per_token(T) * double(B) * T;
  if (log) {
    std::fprintf(log, "layout: %s; this process is rank 0 of %d\n", ctx.grid().describe().c_str(),
                 ctx.grid().world_size());
    for (const std::string& line : ctx.nodes().placement_lines(ctx.grid())) std::fprintf(log, "%s\n", line.c_str());
    const ModelConfig& m = cfg.model;
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
    std::fprintf(log, "data: %s; global batch %d x %d tokens, %d rows per replica\n", data->describe().c_str(), B,
                 T, rows.size());
    std::fprintf(log,
                 "data parallel: %d replicas x micro-batch %d x %d accumulation steps; ZeRO-%d; gradients in %zu "
                 "buckets of %.2f MiB\n",
                 dp, micro, accumulation, replica.zero_stage(), size_t(replica.buckets()),
                 double(replica.largest_bucket()) * 4 / (1 << 20));
    const int cp = ctx.grid().cp();
    std::fprintf(log, "attention: %s%s\n",
                 cfg.model.tiled_attention(T, cp) ? "tiled (row log-sum-exps kept, tiles recomputed in backward)"
                                                  : "materialized (T x T probabilities kept)",
                 cfg.model.attention == AttentionKind::auto_ ? " (model.attention = auto)" : "");
    if (cp > 1)
      std::fprintf(log, "context parallel: each sequence's %d tokens over %d ranks (%d each, chunks r and %d-r), "
                   "ring attention; gradients summed over dp x cp = %d ranks\n",
                   T, cp, T / cp, 2 * cp - 1, ctx.dp().size());
    if (const int ep = ctx.grid().ep(); ep > 1) {
      std::string groups;
      for (const auto& g : ctx.grid().groups(GroupKind::ep)) {
        if (groups.size() > 60) {
          groups += " ...";
          break;
        }
        groups += groups.empty() ? "[" : " [";
        for (size_t i = 0; i < g.size(); i++) groups += (i ? "," : "") + std::to_string(g[i]);
        groups += "]";
      }
      std::fprintf(log,
                   "expert parallel: %d experts over ep = %d ranks (%d each), tokens exchanged by all-to-all in ep "
                   "groups %s; the experts' gradients%s over the %d ranks of each expert-data group\n",
                   m.n_experts, ep, m.n_experts / ep, groups.c_str(),
                   replica.zero_stage() > 0 ? " and ZeRO shards" : "", ctx.group(GroupKind::expert_data).size());
    }
    if (replica.zero_stage() > 0 && ctx.dp().size() == 1)
      std::fprintf(log, "note: parallel.zero = %d with one replica shards nothing (every shard is the whole)\n",
                   replica.zero_stage());
    if (ctx.grid().pp() > 1) {
      const PipelinePlan& pl = replica.pipeline();
      std::fprintf(log, "pipeline: %d stages x %d chunks, blocks %s, schedule %s, %d micro-batches per step\n",
                   ctx.grid().pp(), pl.v, pp::describe_partition(pl.layers).c_str(), cfg.parallel.schedule.c_str(),
                   accumulation);
    }
    if (ctx.grid().tp() > 1) {
      const ModelShard shard{0, ctx.grid().tp()};
      std::fprintf(log,
                   "tensor parallel: %d ranks per layer, %d heads and %d MLP features each; vocabulary %d padded to "
                   "%lld; sequence parallel: %s\n",
                   ctx.grid().tp(), cfg.model.n_head / ctx.grid().tp(), cfg.model.ffn() / ctx.grid().tp(),
                   cfg.model.vocab_size, (long long)shard.padded_vocab(cfg.model),
                   cfg.parallel.sequence_parallel ? "on" : "off");
    }
    const double mib = 1 << 20, grads_mib = double(replica.grad_floats()) * 4 / mib;
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
    if (!cfg.train.freeze.empty() || lora.enabled()) {
      // What a frozen tensor does not keep: its gradient and AdamW moments
      // (each divided over the data ranks where ZeRO shards them).
      const FrozenShare share = frozen_share(cfg.model, cfg.train.freeze);
      // (Frozen experts: over the expert-data group their trained twins would shard over.)
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
    if (replica.compute() != ComputePrecision::fp32) {
      const LossScalerOptions& so = replica.scaler().options();
      const std::string scaling =
          so.mode == LossScaleMode::off     ? std::string("off")
          : so.mode == LossScaleMode::fixed ? strprintf("fixed at %g", double(so.initial_scale))
                                            : strprintf("dynamic from %g (x%g after %d clean steps, x%g after %d "
                                                        "overflows, at least %g)",
                                                        double(so.initial_scale), double(so.growth_factor),
                                                        so.growth_interval, double(so.backoff_factor),
                                                        so.hysteresis, double(so.min_scale));
      std::fprintf(log,
                   "precision: %s matrix products and stored activations (+%.1f MiB of %s weights); fp32 master "
                   "weights, AdamW state, gradients, norms and loss; loss scaling %s\n",
                   compute_precision_name(replica.compute()), double(replica.compute_weight_bytes()) / mib,
                   compute_precision_name(replica.compute()), scaling.c_str());
    }
    std::fprintf(log, "%s\n", dispatch.line().c_str());
    std::fprintf(log, "threads: %d per rank, measured fp32 peak %.0f GFLOP/s over all ranks\n", threads,
                 result.peak_gflops);
    // The planner's prediction for this very run, checked at the end.
    try {
      prediction = planner::predict_loom_run(cfg, ctx.grid().world_size(),
                                             planner::cluster_for_run(options.cluster, ctx.nodes().nodes(), threads));
      std::fprintf(log, "plan: predicted %s\n", prediction->describe().c_str());
    } catch (const UserError& e) {
      std::fprintf(log, "plan: no prediction (%s)\n", e.what());
    }
    std::fflush(log);
  }

  // Every micro-batch of the step, one after another.
  std::vector<int32_t> tokens(size_t(accumulation) * micro * T), targets(tokens.size());
  // Packed rows: each token's position in its document.
  std::vector<int32_t> positions(data->packs() || options.document_position ? tokens.size() : 0);
  const int pp = ctx.grid().pp();
  std::vector<double> bubble_sum(size_t(pp), 0.0);  // per stage, over the timed steps
  PassTimes pass_times(replica.pipeline());
  // Resume first: a checkpoint that cannot be used stops the run before its
  // run directory is written.
  TrainCheckpoints checkpoints(cfg, ctx);
  TrainPosition position = checkpoints.resume(options.resume, replica, log);
  RunRecorder recorder(options.run_dir, cfg, ctx, accumulation, !options.resume.empty());
  replica.set_trace(recorder.trace());
  obs::TraceRecorder* trace = recorder.trace();
  FlightRecorder* flight = recorder.flight();
  const auto run_start = Clock::now();
  double tp_comm_before = 0, wait_before = 0;  // totals at the previous step's end
  ReduceTimes warm_up;  // the reductions of the first step, left out of the overlap figures
  double tp_comm_warm_up = 0, tp_comm_eval = 0;  // tensor-parallel waits in the first step / in evaluations
  double optimizer_seconds = 0;  // after the first step
  double timed_seconds = 0, window_seconds = 0;
  double data_seconds = 0, step_seconds = 0;  // reading batches, within whole steps
  int timed_steps = 0, window_steps = 0;
  obs::StragglerMonitor stragglers(ctx.grid().world_size(), cfg.train.straggler_factor, cfg.train.straggler_window);
  recorder.resumed_at(position.next_step);
  LossGuard guard(LossGuardConfig{cfg.train.guard_window, cfg.train.guard_z, cfg.train.guard_warmup,
                                  cfg.train.guard_max_skips});
  guard.restore(position.guard);
  const int first_step = int(position.next_step);
  const int end_step = options.stop_after > 0 ? std::min(options.stop_after, cfg.train.steps) : cfg.train.steps;
  if (log && first_step >= end_step)
    std::fprintf(log, "nothing to do: the checkpoint is at step %d of %d\n", first_step, cfg.train.steps);
  for (int step = first_step; step < end_step; step++) {
    // The first step warms up caches and primitives: leave it out of the
    // averages, unless it is the only step.
    const bool timed = step > first_step || end_step - first_step == 1;
    if (flight) flight->note_step(step + 1);
    options.faults.at_step_begin(step, ctx.rank());
    auto t0 = Clock::now();
    obs::ScopedSpan step_span(trace, "step", obs::SpanKind::step, obs::CommGroup::none, step);
    auto t_data = Clock::now();
    if (trace) trace->begin("data", obs::SpanKind::data);
    for (int k = 0; k < accumulation; k++) {
      const RowRange micro_rows{rows.begin + k * micro, rows.begin + (k + 1) * micro};
      const size_t at = size_t(k) * micro * T;
      data->train_batch(uint64_t(cfg.train.seed), step + position.data_skip, B, T, micro_rows, tokens.data() + at,
                        targets.data() + at, positions.empty() ? nullptr : positions.data() + at);
      if (options.target_mask)
        for (int r = 0; r < micro; r++)
          for (int t = 0; t < T; t++)
            if (options.target_mask(step + position.data_skip, micro_rows.begin + r, t))
              targets[at + size_t(r) * T + size_t(t)] = -1;
      if (options.document_position)
        for (int r = 0; r < micro; r++)
          for (int t = 0; t < T; t++)
            positions[at + size_t(r) * T + size_t(t)] = options.document_position(step + position.data_skip,
                                                                                   micro_rows.begin + r, t);
    }
    if (trace) trace->end();
    const double step_data_s = seconds_since(t_data);
    data_seconds += step_data_s;
    const float scale_used = replica.scaler().scale();
    result.loss_scales.push_back(scale_used);
    if ((options.inf_rank < 0 || ctx.rank() == options.inf_rank) && std::count(options.inf_steps.begin(), options.inf_steps.end(), step))
      replica.inject_inf();
    // Busy time: this rank's own forward and backward, without its waits
    // for tensor-parallel peers (the straggler monitor compares ranks).
    const double tp_wait_before = replica.tp_comm_seconds();
    const int slow_ms = options.faults.slow_ms(step, ctx.rank());
    if (slow_ms > 0)  // an injected straggler: the delay stands for slower compute
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
    float loss = replica.forward_backward(tokens, targets, T, positions);
    const double busy_s =
        1e-3 * slow_ms + std::max(0.0, replica.timeline().compute - (replica.tp_comm_seconds() - tp_wait_before));
    if (timed) {
      bubble_sum[size_t(ctx.coord().pp)] += replica.timeline().bubble();
      if (pp > 1) pass_times.add(replica.timeline(), ctx.coord().pp);
    }
    result.peak_in_flight = std::max(result.peak_in_flight, replica.timeline().peak_in_flight);
    double norm;
    {
      obs::ScopedSpan wait(trace, "gradient reduction", obs::SpanKind::wait, obs::CommGroup::dp);
      norm = replica.reduce();
    }
    // Each replica (and cp rank) holds its share of the batch's mean loss.
    loss = float(sum_over_ranks(ctx.dp(), double(loss)));
    // A batch with no valid target has no loss and zero gradients: nothing
    // is updated, in every layout alike.
    const bool empty = replica.step_targets() == 0;
    if (empty) loss = NAN, result.empty_steps++;
    if (step == first_step && options.keep_first_step_grads) result.first_step_grads = replica.gather_grads();
    const obs::MoeStepMetrics moe = moe_metrics(cfg.model, replica, ctx.grid().ep());
    float clip = clip_scale(norm, cfg.train.grad_clip);
    float lr = schedule.at(step);
    if (std::count(options.poison_steps.begin(), options.poison_steps.end(), step + position.data_skip)) loss = NAN;
    // Every rank holds the same loss and the same overflow flag, so every
    // rank decides alike. An overflow (mixed precision) that the dynamic
    // scaler answers by backing off is its business: the step is skipped
    // without judging the loss. One it cannot answer (no dynamic scaling, or
    // the scale at its minimum: a diverged model, not a too-large scale) is
    // a bad step for the loss guard, which skips and then rolls back.
    const bool overflow = replica.overflowed();
    const LossScalerOptions& scaling = replica.scaler().options();
    const bool scaler_skip = overflow && scaling.mode == LossScaleMode::dynamic && scale_used > scaling.min_scale;
    const LossVerdict verdict =
        scaler_skip || empty ? LossVerdict::Skip : guard.observe(overflow ? NAN : loss);
    if (overflow) result.overflow_steps++;
    auto t_update = Clock::now();
    if (verdict == LossVerdict::Ok) {
      obs::ScopedSpan optimizer(trace, "optimizer", obs::SpanKind::optimizer);
      replica.update(lr, clip);
    } else if (empty) {
      if (log) std::fprintf(log, "step %5d/%d | skipped: no valid target in the batch\n", step + 1, cfg.train.steps);
    } else if (scaler_skip) {
      if (log)
        std::fprintf(log, "step %5d/%d | skipped: inf/NaN in the gradients; loss scale %g -> %g\n", step + 1,
                     cfg.train.steps, double(scale_used), double(replica.scaler().scale()));
    } else {
      result.skipped_steps++;
      if (log)
        std::fprintf(log, "step %5d/%d | skipped: %s%s\n", step + 1, cfg.train.steps,
                     overflow ? "inf/NaN in the gradients; " : "", guard.reason().c_str());
    }
    const double step_optimizer_s = seconds_since(t_update);
    if (timed) optimizer_seconds += step_optimizer_s;
    double dt = seconds_since(t0);
    if (step == first_step) warm_up = replica.reduce_times(), tp_comm_warm_up = replica.tp_comm_seconds();
    result.train_losses.push_back(loss);
    result.grad_norms.push_back(float(norm));
    if (moe.experts > 0) result.moe_steps.push_back(moe);
    // The first step warms up caches and primitives: leave it out of the
    // averages, unless it is the only step.
    if (timed) timed_seconds += dt, timed_steps++;
    window_seconds += dt, window_steps++;
    step_seconds += dt;

    bool last = step + 1 == cfg.train.steps;
    if (log && (step % cfg.train.log_every == 0 || last)) {
      double tok_s = double(B) * T * window_steps / window_seconds;
      double gflops = flops_per_step * window_steps / window_seconds * 1e-9;
      const std::string scale =
          replica.scaler().mode() == LossScaleMode::off ? "" : strprintf(" | scale %g", double(scale_used));
      // Instruction data: how many of the batch's tokens are learned from.
      const std::string targets = replica.step_targets() < int64_t(B) * T
                                      ? strprintf(" | targets %lld", (long long)replica.step_targets())
                                      : "";
      // A mixture of experts: the busiest and idlest expert's load over the mean.
      // Expert parallelism: the token all-to-alls' exposed time.
      std::string experts =
          moe.experts > 0 ? strprintf(" | experts %.2f-%.2f", moe.load_min, moe.load_max) : std::string();
      if (moe.ep > 1) experts += strprintf(" | all-to-all %.1f ms (%.1f hidden)", moe.a2a_ms, moe.a2a_hidden_ms);
      std::fprintf(log,
                   "step %5d/%d | loss %.4f%s | lr %.2e | grad norm %.3f%s%s | %.0f tok/s | %.1f GFLOP/s (%.1f%% of "
                   "peak)\n",
                   step + 1, cfg.train.steps, loss, targets.c_str(), lr, norm, scale.c_str(), experts.c_str(), tok_s,
                   gflops, 100.0 * gflops / result.peak_gflops);
      std::fflush(log);
    }
    if (step % cfg.train.log_every == 0 || last) window_seconds = 0, window_steps = 0;
    // This step's exposed communication: tensor-parallel waits and the
    // data-parallel wait after backward (before an evaluation adds its own).
    const double tp_now = replica.tp_comm_seconds(), wait_now = replica.reduce_times().wait_s;
    const double step_comm_s = (tp_now - tp_comm_before) + (wait_now - wait_before);
    bool eval_due = cfg.train.eval_every > 0 && ((step + 1) % cfg.train.eval_every == 0 || last);
    float val = NAN;
    if (eval_due) {
      const double tp_before = replica.tp_comm_seconds();
      val = evaluate(replica, *data, cfg.train.eval_batches, B, rows, micro, T, ctx);
      if (timed) tp_comm_eval += replica.tp_comm_seconds() - tp_before;
      result.val_losses.push_back(val);
      if (log) std::fprintf(log, "step %5d/%d | val loss %.4f\n", step + 1, cfg.train.steps, val), std::fflush(log);
    }
    tp_comm_before = replica.tp_comm_seconds(), wait_before = replica.reduce_times().wait_s;
    if (verdict == LossVerdict::Rollback) {
      guard.after_rollback();
      if (checkpoints.last().empty()) {
        if (log) std::fprintf(log, "step %5d/%d | %d bad steps in a row and no checkpoint to roll back to: going on\n",
                              step + 1, cfg.train.steps, cfg.train.guard_max_skips);
      } else {
        // Back to the last checkpoint, past the data window that went bad.
        const int64_t skip = position.data_skip;
        TrainPosition back = checkpoints.resume(checkpoints.last(), replica, log);
        LOOM_CHECK(back.next_step <= step + 1, "rolled back to step %lld, after step %d",
                   (long long)back.next_step, step + 1);
        position.data_skip = skip + (step + 1 - back.next_step);
        result.rollbacks++;
        if (log)
          std::fprintf(log, "step %5d/%d | rolled back to step %lld; skipping %lld steps of data\n", step + 1,
                       cfg.train.steps, (long long)back.next_step, (long long)(step + 1 - back.next_step));
        step = int(back.next_step) - 1;
        continue;
      }
    }
    if (cfg.train.checkpoint_every > 0 && ((step + 1) % cfg.train.checkpoint_every == 0 || last)) {
      checkpoints.save(TrainPosition{step + 1, position.data_skip, guard.state()}, replica, options.faults, log);
    }
    RankStats stats;
    if (recorder.active() || stragglers.enabled()) stats = gather_rank_stats(ctx, busy_s);
    if (step > first_step)  // the first step warms up
      for (const obs::StragglerEvent& e : stragglers.observe(stats.busy_s))
        if (log) std::fprintf(log, "step %5d/%d | %s\n", step + 1, cfg.train.steps, e.text().c_str()), std::fflush(log);
    if (recorder.active()) {
      obs::StepMetrics m;
      m.skipped = verdict != LossVerdict::Ok;
      m.loss_scale = scale_used;
      m.step = step + 1, m.loss = loss, m.val_loss = val, m.lr = lr, m.grad_norm = norm;
      m.step_time_s = dt, m.tokens_per_s = double(B) * T / dt;
      m.target_tokens = replica.step_targets();
      m.mfu = flops_per_step / dt / (result.peak_gflops * 1e9);
      m.peak_mem_bytes = stats.peak_mem_bytes;
      if (ctx.grid().world_size() > 1) m.busy_s = stats.busy_s;
      m.stragglers = stragglers.current();
      const pp::StageTimeline& tl = replica.timeline();
      m.time.compute = tl.compute;
      m.time.bubble = pp > 1 ? std::max(0.0, tl.span - tl.compute) : 0;
      m.time.comm_exposed = step_comm_s, m.time.optimizer = step_optimizer_s, m.time.data = step_data_s;
      m.checkpoint_stall_s = checkpoints.stall_s(step + 1);
      m.moe = moe;
      recorder.step(m);
    }
  }
  checkpoints.finish(log);  // a save still being written: on disk (or a UserError) before the run reports done
  if (timed_steps > 0) {
    result.tokens_per_s = double(B) * T * timed_steps / timed_seconds;
    result.gflops = flops_per_step * timed_steps / timed_seconds * 1e-9;
  }
  const ReduceTimes& all = replica.reduce_times();
  const int reduced_steps = all.steps - warm_up.steps;
  if (reduced_steps > 0) {
    double in_flight = all.in_flight_s - warm_up.in_flight_s, overlapped = all.overlapped_s - warm_up.overlapped_s;
    result.reduce_overlap = in_flight > 0 ? overlapped / in_flight : 0;
    result.reduce_wait_ms = 1e3 * (all.wait_s - warm_up.wait_s) / reduced_steps;
    result.reduce_calls_ms = 1e3 * (all.calls_s - warm_up.calls_s) / reduced_steps;
  }
  if (timed_steps > 0) {
    result.optimizer_ms = 1e3 * optimizer_seconds / timed_steps;
    result.step_ms = 1e3 * timed_seconds / timed_steps;
    result.tp_comm_ms = 1e3 * (replica.tp_comm_seconds() - tp_comm_warm_up - tp_comm_eval) / timed_steps;
  }
  result.param_bytes = replica.param_bytes();
  result.activation_bytes = replica.activation_bytes();
  result.buckets = replica.buckets();
  result.optimizer_state_bytes = replica.optimizer_state_bytes();
  result.grad_bytes = replica.grad_bytes_resident();
  if (pp > 1 && timed_steps > 0) {
    // Each stage's mean bubble, to every rank (stage s fills entry s).
    std::vector<float> bubble(size_t(pp), 0.f);
    bubble[size_t(ctx.coord().pp)] = float(bubble_sum[size_t(ctx.coord().pp)] / timed_steps);
    ctx.pp().all_reduce(bubble.data(), bubble.size(), DType::f32, ReduceOp::Sum);
    result.bubble.assign(bubble.begin(), bubble.end());
    result.simulated_bubble = pass_times.simulated_bubble(ctx.pp());
  }
  if (log && pp > 1 && !result.bubble.empty()) {
    const PipelinePlan& pl = replica.pipeline();
    std::fprintf(log, "pipeline bubble per stage (measured, %s, m = %d):", cfg.parallel.schedule.c_str(), accumulation);
    for (int s = 0; s < pp; s++) std::fprintf(log, " %.1f%%", 100.0 * result.bubble[size_t(s)]);
    std::fprintf(log, "; simulated from the measured pass times:");
    for (float b : result.simulated_bubble) std::fprintf(log, " %.1f%%", 100.0 * b);
    std::fprintf(log, "; 1F1B/GPipe theory (pp-1)/(m+pp-1) = %.1f%%%s\n",
                 100.0 * (pp - 1) / (accumulation + pp - 1), pl.v > 1 ? " (before interleaving)" : "");
  }
  // Peak memory: the largest resident set of any rank.
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  float peak_mib = float(double(usage.ru_maxrss) / 1024.0);
  ctx.world().all_reduce(&peak_mib, 1, DType::f32, ReduceOp::Max);
  result.peak_rss_bytes = double(peak_mib) * (1 << 20);
  if (log && prediction && timed_steps > 0) {
    const double mem = prediction->peak_memory_bytes, step_s = result.step_ms * 1e-3;
    std::fprintf(log,
                 "plan vs measured: peak memory per rank %.0f MiB predicted, %.0f MiB measured (%+.0f%%); step time "
                 "%.3f s predicted, %.3f s measured (%+.0f%%)\n",
                 mem / (1 << 20), result.peak_rss_bytes / (1 << 20), 100.0 * (mem / result.peak_rss_bytes - 1),
                 prediction->step_seconds, step_s, 100.0 * (prediction->step_seconds / step_s - 1));
  }
  if (recorder.active()) {
    obs::RunSummary summary;
    if (prediction) {
      summary.predicted_mem_bytes = prediction->peak_memory_bytes;
      summary.predicted_step_s = prediction->step_seconds;
    }
    summary.finished = true;
    summary.cpu = {{"model", dispatch.cpu.model},       {"flags", dispatch.cpu.flags()},
                   {"isa", cpu::isa_name(dispatch.in_use)}, {"fp32_gemm", dispatch.fp32_gemm},
                   {"bf16_gemm", dispatch.bf16_gemm},   {"fp16_gemm", dispatch.fp16_gemm},
                   {"line", dispatch.line()}};
    summary.steps = cfg.train.steps;
    summary.wall_s = seconds_since(run_start);
    summary.tokens_per_s = result.tokens_per_s;
    summary.mfu = result.gflops / result.peak_gflops;
    summary.measured_step_s = result.step_ms * 1e-3;
    summary.measured_mem_bytes = result.peak_rss_bytes;
    for (float b : result.bubble) summary.bubble_fraction_per_stage.push_back(b);
    if (ctx.grid().tp() > 1) summary.exposed_comm_s["tp"] = result.tp_comm_ms * 1e-3;
    if (ctx.dp().size() > 1) {  // replicas and cp ranks
      summary.exposed_comm_s["dp"] = result.reduce_wait_ms * 1e-3;
      summary.overlap["dp"] = result.reduce_overlap;
    }
    recorder.finish(summary);
    if (log) std::fprintf(log, "run directory: %s (loom report / loom diagnose read it)\n", recorder.dir().c_str());
  }
  if (log && ctx.grid().tp() > 1)
    std::fprintf(log, "tensor-parallel communication: %.1f ms per step waited (%.1f%% of the step time)\n",
                 result.tp_comm_ms, 100.0 * result.tp_comm_ms / std::max(result.step_ms, 1e-9));
  if (log && ctx.dp().size() > 1)
    std::fprintf(log, "gradient reduction: %d buckets, %.0f%% of its time overlapped with backward, %.1f ms per step "
                 "waited after backward\n", result.buckets, 100.0 * result.reduce_overlap, result.reduce_wait_ms);
  if (log)
    std::fprintf(log,
                 "done: %d steps, %.0f tok/s, %.1f GFLOP/s (%.1f%% of the measured peak); reading batches took "
                 "%.2f%% of the step time\n",
                 cfg.train.steps, result.tokens_per_s, result.gflops, 100.0 * result.gflops / result.peak_gflops,
                 100.0 * data_seconds / step_seconds);
  if (cfg.train.sample_tokens > 0) replica.gather_whole_params();  // sharded masters: every dp rank takes part
  if (log && cfg.train.sample_tokens > 0) {
    try {
      print_sample(cfg, replica, log);
    } catch (const std::exception& e) {  // the run is done: a sample that fails must not fail it
      std::fprintf(log, "sample: skipped (%s)\n", e.what());
    }
  }
  if (log && result.empty_steps > 0)
    std::fprintf(log, "%d steps had no valid target in their batch: nothing was updated\n", result.empty_steps);
  if (log && replica.scaler().mode() != LossScaleMode::off)
    std::fprintf(log, "loss scaling: %d steps skipped for inf/NaN gradients; final scale %g\n", result.overflow_steps,
                 double(replica.scaler().scale()));
  if (options.keep_params) result.final_params = replica.gather_params();
  return result;
}

}  // namespace loom
