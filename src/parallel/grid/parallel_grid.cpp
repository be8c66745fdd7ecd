#include "parallel/grid/parallel_grid.h"

#include <algorithm>
#include <set>

#include "core/check.h"

namespace loom {

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::tp: return "tp";
    case GroupKind::data: return "dp";
    case GroupKind::pp: return "pp";
    case GroupKind::model: return "model";
    case GroupKind::embedding: return "embedding";
    case GroupKind::world: return "world";
    case GroupKind::cp: return "cp";
    case GroupKind::ep: return "ep";
    case GroupKind::expert_data: return "expert_dp";
  }
  return "?";
}

static const char* kOrderRule = "parallel.order '%s' must be a permutation of tp, dp, pp and optionally cp "
                                "(like \"tp-dp-pp\" or \"tp-cp-dp-pp\")";

static Axis parse_axis(const std::string& s, const std::string& order) {
  if (s == "dp") return Axis::dp;
  if (s == "tp") return Axis::tp;
  if (s == "pp") return Axis::pp;
  if (s == "cp") return Axis::cp;
  throw UserError(strprintf(kOrderRule, order.c_str()));
}

ParallelGrid::ParallelGrid(int dp, int tp, int pp, const std::string& order, int cp, int ep)
    : ep_(ep), order_(order) {
  LOOM_USER_CHECK(dp >= 1, "parallel.dp must be >= 1 (got %d)", dp);
  LOOM_USER_CHECK(tp >= 1, "parallel.tp must be >= 1 (got %d)", tp);
  LOOM_USER_CHECK(pp >= 1, "parallel.pp must be >= 1 (got %d)", pp);
  LOOM_USER_CHECK(cp >= 1, "parallel.cp must be >= 1 (got %d)", cp);
  const std::string ep_rule = ep_problem(dp, cp, ep);
  LOOM_USER_CHECK(ep_rule.empty(), "%s", ep_rule.c_str());
  sizes_ = {dp, tp, pp, cp};
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dash; (dash = order.find('-', start)) != std::string::npos; start = dash + 1)
    parts.push_back(order.substr(start, dash - start));
  parts.push_back(order.substr(start));
  std::vector<Axis> axes;
  for (const std::string& p : parts) axes.push_back(parse_axis(p, order));
  if (std::find(axes.begin(), axes.end(), Axis::cp) == axes.end()) {  // cp right after tp
    auto tp_at = std::find(axes.begin(), axes.end(), Axis::tp);
    axes.insert(tp_at == axes.end() ? axes.end() : tp_at + 1, Axis::cp);
  }
  const std::set<Axis> seen(axes.begin(), axes.end());
  LOOM_USER_CHECK(axes.size() == 4 && seen.size() == 4, kOrderRule, order.c_str());
  std::copy(axes.begin(), axes.end(), inner_to_outer_.begin());
}

std::string world_problem(int world, int dp, int tp, int pp, int cp) {
  if (tp < 1) return strprintf("parallel.tp must be >= 1 (got %d)", tp);
  if (pp < 1) return strprintf("parallel.pp must be >= 1 (got %d)", pp);
  if (cp < 1) return strprintf("parallel.cp must be >= 1 (got %d)", cp);
  if (dp < 0) return strprintf("parallel.dp must be >= 1, or 0 to infer it (got %d)", dp);
  if (dp == 0 && world % (tp * pp * cp) != 0)
    return cp > 1 ? strprintf("the world size %d is not a multiple of parallel.tp (%d) x parallel.pp (%d) x "
                              "parallel.cp (%d)",
                              world, tp, pp, cp)
                  : strprintf("the world size %d is not a multiple of parallel.tp (%d) x parallel.pp (%d)", world,
                              tp, pp);
  if (dp > 0 && dp * tp * pp * cp != world)
    return cp > 1 ? strprintf("the world size %d is not parallel.dp (%d) x parallel.tp (%d) x parallel.pp (%d) x "
                              "parallel.cp (%d) = %d",
                              world, dp, tp, pp, cp, dp * tp * pp * cp)
                  : strprintf("the world size %d is not parallel.dp (%d) x parallel.tp (%d) x parallel.pp (%d) = %d",
                              world, dp, tp, pp, dp * tp * pp);
  return "";
}

