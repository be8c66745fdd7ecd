#include "planner/layout.h"

#include <algorithm>

#include "core/check.h"

namespace loom::planner {

std::string Layout::describe() const {
  std::string layers;
  for (size_t i = 0; i < vs_layers.size(); i++) layers += (i ? "," : " | layers ") + std::to_string(vs_layers[i]);
  return strprintf("dp %d tp %d pp %d%s%s v %d | micro-batch %d x %d | zero %d | %s%s | recompute %s%s%s%s", dp, tp,
                   pp, cp > 1 ? strprintf(" cp %d", cp).c_str() : "", ep > 1 ? strprintf(" ep %d", ep).c_str() : "", v, micro_batch, micro_batches, zero,
                   compute_precision_name(precision),
                   fp32_grads && precision != ComputePrecision::fp32 ? " (fp32 gradients)" : "", to_string(recompute),
                   seq_parallel ? " | seq-parallel" : "", zero_bubble ? (v == 2 ? " | zb-v" : " | zb-h1") : "",
                   layers.c_str());
}

const char* Layout::schedule_name() const {
  switch (schedule()) {
    case pp::ScheduleKind::ZeroBubbleV: return "zb-v";
    case pp::ScheduleKind::ZeroBubbleH1: return "zb-h1";
    case pp::ScheduleKind::Interleaved1F1B: return "interleaved";
    default: return "1f1b";
  }
}

Layout layout_of(const RunConfig& cfg, int world_size) {
  const ParallelConfig& p = cfg.parallel;
  Layout l;
  l.tp = p.tp, l.pp = p.pp, l.v = p.virtual_stages, l.zero = p.zero, l.cp = std::max(1, p.cp);
  l.dp = p.dp > 0 ? p.dp : std::max(1, world_size / std::max(1, p.tp * p.pp * l.cp));
  l.ep = std::max(1, p.ep);
  const int rows = std::max(1, cfg.train.batch_size / l.dp);
  l.micro_batch = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : rows;
  l.micro_batches = std::max(1, rows / l.micro_batch);
  l.recompute = cfg.train.recompute_mode();
  l.seq_parallel = p.sequence_parallel;
  l.precision = cfg.precision.compute_precision();
  l.bucket_bytes = double(cfg.parallel.bucket_mb) * (1 << 20);
  l.zero_bubble = p.schedule == "zb-h1" || p.schedule == "zb-v";
  return l;
}

RunConfig with_layout(RunConfig cfg, const Layout& l) {
  ParallelConfig& p = cfg.parallel;
  p.dp = l.dp, p.tp = l.tp, p.pp = l.pp, p.zero = l.zero, p.virtual_stages = l.v, p.cp = l.cp, p.ep = l.ep;
  p.sequence_parallel = l.seq_parallel;
  if (l.v > 1 || l.zero_bubble) p.schedule = l.schedule_name();
  else if (p.schedule != "gpipe") p.schedule = "1f1b";
  cfg.train.micro_batch_size = l.micro_batch;
  cfg.train.batch_size = l.dp * l.micro_batch * l.micro_batches;
  cfg.train.recompute = to_string(l.recompute);
  cfg.precision.compute = compute_precision_name(l.precision);
  if (!l.vs_layers.empty()) p.pp_layers = l.vs_layers;  // else the config's own, if any
  return cfg;
}

int layers_on_stage(int n_layer, int pp, int stage) {
  return n_layer / pp + (stage < n_layer % pp ? 1 : 0);
}

int layers_on_stage(int n_layer, const Layout& l, int stage) {
  if (l.vs_layers.empty()) return layers_on_stage(n_layer, l.pp, stage);
  const pp::ChunkMap map = pp::chunk_map(l.schedule(), l.pp, l.v);
  int n = 0;
  for (int vs = 0; vs < l.pp * l.v; vs++)
    if (map.stage_of(vs) == stage) n += l.vs_layers[size_t(vs)];
  return n;
}

double layers_of_chunk(int n_layer, const Layout& l, int vs, int stage) {
  if (!l.vs_layers.empty()) return l.vs_layers[size_t(vs)];
  return double(layers_on_stage(n_layer, l.pp, stage)) / l.v;
}

}  // namespace loom::planner
