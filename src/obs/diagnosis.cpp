#include "obs/diagnosis.h"

#include <cmath>
#include <map>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom::obs {
namespace {

std::string pct(double share) { return strprintf("%.0f%%", share * 100); }

const char* severity_name(Severity s) { return s == Severity::high ? "high" : "warning"; }

// Advice that reads the run's config.toml (run.config): a lever the run
// already pulls is not suggested again; the next one is, with the value
// the run used. Without a config the advice is the generic one.
bool clips(const RunConfig* c) { return c && c->train.grad_clip > 0; }
std::string clip_advice(const RunConfig* c) {
  if (!c) return "clip gradients (train.grad_clip, e.g. 1.0)";
  return "clip gradients (train.grad_clip is 0: set it to 1.0)";
}
std::string lower_lr(const RunConfig* c) {
  if (!c) return "lower the learning rate";
  return strprintf("lower the learning rate (train.lr = %g: try %g)", double(c->train.lr), double(c->train.lr) / 2);
}
std::string longer_warmup(const RunConfig* c) {
  if (!c) return "lengthen the warmup";
  return strprintf("lengthen the warmup (train.warmup_steps = %d: try %d)", c->train.warmup_steps,
                   std::max(2 * c->train.warmup_steps, 100));
}

Finding finding(const char* cause, const char* area, Severity severity = Severity::warning, double score = 0) {
  Finding f;
  f.cause = cause, f.area = area, f.severity = severity, f.score = score;
  return f;
}

// Bubble share the schedule alone leaves with equal pass times: (pp - 1) /
// (k m + pp - 1), k = v for GPipe / 1F1B / interleaved, 3 for ZB-H1 (its W
// passes fill two thirds of 1F1B's idle time), 6 for ZB-V.
int bubble_divisor(const RunLayout& l) {
  if (l.schedule == "zb-h1") return 3;
  if (l.schedule == "zb-v") return 6;
  return l.schedule == "interleaved" ? std::max(l.virtual_stages, 1) : 1;
}
double schedule_bubble(const RunLayout& l, int m) {
  return double(l.pp - 1) / double(bubble_divisor(l) * m + l.pp - 1);
}

void pipeline_bound(const RunData& run, const RunFigures& f, const DiagnoseThresholds& t, Diagnosis& d) {
  const RunLayout* l = run.layout ? &*run.layout : nullptr;
  double worst = 0;
  int worst_stage = 0;
  for (size_t s = 0; s < f.bubble_per_stage.size(); s++)
    if (f.bubble_per_stage[s] > worst) worst = f.bubble_per_stage[s], worst_stage = int(s);
  bool measured = !f.bubble_per_stage.empty();
  double predicted = l && l->pp > 1 ? schedule_bubble(*l, std::max(l->micro_batches, 1)) : 0;
  double share = measured ? worst : predicted;
  if (share < t.bubble_share) {
    d.checked.push_back(measured ? "pipeline bubble " + pct(worst) + " of the step (below " + pct(t.bubble_share) + ")"
                                 : "pipeline bubble: not measured");
    return;
  }
  Finding x = finding("pipeline-bound", "performance");
  x.severity = share >= 2 * t.bubble_share ? Severity::high : Severity::warning;
  x.score = share / t.bubble_share;
  if (measured) {
    std::string per_stage;
    for (size_t s = 0; s < f.bubble_per_stage.size(); s++)
      per_stage += strprintf("%s stage %zu %s", s ? "," : "", s, pct(f.bubble_per_stage[s]).c_str());
    x.evidence.push_back(strprintf("stages idle in the pipeline bubble for up to %s of the step (stage %d):%s [%s]",
                                   pct(worst).c_str(), worst_stage, per_stage.c_str(), f.bubble_source.c_str()));
  } else {
    x.evidence.push_back("no bubble was measured; this is the schedule's own bubble, predicted from layout.json");
  }
  if (l && l->pp > 1) {
    int m = std::max(l->micro_batches, 1);
    const int k = bubble_divisor(*l);
    x.evidence.push_back(strprintf("pp=%d with %d micro-batch%s per step under %s: the schedule alone idles "
                                   "(pp-1)/(%sm+pp-1) = %s of each stage's time",
                                   l->pp, m, m == 1 ? "" : "es", l->schedule.c_str(),
                                   k > 1 ? strprintf("%d ", k).c_str() : "", pct(predicted).c_str()));
    int target = 4 * l->pp;
    const bool zero_bubble = l->schedule == "zb-h1" || l->schedule == "zb-v";
    if (m < target) {
      x.recommendation = strprintf("raise the micro-batches per step from %d to at least %d (4 x pp), which cuts the "
                                   "bubble to %s; keep the global batch by making each micro-batch smaller, or use %s "
                                   "or fewer pipeline stages with more dp",
                                   m, target, pct(schedule_bubble(*l, target)).c_str(),
                                   zero_bubble ? "ZB-V (parallel.schedule = \"zb-v\", parallel.virtual_stages = 2)"
                                               : "a zero-bubble schedule (parallel.schedule = \"zb-h1\", or \"zb-v\" "
                                                 "with parallel.virtual_stages = 2), the interleaved schedule");
    } else {
      x.recommendation = strprintf("the bubble is larger than %d micro-batches explain (%s): look for a stalled stage or "
                                   "exposed pipeline sends (see below and the timeline in loom report)",
                                   m, pct(predicted).c_str());
    }
  } else {
    x.recommendation = "use more micro-batches per step (at least 4 x pp) or fewer pipeline stages";
  }
  d.findings.push_back(std::move(x));
}

void communication_bound(const RunData& run, const RunFigures& f, const DiagnoseThresholds& t, Diagnosis& d) {
  double share = f.exposed_comm_share;
  if (!std::isfinite(share)) return d.checked.push_back("exposed communication: not measured");
  // Waiting for a rank whose compute ended later is not the link's time.
  const std::string slower =
      f.waited_for_slower_share > 0.005
          ? "; besides, the ranks waited " + pct(f.waited_for_slower_share) +
                " of the step for a slower rank's backward (a straggler or noisy cores, not communication)"
          : "";
  if (share < t.exposed_comm_share)
    return d.checked.push_back("exposed communication " + pct(share) + " of the step (below " +
                               pct(t.exposed_comm_share) + ")" + slower);
  Finding x = finding("communication-bound", "performance");
  x.severity = share >= t.exposed_comm_share * 1.8 ? Severity::high : Severity::warning;
  x.score = share / t.exposed_comm_share;
  std::string worst;
  double worst_s = -1, per_group_total = 0;
  std::string groups;
  for (const auto& [g, all] : f.exposed_comm_s) {
    const auto w = f.waited_for_slower_s.find(g);
    const double waited = w != f.waited_for_slower_s.end() && std::isfinite(w->second) ? std::min(w->second, all) : 0;
    const double v = all - waited;
    groups += strprintf("%s%s %.1f ms", groups.empty() ? "" : ", ", g.c_str(), v * 1e3);
    if (waited > 0) groups += strprintf(" (and %.1f ms waiting for a slower rank)", waited * 1e3);
    per_group_total += v;
    if (v > worst_s) worst_s = v, worst = g;
  }
  x.evidence.push_back(strprintf("communication nothing overlapped takes %s of the step%s [%s]", pct(share).c_str(),
                                 groups.empty() ? "" : (" (" + groups + " per step)").c_str(), f.comm_source.c_str()));
  for (const auto& [g, o] : f.overlap)
    x.evidence.push_back(strprintf("overlap achieved for %s: %s of its communication hidden behind compute", g.c_str(),
                                   pct(o).c_str()));
  const RunLayout* l = run.layout ? &*run.layout : nullptr;
  std::vector<std::string> changes;
  if (worst == "dp" || worst.empty()) {
    auto o = f.overlap.find("dp");
    const RunConfig* c = run.config ? &*run.config : nullptr;
    if (o != f.overlap.end() && o->second < t.low_overlap) {
      if (!c)
        changes.push_back("little of the gradient reduction overlaps backward: use smaller buckets "
                          "(parallel.bucket_mb) so reductions start earlier in backward");
      else if (c->parallel.bucket_mb > 1)
        changes.push_back(strprintf("little of the gradient reduction overlaps backward: use smaller buckets "
                                    "(parallel.bucket_mb = %g: try %g) so reductions start earlier in backward",
                                    double(c->parallel.bucket_mb), double(c->parallel.bucket_mb) / 4));
      else
        changes.push_back(strprintf("little of the gradient reduction overlaps backward although its buckets are "
                                    "small already (parallel.bucket_mb = %g): do more compute per reduction "
                                    "(more micro-batches per step) or reduce over fewer ranks",
                                    double(c->parallel.bucket_mb)));
    }
    if (l && l->batch_size > 0 && l->seq_len > 0 && l->dp > 1) {
      long tokens = long(l->batch_size) / l->dp * l->seq_len;
      x.evidence.push_back(strprintf("each of the %d dp ranks computes %ld tokens per step for one full gradient "
                                     "reduction",
                                     l->dp, tokens));
      if (tokens < t.small_batch_tokens)
        changes.push_back(strprintf("the per-rank batch is small (%ld tokens < %d): raise train.batch_size (more "
                                    "accumulation steps per reduction) or use fewer dp ranks",
                                    tokens, t.small_batch_tokens));
    }
    if (changes.empty())
      changes.push_back(c && c->parallel.bucket_mb <= 1
                            ? "raise the per-rank batch (more accumulation per reduction) or reduce over fewer ranks"
                            : "raise the per-rank batch (more accumulation per reduction) or overlap the reduction "
                              "with backward (smaller parallel.bucket_mb)");
  }
  if (worst == "tp") {
    if (l && l->ranks_per_node > 0 && l->tp > l->ranks_per_node)
      changes.push_back(strprintf("tensor parallelism spans nodes (tp=%d > %d ranks per node): its all-reduces, two "
                                  "per layer per micro-batch, cross the slow link; keep tp within a node",
                                  l->tp, l->ranks_per_node));
    else if (l && l->order.rfind("tp", 0) != 0)
      changes.push_back("tp is not the innermost axis (parallel.order = " + l->order +
                        "): its ranks are not neighbours; use order tp-dp-pp");
    else
      changes.push_back("tp all-reduces twice per layer per micro-batch: lower tp and use pp or dp for the rest, or "
                        "larger micro-batches so each all-reduce carries more compute");
  }
  if (worst == "pp")
    changes.push_back("pipeline sends are exposed: fewer, larger micro-batches or fewer stages");
  if (worst != "dp" && worst != "tp" && worst != "pp" && !worst.empty())
    changes.push_back("the " + worst + " group's communication is exposed: overlap it with compute or do less of it");
  for (size_t i = 0; i < changes.size(); i++) x.recommendation += (i ? "; " : "") + changes[i];
  d.findings.push_back(std::move(x));
}

void stalled_stage(const RunFigures& f, const DiagnoseThresholds& t, Diagnosis& d) {
  const std::vector<double>& c = f.compute_s_per_stage;
  if (c.size() < 2) return d.checked.push_back("stage balance: needs compute per stage for 2+ stages");
  double mean = 0;
  for (double v : c) mean += v;
  mean /= double(c.size());
  size_t slow = size_t(std::max_element(c.begin(), c.end()) - c.begin());
  size_t fast = size_t(std::min_element(c.begin(), c.end()) - c.begin());
  double ratio = mean > 0 ? c[slow] / mean : 0;
  if (ratio < t.stage_imbalance)
    return d.checked.push_back(strprintf("stage balance: slowest stage %.2fx the mean (below %.2fx)", ratio,
                                         t.stage_imbalance));
  Finding x = finding("stalled-stage", "performance");
  x.severity = ratio >= 1 + 2 * (t.stage_imbalance - 1) ? Severity::high : Severity::warning;
  x.score = ratio / t.stage_imbalance;
  std::string per;
  for (size_t s = 0; s < c.size(); s++) per += strprintf("%s stage %zu %.1f ms", s ? "," : "", s, c[s] * 1e3);
  x.evidence.push_back(strprintf("stage %zu computes %.2fx the mean per step, and the others wait for it:%s [%s]", slow,
                                 ratio, per.c_str(), f.compute_source.c_str()));
  x.recommendation = strprintf("rebalance the partition: move layers from stage %zu to stage %zu (remember the first "
                               "stage also holds the embedding and the last the LM head and loss)",
                               slow, fast);
  d.findings.push_back(std::move(x));
}

// Ranks the trainer's StragglerMonitor named in metrics.jsonl.
void stragglers(const RunData& run, Diagnosis& d) {
  struct Seen {
    int64_t first = 0, last = 0, steps = 0;
    double ratio = 0, busy_s = 0, median_s = 0;  // the largest ratio named, with its times
  };
  std::map<int, Seen> seen;
  bool measured = false;
  for (const StepMetrics& m : run.steps) {
    measured = measured || !m.busy_s.empty();
    for (const Straggler& s : m.stragglers) {
      Seen& x = seen[s.rank];
      if (x.steps++ == 0) x.first = m.step;
      x.last = m.step;
      if (s.ratio > x.ratio) x.ratio = s.ratio, x.busy_s = s.busy_s, x.median_s = s.median_s;
    }
  }
  if (!measured) return d.checked.push_back("stragglers: needs each rank's busy time (2+ ranks, metrics.jsonl)");
  if (seen.empty())
    return d.checked.push_back("stragglers: none (no rank computed persistently slower than the others)");
  for (const auto& [rank, x] : seen) {
    Finding f = finding("straggler", "performance", x.ratio >= 1.5 ? Severity::high : Severity::warning, x.ratio);
    f.evidence.push_back(strprintf("rank %d computed up to %.2fx the median rank (%.3f s vs %.3f s per step), named on "
                                   "%lld steps between step %lld and %lld; every rank waits for it at each "
                                   "reduction, which the others count as exposed communication [metrics.jsonl "
                                   "stragglers]",
                                   rank, x.ratio, x.busy_s, x.median_s, (long long)x.steps, (long long)x.first,
                                   (long long)x.last));
    f.recommendation = strprintf("look at rank %d's machine (another job on its cores, thermal throttling, a slower "
                                 "CPU: run `loom bench step` there); if it stays slow, leave it out and continue from "
                                 "the last checkpoint on the other ranks (loom elastic does this after a failure)",
                                 rank);
    d.findings.push_back(std::move(f));
  }
}

struct Series {
  std::vector<int64_t> step;
  std::vector<double> v;
};

Series finite_series(const RunData& run, double StepMetrics::*field, bool skip_skipped) {
  Series s;
  for (const StepMetrics& m : run.steps)
    if (std::isfinite(m.*field) && !(skip_skipped && m.skipped)) s.step.push_back(m.step), s.v.push_back(m.*field);
  return s;
}

// Steps whose value exceeds `factor` x the median of up to 20 before it.
std::vector<size_t> spikes(const Series& s, double factor) {
  std::vector<size_t> out;
  for (size_t i = 5; i < s.v.size(); i++) {
    std::vector<double> prev(s.v.begin() + long(i >= 20 ? i - 20 : 0), s.v.begin() + long(i));
    double med = median_of(prev);
    if (med > 0 && s.v[i] > factor * med) out.push_back(i);
  }
  return out;
}

std::string step_list(const Series& s, const std::vector<size_t>& idx, const char* what) {
  std::string out;
  for (size_t k = 0; k < idx.size() && k < 4; k++)
    out += strprintf("%s step %lld (%s %.3g)", k ? "," : "", (long long)s.step[idx[k]], what, s.v[idx[k]]);
  if (idx.size() > 4) out += strprintf(" and %zu more", idx.size() - 4);
  return out;
}

void numerics(const RunData& run, const DiagnoseThresholds& t, Diagnosis& d) {
  if (run.steps.empty()) return d.checked.push_back("numerics: no steps in metrics.jsonl");
  const RunLayout* l = run.layout ? &*run.layout : nullptr;
  size_t n = run.steps.size();

  // Non-finite loss on a step that was not skipped.
  for (const StepMetrics& m : run.steps)
    if (!std::isfinite(m.loss) && !m.skipped) {
      Finding x = finding("non-finite-loss", "numerics", Severity::high, 10);
      x.evidence.push_back(strprintf("the loss is not finite at step %lld", (long long)m.step));
      const RunConfig* c = run.config ? &*run.config : nullptr;
      std::vector<std::string> levers = {lower_lr(c)};
      if (!clips(c)) levers.push_back(clip_advice(c));
      if (!c) levers.push_back("under fp16 turn dynamic loss scaling on or use bf16");
      else if (l && l->dtype == "fp16" && !l->loss_scaling)
        levers.push_back("turn dynamic loss scaling on (precision.loss_scale = \"dynamic\")");
      else if (l && l->dtype == "fp16")
        levers.push_back("compute in bf16 (precision.compute = \"bf16\": fp32's range)");
      levers.push_back("check the data at that step");
      for (size_t i = 0; i < levers.size(); i++) x.recommendation += (i ? "; " : "") + levers[i];
      d.findings.push_back(std::move(x));
      break;
    }

  // Skipped steps: share and longest run.
  size_t skipped = 0, run_len = 0, longest = 0;
  int64_t longest_end = 0;
  for (const StepMetrics& m : run.steps) {
    run_len = m.skipped ? run_len + 1 : 0;
    skipped += m.skipped;
    if (run_len > longest) longest = run_len, longest_end = m.step;
  }
  std::string skip_evidence = strprintf("%zu of %zu steps skipped (%s); longest run %zu ending at step %lld", skipped, n,
                                        pct(double(skipped) / double(n)).c_str(), longest, (long long)longest_end);
  bool many_skips = double(skipped) >= t.skipped_share * double(n) || longest >= size_t(t.skipped_run);

  // Loss-scale collapse.
  double peak = 0, final_scale = kUnknown, min_scale = INFINITY;
  int64_t peak_step = 0;
  for (const StepMetrics& m : run.steps)
    if (std::isfinite(m.loss_scale)) {
      if (m.loss_scale > peak) peak = m.loss_scale, peak_step = m.step;
      min_scale = std::min(min_scale, m.loss_scale);
      final_scale = m.loss_scale;
    }
  bool scaling = peak > 1 || (l && l->loss_scaling);
  bool collapsed = scaling && peak > 1 && std::isfinite(final_scale) &&
                   (final_scale <= 1 || final_scale * t.scale_collapse <= peak);
  if (collapsed) {
    Finding x = finding("loss-scale-collapse", "numerics", Severity::high, peak / std::max(final_scale, 1e-30));
    x.evidence.push_back(strprintf("the loss scale fell from %.6g (step %lld) to %.6g (%.0f halvings): gradients keep "
                                   "overflowing fp16 at every scale",
                                   peak, (long long)peak_step, final_scale, std::log2(peak / std::max(final_scale, 1e-30))));
    if (skipped) x.evidence.push_back(skip_evidence);
    const RunConfig* c = run.config ? &*run.config : nullptr;
    x.recommendation = clips(c) ? strprintf("something overflows whatever the scale, though gradients are clipped at "
                                            "%g: %s, or compute in bf16 (precision.compute = \"bf16\": fp32's range, "
                                            "no loss scaling needed)",
                                            double(c->train.grad_clip), lower_lr(c).c_str())
                                : "something overflows whatever the scale: " + lower_lr(c) + ", " + clip_advice(c) +
                                      ", or compute in bf16 (fp32 range, no loss scaling needed)";
    d.findings.push_back(std::move(x));
  } else if (many_skips) {
    Finding x = finding("skipped-steps", "numerics", Severity::warning, double(skipped) / double(n) / t.skipped_share);
    if (longest >= size_t(t.skipped_run) * 3) x.severity = Severity::high;
    x.evidence.push_back(skip_evidence);
    if (scaling) x.evidence.push_back(strprintf("loss scale now %.6g (peak %.6g)", final_scale, peak));
    const RunConfig* c = run.config ? &*run.config : nullptr;
    x.recommendation = "steps are skipped when gradients hold inf/NaN: " +
                       (c ? strprintf("grow the loss scale less often (precision.growth_interval = %d: try %d)",
                                      c->precision.growth_interval, 4 * c->precision.growth_interval)
                          : std::string("raise the loss-scale growth interval (grow less often)")) +
                       ", " + lower_lr(c) + ", or compute in bf16";
    d.findings.push_back(std::move(x));
  } else {
    d.checked.push_back(strprintf("skipped steps: %zu of %zu", skipped, n));
  }

  // fp16 without loss scaling: small gradients flush to zero.
  bool fp16 = l && (l->dtype == "fp16" || l->dtype == "f16" || l->dtype == "float16");
  if (fp16 && !scaling) {
    size_t zero = 0, with_norm = 0;
    for (const StepMetrics& m : run.steps)
      if (std::isfinite(m.grad_norm)) with_norm++, zero += m.grad_norm == 0 || m.grad_norm < 1e-30;
    Series loss = finite_series(run, &StepMetrics::loss, true);
    size_t q = loss.v.size() / 4;
    double first = q ? median_of({loss.v.begin(), loss.v.begin() + long(q)}) : kUnknown;
    double last = q ? median_of({loss.v.end() - long(q), loss.v.end()}) : kUnknown;
    bool stuck = q >= 2 && last >= first * 0.995;
    bool zeros = with_norm && double(zero) >= t.zero_grad_share * double(with_norm);
    Finding x = finding("fp16-underflow", "numerics", zeros || stuck ? Severity::high : Severity::warning, zeros || stuck ? 5.0 : 1.0);
    x.evidence.push_back("fp16 compute with loss scaling off (layout.json): gradients below 6e-8 round to zero");
    if (zeros) x.evidence.push_back(strprintf("the gradient norm is zero on %zu of %zu steps", zero, with_norm));
    if (stuck) x.evidence.push_back(strprintf("the loss does not fall: %.4g over the first quarter, %.4g over the last",
                                              first, last));
    x.recommendation = "turn dynamic loss scaling on (precision.loss_scale = \"dynamic\": it keeps small gradients "
                       "inside fp16's range) or compute in bf16";
    d.findings.push_back(std::move(x));
  }

  Series gn = finite_series(run, &StepMetrics::grad_norm, false);
  if (auto idx = spikes(gn, t.grad_spike); !idx.empty()) {
    Finding x = finding("grad-norm-spikes", "numerics", idx.size() > 2 ? Severity::high : Severity::warning, double(idx.size()));
    x.evidence.push_back(strprintf("the gradient norm jumped above %.0fx its recent median at%s", t.grad_spike,
                                   step_list(gn, idx, "norm").c_str()));
    const RunConfig* c = run.config ? &*run.config : nullptr;
    x.recommendation = clips(c) ? strprintf("the run already clips gradients at %g (train.grad_clip), which bounds the "
                                            "update but not the cause: %s or %s",
                                            double(c->train.grad_clip), lower_lr(c).c_str(), longer_warmup(c).c_str())
                                : clip_advice(c) + " and " + lower_lr(c) + " or " + longer_warmup(c);
    d.findings.push_back(std::move(x));
  } else {
    d.checked.push_back("gradient norm: no spikes");
  }

  Series loss = finite_series(run, &StepMetrics::loss, true);
  if (auto idx = spikes(loss, t.loss_spike); !idx.empty()) {
    Finding x = finding("loss-spikes", "numerics", idx.size() > 2 ? Severity::high : Severity::warning, double(idx.size()));
    x.evidence.push_back(strprintf("the loss jumped above %.2fx its recent median at%s", t.loss_spike,
                                   step_list(loss, idx, "loss").c_str()));
    const RunConfig* c = run.config ? &*run.config : nullptr;
    x.recommendation = "the learning rate is likely too high for the batch: " + lower_lr(c) +
                       (c ? strprintf(" or raise the batch (train.batch_size = %d)", c->train.batch_size)
                          : std::string(" (or raise the batch)")) +
                       ", " + longer_warmup(c) + (clips(c) ? "" : ", " + clip_advice(c));
    d.findings.push_back(std::move(x));
  } else {
    d.checked.push_back("loss: no spikes");
  }

  size_t q = loss.v.size() / 4;
  if (q >= 4) {
    double first = 0, last = 0;
    for (size_t i = 0; i < q; i++) first += loss.v[i], last += loss.v[loss.v.size() - 1 - i];
    first /= double(q), last /= double(q);
    if (last > first * t.loss_rise) {
      Finding x = finding("loss-rising", "numerics", Severity::high, last / first);
      x.evidence.push_back(strprintf("the loss rises: mean %.4g over the first quarter of the steps, %.4g over the last",
                                     first, last));
      const StepMetrics& end = run.steps.back();
      if (std::isfinite(end.lr)) x.evidence.push_back(strprintf("learning rate at the end: %.3g", end.lr));
      const RunConfig* c = run.config ? &*run.config : nullptr;
      x.recommendation = c ? strprintf("the learning rate is too high for this batch size: halve it (train.lr = %g: "
                                       "try %g), or raise the batch (train.batch_size = %d), or %s",
                                       double(c->train.lr), double(c->train.lr) / 2, c->train.batch_size,
                                       longer_warmup(c).c_str())
                           : "the learning rate is too high for this batch size: halve it (or raise the batch, or "
                             "lengthen the warmup)";
      d.findings.push_back(std::move(x));
    } else {
      d.checked.push_back(strprintf("loss trend: %.4g -> %.4g (first vs last quarter)", first, last));
    }
  } else {
    d.checked.push_back("loss trend: too few steps to judge (needs 16)");
  }
}

// A mixture of experts whose router sends most tokens to the same experts:
// the median over the last quarter of the steps of the worst layer's
// busiest-expert load, against its ceiling E/k.
void router_collapse(const RunData& run, const DiagnoseThresholds& t, Diagnosis& d) {
  std::vector<const MoeStepMetrics*> moe;
  for (const StepMetrics& m : run.steps)
    if (m.moe.experts > 0 && std::isfinite(m.moe.load_max)) moe.push_back(&m.moe);
  if (moe.empty()) return;  // a dense model: nothing to say
  const size_t from = moe.size() - std::max<size_t>(1, moe.size() / 4);
  std::vector<double> high, low;
  for (size_t i = from; i < moe.size(); i++) high.push_back(moe[i]->load_max), low.push_back(moe[i]->load_min);
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double ceiling = double(moe.back()->experts) / moe.back()->top_k;
  const double share = median(high) / ceiling, idle = median(low);
  if (share < t.router_collapse)
    return d.checked.push_back(strprintf("router collapse: none (the busiest expert's load is %.2fx the mean, %.0f%% "
                                         "of its ceiling E/k = %.1f, over the last %zu steps)",
                                         median(high), 100 * share, ceiling, high.size()));
  Finding f = finding("router-collapse", "numerics", share >= 0.9 ? Severity::high : Severity::warning,
                      share / t.router_collapse);
  f.evidence.push_back(strprintf("over the last %zu steps the busiest expert of the worst layer took %.2fx the mean "
                                 "load (median), %.0f%% of the ceiling E/k = %.1f reached when every token chooses it; "
                                 "the idlest expert's load is %.2fx the mean%s [metrics.jsonl moe.load_max, "
                                 "moe.load_min]",
                                 high.size(), median(high), 100 * share, ceiling, idle,
                                 idle == 0 ? " (some expert gets no token: its weights learn nothing)" : ""));
  const RunConfig* c = run.config ? &*run.config : nullptr;
  if (!c || c->model.moe_balance == MoeBalance::none)
    f.recommendation = "balance the experts: model.moe_balance = \"aux_free\" (per-expert selection biases) or "
                       "\"sequence\" (a per-sequence auxiliary loss)";
  else if (c->model.moe_balance == MoeBalance::aux_free)
    f.recommendation = strprintf("the aux_free biases move too slowly for this run (model.moe_bias_rate = %g, largest "
                                 "bias %.3g): raise the rate (try %g)",
                                 c->model.moe_bias_rate, moe.back()->bias_max, 10 * c->model.moe_bias_rate);
  else
    f.recommendation = strprintf("the balancing loss is too weak (model.moe_aux_coef = %g): raise it (try %g), or "
                                 "add the router z-loss (model.moe_z_coef)",
                                 c->model.moe_aux_coef, 10 * c->model.moe_aux_coef);
  d.findings.push_back(std::move(f));
}

}  // namespace

