#include "planner/time_model.h"

#include <algorithm>
#include <cmath>

#include "config/run_pipeline.h"
#include "planner/memory_model.h"
#include "planner/work_model.h"

namespace loom::planner {
namespace {

// What one (micro-batch, chunk) costs on each virtual stage, split by kind.
struct ChunkCosts {
  std::vector<double> f_compute, b_compute, f_tp, b_tp, f_zero3, b_zero3;
  std::vector<double> b_weight;  // of b_compute: the weight products (a split backward's W)
  std::vector<double> zero3_total;  // all ZeRO-3 traffic of one (micro-batch, chunk), hidden or not
  std::vector<double> f_cp, b_cp;   // the ring's transfers not hidden behind attention
  std::vector<double> f_ep, b_ep;   // expert parallelism's token all-to-alls (not overlapped)
  double p2p = 0;
  double forward(int vs) const { return f_compute[vs] + f_tp[vs] + f_zero3[vs] + f_cp[vs] + f_ep[vs]; }
  double backward(int vs) const { return b_compute[vs] + b_tp[vs] + b_zero3[vs] + b_cp[vs] + b_ep[vs]; }
};

double act_bytes(ComputePrecision p) { return p == ComputePrecision::fp32 ? 4 : 2; }

ChunkCosts chunk_costs(const Workload& w, const Layout& l, const ClusterSpec& c, const GroupLinks& links) {
  const ModelConfig& m = w.model;
  // Context parallelism: a rank's queries are s / cp of each sequence; its
  // attention still reads all s keys.
  const double s = w.seq_len(), h = m.d_model, t = l.tp;
  const double tokens = double(l.micro_batch) * s / l.cp;
  // One block's and the head's work from their shapes (planner/work_model.h).
  const DeviceRates rates = device_rates(c, l.precision);
  BlockShape shape;
  shape.model = m, shape.sequences = l.micro_batch, shape.cp = l.cp, shape.tp = l.tp;
  shape.seq_parallel = l.seq_parallel, shape.dropout = w.dropout, shape.act_bytes = act_bytes(l.precision);
  const PassSeconds block = block_seconds(shape, rates), head = head_seconds(shape, rates);
  const double f_layer = block.forward;
  // The tiled attention keeps no probabilities: selective recomputes nothing.
  const bool tiled = m.tiled_attention(w.seq_len(), l.cp);
  const double recompute = l.recompute == Recompute::full                          ? f_layer
                           : l.recompute == Recompute::selective && !tiled ? block.attention_forward
                                                                            : 0;
  const double b_layer = block.backward() + recompute;
  // Two all-reduces of the layer's output per pass (attention, MLP), in both
  // families; with sequence parallelism an all-gather + reduce-scatter pair
  // moves the same. The data-parallel reduction below covers every stage's
  // own parameters (an untied LLaMA head is the last stage's alone).
  const double ar = all_reduce_seconds(tokens * h * act_bytes(l.precision), l.tp, links.tp);
  const double f_tp = 2 * ar, b_tp = 2 * ar + (l.recompute == Recompute::full ? 2 * ar : 0);
  const double f_head = head.forward;
  const double pbytes = act_bytes(l.precision);
  // Context parallelism: the ring's fp32 key/value blocks, against the
  // attention core they hide behind.
  const RingSeconds ring = ring_attention_seconds(4 * tokens * 2 * double(m.kv_heads()) / t * m.head_dim(),
                                                  block.attention_forward, l.cp, links.cp);

  // Expert parallelism, per MoE layer and micro-batch (model/moe/moe_block.h):
  // forward sends the k routed copies of each token out (compute type) and
  // brings the outputs back (fp32); backward the output gradients out and
  // the input gradients back; a full recomputation repeats the forward's.
  // Each tp rank exchanges its own copy. Not overlapped with compute.
  double a2a_f = 0, a2a_b = 0;
  if (m.is_moe() && l.ep > 1) {
    const double pairs = tokens * m.top_k, moe = 1.0 / m.moe_every;
    const double out = all_to_all_seconds(pairs * h * act_bytes(l.precision), l.ep, links.ep);
    const double back = all_to_all_seconds(pairs * h * 4, l.ep, links.ep);
    a2a_f = moe * (out + back), a2a_b = moe * (out + back) + (l.recompute == Recompute::full ? a2a_f : 0);
  }

  const int stages = l.pp * l.v;
  const pp::ChunkMap map = pp::chunk_map(l.schedule(), l.pp, l.v);
  ChunkCosts k;
  const double w_layer = block.backward_weight;
  for (auto* v : {&k.f_compute, &k.b_compute, &k.f_tp, &k.b_tp, &k.f_zero3, &k.b_zero3, &k.zero3_total, &k.b_weight,
                 &k.f_cp, &k.b_cp, &k.f_ep, &k.b_ep})
    v->assign(stages, 0);
  for (int vs = 0; vs < stages; vs++) {
    const int stage = map.stage_of(vs);
    const double layers = layers_of_chunk(m.n_layer, l, vs, stage);
    k.f_compute[vs] = layers * f_layer + (vs == stages - 1 ? f_head : 0);
    k.b_compute[vs] = layers * b_layer + (vs == stages - 1 ? head.backward() : 0);
    k.b_weight[vs] = layers * w_layer + (vs == stages - 1 ? head.backward_weight : 0);
    k.f_tp[vs] = layers * f_tp + (vs == 0 ? ar : 0);  // vocab-parallel embedding sums its output
    k.b_tp[vs] = layers * b_tp;
    k.f_cp[vs] = layers * ring.forward, k.b_cp[vs] = layers * ring.backward;
    k.f_ep[vs] = layers * a2a_f, k.b_ep[vs] = layers * a2a_b;
    const double chunk_params = stage_parameters(w.counts(), m, l, stage) / l.v;
    const double chunk_trained = trained_parameters(w, l, stage) / l.v;
    if (l.fp32_grads && l.precision != ComputePrecision::fp32) {
      // fp32 gradient accumulation: each micro-batch's 16-bit weight
      // gradients are added into the fp32 buffer (Megatron-LM's main_grad:
      // read 2 + 4 bytes, write 4, per parameter of the chunk).
      k.b_compute[vs] += chunk_trained * 10 / rates.bandwidth;
    }
    if (l.zero >= 3) {
      // Each pass gathers the chunk's parameters one layer at a time, the
      // next layer's while this one computes; backward also reduce-scatters
      // each layer's gradients. The first layer's gather has nothing before
      // it to hide behind; each later one hides behind the previous layer's
      // compute as far as that lasts. One collective per layer: each pays
      // the ring's latency.
      const double units = std::max(1.0, layers);
      const double gather = all_gather_seconds(chunk_params * pbytes / units, l.data(), links.dp);
      const double scatter = reduce_scatter_seconds(chunk_trained * pbytes / units, l.data(), links.dp);
      const double f_unit = k.f_compute[vs] / units, b_unit = k.b_compute[vs] / units;
      k.f_zero3[vs] = gather + (units - 1) * std::max(0.0, gather - f_unit);
      k.b_zero3[vs] = gather + (units - 1) * std::max(0.0, gather + scatter - b_unit) + scatter;
      k.zero3_total[vs] = units * (2 * gather + scatter);
    }
  }
  k.p2p = p2p_seconds(tokens * h * act_bytes(l.precision) / (l.seq_parallel ? t : 1), links.pp);
  return k;
}

double optimizer_seconds(const Workload& w, const Layout& l, const ClusterSpec& c, int stage) {
  // AdamW reads parameter, gradient and two moments and writes three of
  // them back: about 28 bytes per parameter it updates.
  const double trained = trained_parameters(w, l, stage);
  const double experts = w.model.lora.enabled() ? 0 : stage_expert_parameters(w.counts(), w.model, l, stage);
  const double updated = (trained - experts) / (l.zero >= 1 ? l.data() : 1) + experts / (l.zero >= 1 ? l.expert_data() : 1);
  return updated * 28 / (c.memory_bandwidth * c.memory_efficiency);
}

}  // namespace

PipelineTiming PipelineTimer::time(pp::ScheduleKind kind, int pp, int m, int v, const StageDurations& d,
                                   const pp::PassRatios& ratios) {
  std::vector<double> key = {double(kind), double(pp), double(m), double(v), d.p2p_seconds,
                             ratios.forward, ratios.backward_input, ratios.backward_weight};
  key.insert(key.end(), d.forward.begin(), d.forward.end());
  key.insert(key.end(), d.backward.begin(), d.backward.end());
  key.insert(key.end(), d.backward_weight.begin(), d.backward_weight.end());
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  PipelineTiming timing =
      simulate_pipeline(pp::build_schedule(kind, pp, m, v, ratios), pp::chunk_map(kind, pp, v), d);
  cache_.emplace(std::move(key), timing);
  return timing;
}

StepTime step_time(const Workload& w, const Layout& l, const ClusterSpec& c) {
  PipelineTimer timer;
  return step_time(w, l, c, group_links(c, l.dp, l.tp, l.pp, l.cp, "tp-dp-pp", l.ep), timer);
}

StepTime step_time(const Workload& w, const Layout& l, const ClusterSpec& c, const GroupLinks& links,
                   PipelineTimer& timer) {
  StepTime out;
  out.links = links;
  const ChunkCosts k = chunk_costs(w, l, c, out.links);
  const int stages = l.pp * l.v, m = l.micro_batches;
  const pp::ChunkMap map = pp::chunk_map(l.schedule(), l.pp, l.v);
  StageDurations d;
  d.p2p_seconds = l.pp > 1 ? k.p2p : 0;
  for (int vs = 0; vs < stages; vs++) {
    d.forward.push_back(k.forward(vs));
    d.backward.push_back(k.backward(vs));
    d.backward_weight.push_back(k.b_weight[vs]);
    d.backward_input.push_back(k.backward(vs) - k.b_weight[vs]);
  }
  // The engine builds ZB-V with the same ratios (config/run_pipeline.h).
  const PipelineTiming timing = timer.time(l.schedule(), l.pp, m, l.v, d, pass_ratios(w.model));

  const double pbytes = act_bytes(l.precision);
  int busiest = 0;
  for (int s = 0; s < l.pp; s++) {
    // Data-parallel reduction of this stage's gradients, in the buckets the
    // engine cuts (Layout::bucket_bytes; each collective pays the ring's
    // latency). They fill evenly over the last micro-batch's backward and
    // the link takes them one at a time: bucket i of b is ready i / b into
    // that window, so the last is never hidden and a slow link queues the
    // rest behind it (as predict_loom_run).
    const double params = trained_parameters(w, l, s), grads = params * l.grad_bytes();
    const double buckets = l.bucket_bytes > 0 ? std::max(1.0, std::ceil(grads / l.bucket_bytes)) : 1;
    // Expert parallelism: the experts' share reduces over the expert-data group.
    const double experts = w.model.lora.enabled() ? 0 : stage_expert_parameters(w.counts(), w.model, l, s);
    const double share = l.ep > 1 && params > 0 ? experts / params : 0;
    auto over_both = [&](auto collective, double bytes) {
      return collective(bytes * (1 - share), l.data(), out.links.dp) +
             (share > 0 ? collective(bytes * share, l.expert_data(), out.links.expert_dp) : 0.0);
    };
    double one = 0, gather = 0, window = 0;
    if (l.zero == 0) one = over_both(all_reduce_seconds, grads / buckets);
    if (l.zero == 1 || l.zero == 2) {
      one = over_both(reduce_scatter_seconds, grads / buckets);
      gather = over_both(all_gather_seconds, params * pbytes);  // updated parameters, after the step
    }
    if (l.zero == 3) one = 0;  // reduce-scattered layer by layer inside the passes (zero3_total)
    const double reduce = buckets * one;
    for (int chunk = 0; chunk < l.v; chunk++) window += d.backward[size_t(map.virtual_stage(s, chunk))];
    // Megatron-LM's 2021 DDP reduced after the whole backward (Layout::overlap_grad_reduce).
    if (!l.overlap_grad_reduce) window = 0;
    const double exposed = std::max(one, reduce - window * (buckets - 1) / buckets) + gather;
    const double opt = optimizer_seconds(w, l, c, s);
    const double end = timing.stage_finish[s] + exposed + opt;
    if (end > out.step) {
      out.step = end;
      out.dp_comm = reduce + gather;
      out.dp_exposed = exposed;
      out.optimizer = opt;
    }
    if (timing.stage_busy[s] > timing.stage_busy[busiest]) busiest = s;
  }
  for (int chunk = 0; chunk < l.v; chunk++) {
    const int vs = map.virtual_stage(busiest, chunk);
    out.compute += m * (k.f_compute[vs] + k.b_compute[vs]);
    out.tp_comm += m * (k.f_tp[vs] + k.b_tp[vs]);
    out.cp_comm += m * (k.f_cp[vs] + k.b_cp[vs]);
    out.ep_comm += m * (k.f_ep[vs] + k.b_ep[vs]);
    out.zero3_comm += m * (k.f_zero3[vs] + k.b_zero3[vs]);
    out.zero3_total += m * k.zero3_total[vs];
  }
  out.pp_comm = l.pp > 1 ? 2.0 * (stages - 1) * k.p2p : 0;
  out.bubble = timing.makespan - timing.stage_busy[busiest];
  out.bubble_fraction = timing.bubble_fraction();
  const double tokens = double(w.global_batch) * w.seq_len();
  out.tokens_per_s = tokens / out.step;
  // One basis everywhere (ModelConfig::train_flops_per_token): 6 N + 12 L h s
  // per token, no recomputation; the hardware figure adds what is run again.
  const ModelConfig& mc = w.model;
  const double s = w.seq_len(), model_flops = mc.train_flops_per_token(w.seq_len()) * tokens;
  const bool tiled = mc.tiled_attention(w.seq_len(), l.cp);
  const double redone = l.recompute == Recompute::full ? model_flops / 3  // one more forward
                        : l.recompute == Recompute::selective && !tiled
                            ? 4.0 * mc.n_layer * mc.d_model * s * tokens  // the attention core's two products
                            : 0;
  const double peak = out.step * l.devices() * c.peak_flops(l.precision);
  out.mfu = model_flops / peak;
  out.hfu = (model_flops + redone) / peak;
  return out;
}

double step_time_lower_bound(const Workload& w, const Layout& l, const ClusterSpec& c, const GroupLinks& links) {
  const ChunkCosts k = chunk_costs(w, l, c, links);
  const pp::ChunkMap map = pp::chunk_map(l.schedule(), l.pp, l.v);
  double bound = 0;
  for (int s = 0; s < l.pp; s++) {
    double busy = 0;
    for (int chunk = 0; chunk < l.v; chunk++) {
      const int vs = map.virtual_stage(s, chunk);
      busy += k.forward(vs) + k.backward(vs);
    }
    bound = std::max(bound, l.micro_batches * busy + optimizer_seconds(w, l, c, s));
  }
  return bound;
}

}  // namespace loom::planner
