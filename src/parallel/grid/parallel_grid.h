// ParallelGrid: how world ranks map onto (dp, tp, pp, cp) coordinates.
//
// The order string lists the axes innermost first: with "tp-dp-pp" (the
// default) consecutive ranks differ in tp, so a tensor-parallel group sits on
// neighbouring ranks (one node, where bandwidth is high), then data-parallel
// replicas, then pipeline stages outermost. Context parallelism (cp: the
// sequence split over ranks, parallel/cp/) is a fourth axis; an order that
// does not name it has it right after tp ("tp-cp-dp-pp", Megatron-core's
// order: the ring's key/value traffic stays near). A value type: no
// communication.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace loom {

enum class Axis { dp = 0, tp = 1, pp = 2, cp = 3 };

struct GridCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
  int operator[](Axis a) const { return a == Axis::dp ? dp : a == Axis::tp ? tp : a == Axis::pp ? pp : cp; }
  int& operator[](Axis a) { return a == Axis::dp ? dp : a == Axis::tp ? tp : a == Axis::pp ? pp : cp; }
  bool operator==(const GridCoord&) const = default;
};

// The groups parallel features communicate in.
enum class GroupKind {
  tp,         // same (dp, pp, cp): tensor-parallel layers
  data,       // same (tp, pp): gradient reduction, ZeRO shards; the dp x cp ranks holding
              // the same parameters (context-parallel ranks sum their gradients too)
  pp,         // same (dp, tp, cp): pipeline sends and receives
  model,      // same (dp, cp): every rank holding one replica's parameters (tp x pp)
  embedding,  // first and last pipeline stage with the same (dp, tp, cp): tied embeddings
  world,
  cp,         // same (dp, tp, pp): a sequence's ranks (ring attention)
  // Expert parallelism (parallel.ep divides the data group: an expert view
  // of the same ranks, not a new axis). The data group's ranks in its order
  // (dp fastest, then cp) are cut into runs of ep consecutive ones:
  ep,           // one run: the ranks whose experts together make every expert (the token all-to-all)
  expert_data,  // the same place in every run: the ranks holding the same experts (their gradient
                // reduction and ZeRO shards)
};
const char* group_kind_name(GroupKind k);
constexpr std::array<GroupKind, 9> kAllGroupKinds = {
    GroupKind::tp,    GroupKind::data, GroupKind::pp, GroupKind::model,      GroupKind::embedding,
    GroupKind::world, GroupKind::cp,   GroupKind::ep, GroupKind::expert_data};

// Why world ranks cannot be laid out as dp x tp x pp x cp (dp 0: inferred
// as world / (tp x pp x cp)), "" when they can: the world's side of the
// layout rules (config/layout_rules.h gathers them all).
std::string world_problem(int world, int dp, int tp, int pp, int cp = 1);
// Why ep cannot split the data group of dp x cp ranks ("" when it can).
std::string ep_problem(int dp, int cp, int ep);

class ParallelGrid {
 public:
  // Throws UserError (naming parallel.dp / .tp / .pp / .cp / .ep / .order)
  // if a size is < 1, ep does not divide dp x cp, or the order is not a
  // permutation of tp, dp, pp (and cp).
  ParallelGrid(int dp, int tp, int pp, const std::string& order = "tp-dp-pp", int cp = 1, int ep = 1);
  // dp = 0 infers dp = world / (tp * pp * cp); throws UserError if world is
  // not dp * tp * pp * cp.
  static ParallelGrid for_world(int world, int dp, int tp, int pp, const std::string& order = "tp-dp-pp",
                                int cp = 1, int ep = 1);

  int dp() const { return size(Axis::dp); }
  int tp() const { return size(Axis::tp); }
  int pp() const { return size(Axis::pp); }
  int cp() const { return size(Axis::cp); }
  int ep() const { return ep_; }
  // This rank's place in the data group (dp fastest, then cp), in its ep
  // group (the experts it holds: [ep_rank x E / ep, ...)) and in its
  // expert-data group.
  int data_index(const GridCoord& c) const { return c.dp + dp() * c.cp; }
  int ep_rank(int rank) const { return data_index(coord(rank)) % ep_; }
  int size(Axis a) const { return sizes_[int(a)]; }
  int world_size() const { return dp() * tp() * pp() * cp(); }
  const std::string& order() const { return order_; }

  GridCoord coord(int rank) const;
  int rank(const GridCoord& c) const;

  // The world ranks of `rank`'s group of this kind, in group-rank order
  // (ordered by the varying coordinate(s)).
  std::vector<int> group(GroupKind kind, int rank) const;
  // Every group of this kind (each rank in exactly one), ordered by their
  // first member. A middle pipeline stage is alone in its embedding group.
  std::vector<std::vector<int>> groups(GroupKind kind) const;

  // "dp=2 tp=2 pp=1 (order tp-dp-pp, 4 ranks)"; " cp=2" after pp when cp > 1, " ep=2" when ep > 1
  std::string describe() const;

 private:
  std::array<int, 4> sizes_{};  // indexed by Axis
  int ep_ = 1;
  std::array<Axis, 4> inner_to_outer_{};
  std::string order_;
};

}  // namespace loom
