#include "planner/memory_model.h"

#include <algorithm>
#include <tuple>

#include "model/param_layout.h"

namespace loom::planner {
namespace {

double param_bytes(ComputePrecision p) { return p == ComputePrecision::fp32 ? 4 : 2; }
double optimizer_bytes(ComputePrecision p) { return p == ComputePrecision::fp32 ? 8 : 12; }  // (master +) two moments
// Korthikanti's counts assume 2-byte activations; fp32 doubles them (the
// 1-byte dropout masks are counted double too: a small overestimate).
double activation_scale(ComputePrecision p) { return p == ComputePrecision::fp32 ? 2 : 1; }

}  // namespace

double layer_activation_bytes(double s, double b, double h, double a, int t, bool sp, Recompute r, bool tiled) {
  // The attention core's probabilities (and dropout mask); the tiled
  // attention keeps one fp32 log-sum-exp per row and head instead.
  const double sbh = s * b * h, attn = tiled ? 4 * a / h : 5 * a * s / h;
  switch (r) {
    case Recompute::none: return sp ? sbh * (34 + attn) / t : sbh * (10 + 24.0 / t + attn / t);
    case Recompute::selective: return sp ? sbh * 34 / t : sbh * (10 + 24.0 / t);
    case Recompute::full: return sp ? 2 * sbh / t : 2 * sbh;
  }
  return 0;
}

double layer_activation_bytes(const ModelConfig& m, double s, double b, int t, bool sp, Recompute r, bool tiled,
                              int ep) {
  const double h = m.d_model, a = m.n_head;
  if (!m.is_llama()) return layer_activation_bytes(s, b, h, a, t, sp, r, tiled);
  if (r == Recompute::full) return sp ? 2 * s * b * h / t : 2 * s * b * h;
  const double g = double(m.kv_heads()) / m.n_head, F = m.ffn();
  const double whole = 8 * s * b * h + 8 * s * b;
  const double core = tiled ? 4 * a * s * b : r == Recompute::none ? 2 * a * s * s * b : 0;
  double split = (4 + 4 * g) * s * b * h + 6 * s * b * F + core;
  if (m.is_moe()) {
    // A MoE block (model/moe/moe_block.h) keeps, per token, its k pairs'
    // permuted input (2h), gate/up and SwiGLU output (6 Fe / t) and fp32
    // output (4h), the fp32 input for the router (4h) and its probabilities
    // (4E), on every tp rank whether or not sequence parallelism splits
    // the rest of the block's rows; the mix of dense and MoE blocks by moe_every.
    // With ep the experts' rows (input, gate/up, SwiGLU output) are reserved
    // for every rank of the ep group.
    const double f = 1.0 / m.moe_every, k = m.top_k, Fe = m.expert_ffn();
    const double moe = s * b * (k * (ep * (2 * h + 6 * Fe / t) + 4 * h) + 4 * h + 4 * m.n_experts);
    const double rows = sp ? whole / t : whole;
    return (rows + split / t) * (1 - f) + (rows + (split - 6 * s * b * F) / t + moe) * f;
  }
  return sp ? (whole + split) / t : whole + split / t;
}

// Counted from the family's own parameter layout (model/<family>/), so the
// planner holds what the engine allocates: one block, the embedding side and
// the head side of the whole model, each tensor by its global shape.
ParameterCounts parameter_counts(const ModelConfig& with_adapters) {
  ModelConfig m = with_adapters;
  m.lora = {};  // the base: the adapters are trained_parameters'
  auto numel = [](const ParamSpec& p) {
    double n = 1;
    for (int64_t d : p.shape) n *= double(d);
    return n;
  };
  ParameterCounts c;
  ModelShard block;  // block 0 alone
  block.end_layer = std::min(1, m.n_layer), block.embedding = false, block.head = false;
  for (const ParamSpec& p : ParamLayout::for_model(m, block).params) {
    (p.split.dim >= 0 ? c.layer_split : c.layer_replicated) += numel(p);
    if (p.split.experts > 0) c.layer_experts += numel(p);
    if (p.shape.size() == 2) c.layer_matrices += numel(p);
  }
  ModelShard embedding;  // the first stage's tables
  embedding.end_layer = 0, embedding.head = false;
  for (const ParamSpec& p : ParamLayout::for_model(m, embedding).params)
    (p.split.dim >= 0 ? c.embedding : c.positions) += numel(p);  // vocabulary-parallel table; position table
  ModelShard head;  // the last stage's final norm and head (a tied head is the token table's copy)
  head.end_layer = 0, head.embedding = false;
  for (const ParamSpec& p : ParamLayout::for_model(m, head).params) {
    if (p.split.dim < 0) c.final_norm += numel(p);
    else if (!p.tied_across_stages) c.head += numel(p);
  }
  return c;
}

int head_stage(const Layout& l) {
  return pp::chunk_map(l.schedule(), l.pp, l.v).stage_of(l.pp * l.v - 1);
}

const ParameterCounts& Workload::counts() const {
  // Again when a field that shapes the parameters changed since.
  auto shape = [](const ModelConfig& m) {  // the base's (parameter_counts leaves the adapters out)
    return std::make_tuple(m.vocab_size, m.n_layer, m.n_head, m.d_model, m.seq_len, int(m.family), m.n_kv_head,
                           m.ffn_hidden, m.ffn_multiple_of, m.tie_embeddings, m.qkv_bias, m.n_experts, m.moe_ffn_hidden,
                           m.moe_shared_ffn, m.moe_every);
  };
  if (!counted || shape(counted->first) != shape(model)) counted.emplace(model, parameter_counts(model));
  return counted->second;
}

double trained_parameters(const Workload& w, const Layout& l, int stage) {
  const ModelConfig& m = w.model;
  if (!m.lora.enabled()) return stage_parameters(w.counts(), m, l, stage);
  return double(lora_parameters(m)) / m.n_layer * layers_on_stage(m.n_layer, l, stage) / l.tp;
}

double stage_parameters(const ModelConfig& m, const Layout& l, int stage) {
  return stage_parameters(parameter_counts(m), m, l, stage);
}

double stage_parameters(const ParameterCounts& p, const ModelConfig& m, const Layout& l, int stage) {
  const double t = l.tp;
  const double split = p.layer_split - p.layer_experts * (1 - 1.0 / l.ep);  // a rank's E / ep experts
  double n = layers_on_stage(m.n_layer, l, stage) * (split / t + p.layer_replicated);
  if (stage == 0) n += p.embedding / t + p.positions;  // vocabulary-parallel token table, positions
  if (stage == head_stage(l)) {  // the last virtual stage's: pp - 1, or 0 in ZB-V's V
    // The output head: its own matrix when untied, else the tied table
    // (a copy only when the first stage is another device).
    n += (m.tied() ? (l.pp > 1 ? p.embedding / t : 0) : p.head / t) + p.final_norm;
  }
  return n;
}

double stage_expert_parameters(const ParameterCounts& p, const ModelConfig& m, const Layout& l, int stage) {
  return layers_on_stage(m.n_layer, l, stage) * p.layer_experts / (double(l.tp) * l.ep);
}

MemoryBreakdown stage_memory(const Workload& w, const Layout& l, const ClusterSpec& c, int stage) {
  const ModelConfig& m = w.model;
  // Context parallelism: a rank holds seq_len / cp of each sequence.
  const double s = double(w.seq_len()) / l.cp, b = l.micro_batch, h = m.d_model;
  const bool tiled = m.tiled_attention(w.seq_len(), l.cp);
  MemoryBreakdown mem;
  mem.stage = stage;

  const double n = stage_parameters(w.counts(), m, l, stage), trained = trained_parameters(w, l, stage);
  if (m.lora.enabled()) {
    // LoRA (loom's engine): the frozen base in the compute type below ZeRO-3
    // (the token table, which lookups read, also in fp32), under ZeRO-3 an
    // fp32 shard; the adapters fp32 (+ the 16-bit copy) and trained.
    const bool lowp = l.precision != ComputePrecision::fp32;
    const double table = stage == 0 ? w.counts().embedding / l.tp : 0;
    const double ne = stage_expert_parameters(w.counts(), m, l, stage);  // a frozen base's experts: over expert_data
    mem.params = l.zero >= 3 ? 4 * ((n - ne) / l.data() + ne / l.expert_data())
                             : n * param_bytes(l.precision) + (lowp ? 4 * table : 0);
    mem.params += trained * (lowp ? 6 : 4) / (l.zero >= 3 ? l.data() : 1);
    mem.grads = trained * l.grad_bytes() / (l.zero >= 2 ? l.data() : 1);
    mem.optimizer = trained * optimizer_bytes(l.precision) / (l.zero >= 1 ? l.data() : 1);
  } else {
    // The dense parameters shard over the data group, the experts over the
    // expert-data group (the same with ep 1).
    const double ne = stage_expert_parameters(w.counts(), m, l, stage), nd = n - ne;
    auto held = [&](double bytes, int from_stage) {
      return nd * bytes / (l.zero >= from_stage ? l.data() : 1) + ne * bytes / (l.zero >= from_stage ? l.expert_data() : 1);
    };
    mem.params = held(param_bytes(l.precision), 3);
    mem.grads = held(l.grad_bytes(), 2);
    mem.optimizer = held(optimizer_bytes(l.precision), 1);
  }

  // Activations: every (micro-batch, chunk) whose forward ran and backward
  // has not, as the schedule itself bounds it.
  const double scale = activation_scale(l.precision);
  const int in_flight = pp::max_in_flight(l.schedule(), l.pp, l.micro_batches, l.v, stage);
  const double layers_per_chunk = double(layers_on_stage(m.n_layer, l, stage)) / l.v;
  // The tiled attention keeps no probabilities: selective recomputation
  // drops nothing from it (model/block_stage.h), as none.
  const Recompute kept = tiled && l.recompute == Recompute::selective ? Recompute::none : l.recompute;
  const double per_layer = scale * layer_activation_bytes(m, s, b, l.tp, l.seq_parallel, kept, tiled, l.ep);
  mem.activations = in_flight * layers_per_chunk * per_layer;
  if (l.recompute == Recompute::full)  // the layer being recomputed holds everything once
    mem.activations += scale * layer_activation_bytes(m, s, b, l.tp, l.seq_parallel, Recompute::none, tiled, l.ep);
  const double sbh_bytes = s * b * h * 2 * scale / (l.seq_parallel ? l.tp : 1);
  // (The embedding's output is the first layer's input, which the layer's
  // own count already holds: nothing more on stage 0.)
  if (stage == head_stage(l))  // final layernorm input, and fp32 logits for the loss (one micro-batch)
    mem.activations += sbh_bytes + 4 * s * b * m.vocab_size / l.tp;

  // Communication buffers: two gradient buckets in flight (25 MiB each, as
  // PyTorch DDP), pipeline send/receive buffers, and under ZeRO-3 the
  // gathered parameters of the current and the prefetched layer.
  if (l.data() > 1) mem.comm_buffers += 2 * std::min(25.0 * (1 << 20), mem.grads);
  // The ring's fp32 blocks: two key/value blocks, two gradient blocks and
  // (cp > 2) a share.
  const double kv_cols = 2 * double(m.kv_heads() / l.tp) * m.head_dim();
  if (l.cp > 1) mem.comm_buffers += (l.cp > 2 ? 5 : 4) * 4 * s * b * kv_cols;
  // 16-bit tiled attention works on fp32 copies of q/k/v, their gradient
  // and the output (one set for all layers).
  if (tiled && l.precision != ComputePrecision::fp32)
    mem.activations += 4 * s * b * (2 * (h / l.tp + kv_cols) + h / l.tp);
  if (l.pp > 1) mem.comm_buffers += 2 * sbh_bytes;
  // Expert parallelism's work space (model/moe/moe_block.h): the routed rows
  // to send, the all-to-all's fp32 staging and the local experts' fp32
  // outputs (ep x the pairs each).
  if (m.is_moe() && l.ep > 1) mem.comm_buffers += s * b * m.top_k * h * (8.0 * l.ep + 2 * scale);
  // An MoE block's backward work space (one set per stage), ep x the pairs'
  // rows: the input and hidden gradients in fp32, the output and gate/up
  // gradients in the compute type.
  if (m.is_moe()) {
    const double rows = s * b * m.top_k * l.ep, Fe = double(m.expert_ffn()) / l.tp, act = scale * 2;
    mem.activations += rows * (4 * h + 4 * Fe + act * h + act * 2 * Fe);
  }
  if (l.zero >= 3) mem.comm_buffers += 2 * (w.counts().layer_matrices / l.tp) * param_bytes(l.precision);
  mem.overhead = c.overhead_bytes;
  return mem;
}

MemoryBreakdown peak_memory(const Workload& w, const Layout& l, const ClusterSpec& c) {
  // The first stage holds the most micro-batches and the embedding, the last
  // the logits; stages in between never need more than the first.
  MemoryBreakdown first = stage_memory(w, l, c, 0);
  if (l.pp == 1) return first;
  MemoryBreakdown last = stage_memory(w, l, c, l.pp - 1);
  return last.total() > first.total() ? last : first;
}

}  // namespace loom::planner
