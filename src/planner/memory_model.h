// Memory of one device for a layout: model states by precision and ZeRO
// stage, activations of the micro-batches a pipeline stage holds at once,
// communication buffers and a fixed overhead.
//
// Model states follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1):
// mixed precision keeps 2 B parameters + 2 B gradients + 12 B fp32 master
// weights and Adam moments = 16 B per parameter; fp32 training 4 + 4 + 8.
// ZeRO-1 divides the optimizer share by dp, ZeRO-2 also the gradients,
// ZeRO-3 also the parameters.
#pragma once

#include "planner/cluster.h"
#include "planner/layout.h"

namespace loom::planner {

struct MemoryBreakdown {
  int stage = 0;  // pipeline stage these figures are for
  double params = 0, grads = 0, optimizer = 0, activations = 0, comm_buffers = 0, overhead = 0;
  double total() const { return params + grads + optimizer + activations + comm_buffers + overhead; }
};

// Activation bytes one transformer layer keeps for one micro-batch of b
// sequences of s tokens, width h, a heads, over t tensor-parallel ranks, with
// 16-bit activations (Korthikanti et al. 2022, "Reducing Activation
// Recomputation in Large Transformer Models", Table 2):
//   no recompute:        s b h (10 + 24/t + 5 a s / (h t))   (34 + 5as/h at t = 1)
//   + sequence parallel: s b h (34 + 5 a s / h) / t
//   selective recompute: s b h (10 + 24/t), or s b h 34/t with sequence parallelism
//   full recompute:      2 s b h (only the layer's input), / t with sequence parallelism
double layer_activation_bytes(double s, double b, double h, double a, int t, bool seq_parallel, Recompute r);

// Parameters held by one device of pipeline stage `stage` before any ZeRO
// sharding (its layers' share over tp, plus the embedding on the first stage
// and the tied output embedding and final layernorm on the last).
double stage_parameters(const GPTConfig& m, const Layout& l, int stage);

MemoryBreakdown stage_memory(const Workload& w, const Layout& l, const ClusterSpec& c, int stage);
// The stage that needs the most memory (the first device to run out).
MemoryBreakdown peak_memory(const Workload& w, const Layout& l, const ClusterSpec& c);

}  // namespace loom::planner
