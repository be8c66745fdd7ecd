#include "model/split_rules.h"

#include "core/check.h"

namespace loom {

std::string tp_split_problem(const ModelConfig& m, int tp) {
  if (tp < 1) return strprintf("parallel.tp must be >= 1 (got %d)", tp);
  if (m.n_head % tp != 0)
    return strprintf("parallel.tp = %d must divide model.n_head (%d): tensor parallelism splits the attention heads "
                     "(and the MLP's %d hidden features) over the tp ranks",
                     tp, m.n_head, m.ffn());
  if (m.kv_heads() % tp != 0)
    return strprintf("parallel.tp = %d must divide model.n_kv_head (%d): tensor parallelism gives each rank whole "
                     "key/value heads (it does not replicate them); use a tp that divides %d",
                     tp, m.kv_heads(), m.kv_heads());
  if (m.ffn() % tp != 0)
    return strprintf("parallel.tp = %d must divide the MLP width (model.ffn_hidden = %d)", tp, m.ffn());
  return "";
}

std::string cp_split_problem(const ModelConfig& m, int cp) {
  if (cp < 1) return strprintf("parallel.cp must be >= 1 (got %d)", cp);
  if (cp == 1) return "";
  if (m.seq_len % (2 * cp) != 0)
    return strprintf("'model.seq_len' (%d) must be divisible by 2 x parallel.cp = %d (each of the cp ranks holds "
                     "two equal chunks)",
                     m.seq_len, 2 * cp);
  if (m.attention == AttentionKind::materialized)
    return strprintf("'model.attention' must be \"tiled\" or \"auto\" with parallel.cp = %d (ring attention runs the "
                     "tiled kernels)",
                     cp);
  return "";
}

std::string sequence_parallel_problem(int64_t rows, int64_t tokens_per_row, int tp) {
  if (tp <= 1 || (rows * tokens_per_row) % tp == 0) return "";
  return strprintf("parallel.sequence_parallel splits each micro-batch's %lld x %lld tokens over parallel.tp = %d "
                   "ranks: they must divide evenly (change train.micro_batch_size or model.seq_len)",
                   (long long)rows, (long long)tokens_per_row, tp);
}

}  // namespace loom
