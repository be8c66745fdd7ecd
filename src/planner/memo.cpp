#include "planner/memo.h"

#include "model/lora/lora_config.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace loom::planner {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string link_words(const Link& link) {
  return strprintf("%s, %.1f GB/s per ring, %.0f us per hop", link.crosses_nodes ? "across nodes" : "inside a node",
                   link.bandwidth / 1e9, link.latency * 1e6);
}

std::string fits_paragraph(const Workload& w, const ClusterSpec& c, const Candidate& best) {
  const Layout& l = best.layout;
  const MemoryBreakdown& m = best.memory;
  const char* which = l.pp == 1 ? "every device" : m.stage == 0 ? "the first pipeline stage" : "the last pipeline stage";
  std::string zero = l.zero == 0 ? "replicated"
                     : l.cp > 1 ? strprintf("ZeRO-%d over dp x cp = %d ranks", l.zero, l.data())
                                : strprintf("ZeRO-%d over %d replicas", l.zero, l.dp);
  if (!best.fits)
    return strprintf(
        "It does NOT fit (timed anyway: --ignore-memory): %s needs %.1f of %.1f GiB (%.1f GiB too many): "
        "parameters %.2f, gradients %.2f, optimizer state %.2f (%s), activations %.2f, communication buffers %.2f, "
        "fixed overhead %.2f.\n",
        which, m.total() / kGiB, c.memory_bytes / kGiB, (m.total() - c.memory_bytes) / kGiB, m.params / kGiB,
        m.grads / kGiB, m.optimizer / kGiB, zero.c_str(), m.activations / kGiB, m.comm_buffers / kGiB,
        m.overhead / kGiB);
  return strprintf(
      "Why it fits: %s needs %.1f of %.1f GiB (%.1f GiB spare): parameters %.2f, gradients %.2f, optimizer state "
      "%.2f (%s), activations %.2f (recompute: %s%s, up to %d %s of %d in flight on this stage), "
      "communication buffers %.2f, fixed overhead %.2f.\n",
      which, m.total() / kGiB, c.memory_bytes / kGiB, (c.memory_bytes - m.total()) / kGiB, m.params / kGiB,
      m.grads / kGiB, m.optimizer / kGiB, zero.c_str(), m.activations / kGiB, to_string(l.recompute),
      l.seq_parallel ? ", sequence parallel" : "",
      pp::max_in_flight(l.schedule(), l.pp, l.micro_batches, l.v, m.stage),
      l.v > 1 ? "(micro-batch, chunk) pairs" : "micro-batches", l.micro_batches * l.v, m.comm_buffers / kGiB, m.overhead / kGiB);
}

// The family and what it means for where parameters live and what is exchanged.
std::string model_paragraph(const Workload& w, const Layout& l) {
  const ModelConfig& m = w.model;
  const bool split_ends = l.pp > 1;  // embedding and head on different stages
  std::string head;
  if (m.tied())
    head = split_ends ? "the token embedding (tied): the last stage keeps a copy whose gradient is summed with the "
                        "first stage's once per step (not in the step time)"
                      : "the token embedding (tied)";
  else
    head = strprintf("its own %d x %d matrix (untied)%s", m.vocab_size, m.d_model,
                     split_ends ? ": the first stage holds the embedding, the last the head, and no gradient passes "
                                  "between them"
                                : ", beside the embedding on every device");
  if (!m.is_llama())
    return strprintf("Model: gpt2 family: %d layers of LayerNorm, %d-head attention and a GELU MLP %d wide, with "
                     "biases and learned positions; the output head is %s.\n",
                     m.n_layer, m.n_head, m.ffn(), head.c_str());
  const std::string attention =
      m.kv_heads() == m.n_head
          ? strprintf("%d-head attention", m.n_head)
          : strprintf("grouped-query attention (%d query heads sharing %d key/value heads: q/k/v %lld wide, not %d)",
                      m.n_head, m.kv_heads(), (long long)m.qkv_rows(), 3 * m.d_model);
  return strprintf("Model: llama family: %d layers of RMSNorm, %s and a SwiGLU MLP %d wide (gate, up, down), %s, "
                   "rotary positions (base %g%s); the output head is %s.\n",
                   m.n_layer, attention.c_str(), m.ffn(), m.qkv_bias ? "q/k/v biases only" : "no biases",
                   m.rope_theta,
                   m.rope_scaling.kind == RopeScaling::Kind::llama3
                       ? strprintf(", llama3 scaling x%g", m.rope_scaling.factor).c_str()
                       : "",
                   head.c_str());
}

