// ParallelGrid: how world ranks map onto (dp, tp, pp) coordinates.
//
// The order string lists the axes innermost first: with "tp-dp-pp" (the
// default) consecutive ranks differ in tp, so a tensor-parallel group sits on
// neighbouring ranks (one node, where bandwidth is high), then data-parallel
// replicas, then pipeline stages outermost. A value type: no communication.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace loom {

enum class Axis { dp = 0, tp = 1, pp = 2 };

struct GridCoord {
  int dp = 0, tp = 0, pp = 0;
  int operator[](Axis a) const { return a == Axis::dp ? dp : a == Axis::tp ? tp : pp; }
  bool operator==(const GridCoord&) const = default;
};

// The groups parallel features communicate in.
enum class GroupKind {
  tp,         // same (dp, pp): tensor-parallel layers
  dp,         // same (tp, pp): gradient reduction, ZeRO shards
  pp,         // same (dp, tp): pipeline sends and receives
  model,      // same dp: every rank holding one replica's parameters (tp x pp)
  embedding,  // first and last pipeline stage with the same (dp, tp): tied embeddings
  world,
};
const char* group_kind_name(GroupKind k);
constexpr std::array<GroupKind, 6> kAllGroupKinds = {GroupKind::tp,    GroupKind::dp,        GroupKind::pp,
                                                     GroupKind::model, GroupKind::embedding, GroupKind::world};

class ParallelGrid {
 public:
  // Throws UserError (naming parallel.dp / .tp / .pp / .order) if a size is
  // < 1 or the order is not a permutation of tp, dp, pp.
  ParallelGrid(int dp, int tp, int pp, const std::string& order = "tp-dp-pp");
  // dp = 0 infers dp = world / (tp * pp); throws UserError if world is not
  // dp * tp * pp.
  static ParallelGrid for_world(int world, int dp, int tp, int pp, const std::string& order = "tp-dp-pp");

  int dp() const { return size(Axis::dp); }
  int tp() const { return size(Axis::tp); }
  int pp() const { return size(Axis::pp); }
  int size(Axis a) const { return sizes_[int(a)]; }
  int world_size() const { return dp() * tp() * pp(); }
  const std::string& order() const { return order_; }

  GridCoord coord(int rank) const;
  int rank(const GridCoord& c) const;

  // The world ranks of `rank`'s group of this kind, in group-rank order
  // (ordered by the varying coordinate(s)).
  std::vector<int> group(GroupKind kind, int rank) const;
  // Every group of this kind (each rank in exactly one), ordered by their
  // first member. A middle pipeline stage is alone in its embedding group.
  std::vector<std::vector<int>> groups(GroupKind kind) const;

  // "dp=2 tp=2 pp=1 (order tp-dp-pp, 4 ranks)"
  std::string describe() const;

 private:
  std::array<int, 3> sizes_{};  // indexed by Axis
  std::array<Axis, 3> inner_to_outer_{};
  std::string order_;
};

}  // namespace loom
