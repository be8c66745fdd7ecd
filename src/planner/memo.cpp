#include "planner/memo.h"

#include <algorithm>

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
  std::string zero = l.zero == 0 ? "replicated" : strprintf("ZeRO-%d over %d replicas", l.zero, l.dp);
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

std::string comm_paragraph(const Workload& w, const Candidate& best) {
  const Layout& l = best.layout;
  const StepTime& t = best.time;
  const double act = l.precision == Precision::FP32 ? 4 : 2;
  const double msg = double(l.micro_batch) * w.seq_len() * w.model.d_model * act;
  std::string out = "Communication:\n";
  if (l.tp > 1)
    out += strprintf(
        "  - tensor parallel over %d devices (%s): each layer splits its matrices, so every micro-batch "
        "%s the layer output twice forward and twice backward (%.1f MB each); %.3f s per step, not overlapped.\n",
        l.tp, link_words(t.links.tp).c_str(), l.seq_parallel ? "reduce-scatters and all-gathers" : "all-reduces",
        msg / 1e6, t.tp_comm);
  if (l.pp > 1)
    out += strprintf(
        "  - pipeline over %d stages (%s): each stage sends its activations forward and receives their gradients "
        "backward, %.1f MB per message; about %.4f s of messages on the critical path.\n",
        l.pp, link_words(t.links.pp).c_str(), msg / (l.seq_parallel ? l.tp : 1) / 1e6, t.pp_comm);
  if (l.dp > 1) {
    const char* how = l.zero == 0 ? "all-reduced" : l.zero < 3 ? "reduce-scattered, then parameters all-gathered"
                                                               : "reduce-scattered per micro-batch and parameters "
                                                                 "gathered before every use";
    out += strprintf(
        "  - data parallel over %d replicas (%s): every replica computes gradients of its own rows, so they are "
        "%s; %.3f s per step, %.3f s of it not hidden behind computation.\n",
        l.dp, link_words(t.links.dp).c_str(), how, t.dp_comm + t.zero3_total, t.dp_exposed + t.zero3_comm);
  }
  if (l.tp == 1 && l.pp == 1 && l.dp == 1) out += "  - none: one device holds everything.\n";
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
  return strprintf(
      "Micro-batching: split over %d stages with the replica's %d sequences as one batch (a naive layer split), "
      "each stage would idle %.0f%% of the step (simulated); %d micro-batches of %d in %s keep the idle share at "
      "%.1f%%, for %.3f s instead of %.3f s per step.\n",
      l.pp, naive.micro_batch, 100 * t.bubble_fraction, l.micro_batches, l.micro_batch,
      l.v > 1 ? strprintf("interleaved 1F1B (%d chunks per stage)", l.v).c_str() : "1F1B",
      100 * best.time.bubble_fraction, best.time.step, t.step);
}

std::string precision_paragraph(const Layout& l) {
  if (l.precision == Precision::FP32)
    return "Precision: everything in fp32 (the cluster has no faster 16-bit path chosen, or fp32 was asked for): "
           "4 B parameters, 4 B gradients, 8 B Adam moments per parameter.\n";
  return strprintf(
      "Precision: matrix products and stored activations in %s; in fp32: the master weights and both Adam moments "
      "(12 of the 16 bytes per parameter), because an update of lr x gradient is ~1e-4 of the weight and %s's "
      "%d-bit mantissa would round it away; layernorm statistics, softmax, the loss and gradient reductions, "
      "because they sum many terms whose rounding errors would accumulate%s.\n",
      to_string(l.precision), to_string(l.precision), l.precision == Precision::BF16 ? 8 : 11,
      l.precision == Precision::FP16 ? "; fp16 also needs dynamic loss scaling so small gradients do not underflow"
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
           : "interleaved 1F1B (v > 1 chunks per stage) or more micro-batches per step",
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
      {"optimizer step", "ZeRO-1 to split the update over the replicas", t.optimizer},
  };
  auto worst = std::max_element(costs.begin(), costs.end(),
                                [](const Bottleneck& a, const Bottleneck& b) { return a.seconds < b.seconds; });
  if (worst->seconds < 0.05 * t.step)
    return {"compute (every overhead is under 5% of the step)",
            strprintf("larger micro-batches for bigger GEMMs, or faster kernels (the model assumes %.0f%% of peak)",
                      100 * c.matmul_efficiency),
            t.compute};
  return *worst;
}

std::string write_memo(const Workload& w, const ClusterSpec& c, const Candidate& best) {
  const StepTime& t = best.time;
  std::string out = "Memo for plan #1: " + best.layout.describe() + "\n";
  out += fits_paragraph(w, c, best);
  out += comm_paragraph(w, best);
  out += microbatch_paragraph(w, c, best);
  out += precision_paragraph(best.layout);
  const Bottleneck b = likely_bottleneck(best, c);
  out += strprintf(
      "Step: %.3f s ~ compute %.3f + tensor-parallel %.3f + bubble %.3f + pipeline messages (in the bubble "
      "figure) + exposed data-parallel %.3f + ZeRO-3 gathers %.3f + optimizer %.3f; %.0f tokens/s, %.1f%% MFU.\n",
      t.step, t.compute, t.tp_comm, t.bubble, t.dp_exposed, t.zero3_comm, t.optimizer, t.tokens_per_s,
      100 * t.mfu);
  out += strprintf("Likely bottleneck: %s (%.3f s, %.0f%% of the step). First mitigation: %s.\n", b.what.c_str(),
                   b.seconds, 100 * b.seconds / t.step, b.mitigation.c_str());
  if (t.zero3_total > 0.5 * t.compute)
    out += strprintf("Risk: ZeRO-3 moves %.3f s of parameters and gradients per step, which this model assumes "
                     "hides behind %.3f s of compute (perfect prefetch); if the overlap falls short, that traffic "
                     "is the bottleneck: then try ZeRO-1 with tensor and pipeline parallelism (--zero 0,1).\n",
                     t.zero3_total, t.compute);
  return out;
}

}  // namespace loom::planner
