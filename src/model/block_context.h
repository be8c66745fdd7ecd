// What a block's forward and backward functions are given (model/<family>/
// *_block.h): the backend, the tensor-parallel group, the parameters, the
// shared work space, the micro-batch's shape and where to report finished
// gradients. Blocks are plain functions of these, so recomputation and new
// block types call them without the stage around them.
#pragma once

#include <functional>

#include "kernels/backend.h"
#include "model/config.h"
#include "model/transformer_stage.h"

namespace loom {

// Work space the blocks of a stage share (used within one action); fp32
// unless marked A (the compute type). Families size what they use.
struct BlockWork {
  void* gathered = nullptr;     // A, [N, C]: a norm's output gathered (sequence parallel)
  float* grad_work = nullptr;   // [N, C]: partial sums / gathered gradients (sequence parallel)
  float* dnorm = nullptr;       // [R, C]: a norm's output gradient
  void* dres16 = nullptr;       // A, [R, C]: the residual gradient rounded (16-bit compute)
  void* dres16_full = nullptr;  // A, [N, C]: the same gathered (16-bit, sequence parallel)
  float* dattn_out = nullptr;   // [N, Cl]: attention output's gradient
  void* dqkv = nullptr;         // A, [N, qkv width]: attention's input gradient
  float* datt = nullptr;        // [B, NHl, T, T]: attention's backward scratch
  float* dmlp_out = nullptr;    // [N, Fl]: the MLP activation's output gradient
  void* dmlp_in = nullptr;      // A, [N, Fl or 2 Fl]: the MLP activation's input gradient
};

struct BlockContext {
  CpuBackend& ops;
  const TensorParallel& tp;
  const ModelConfig& cfg;
  const ParamAccess& p;
  const BlockWork& work;
  const std::function<void(int)>& ready;  // reports a finished gradient (may be empty)
  int B, T;
  int N() const { return B * T; }
  int R() const { return int(tp.local_rows(int64_t(B) * T)); }
  void grad_ready(int i) const {
    if (ready) ready(i);
  }
};

}  // namespace loom