std::string comm_paragraph(const Workload& w, const Candidate& best) {
  const Layout& l = best.layout;
  const StepTime& t = best.time;
  const double act = l.precision == ComputePrecision::fp32 ? 4 : 2;
  const double msg = double(l.micro_batch) * w.seq_len() / l.cp * w.model.d_model * act;  // a rank's rows
  std::string out = "Communication:\n";
  if (l.cp > 1) {
    const double block = 4.0 * l.micro_batch * w.seq_len() / l.cp * 2 * w.model.kv_heads() / l.tp * w.model.head_dim();
    out += strprintf(
        "  - context parallel over %d ranks (%s): each layer passes fp32 key/value blocks (%.1f MB) around the ring, "
        "%d per forward and twice as many with their gradients in backward, each while the previous one is "
        "attended; %.3f s per step not hidden.\n",
        l.cp, link_words(t.links.cp).c_str(), block / 1e6, l.cp - 1, t.cp_comm);
  }
  if (l.tp > 1)
    out += strprintf(
        "  - tensor parallel over %d devices (%s): each layer splits its matrices, so every micro-batch "
        "%s the layer output twice forward and twice backward (%.1f MB each); %.3f s per step, not overlapped.\n",
        l.tp, link_words(t.links.tp).c_str(), l.seq_parallel ? "reduce-scatters and all-gathers" : "all-reduces",
        msg / 1e6, t.tp_comm);
  if (l.ep > 1) {
    // Expert parallelism against splitting the experts' width over tp: ep
    // divides the experts' state by ep with no per-layer all-reduce, at the
    // price of four all-to-alls per MoE layer that cross whatever links the
    // ep group spans.
    const ModelConfig& m = w.model;
    const double pairs = double(l.micro_batch) * w.seq_len() / l.cp * m.top_k;
    out += strprintf(
        "  - expert parallel over %d ranks (%s): each holds %d of the %d experts (their weights, gradients and "
        "optimizer state 1/%d), and every MoE layer sends its %.0f routed (token, expert) pairs to their experts' "
        "ranks and the outputs back (%.1f MB out, %.1f MB back per micro-batch), and again in backward; %.3f s per "
        "step, not overlapped. Splitting the experts over tp instead keeps every expert on every rank (all the "
        "state, 1/tp of each) and all-reduces each layer's output: ep wins when the experts' state is what does "
        "not fit or the ep group stays on fast links, tp when the all-to-all would cross the network.\n",
        l.ep, link_words(t.links.ep).c_str(), m.n_experts / l.ep, m.n_experts, l.ep, pairs,
        pairs * m.d_model * act / 1e6, pairs * m.d_model * 4 / 1e6, t.ep_comm);
  }
  if (l.pp > 1)
    out += strprintf(
        "  - pipeline over %d stages (%s): each stage sends its activations forward and receives their gradients "
        "backward, %.1f MB per message; about %.4f s of messages on the critical path.\n",
        l.pp, link_words(t.links.pp).c_str(), msg / (l.seq_parallel ? l.tp : 1) / 1e6, t.pp_comm);
  if (l.data() > 1) {
    const char* how = l.zero == 0 ? "all-reduced" : l.zero < 3 ? "reduce-scattered, then parameters all-gathered"
                                                               : "reduce-scattered per micro-batch and parameters "
                                                                 "gathered before every use";
    out += strprintf(
        "  - data parallel over %d replicas%s (%s): every replica computes gradients of its own rows, so they are "
        "%s; %.3f s per step, %.3f s of it not hidden behind computation.\n",
        l.dp, l.cp > 1 ? strprintf(" x %d context-parallel ranks", l.cp).c_str() : "", link_words(t.links.dp).c_str(),
        how, t.dp_comm + t.zero3_total, t.dp_exposed + t.zero3_comm);
  }
  if (l.devices() == 1) out += "  - none: one device holds everything.\n";
  return out;
}

