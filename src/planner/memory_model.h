// Memory of one device for a layout: model states by precision and ZeRO
// stage, activations of the micro-batches a pipeline stage holds at once,
// communication buffers and a fixed overhead. Both families: GPT-2 (and the
// GPT-3 shapes) and LLaMA (grouped-query attention, SwiGLU, RMSNorm, no
// biases, an untied output head).
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
// tiled: the attention core keeps a 4-byte log-sum-exp per row and head
// (4 a s b) instead of the 5 a s^2 b of probabilities and mask, whatever r.
double layer_activation_bytes(double s, double b, double h, double a, int t, bool seq_parallel, Recompute r,
                              bool tiled = false);

// The same count for either family: GPT-2 the formula above; LLaMA its
// counterpart, term by term as Korthikanti counts GPT's (2-byte elements, no
// dropout, so no masks and no dropout outputs), with g = n_kv_head / n_head
// and F the MLP width:
//   kept whole on every tp rank: both RMSNorm inputs 4 s b h, both RMSNorm
//     outputs (the q/k/v and gate/up inputs) 4 s b h, both rstd 8 s b (fp32);
//   split over t: q 2 s b h, k and v 4 g s b h (after RoPE), the attention
//     output 2 s b h, the gate and up products 4 s b F, the SwiGLU output
//     2 s b F, the softmax probabilities 2 a s^2 b;
//   no recompute:        8 s b h + 8 s b + ((4 + 4g) s b h + 6 s b F + 2 a s^2 b) / t
//   + sequence parallel: everything / t
//   selective recompute: without the 2 a s^2 b term
//   full recompute:      2 s b h (the layer's input), / t with sequence parallelism
//   tiled attention:     4 a s b in place of the 2 a s^2 b term
// Expert parallelism (ep > 1): an MoE block's experts keep their rows for
// every rank of the ep group (the engine reserves the dropless worst case,
// ep x the pairs), the routed outputs stay ep-free.
double layer_activation_bytes(const ModelConfig& m, double s, double b, int t, bool seq_parallel, Recompute r,
                              bool tiled = false, int ep = 1);

// A model's parameters as tensor and pipeline parallelism place them.
// GPT-2: per layer qkv 3h^2 + 3h, projection h^2 + h, fc 4h^2 + 4h, fc
// projection 4h^2 + h, two layernorms 4h. LLaMA: per layer q/k/v
// (n_head + 2 n_kv_head) hd x h, o_proj h^2, gate/up/down 3 F h, two RMSNorm
// weights 2h; embedding and lm_head V x h each (untied), final norm h.
// With LoRA: the base's (the adapters are counted by trained_parameters).
ParameterCounts parameter_counts(const ModelConfig& m);
// Parameters a rank of `stage` trains (gradients, reduction, optimizer): all
// of its parameters, or with LoRA its share of the adapters (r (in + out) a
// target, tp splitting one factor of each: counted as split).
double trained_parameters(const Workload& w, const Layout& l, int stage);

// Parameters held by one device of pipeline stage `stage` before any ZeRO
// sharding: its layers' share over tp, the token embedding (and GPT-2's
// positions) on the first stage, the final norm and the output head on
// head_stage() (the last; the first under ZB-V): GPT-2's tied head is the
// embedding itself, so that stage holds a copy of it only when pp > 1 (its
// gradient is summed with the embedding's); LLaMA's untied lm_head is a
// separate V x h matrix, there always.
double stage_parameters(const ModelConfig& m, const Layout& l, int stage);
// The same from counts already made (Workload::counts).
double stage_parameters(const ParameterCounts& p, const ModelConfig& m, const Layout& l, int stage);
// Of those, the routed experts' (1 / (tp ep) of each layer's stacks): sharded
// and reduced over the expert-data group rather than the data group.
double stage_expert_parameters(const ParameterCounts& p, const ModelConfig& m, const Layout& l, int stage);
// The stage holding the final norm and the head: the last virtual stage's
// (pp - 1; stage 0 under ZB-V's V).
int head_stage(const Layout& l);

MemoryBreakdown stage_memory(const Workload& w, const Layout& l, const ClusterSpec& c, int stage);
// The stage that needs the most memory (the first device to run out).
MemoryBreakdown peak_memory(const Workload& w, const Layout& l, const ClusterSpec& c);

}  // namespace loom::planner
