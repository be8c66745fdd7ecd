#include "parallel/grid/dp_hierarchy.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "core/check.h"

namespace loom {

namespace {

// Members of one data group per node, in the group's order, nodes in order
// of their first member.
std::vector<std::vector<int>> members_by_node(const std::vector<int>& members, const NodeMap& nodes) {
  std::vector<std::vector<int>> out;
  std::map<int, size_t> index;
  for (int r : members) {
    auto [it, added] = index.emplace(nodes.node_of_rank.at(size_t(r)), out.size());
    if (added) out.emplace_back();
    out[it->second].push_back(r);
  }
  return out;
}

}  // namespace

std::string DpReduceChoice::line() const {
  if (!applies) return "dp reduction: flat (no data group has two ranks on one node and others elsewhere)";
  std::string why;
  if (measured)
    why = strprintf("measured at start-up on %.1f MiB: flat %.2f ms, hierarchical %.2f ms", probe_bytes / 1048576.0,
                    flat_ms, hierarchical_ms);
  else why = hierarchical ? "parallel.dp_reduce = \"hierarchical\"" : "parallel.dp_reduce = \"flat\"";
  if (!description.empty()) why = "over " + description + "; " + why;
  return strprintf("dp reduction: %s (%s)", hierarchical ? "hierarchical" : "flat", why.c_str());
}

bool hierarchy_applies(const ParallelGrid& grid, const NodeMap& nodes) {
  if (nodes.nodes() < 2) return false;
  for (const auto& g : grid.groups(GroupKind::data)) {
    const auto by_node = members_by_node(g, nodes);
    if (by_node.size() < 2) continue;
    for (const auto& on_node : by_node)
      if (on_node.size() >= 2) return true;
  }
  return false;
}

std::unique_ptr<HierarchicalComm> make_hierarchical_dp(const ParallelGrid& grid, const NodeMap& nodes, int rank,
                                                       Communicator& flat, const MpiOptions& opts) {
  const auto by_node = members_by_node(grid.group(GroupKind::data, rank), nodes);
  const std::vector<int>* mine = nullptr;
  std::vector<int> leaders;
  std::string counts;
  for (const auto& on_node : by_node) {
    if (std::find(on_node.begin(), on_node.end(), rank) != on_node.end()) mine = &on_node;
    leaders.push_back(on_node.front());
    counts += strprintf("%s%zu", counts.empty() ? "" : " + ", on_node.size());
  }
  LOOM_CHECK(mine, "rank %d is not in its own data group", rank);
  // Disjoint member sets, each named by its smallest member: unique colors.
  const int node_color = *std::min_element(mine->begin(), mine->end());
  auto node = MpiComm::split("dp.node", node_color, *mine, opts);
  auto bcast = MpiComm::split("dp.bcast", node_color, *mine, opts);
  const bool leads = mine->front() == rank;
  auto across = MpiComm::split("dp.nodes", leads ? *std::min_element(leaders.begin(), leaders.end()) : -1,
                               leads ? leaders : std::vector<int>{}, opts);
  return std::make_unique<HierarchicalComm>(flat, std::move(node), std::move(across), std::move(bcast),
                                            strprintf("%zu nodes (%s ranks)", by_node.size(), counts.c_str()),
                                            opts.engine);
}

DpReduceChoice choose_dp_reduce(const DpReduceOptions& options, Communicator& flat, HierarchicalComm& hierarchical,
                                Communicator& world) {
  DpReduceChoice c;
  c.applies = true;
  c.description = hierarchical.describe();
  if (options.mode != "auto") {
    c.hierarchical = options.mode == "hierarchical";
    return c;
  }
  // Every rank times both (each on its own data group), and the slowest
  // rank's times decide for all.
  c.measured = true;
  c.probe_bytes = std::max<size_t>(options.probe_bytes / 4, HierarchicalComm::kMinElements) * 4;
  std::vector<float> buf(c.probe_bytes / 4, 1.0f);
  auto time_ms = [&](Communicator& comm) {
    const auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce_async(buf.data(), buf.size(), DType::f32, ReduceOp::Sum)->wait();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  time_ms(flat), time_ms(hierarchical);  // warm-up: connections, buffers
  float best[2] = {1e30f, 1e30f};
  for (int rep = 0; rep < 3; rep++) {
    best[0] = std::min(best[0], float(time_ms(flat)));
    best[1] = std::min(best[1], float(time_ms(hierarchical)));
  }
  world.all_reduce(best, 2, DType::f32, ReduceOp::Max);
  c.flat_ms = best[0], c.hierarchical_ms = best[1];
  c.hierarchical = c.hierarchical_ms < 0.97 * c.flat_ms;
  return c;
}

}  // namespace loom
