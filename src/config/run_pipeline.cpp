#include "config/run_pipeline.h"

namespace loom {

double head_cost_in_blocks(const ModelConfig& model) {
  const double C = model.d_model, T = model.seq_len, V = model.vocab_size;
  return 2 * C * V / (24 * C * C + 4 * T * C);
}

pp::PassRatios pass_ratios(const ModelConfig& model) {
  const double C = model.d_model, T = model.seq_len;
  const double matrices = double(model.qkv_rows()) * C + C * C + (model.is_llama() ? 3 : 2) * double(model.ffn()) * C;
  return {2 * matrices + 4 * T * C, 2 * matrices + 8 * T * C, 2 * matrices};
}

PipelinePlan plan_pipeline(const RunConfig& cfg, int stages, int micro_batches) {
  return pp::plan_pipeline(cfg.parallel.schedule, cfg.parallel.virtual_stages, cfg.parallel.pp_layers,
                           cfg.model.n_layer, stages, head_cost_in_blocks(cfg.model), micro_batches,
                           pass_ratios(cfg.model));
}

std::vector<ModelShard> chunk_shards(const RunConfig& cfg, const PipelinePlan& plan, int stage, int tp_rank,
                                     int tp_size, int ep_rank, int ep_size) {
  std::vector<ModelShard> shards;
  for (int c = 0; c < plan.v; c++) {
    const int vs = plan.map().virtual_stage(stage, c);
    ModelShard s;
    s.tp_rank = tp_rank;
    s.tp_size = tp_size;
    s.ep_rank = ep_rank, s.ep_size = ep_size;
    s.sequence_parallel = cfg.parallel.sequence_parallel && tp_size > 1;
    s.first_layer = plan.first_layer(vs);
    s.end_layer = s.first_layer + plan.layers[size_t(vs)];
    s.embedding = vs == 0;
    s.head = vs == plan.virtual_stages() - 1;
    shards.push_back(s);
  }
  return shards;
}

}  // namespace loom
