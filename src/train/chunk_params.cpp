#include "train/chunk_params.h"

#include <algorithm>

namespace loom {

ChunkParams::ChunkParams(const std::vector<std::unique_ptr<ParamGroup>>& groups, const std::vector<GroupPlace>& places)
    : groups_(groups), places_(places), now_(groups.size()), then_(groups.size()) {
  for (const GroupPlace& p : places) {
    const ParamGroup& g = *groups[size_t(p.group)];
    params_.push_back(g.param_at(p.member));
    weights_.push_back(g.weight_at(p.member));
    grads_.push_back(g.grad_at(p.member));
  }
  for (const auto& g : groups) gathers_ = gathers_ || g->gather();
}

void ChunkParams::split(const std::vector<int>& tensors, std::vector<std::vector<int>>& out) const {
  for (auto& o : out) o.clear();
  for (int t : tensors) {
    const GroupPlace& p = places_[size_t(t)];
    out[size_t(p.group)].push_back(p.member);
  }
}

void ChunkParams::acquire(const std::vector<int>& tensors, const std::vector<int>& then) {
  if (!gathers_) return;
  split(tensors, now_), split(then, then_);
  size_t gathered = 0;
  for (size_t g = 0; g < groups_.size(); g++) {
    ParamGather* gather = groups_[g]->gather();
    if (!gather) continue;
    if (!now_[g].empty() || !then_[g].empty()) gather->acquire(now_[g], then_[g]);
    gathered += gather->gathered_bytes();
  }
  peak_ = std::max(peak_, gathered);
}

void ChunkParams::release(const std::vector<int>& tensors) {
  if (!gathers_) return;
  split(tensors, now_);
  for (size_t g = 0; g < groups_.size(); g++)
    if (ParamGather* gather = groups_[g]->gather(); gather && !now_[g].empty()) gather->release(now_[g]);
}

}  // namespace loom
