// Which node each rank runs on, and where the grid's chatty groups fall
// (issue 22): tensor-parallel groups inside a node under the default order,
// across nodes (a warning naming them) when the order puts dp innermost.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "parallel/grid/node_map.h"

namespace loom {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(NodeMap, NumbersNodesByTheirFirstRank) {
  const NodeMap m = NodeMap::from_keys({4, 4, 0, 0, 4}, {"b", "b", "a", "a", "b"});
  EXPECT_EQ(m.nodes(), 2);
  EXPECT_EQ(m.node_of_rank, (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(m.names, (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(m.max_ranks_per_node(), 3);
  EXPECT_EQ(m.describe(), "2 nodes (b: ranks 0-1,4, a: ranks 2-3)");
  EXPECT_EQ(NodeMap::single(3, "h").describe(), "1 node (h: ranks 0-2)");
}

TEST(NodeMap, TensorParallelGroupsStayInsideANodeUnderTheDefaultOrder) {
  // 2 nodes x 4 ranks; dp 2 x tp 4.
  const NodeMap m = NodeMap::from_keys({0, 0, 0, 0, 4, 4, 4, 4}, {"n0", "n0", "n0", "n0", "n1", "n1", "n1", "n1"});
  const ParallelGrid inner(2, 4, 1, "tp-dp-pp");
  EXPECT_TRUE(m.groups_across_nodes(inner, GroupKind::tp).empty());
  EXPECT_EQ(m.groups_across_nodes(inner, GroupKind::data).size(), 4u);  // replicas are one per node
  const std::vector<std::string> ok = m.placement_lines(inner);
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_TRUE(contains(ok[0], "2 nodes (n0: ranks 0-3, n1: ranks 4-7)")) << ok[0];
  EXPECT_TRUE(contains(ok[1], "tensor-parallel groups: all 2 inside one node")) << ok[1];

  const ParallelGrid outer(2, 4, 1, "dp-tp-pp");  // tp strides over the nodes
  EXPECT_EQ(m.groups_across_nodes(outer, GroupKind::tp).size(), 2u);
  const std::vector<std::string> bad = m.placement_lines(outer);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_TRUE(contains(bad[1], "warning: 2 of 2 tensor-parallel groups span nodes")) << bad[1];
  EXPECT_TRUE(contains(bad[1], "ranks 0,2,4,6 on n0, n1")) << bad[1];
  EXPECT_TRUE(contains(bad[1], "dp-tp-pp")) << bad[1];
}

TEST(NodeMap, ContextParallelRingsAreReportedToo) {
  const NodeMap m = NodeMap::from_keys({0, 0, 2, 2}, {"n0", "n0", "n1", "n1"});
  const ParallelGrid g(2, 1, 1, "tp-dp-pp", 2);  // cp right after tp: rings inside a node
  const std::vector<std::string> lines = m.placement_lines(g);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(contains(lines[1], "context-parallel groups: all 2 inside one node")) << lines[1];
  const ParallelGrid across(2, 1, 1, "dp-cp-tp-pp", 2);
  EXPECT_TRUE(contains(m.placement_lines(across)[1], "warning: 2 of 2 context-parallel groups span nodes"));
}

// Expert parallelism: ep groups are runs of the data group's ranks; on 2
// nodes of 2, dp 4 with ep 2 keeps each inside a node, ep 4 spans both.
TEST(NodeMap, ExpertParallelGroupsAreReportedToo) {
  const NodeMap m = NodeMap::from_keys({0, 0, 2, 2}, {"n0", "n0", "n1", "n1"});
  const ParallelGrid inside(4, 1, 1, "tp-dp-pp", 1, 2);
  EXPECT_EQ(inside.group(GroupKind::ep, 1), (std::vector<int>{0, 1}));
  EXPECT_EQ(inside.group(GroupKind::expert_data, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(inside.ep_rank(3), 1);
  const std::vector<std::string> lines = m.placement_lines(inside);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(contains(lines[1], "expert-parallel groups: all 2 inside one node")) << lines[1];
  const ParallelGrid across(4, 1, 1, "tp-dp-pp", 1, 4);
  EXPECT_TRUE(contains(m.placement_lines(across)[1], "warning: 1 of 1 expert-parallel groups span nodes"))
      << m.placement_lines(across)[1];
  EXPECT_TRUE(contains(m.placement_lines(across)[1], "token all-to-alls"));
  // ep must divide dp x cp.
  EXPECT_THROW(ParallelGrid(3, 1, 1, "tp-dp-pp", 1, 2), UserError);
}

}  // namespace
}  // namespace loom
