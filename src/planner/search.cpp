#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "model/split_rules.h"
#include "core/check.h"

namespace loom::planner {
namespace {

std::vector<int> divisors(int n, int max) {
  std::vector<int> out;
  for (int d = 1; d <= n && d <= max; d++)
    if (n % d == 0) out.push_back(d);
  return out;
}

bool allowed(const std::vector<int>& list, int value) {
  return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
}

// Faster first. Among equally fast layouts (within 1e-6) the simpler one:
// a lower ZeRO stage (less traffic whose overlap the model takes on faith),
// less recomputation, less model parallelism, larger micro-batches, then
// more memory to spare.
bool better(const Candidate& a, const Candidate& b) {
  const double ta = a.time.step, tb = b.time.step;
  if (std::abs(ta - tb) > 1e-6 * std::max(ta, tb)) return ta < tb;
  const Layout &la = a.layout, &lb = b.layout;
  if (la.zero != lb.zero) return la.zero < lb.zero;
  if (la.recompute != lb.recompute) return la.recompute < lb.recompute;  // tiled attention: selective is none
  if (la.tp * la.pp * la.cp != lb.tp * lb.pp * lb.cp) return la.tp * la.pp * la.cp < lb.tp * lb.pp * lb.cp;
  if (la.micro_batch != lb.micro_batch) return la.micro_batch > lb.micro_batch;
  return a.memory.total() < b.memory.total();
}

}  // namespace

SearchResult search_layouts(const Workload& w, const ClusterSpec& c, const SearchSpace& space, int top_k) {
  LOOM_USER_CHECK(top_k >= 1, "top-k must be at least 1");
  LOOM_USER_CHECK(w.global_batch >= 1, "the global batch must be at least 1 sequence");
  const ModelConfig& m = w.model;
  const int devices = c.devices();
  std::vector<ComputePrecision> precisions = space.precision;
  if (precisions.empty()) {
    if (c.peak_flops_bf16 > 0) precisions.push_back(ComputePrecision::bf16);
    else if (c.peak_flops_fp16 > 0) precisions.push_back(ComputePrecision::fp16);
    precisions.push_back(ComputePrecision::fp32);
  }
  for (ComputePrecision p : precisions)
    LOOM_USER_CHECK(c.peak_flops(p) > 0, "cluster %s has no %s peak (device.peak_tflops_%s)", c.name.c_str(),
                    compute_precision_name(p), compute_precision_name(p));
  std::vector<Recompute> recomputes = space.recompute;
  if (recomputes.empty()) recomputes = {Recompute::none, Recompute::selective, Recompute::full};

  SearchResult result;
  struct Pending {
    double bound;
    Candidate candidate;
    const GroupLinks* links;
  };
  std::vector<Pending> pending;
  std::vector<std::unique_ptr<GroupLinks>> links_store;
  double closest_excess = 0;

  for (int tp : divisors(devices, devices)) {
    if (!tp_split_problem(m, tp).empty() || !allowed(space.tp, tp)) continue;
    for (int cp : divisors(devices / tp, w.seq_len() / 2)) {
      // Each cp rank holds two equal chunks of every sequence.
      if (!allowed(space.cp, cp) || !cp_split_problem(m, cp).empty()) continue;
      for (int pp : divisors(devices / (tp * cp), m.n_layer)) {
        if (!space.pp_layers.empty() && int(space.pp_layers.size()) % pp != 0) continue;
        const int dp = devices / (tp * cp * pp);
        if (!allowed(space.pp, pp) || !allowed(space.dp, dp) || w.global_batch % dp != 0) continue;
        for (int ep : divisors(dp * cp, m.is_moe() ? m.n_experts : 1)) {
        if (!allowed(space.ep, ep) || (m.is_moe() && m.n_experts % ep != 0)) continue;
        links_store.push_back(std::make_unique<GroupLinks>(group_links(c, dp, tp, pp, cp, "tp-dp-pp", ep)));
        const GroupLinks* links = links_store.back().get();
        const int rows = w.global_batch / dp;  // sequences per replica per step
        for (int b : divisors(rows, space.max_micro_batch)) {
          if (!allowed(space.micro_batch, b)) continue;
          const int mbs = rows / b;
          for (int v = 1; v <= (pp > 1 ? space.max_v : 1); v++) {
            if (!allowed(space.v, v)) continue;
            if (!space.pp_layers.empty() ? int(space.pp_layers.size()) != pp * v
                                         : v > 1 && m.n_layer % (pp * v) != 0)
              continue;
            // Interleaving needs m % pp == 0; ZB-H1 (v 1) and ZB-V (v 2) a
            // micro-batch per stage to fill the bubble.
            const bool plain_runs = v == 1 || mbs % pp == 0;
            const bool zb_schedule = pp > 1 && v <= 2 && mbs >= pp;
            if (!plain_runs && !zb_schedule) continue;
            for (int zero = 0; zero <= (dp * cp > 1 ? space.max_zero : 0); zero++) {
              if (!allowed(space.zero, zero)) continue;
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); sp++) {
                if (!allowed(space.seq_parallel, sp)) continue;
                for (Recompute r : recomputes) {
                  // Zero-bubble schedules: and the activations the weight pass reads.
                  const bool zb_runs = zb_schedule && r != Recompute::full;
                  for (int zb = plain_runs ? 0 : 1; zb <= (zb_runs ? 1 : 0); zb++) {
                    if (!allowed(space.zero_bubble, zb)) continue;
                    for (ComputePrecision p : precisions) {
                      Candidate cand;
                      cand.layout =
                          Layout{dp, tp, pp, v, b, mbs, zero, r, sp == 1, p, zb == 1, cp, space.pp_layers,
                                 space.fp32_grads};
                      cand.layout.ep = ep;
                      cand.memory = peak_memory(w, cand.layout, c);
                      result.considered++;
                      const double excess = cand.memory.total() - c.memory_bytes;
                      if (excess > 0) {
                        if (!result.have_closest || excess < closest_excess) {
                          result.have_closest = true;
                          result.closest = cand;
                          closest_excess = excess;
                        }
                        if (!space.ignore_memory) continue;
                        cand.fits = false;
                      } else {
                        result.fitting++;
                      }
                      pending.push_back({step_time_lower_bound(w, cand.layout, c, *links), cand, links});
                    }
                  }
                }
              }
            }
          }
        }
        }  // ep
      }
    }
  }

  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) { return a.bound < b.bound; });
  PipelineTimer timer;
  for (Pending& p : pending) {
    if (int(result.top.size()) == top_k && p.bound > result.top.back().time.step) break;
    p.candidate.time = step_time(w, p.candidate.layout, c, *p.links, timer);
    result.timed++;
    auto at = std::upper_bound(result.top.begin(), result.top.end(), p.candidate, better);
    result.top.insert(at, p.candidate);
    if (int(result.top.size()) > top_k) result.top.pop_back();
  }
  return result;
}

int smallest_fitting_devices(const Workload& w, const ClusterSpec& c, const SearchSpace& space, int top_k,
                             int more_than, int max_devices, SearchResult* found) {
  const double usable = c.memory_bytes - c.overhead_bytes;
  if (usable <= 0) return 0;
  const double need = std::ceil(16 * double(w.model.num_parameters()) / usable);
  const int per_node = c.devices_per_node;
  int searches = 0;
  auto next = [&](int d) { return d < per_node ? d + 1 : (d / per_node + 1) * per_node; };  // whole nodes past one
  for (int d = more_than + 1; d <= max_devices && searches < 16; d = next(d)) {
    if (d < need || (d > per_node && d % per_node != 0)) continue;
    searches++;
    SearchResult r = search_layouts(w, with_devices(c, d), space, top_k);
    if (!r.top.empty()) {
      *found = std::move(r);
      return d;
    }
  }
  return 0;
}

}  // namespace loom::planner