std::string microbatch_paragraph(const Workload& w, const ClusterSpec& c, const Candidate& best) {
  const Layout& l = best.layout;
  if (l.pp == 1)
    return strprintf("Micro-batching: no pipeline, so micro-batches only bound activation memory (%d of %d "
                     "sequences at a time); there is no bubble.\n",
                     l.micro_batch, l.micro_batch * l.micro_batches);
  // The same stages fed the replica's whole batch at once: a naive layer
  // split, one stage busy at a time (simulated with the same schedule IR).
  Layout naive = l;
  naive.v = 1;
  naive.micro_batch = l.micro_batch * l.micro_batches;
  naive.micro_batches = 1;
  const StepTime t = step_time(w, naive, c);
  const pp::ScheduleKind kind = l.schedule();
  const char* schedule = kind == pp::ScheduleKind::ZeroBubbleV    ? "ZB-V (2 chunks per stage in a V)"
                         : kind == pp::ScheduleKind::ZeroBubbleH1 ? "ZB-H1"
                                                                  : "1F1B";
  std::string out = strprintf(
      "Micro-batching: split over %d stages with the replica's %d sequences as one batch (a naive layer split), "
      "each stage would idle %.0f%% of the step (simulated); %d micro-batches of %d in %s keep the idle share at "
      "%.1f%%, for %.3f s instead of %.3f s per step.\n",
      l.pp, naive.micro_batch, 100 * t.bubble_fraction, l.micro_batches, l.micro_batch,
      kind == pp::ScheduleKind::Interleaved1F1B ? strprintf("interleaved 1F1B (%d chunks per stage)", l.v).c_str()
                                                : schedule,
      100 * best.time.bubble_fraction, best.time.step, t.step);
  // The bubble each schedule leaves on these stages, simulated from the
  // same action lists the executor would run.
  out += "Schedules on these stages (simulated bubble, step):";
  auto add = [&](const char* name, Layout alt) {
    const StepTime a = step_time(w, alt, c);
    out += strprintf(" %s %.1f%%, %.3f s;", name, 100 * a.bubble_fraction, a.step);
  };
  Layout one = l;
  one.v = 1, one.zero_bubble = false;
  add("1F1B", one);
  if (l.micro_batches >= l.pp && l.recompute != Recompute::full) {
    one.zero_bubble = true;
    add("ZB-H1 (backward split into input and weight passes; the weight passes fill 1F1B's idle time, same peak "
        "activations)",
        one);
    if (w.model.n_layer % (2 * l.pp) == 0) {
      one.v = 2;
      add("ZB-V (two chunks per stage in a V, split backward, the same peak activations)", one);
    }
  }
  if (kind == pp::ScheduleKind::Interleaved1F1B) add(strprintf("interleaved 1F1B, %d chunks", l.v).c_str(), l);
  out.back() = '.';
  return out + "\n";
}

std::string precision_paragraph(const Layout& l) {
  if (l.precision == ComputePrecision::fp32)
    return "Precision: everything in fp32 (the cluster has no faster 16-bit path chosen, or fp32 was asked for): "
           "4 B parameters, 4 B gradients, 8 B Adam moments per parameter.\n";
  return strprintf(
      "Precision: matrix products and stored activations in %s; in fp32: the master weights and both Adam moments "
      "(12 of the 16 bytes per parameter), because an update of lr x gradient is ~1e-4 of the weight and %s's "
      "%d-bit mantissa would round it away; layernorm statistics, softmax, the loss and gradient reductions, "
      "because they sum many terms whose rounding errors would accumulate%s.\n",
      compute_precision_name(l.precision), compute_precision_name(l.precision), l.precision == ComputePrecision::bf16 ? 8 : 11,
      l.precision == ComputePrecision::fp16 ? "; fp16 also needs dynamic loss scaling so small gradients do not underflow"
                                     : "");
}

}  // namespace

Bottleneck likely_bottleneck(const Candidate& best, const ClusterSpec& c) {
  const Layout& l = best.layout;
  const StepTime& t = best.time;
  std::vector<Bottleneck> costs = {
      {"pipeline bubble",
       l.v > 1 || l.pp * 2 > l.micro_batches
           ? "more micro-batches per step (a larger global batch or a smaller micro-batch) or more interleaved chunks"
       : l.zero_bubble ? "more micro-batches per step, or ZB-V (parallel.schedule = \"zb-v\")"
                       : "a zero-bubble schedule (parallel.schedule = \"zb-v\" or \"zb-h1\"), interleaved 1F1B (v > 1 "
                         "chunks per stage) or more micro-batches per step",
       t.bubble},
      {"tensor-parallel communication",
       t.links.tp.crosses_nodes ? "keep tensor parallelism inside a node (lower tp, more pp)"
                                : "lower tp and trade it for pipeline stages, or overlap the all-reduces with GEMMs",
       t.tp_comm},
      {"data-parallel gradient reduction",
       l.zero >= 2 ? "a lower ZeRO stage if memory allows, or gradient accumulation over more micro-batches"
                   : "larger buckets started earlier in backward, or more accumulation (fewer reductions per token)",
       t.dp_exposed + t.zero3_comm},
      {"pipeline messages", "fewer pipeline stages, or sequence parallelism to shrink each message", t.pp_comm},
      {"context-parallel ring transfers",
       "a smaller cp (longer chunks give each key/value block more attention to hide behind), or cp inside a node",
       t.cp_comm},
      {"optimizer step", "ZeRO-1 to split the update over the replicas", t.optimizer},
  };
  auto worst = std::max_element(costs.begin(), costs.end(),
                                [](const Bottleneck& a, const Bottleneck& b) { return a.seconds < b.seconds; });
  if (worst->seconds < 0.05 * t.step)
    return {"compute (every overhead is under 5% of the step)",
            strprintf("larger micro-batches for bigger GEMMs, or faster kernels (the model prices a product at up "
                      "to %.0f%% of peak, less for small or oddly shaped ones)",
                      100 * c.matmul_efficiency),
            t.compute};
  return *worst;
}

