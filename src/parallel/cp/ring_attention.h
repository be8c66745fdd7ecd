// Ring attention (Liu et al. 2023; Megatron-core's context parallelism): the
// tiled attention over a sequence split across the cp group
// (sequence_split.h). Each rank keeps its queries and passes key/value
// blocks around the ring, attending its queries to each block as it comes
// by and merging the spans (kernels/cpu/attention_tiled.h). Transfers are
// non-blocking and overlap the compute: while a block is attended, the next
// one arrives. Backward passes the blocks again, and with them the blocks'
// key/value gradients, each rank adding its share; after a full turn each
// block's gradient is back at its owner. Blocks travel in fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"
#include "kernels/backend.h"
#include "parallel/cp/sequence_split.h"

namespace loom {

class RingAttention {
 public:
  // piece: the most floats one MPI message carries (counts are ints); a
  // block travels in pieces of at most this many.
  RingAttention(Backend& ops, Communicator& cp, size_t piece = size_t(1) << 28)
      : ops_(ops), cp_(cp), split_{cp.size(), cp.rank()}, piece_(piece) {}
  const SequenceSplit& split() const { return split_; }

  // fp32 work space, in floats, for B local sequences of T rows (2 chunks)
  // on a ring of cp ranks; lowp: 16-bit storage (fp32 copies of q/k/v,
  // their gradient and the output).
  static size_t work_floats(int B, int T, int C, int NH, int NKV, bool lowp, int cp);

  // As Attention::forward / backward on the local rows; tiles: the tiled
  // kernels' per-thread work, work: work_floats(B, T, ...); doc[B,T]: the
  // local rows' document starts (global positions; packed rows) or null.
  template <class A>
  void forward(A* out, float* lse, const A* qkv, float* tiles, float* work, int B, int T, int C, int NH, int NKV,
               const int32_t* doc = nullptr);
  template <class A>
  void backward(A* dqkv, const float* dout, const A* qkv, const A* out, const float* lse, float* tiles, float* work,
                int B, int T, int C, int NH, int NKV, const int32_t* doc = nullptr);

 private:
  Backend& ops_;
  Communicator& cp_;
  SequenceSplit split_;
  size_t piece_;
};

}  // namespace loom
