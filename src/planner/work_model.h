// What a transformer block costs on one device, from the shapes of its work.
//
// Each product of a block (the engine's own list: fused q/k/v, the two
// attention products, the output projection, the MLP's products, and the
// head) is priced by a GEMM-efficiency model in M, N and K: the device's
// large-GEMM ceiling, times tile and wave quantisation (the output is cut
// into tile_m x tile_n tiles that `units` processors take in waves), times
// a short-reduction penalty K / (K + k_half) and a skinny-output penalty
// min(M,N) / (min(M,N) + mn_half), bounded below by the bytes it moves over
// the memory bandwidth. The memory-bound rest (norms, activations,
// residuals, softmax, dropout, rope) is priced by its bytes over the
// achieved bandwidth. The figures are per device: published for GPU presets
// (configs/clusters), measured on the machine for loom's own runs
// (loom bench calibrate). docs/planner.md lists them.
#pragma once

#include "model/config.h"
#include "planner/cluster.h"

namespace loom::planner {

// A device's rates for one compute precision.
struct DeviceRates {
  double peak = 0;       // FLOP/s of the precision
  double ceiling = 0.5;  // share of peak a large, aligned GEMM reaches
  int units = 0;         // processors tiles are spread over (GPU SMs); 0: no quantisation
  int tile_m = 1, tile_n = 1;
  double k_half = 0, mn_half = 0;
  double tiled_attention = 0;  // share of peak the tiled attention reaches (0: priced as GEMMs)
  double bandwidth = 0;  // achieved bytes/s of streaming kernels
  double gemm_bytes = 2; // bytes per GEMM operand element
};

// `cores`: devices of the cluster one rank spans (CPU ranks with several
// cores); `speedup`: the rate of `p` over fp32 where the cluster names none.
DeviceRates device_rates(const ClusterSpec& c, ComputePrecision p, double cores = 1);

// Share of peak a batch of `batch` products C[m,n] = A[m,k] B[k,n] reaches.
double gemm_efficiency(const DeviceRates& d, double m, double n, double k, double batch = 1);
double gemm_seconds(const DeviceRates& d, double m, double n, double k, double batch = 1);

// One micro-batch's block on one rank.
struct BlockShape {
  ModelConfig model;
  double sequences = 1;   // micro-batch
  int cp = 1, tp = 1;
  bool seq_parallel = false;
  bool dropout = false;   // hidden and attention dropout (Megatron's default; loom has none)
  double act_bytes = 4;   // bytes per activation element in the memory-bound kernels
};

struct PassSeconds {
  double forward = 0;
  double backward_input = 0;   // activation gradients (and the memory-bound backward)
  double backward_weight = 0;  // weight-gradient products (a split backward's W)
  double attention_forward = 0;  // the attention core's forward (what selective recomputation reruns)
  double backward() const { return backward_input + backward_weight; }
};

PassSeconds block_seconds(const BlockShape& b, const DeviceRates& d);
// The output head (V x C product, final norm and cross-entropy) of the last stage.
PassSeconds head_seconds(const BlockShape& b, const DeviceRates& d);

}  // namespace loom::planner