// The part of the prediction that would move it most if the model is wrong.
std::string least_certain(const Candidate& best, const ClusterSpec& c) {
  const StepTime& t = best.time;
  if (t.zero3_total > 0.5 * t.compute)
    return strprintf("whether ZeRO-3's %.3f s of gathers and reduce-scatters per step hide behind compute as the model "
                     "assumes (each layer's gather behind the previous layer's compute)",
                     t.zero3_total);
  const double comm = t.tp_comm + t.cp_comm + t.pp_comm + t.dp_exposed;
  if (comm > 0.2 * t.step)
    return strprintf("the collectives' achieved bandwidth (%.0f%% of the step; the links are priced at %.0f%% of "
                     "nominal inside a node and %.0f%% across)",
                     100 * comm / t.step, 100 * c.intra_efficiency, 100 * c.inter_efficiency);
  return strprintf("the GEMM rate: compute is %.0f%% of the step, priced from the best rate a large product reaches "
                   "(%.0f%% of peak) by its shape; Megatron-LM's published runs ran 3-17%% slower than this model "
                   "predicts for them (loom bench planner --published), so read the step as that much optimistic",
                   100 * t.compute / t.step, 100 * c.matmul_efficiency);
}

std::string write_memo(const Workload& w, const ClusterSpec& c, const Candidate& best) {
  const StepTime& t = best.time;
  std::string out = "Memo for plan #1: " + best.layout.describe() + "\n";
  out += model_paragraph(w, best.layout);
  const Layout& l = best.layout;
  if (w.model.lora.enabled()) {
    const LoraConfig& lora = w.model.lora;
    std::string targets;
    for (const std::string& t : lora.targets) targets += (targets.empty() ? "" : ", ") + t;
    out += strprintf(
        "LoRA: rank %d, alpha %g on %s: %.3gB adapter parameters trained (gradients, AdamW moments, the "
        "data-parallel reduction: %.2f%% of the model), the %.2fB base frozen (%s a parameter, no gradient, no "
        "weight-gradient products: about 2/3 of full training's compute).\n",
        lora.rank, lora.alpha, targets.c_str(), double(lora_parameters(w.model)) / 1e9,
        100.0 * double(lora_parameters(w.model)) / double(w.model.num_parameters()),
        double(w.model.num_parameters()) / 1e9,
        l.zero >= 3 ? "an fp32 ZeRO-3 shard of 4 B" : l.precision == ComputePrecision::fp32 ? "4 B" : "2 B");
  }
  if (l.cp > 1)
    out += strprintf("Context parallelism: each sequence's %d tokens over cp = %d ranks (%d each, two chunks for "
                     "causal balance), tiled attention over a ring of key/value blocks; gradients and ZeRO shards "
                     "over the dp x cp = %d ranks.\n",
                     w.seq_len(), l.cp, w.seq_len() / l.cp, l.data());
  else if (w.model.tiled_attention(w.seq_len()))
    out += strprintf("Attention: tiled (flash-style) at %d tokens: no T x T probabilities kept.\n", w.seq_len());
  out += fits_paragraph(w, c, best);
  out += comm_paragraph(w, best);
  out += microbatch_paragraph(w, c, best);
  out += precision_paragraph(best.layout);
  const Bottleneck b = likely_bottleneck(best, c);
  out += strprintf(
      "Step: %.3f s ~ compute %.3f + tensor-parallel %.3f%s + bubble %.3f + pipeline messages (in the bubble "
      "figure) + exposed data-parallel %.3f + ZeRO-3 gathers %.3f + optimizer %.3f; %.0f tokens/s, %.1f%% MFU "
      "(model FLOPs: %s a token)%s.\n",
      t.step, t.compute, t.tp_comm,
      (std::string(best.layout.cp > 1 ? strprintf(" + context-parallel ring %.3f", t.cp_comm) : "") +
       (best.layout.ep > 1 ? strprintf(" + expert all-to-all %.3f", t.ep_comm) : ""))
          .c_str(),
      t.bubble,
      t.dp_exposed, t.zero3_comm, t.optimizer, t.tokens_per_s, 100 * t.mfu,
      w.model.lora.enabled() ? "4N + 6N_adapters + 12Lhs, no weight gradient of the frozen base" : "6N + 12Lhs",
      t.hfu > t.mfu ? strprintf(", %.1f%% with the recomputed work (hardware FLOPs)", 100 * t.hfu).c_str() : "");
  out += strprintf("Likely bottleneck: %s (%.3f s, %.0f%% of the step). First mitigation: %s.\n", b.what.c_str(),
                   b.seconds, 100 * b.seconds / t.step, b.mitigation.c_str());
  out += "Least certain: " + least_certain(best, c) + ".\n";
  if (t.zero3_total > 0.5 * t.compute)
    out += strprintf("Risk: ZeRO-3 moves %.3f s of parameters and gradients per step, which this model assumes "
                     "hides behind %.3f s of compute (perfect prefetch); if the overlap falls short, that traffic "
                     "is the bottleneck: then try ZeRO-1 with tensor and pipeline parallelism (--zero 0,1).\n",
                     t.zero3_total, t.compute);
  return out;
}

