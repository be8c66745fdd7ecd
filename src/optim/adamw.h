// AdamW over a flat parameter buffer, or over the part of it a rank owns
// (a ZeRO shard: ranges that may cut through tensors). fp32 moments exist for
// the owned elements only; decoupled weight decay applies per element
// according to the tensor it belongs to (2-D matrices only).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend_fwd.h"
#include "core/arena.h"
#include "core/dtype.h"
#include "core/flat_layout.h"

namespace loom {

// A 16-bit copy of the parameters laid out as the flat buffer (mixed
// precision's compute weights): data == nullptr means none.
struct WeightCopy {
  void* data = nullptr;
  DType dtype = DType::bf16;  // bf16 or f16
};

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW {
 public:
  // Owns the whole buffer; its kernels and moments are the backend's.
  AdamW(Backend& ops, const FlatLayout& layout, const AdamWConfig& cfg);
  // Owns the elements of `owned` (sorted, disjoint ranges of the buffer).
  AdamW(Backend& ops, const FlatLayout& layout, const std::vector<FlatRange>& owned, const AdamWConfig& cfg);

  // One update with learning rate lr. params: the whole flat buffer (only
  // owned elements change); grads: the owned elements' gradients packed in
  // the order of the owned ranges (owning the whole buffer, that is the flat
  // gradient buffer itself). grad_scale multiplies every gradient first
  // (global-norm clipping).
  // `copy`, if given, receives the updated owned parameters rounded to its
  // dtype in the same pass.
  // packed_params: params holds the owned elements only, packed as the
  // gradients (sharded master weights); `copy` then is not written.
  void step(float* params, const float* grads, float lr, float grad_scale, const WeightCopy& copy = {},
            bool packed_params = false);
  // Sum of squares of the owned gradients (packed as for step), padding
  // excluded, each tensor's divided by its copies (FlatTensor::copies).
  double grad_sum_of_squares(const float* grads) const;

  int steps_taken() const { return t_; }
  // The moments of the owned elements, packed as the gradients are (for
  // checkpoints), and the step count the bias correction uses.
  float* first_moment() { return m_.at<float>(0); }
  float* second_moment() { return v_.at<float>(0); }
  void set_steps_taken(int t) { t_ = t; }
  size_t state_bytes() const { return m_.size() + v_.size(); }

 private:
  Backend& ops_;
  std::vector<FlatPiece> pieces_;
  std::vector<bool> decay_;     // per piece
  std::vector<double> weight_;  // per piece: 1 / copies of its tensor
  AdamWConfig cfg_;
  Arena m_, v_;
  int t_ = 0;
};

}  // namespace loom
