#include "train/grad_sync.h"

#include <algorithm>
#include <cmath>

#include "comm/rank_sum.h"
#include "core/check.h"
#include "precision/found_inf.h"
#include "kernels/backend.h"

namespace loom {

void sum_tied_copies(const std::vector<std::unique_ptr<StageModule>>& chunks,
                     const std::vector<std::vector<GroupPlace>>& places, ParamGroups& groups,
                     Communicator& embedding) {
  std::vector<std::pair<size_t, int>> tied;  // (chunk, tensor)
  for (size_t c = 0; c < chunks.size(); c++)
    for (int i : chunks[c]->layout().tied_across_stages()) tied.push_back({c, i});
  auto group_of = [&](size_t c, int i) -> ParamGroup& { return *groups[size_t(places[c][size_t(i)].group)]; };
  if (tied.empty() || group_of(tied[0].first, tied[0].second).frozen()) return;
  const bool both_here = tied.size() == 2 && tied[0].first != tied[1].first;
  if (both_here) {
    auto [ca, ia] = tied[0];
    auto [cb, ib] = tied[1];
    float *a = chunks[ca]->grad(ia), *b = chunks[cb]->grad(ib);
    const int64_t n = chunks[ca]->layout().params[size_t(ia)].numel;
    LOOM_CHECK(n == chunks[cb]->layout().params[size_t(ib)].numel, "tied copies of different sizes");
    for (int64_t k = 0; k < n; k++) a[k] = b[k] = a[k] + b[k];  // what a two-rank sum gives
  }
  for (auto [c, i] : tied) {
    StageModule& chunk = *chunks[c];
    if (!both_here)
      embedding.all_reduce(chunk.grad(i), size_t(chunk.layout().params[size_t(i)].numel), DType::f32,
                           ReduceOp::Sum);
    group_of(c, i).on_grad_ready(places[c][size_t(i)].member);
  }
}

void sum_sequence_partial(ParamGroups& groups, const std::vector<ParamLayout>& layouts,
                          const std::vector<ModelShard>& shards, Communicator& tp) {
  for (auto& g : groups) {
    if (g->frozen()) continue;
    std::vector<int> partial;  // members, in order
    for (size_t j = 0; j < g->members().size(); j++) {
      const ParamGroup::Member& m = g->members()[j];
      const ModelShard& shard = shards[size_t(m.chunk)];
      const ParamSpec& p = layouts[size_t(m.chunk)].params[size_t(m.tensor)];
      if ((shard.sequence_parallel && p.sequence_partial) || (shard.tp_size > 1 && p.tp_partial))
        partial.push_back(int(j));
    }
    if (partial.empty()) continue;
    std::vector<FlatPiece> pieces;
    for (const FlatPiece& p : pieces_of(g->flat(), g->owned()))
      if (std::binary_search(partial.begin(), partial.end(), p.tensor)) pieces.push_back(p);
    std::vector<float> packed;
    float* reduced = g->reduced();
    for (const FlatPiece& p : pieces) packed.insert(packed.end(), reduced + p.packed, reduced + p.packed + p.numel);
    tp.all_reduce(packed.data(), packed.size(), DType::f32, ReduceOp::Sum);
    size_t at = 0;
    for (const FlatPiece& p : pieces) {
      std::copy(packed.begin() + at, packed.begin() + at + p.numel, reduced + p.packed);
      at += size_t(p.numel);
    }
  }
}

bool unscale_and_find_inf(Backend& ops, ParamGroups& groups, float inv_scale, bool inject, Communicator& world) {
  bool local = false;
  for (auto& g : groups) {
    float* reduced = g->reduced();
    const int64_t held = g->held();
    if (!reduced) continue;
    if (inject && held > 0) reduced[0] = INFINITY, inject = false;
    local = ops.unscale_and_check(reduced, size_t(held), inv_scale) || local;
  }
  return any_rank_found_inf(world, local);
}

double global_grad_norm(ParamGroups& groups, Communicator& model, Communicator& ep) {
  double dense = 0, experts = 0;
  for (auto& g : groups) (g->spec().ranks == GroupKind::expert_data ? experts : dense) += g->grad_sum_of_squares();
  // The ep group's ranks hold different experts: their squares add up.
  if (ep.size() > 1) experts = sum_over_ranks(ep, experts);
  return std::sqrt(sum_over_ranks(model, dense + experts));
}

}  // namespace loom