std::string model_summary(const ModelConfig& m) {
  std::string out = strprintf("%s family: %d layers, d_model %d, %d heads", m.family_name(), m.n_layer, m.d_model,
                              m.n_head);
  if (m.is_moe())
    out += strprintf(" (%d key/value), %d experts of width %d (top %d)", m.kv_heads(), m.n_experts, m.expert_ffn(),
                     m.top_k);
  else if (m.is_llama()) out += strprintf(" (%d key/value), MLP %d", m.kv_heads(), m.ffn());
  out += strprintf(", vocab %d", m.vocab_size);
  if (m.is_llama()) out += m.tied() ? ", tied head" : ", untied head";
  return out;
}

std::string write_no_fit_memo(const Workload& w, const ClusterSpec& c, const SearchResult& r) {
  const double n = double(w.model.num_parameters()), states = 16 * n;  // bf16 or fp32 alike (memory_model.h)
  const double usable = c.memory_bytes - c.overhead_bytes;
  const int devices = c.devices();
  std::string out = strprintf(
      "No layout fits %d x %.1f GiB. Model states alone: %.2fB parameters x 16 B (16-bit parameters and "
      "gradients + fp32 master weights and two Adam moments; fp32 training also 4 + 4 + 8) = %.0f GB, against "
      "%d x %.1f GiB = %.0f GB left after the fixed overhead: spread over all %d devices (ZeRO-3, or tp x pp = "
      "%d) each would hold %.1f GiB of states before any activation. Holding them takes at least %d devices of "
      "%.0f GiB.\n",
      devices, c.memory_bytes / kGiB, n / 1e9, states / 1e9, devices, usable / kGiB, devices * usable / 1e9,
      devices, devices, states / devices / kGiB, int(std::ceil(states / usable)), c.memory_bytes / kGiB);
  if (r.have_closest) {
    const MemoryBreakdown& m = r.closest.memory;
    out += strprintf(
        "Closest: %s needs %.1f GiB on pipeline stage %d (parameters %.1f, gradients %.1f, optimizer %.1f, "
        "activations %.1f, buffers %.1f, overhead %.1f GiB), %.1f GiB more than a device has.\n",
        r.closest.layout.describe().c_str(), m.total() / kGiB, m.stage, m.params / kGiB, m.grads / kGiB,
        m.optimizer / kGiB, m.activations / kGiB, m.comm_buffers / kGiB, m.overhead / kGiB,
        (m.total() - c.memory_bytes) / kGiB);
  }
  out += strprintf(
      "Beyond what loom models: offloading the fp32 master weights and moments to host memory (12 B x %.2fB = %.0f "
      "GB there) leaves 4 B per parameter on the devices, %.1f GiB each over %d. Training only adapters (LoRA, "
      "`--lora RANK`, [lora] in a config) on frozen 16-bit weights leaves about 2 B, %.1f GiB each; both before "
      "activations.\n",
      n / 1e9, 12 * n / 1e9, 4 * n / devices / kGiB, devices, 2 * n / devices / kGiB);
  return out;
}

}  // namespace loom::planner
