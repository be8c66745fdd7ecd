#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/check.h"
#include "parallel/grid/parallel_grid.h"

namespace {

const char* kOrders[] = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};

TEST(ParallelGrid, EveryFactorizationAndOrderIsConsistent) {
  for (int world : {1, 2, 4, 8}) {
    for (int tp = 1; tp <= world; tp++) {
      for (int pp = 1; pp <= world; pp++) {
        if (world % (tp * pp)) continue;
        for (const char* order : kOrders) {
          auto g = loom::ParallelGrid::for_world(world, 0, tp, pp, order);
          SCOPED_TRACE(g.describe());
          ASSERT_EQ(g.dp() * g.tp() * g.pp(), world);
          std::set<std::tuple<int, int, int>> coords;
          for (int r = 0; r < world; r++) {
            auto c = g.coord(r);
            EXPECT_EQ(g.rank(c), r);
            coords.insert({c.dp, c.tp, c.pp});
          }
          EXPECT_EQ(int(coords.size()), world);  // a bijection
          for (loom::GroupKind kind : loom::kAllGroupKinds) {
            auto groups = g.groups(kind);
            std::vector<int> seen(size_t(world), 0);
            for (const auto& grp : groups) {
              for (int m : grp) {
                seen[size_t(m)]++;
                EXPECT_EQ(g.group(kind, m), grp);  // every member sees the same group
              }
            }
            for (int r = 0; r < world; r++) EXPECT_EQ(seen[size_t(r)], 1) << "rank " << r << " in group kind " << int(kind);
            size_t want = kind == loom::GroupKind::tp      ? size_t(tp)
                          : kind == loom::GroupKind::data    ? size_t(g.dp())
                          : kind == loom::GroupKind::pp    ? size_t(pp)
                          : kind == loom::GroupKind::model ? size_t(tp * pp)
                          : kind == loom::GroupKind::world ? size_t(world)
                                                           : 0;
            if (want) {
              for (const auto& grp : groups) EXPECT_EQ(grp.size(), want);
            }
          }
          // Members of a group agree on the coordinates the group does not vary.
          for (int r = 0; r < world; r++) {
            auto c = g.coord(r);
            for (int m : g.group(loom::GroupKind::tp, r)) EXPECT_TRUE(g.coord(m).dp == c.dp && g.coord(m).pp == c.pp);
            for (int m : g.group(loom::GroupKind::data, r)) EXPECT_TRUE(g.coord(m).tp == c.tp && g.coord(m).pp == c.pp);
            for (int m : g.group(loom::GroupKind::pp, r)) EXPECT_TRUE(g.coord(m).tp == c.tp && g.coord(m).dp == c.dp);
            for (int m : g.group(loom::GroupKind::model, r)) EXPECT_EQ(g.coord(m).dp, c.dp);
            auto emb = g.group(loom::GroupKind::embedding, r);
            if (pp > 1 && (c.pp == 0 || c.pp == pp - 1)) {
              ASSERT_EQ(emb.size(), 2u);
              EXPECT_EQ(g.coord(emb[0]).pp, 0);
              EXPECT_EQ(g.coord(emb[1]).pp, pp - 1);
            } else {
              EXPECT_EQ(emb, std::vector<int>{r});
            }
          }
        }
      }
    }
  }
}

TEST(ParallelGrid, TensorParallelInnermostKeepsTpRanksAdjacent) {
  auto g = loom::ParallelGrid::for_world(8, 0, 2, 2, "tp-dp-pp");
  EXPECT_EQ(g.group(loom::GroupKind::tp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.group(loom::GroupKind::data, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(g.group(loom::GroupKind::pp, 0), (std::vector<int>{0, 4}));
}

std::string error_of(int world, int dp, int tp, int pp, const char* order, int cp = 1) {
  try {
    loom::ParallelGrid::for_world(world, dp, tp, pp, order, cp);
  } catch (const loom::UserError& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelGrid, BadLayoutsAreNamed) {
  EXPECT_NE(error_of(6, 0, 4, 1, "tp-dp-pp").find("world size 6"), std::string::npos);
  EXPECT_NE(error_of(8, 2, 2, 1, "tp-dp-pp").find("parallel.dp (2) x parallel.tp (2)"), std::string::npos);
  EXPECT_NE(error_of(4, 0, 0, 1, "tp-dp-pp").find("parallel.tp"), std::string::npos);
  EXPECT_NE(error_of(4, 0, 1, 0, "tp-dp-pp").find("parallel.pp"), std::string::npos);
  EXPECT_NE(error_of(4, 0, 1, 1, "tp-dp-dp").find("parallel.order"), std::string::npos);
  EXPECT_NE(error_of(4, 0, 1, 1, "tp-dp").find("parallel.order"), std::string::npos);
  EXPECT_NE(error_of(4, 0, 1, 1, "tp-dp-pp-xx").find("parallel.order"), std::string::npos);
}

// Context parallelism: a fourth axis, right after tp unless the order
// places it; the dp group is the dp x cp ranks holding one replica.
TEST(ParallelGrid, ContextParallelAxis) {
  const loom::ParallelGrid g = loom::ParallelGrid::for_world(16, 0, 2, 2, "tp-dp-pp", 2);
  EXPECT_EQ(g.dp(), 2);
  EXPECT_EQ(g.cp(), 2);
  for (int r = 0; r < 16; r++) EXPECT_EQ(g.rank(g.coord(r)), r);
  EXPECT_EQ(g.coord(2).cp, 1);  // tp innermost, then cp
  EXPECT_EQ(g.coord(2).tp, 0);
  EXPECT_EQ(g.group(loom::GroupKind::cp, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(g.group(loom::GroupKind::data, 0), (std::vector<int>{0, 4, 2, 6}));  // dp varies fastest, then cp
  EXPECT_EQ(g.group(loom::GroupKind::tp, 2), (std::vector<int>{2, 3}));
  for (loom::GroupKind k : loom::kAllGroupKinds)
    for (const auto& members : g.groups(k))
      for (int m : members) EXPECT_EQ(g.group(k, m), members) << loom::group_kind_name(k);
  EXPECT_EQ(loom::ParallelGrid(1, 1, 1, "cp-tp-dp-pp", 2).coord(1).cp, 1);
  EXPECT_NE(error_of(6, 0, 1, 1, "tp-dp-pp", 4).find("parallel.cp (4)"), std::string::npos);
  EXPECT_NE(error_of(8, 2, 1, 1, "tp-dp-pp", 2).find("parallel.cp (2)"), std::string::npos);
  EXPECT_NE(error_of(4, 0, 1, 1, "tp-cp-dp-pp-cp", 2).find("parallel.order"), std::string::npos);
}

}  // namespace
