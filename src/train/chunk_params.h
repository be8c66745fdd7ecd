// ChunkParams: one model chunk's view of the stage's parameter groups (a
// ParamSource): every tensor's address in the group holding it (values,
// 16-bit copy, gradient: nullptr when frozen), and under ZeRO-3 the gathers
// of the groups its tensors are in, called in the model's fixed order.
#pragma once

#include <memory>
#include <vector>

#include "model/stage_module.h"
#include "train/param_group.h"

namespace loom {

// Where a chunk's tensor lives: its group and member index there.
struct GroupPlace {
  int group = 0, member = 0;
};

class ChunkParams : public ParamSource {
 public:
  // places: per tensor of the chunk's layout. Both must outlive this.
  ChunkParams(const std::vector<std::unique_ptr<ParamGroup>>& groups, const std::vector<GroupPlace>& places);

  void acquire(const std::vector<int>& tensors, const std::vector<int>& then) override;
  void release(const std::vector<int>& tensors) override;
  const std::vector<float*>& tensor_params() const override { return params_; }
  const std::vector<void*>& tensor_weights() const override { return weights_; }
  const std::vector<float*>* tensor_grads() const override { return &grads_; }
  // The most bytes gathered at once over every group, seen at this chunk's acquires.
  size_t peak_gathered() const { return peak_; }

 private:
  // The chunk's tensors by group, as the groups' member indices.
  void split(const std::vector<int>& tensors, std::vector<std::vector<int>>& out) const;

  const std::vector<std::unique_ptr<ParamGroup>>& groups_;
  const std::vector<GroupPlace>& places_;
  bool gathers_ = false;
  size_t peak_ = 0;
  std::vector<float*> params_;
  std::vector<void*> weights_;
  std::vector<float*> grads_;
  std::vector<std::vector<int>> now_, then_;  // reused: a step allocates nothing here once warm
};

}  // namespace loom