std::string ep_problem(int dp, int cp, int ep) {
  if (ep < 1) return strprintf("parallel.ep must be >= 1 (got %d)", ep);
  if ((dp * cp) % ep != 0)
    return strprintf("parallel.ep (%d) must divide the data group: parallel.dp (%d) x parallel.cp (%d) = %d ranks "
                     "hold the same dense weights, and ep of them split the experts",
                     ep, dp, cp, dp * cp);
  return "";
}

ParallelGrid ParallelGrid::for_world(int world, int dp, int tp, int pp, const std::string& order, int cp, int ep) {
  const std::string problem = world_problem(world, dp, tp, pp, cp);
  LOOM_USER_CHECK(problem.empty(), "%s", problem.c_str());
  if (dp == 0) dp = world / (tp * pp * cp);
  return ParallelGrid(dp, tp, pp, order, cp, ep);
}

GridCoord ParallelGrid::coord(int rank) const {
  LOOM_CHECK(rank >= 0 && rank < world_size(), "rank %d outside a grid of %d", rank, world_size());
  GridCoord c;
  for (Axis a : inner_to_outer_) {
    c[a] = rank % size(a);
    rank /= size(a);
  }
  return c;
}

int ParallelGrid::rank(const GridCoord& c) const {
  int r = 0;
  for (int i = 3; i >= 0; i--) {
    Axis a = inner_to_outer_[i];
    LOOM_CHECK(c[a] >= 0 && c[a] < size(a), "coordinate out of range");
    r = r * size(a) + c[a];
  }
  return r;
}

std::vector<int> ParallelGrid::group(GroupKind kind, int rank) const {
  GridCoord me = coord(rank);
  std::vector<int> out;
  auto along = [&](std::vector<Axis> free_axes) {
    // Every rank that matches `me` on the other axes; free axes vary, the
    // first one listed fastest.
    GridCoord c = me;
    int total = 1;
    for (Axis a : free_axes) total *= size(a);
    for (int i = 0; i < total; i++) {
      int rest = i;
      for (Axis a : free_axes) {
        int v = rest % size(a);
        rest /= size(a);
        c[a] = v;
      }
      out.push_back(this->rank(c));
    }
  };
  switch (kind) {
    case GroupKind::tp: along({Axis::tp}); break;
    case GroupKind::data: along({Axis::dp, Axis::cp}); break;
    case GroupKind::pp: along({Axis::pp}); break;
    case GroupKind::cp: along({Axis::cp}); break;
    case GroupKind::model: along({Axis::tp, Axis::pp}); break;
    case GroupKind::world: along({Axis::tp, Axis::cp, Axis::dp, Axis::pp}); break;
    case GroupKind::ep:
    case GroupKind::expert_data: {
      // The data group's members whose index shares this rank's run (ep) or
      // its place in a run (expert_data), in data-group order.
      std::vector<int> data = group(GroupKind::data, rank);
      const int mine = data_index(me);
      for (int i = 0; i < int(data.size()); i++)
        if (kind == GroupKind::ep ? i / ep_ == mine / ep_ : i % ep_ == mine % ep_) out.push_back(data[size_t(i)]);
      break;
    }
    case GroupKind::embedding: {
      if (pp() > 1 && (me.pp == 0 || me.pp == pp() - 1)) {
        out.push_back(this->rank(GridCoord{me.dp, me.tp, 0, me.cp}));
        out.push_back(this->rank(GridCoord{me.dp, me.tp, pp() - 1, me.cp}));
      } else {
        out.push_back(rank);
      }
      break;
    }
  }
  return out;
}

std::vector<std::vector<int>> ParallelGrid::groups(GroupKind kind) const {
  std::vector<std::vector<int>> all;
  std::vector<bool> placed(size_t(world_size()), false);
  for (int r = 0; r < world_size(); r++) {
    if (placed[size_t(r)]) continue;
    auto g = group(kind, r);
    for (int m : g) placed[size_t(m)] = true;
    all.push_back(std::move(g));
  }
  return all;
}

std::string ParallelGrid::describe() const {
  return strprintf("dp=%d tp=%d pp=%d%s%s (order %s, %d ranks)", dp(), tp(), pp(),
                   cp() > 1 ? strprintf(" cp=%d", cp()).c_str() : "", ep_ > 1 ? strprintf(" ep=%d", ep_).c_str() : "",
                   order_.c_str(), world_size());
}

}  // namespace loom
