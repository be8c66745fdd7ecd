#include "parallel/pp/partition.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace loom::pp {

namespace {

// Greedy fill under a cost cap: each part takes as many blocks as the cap
// allows; an empty vector if the cap cannot be met.
std::vector<int> fill(int n_layer, int parts, double first_extra, double last_extra, double cap) {
  std::vector<int> counts(size_t(parts), 0);
  int left = n_layer;
  double worst = 0;
  for (int p = 0; p < parts; p++) {
    const double extra = (p == 0 ? first_extra : 0) + (p == parts - 1 ? last_extra : 0);
    const int most = left - (parts - p - 1);  // every later part keeps one block
    int n = p == parts - 1 ? left : std::clamp(int(cap - extra + 1e-9), 1, std::max(1, most));
    counts[size_t(p)] = n;
    left -= n;
    worst = std::max(worst, n + extra);
  }
  return left == 0 && worst <= cap + 1e-9 ? counts : std::vector<int>{};
}

}  // namespace

std::vector<int> balanced_partition(int n_layer, int parts, double first_extra, double last_extra) {
  LOOM_USER_CHECK(parts >= 1 && n_layer >= parts,
                  "model.n_layer (%d) must be at least the number of pipeline chunks (parallel.pp x "
                  "parallel.virtual_stages = %d): every chunk holds one block or more",
                  n_layer, parts);
  if (parts == 1) return {n_layer};
  // The best cap is one of the few values a part's cost can take: try them
  // in increasing order.
  std::vector<double> caps;
  for (int n = 1; n <= n_layer; n++)
    for (double extra : {0.0, first_extra, last_extra, first_extra + last_extra}) caps.push_back(n + extra);
  std::sort(caps.begin(), caps.end());
  for (double cap : caps) {
    auto counts = fill(n_layer, parts, first_extra, last_extra, cap);
    if (!counts.empty()) return counts;
  }
  std::vector<int> even(size_t(parts), n_layer / parts);
  for (int p = 0; p < n_layer % parts; p++) even[size_t(p)]++;
  return even;
}

void check_partition(const std::vector<int>& counts, int n_layer, int parts) {
  LOOM_USER_CHECK(int(counts.size()) == parts,
                  "config field 'parallel.pp_layers' has %zu entries; it needs one per pipeline chunk "
                  "(parallel.pp x parallel.virtual_stages = %d)",
                  counts.size(), parts);
  for (size_t i = 0; i < counts.size(); i++)
    LOOM_USER_CHECK(counts[i] >= 1, "config field 'parallel.pp_layers': entry %zu is %d; every chunk needs a block",
                    i, counts[i]);
  const int sum = std::accumulate(counts.begin(), counts.end(), 0);
  LOOM_USER_CHECK(sum == n_layer, "config field 'parallel.pp_layers' sums to %d blocks, but model.n_layer is %d",
                  sum, n_layer);
}

std::string describe_partition(const std::vector<int>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); i++) s += (i ? "+" : "") + std::to_string(counts[i]);
  return s;
}

}  // namespace loom::pp