Diagnosis diagnose(const RunData& run, const RunFigures& f, const DiagnoseThresholds& t) {
  Diagnosis d;
  pipeline_bound(run, f, t, d);
  communication_bound(run, f, t, d);
  stalled_stage(f, t, d);
  stragglers(run, d);
  numerics(run, t, d);
  router_collapse(run, t, d);
  std::stable_sort(d.findings.begin(), d.findings.end(), [](const Finding& a, const Finding& b) {
    return a.severity != b.severity ? a.severity == Severity::high : a.score > b.score;
  });
  return d;
}

std::string diagnosis_text(const RunData& run, const Diagnosis& d) {
  std::string out = strprintf("loom diagnose %s: %zu steps read", run.path.c_str(), run.steps.size());
  if (!run.trace.empty()) out += strprintf(", trace of %zu ranks", run.trace.size());
  if (!run.missing.empty()) {
    out += "; missing:";
    for (const std::string& m : run.missing) out += " " + m;
  }
  out += "\n";
  for (const std::string& note : run.notes) out += "  note: " + note + "\n";
  out += "\n";
  if (d.findings.empty()) out += "No likely cause of slowness or instability found.\n";
  for (size_t i = 0; i < d.findings.size(); i++) {
    const Finding& f = d.findings[i];
    out += strprintf("%zu. %s (%s, %s)\n", i + 1, f.cause.c_str(), f.area.c_str(), severity_name(f.severity));
    for (const std::string& e : f.evidence) out += "   evidence: " + e + "\n";
    out += "   change:   " + f.recommendation + "\n\n";
  }
  if (!d.checked.empty()) {
    out += "Checked:\n";
    for (const std::string& c : d.checked) out += "  - " + c + "\n";
  }
  return out;
}

std::string diagnosis_json(const RunData& run, const Diagnosis& d) {
  nlohmann::json j = {{"run", run.path}, {"steps_read", run.steps.size()}, {"missing", run.missing},
                      {"notes", run.notes}, {"checked", d.checked}};
  j["findings"] = nlohmann::json::array();
  for (const Finding& f : d.findings)
    j["findings"].push_back({{"cause", f.cause},
                             {"area", f.area},
                             {"severity", severity_name(f.severity)},
                             {"evidence", f.evidence},
                             {"recommendation", f.recommendation}});
  return j.dump(2) + "\n";
}

}  // namespace loom::obs
