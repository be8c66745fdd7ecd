#include "planner/layout.h"

#include "core/check.h"

namespace loom::planner {

const char* to_string(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP16})
    if (s == to_string(p)) return p;
  throw UserError(strprintf("unknown precision '%s' (fp32, bf16, fp16)", s.c_str()));
}

std::string Layout::describe() const {
  return strprintf("dp %d tp %d pp %d v %d | micro-batch %d x %d | zero %d | %s | recompute %s%s", dp, tp, pp, v,
                   micro_batch, micro_batches, zero, to_string(precision), to_string(recompute),
                   seq_parallel ? " | seq-parallel" : "");
}

bool tp_divides(const ModelConfig& m, int tp) {
  return m.n_head % tp == 0 && m.kv_heads() % tp == 0 && m.ffn() % tp == 0;
}

int layers_on_stage(int n_layer, int pp, int stage) {
  return n_layer / pp + (stage < n_layer % pp ? 1 : 0);
}

}  // namespace loom::planner
