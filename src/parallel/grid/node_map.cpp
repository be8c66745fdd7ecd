#include "parallel/grid/node_map.h"

#include <algorithm>
#include <map>

#include "core/check.h"

namespace loom {

NodeMap NodeMap::single(int world, const std::string& name) {
  NodeMap m;
  m.node_of_rank.assign(size_t(std::max(world, 1)), 0);
  m.names = {name};
  return m;
}

NodeMap NodeMap::from_keys(const std::vector<int>& key_of_rank, const std::vector<std::string>& host_of_rank) {
  LOOM_CHECK(key_of_rank.size() == host_of_rank.size() && !key_of_rank.empty(), "node keys for %zu ranks, hosts for %zu",
             key_of_rank.size(), host_of_rank.size());
  NodeMap m;
  std::map<int, int> index;  // key -> node, in order of first rank
  for (size_t r = 0; r < key_of_rank.size(); r++) {
    auto [it, added] = index.emplace(key_of_rank[r], int(m.names.size()));
    if (added) m.names.push_back(host_of_rank[r]);
    m.node_of_rank.push_back(it->second);
  }
  return m;
}

int NodeMap::max_ranks_per_node() const {
  std::vector<int> count(names.size(), 0);
  for (int n : node_of_rank) count[size_t(n)]++;
  return count.empty() ? 0 : *std::max_element(count.begin(), count.end());
}

std::vector<std::vector<int>> NodeMap::groups_across_nodes(const ParallelGrid& grid, GroupKind kind) const {
  LOOM_CHECK(int(node_of_rank.size()) == grid.world_size(), "node map of %zu ranks for a grid of %d",
             node_of_rank.size(), grid.world_size());
  std::vector<std::vector<int>> out;
  for (const auto& g : grid.groups(kind))
    for (int r : g)
      if (node_of_rank[size_t(r)] != node_of_rank[size_t(g[0])]) {
        out.push_back(g);
        break;
      }
  return out;
}

std::string NodeMap::describe() const {
  std::string s = strprintf("%d node%s (", nodes(), nodes() == 1 ? "" : "s");
  for (int n = 0; n < nodes(); n++) {
    std::vector<int> ranks;
    for (size_t r = 0; r < node_of_rank.size(); r++)
      if (node_of_rank[r] == n) ranks.push_back(int(r));
    // Contiguous runs as "a-b".
    std::string list;
    for (size_t i = 0; i < ranks.size();) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) j++;
      list += (list.empty() ? "" : ",") +
              (i == j ? strprintf("%d", ranks[i]) : strprintf("%d-%d", ranks[i], ranks[j]));
      i = j + 1;
    }
    s += strprintf("%s%s: rank%s %s", n ? ", " : "", names[size_t(n)].c_str(), ranks.size() == 1 ? "" : "s",
                   list.c_str());
  }
  return s + ")";
}

std::vector<std::string> NodeMap::placement_lines(const ParallelGrid& grid) const {
  std::vector<std::string> lines = {"nodes: " + describe()};
  struct Chatty {
    GroupKind kind;
    const char* what;
    const char* traffic;
  };
  for (const Chatty& c : {Chatty{GroupKind::tp, "tensor-parallel", "all-reduces"},
                          Chatty{GroupKind::cp, "context-parallel", "key/value ring"},
                          Chatty{GroupKind::ep, "expert-parallel", "token all-to-alls"}}) {
    const int size = c.kind == GroupKind::tp ? grid.tp() : c.kind == GroupKind::cp ? grid.cp() : grid.ep();
    if (size == 1) continue;
    const auto across = groups_across_nodes(grid, c.kind);
    const size_t total = grid.groups(c.kind).size();
    if (across.empty()) {
      lines.push_back(strprintf("%s groups: all %zu inside one node", c.what, total));
      continue;
    }
    std::string members, hosts;
    for (int r : across[0]) {
      members += (members.empty() ? "" : ",") + std::to_string(r);
      const std::string& h = names[size_t(node_of_rank[size_t(r)])];
      if (hosts.find(h) == std::string::npos) hosts += (hosts.empty() ? "" : ", ") + h;
    }
    lines.push_back(strprintf("warning: %zu of %zu %s groups span nodes (the first: ranks %s on %s): their %s cross "
                              "the network; parallel.order \"%s\" decides, and puts tp innermost by default",
                              across.size(), total, c.what, members.c_str(), hosts.c_str(), c.traffic,
                              grid.order().c_str()));
  }
  return lines;
}

}  // namespace loom
