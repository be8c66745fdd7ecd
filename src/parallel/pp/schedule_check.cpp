#include "parallel/pp/schedule_check.h"

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <tuple>

#include "core/check.h"

namespace loom::pp {
namespace {

bool is_per_microbatch(ActionKind kind) {
  return kind != ActionKind::ReduceGrads && kind != ActionKind::OptimizerStep;
}
bool is_send(ActionKind kind) { return kind == ActionKind::SendActivation || kind == ActionKind::SendGrad; }
bool is_recv(ActionKind kind) { return kind == ActionKind::RecvActivation || kind == ActionKind::RecvGrad; }

// (is_grad, from stage, to stage): messages on one channel arrive in order.
using Channel = std::tuple<bool, int, int>;

class Checker {
 public:
  Checker(const Schedule& schedule, const ChunkMap& map, int m)
      : schedule_(schedule), map_(map), pp_(map.pp), m_(m), v_(map.v) {}

  std::vector<std::string> run(const std::vector<int>& bounds) {
    if (pp_ < 1 || m_ < 1 || v_ < 1) {
      problem("sizes must be positive: pp %d, micro-batches %d, chunks %d", pp_, m_, v_);
      return problems_;
    }
    if (int(schedule_.size()) != pp_) {
      problem("schedule has %d stage lists, expected %d", int(schedule_.size()), pp_);
      return problems_;
    }
    if (int(bounds.size()) != pp_) problem("%d in-flight bounds for %d stages", int(bounds.size()), pp_);
    bool indices_ok = true;
    for (int s = 0; s < pp_; s++) indices_ok &= check_indices(s);
    if (!indices_ok) return problems_;  // the checks below index by micro-batch and chunk
    for (int s = 0; s < pp_; s++) check_placement(s);
    check_channels();
    simulate();
    std::vector<int> peaks = peak_in_flight(schedule_);
    for (int s = 0; s < pp_ && s < int(bounds.size()); s++)
      if (peaks[s] > bounds[s])
        problem("stage %d: %d micro-batches in flight, bound is %d", s, peaks[s], bounds[s]);
    return problems_;
  }

 private:
  void problem(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, fmt);
    problems_.push_back(vstrprintf(fmt, args));
    va_end(args);
  }

  int virtual_stage(int stage, int chunk) const { return map_.virtual_stage(stage, chunk); }
  bool first(int stage, int chunk) const { return virtual_stage(stage, chunk) == 0; }
  bool last(int stage, int chunk) const { return virtual_stage(stage, chunk) == pp_ * v_ - 1; }

  bool check_indices(int s) {
    bool ok = true;
    const StageSchedule& actions = schedule_[s];
    for (size_t i = 0; i < actions.size(); i++) {
      const Action& a = actions[i];
      if (!is_per_microbatch(a.kind)) continue;
      if (a.microbatch < 0 || a.microbatch >= m_ || a.chunk < 0 || a.chunk >= v_) {
        problem("stage %d action %zu: %s is outside %d micro-batches x %d chunks", s, i,
                to_string(a).c_str(), m_, v_);
        ok = false;
      }
    }
    return ok;
  }

  // Counts and order of each (micro-batch, chunk)'s actions on stage s.
  void check_placement(int s) {
    const StageSchedule& actions = schedule_[s];
    const int n = int(actions.size());
    if (n < 2 || actions[n - 2].kind != ActionKind::ReduceGrads || actions[n - 1].kind != ActionKind::OptimizerStep)
      problem("stage %d: the list must end with ReduceGrads, OptimizerStep", s);
    constexpr int kKinds = int(ActionKind::OptimizerStep) + 1;
    std::array<int, kKinds> totals{};
    // positions[kind][mb * v + chunk]: where each action sits in the list.
    std::vector<std::vector<std::vector<int>>> positions(kKinds, std::vector<std::vector<int>>(m_ * v_));
    for (int i = 0; i < n; i++) {
      const Action& a = actions[i];
      totals[int(a.kind)]++;
      if (is_per_microbatch(a.kind)) positions[int(a.kind)][a.microbatch * v_ + a.chunk].push_back(i);
    }
    if (totals[int(ActionKind::ReduceGrads)] != 1 || totals[int(ActionKind::OptimizerStep)] != 1)
      problem("stage %d: needs exactly one ReduceGrads and one OptimizerStep", s);

    for (int mb = 0; mb < m_; mb++) {
      for (int c = 0; c < v_; c++) {
        auto at = [&](ActionKind k) -> const std::vector<int>& { return positions[int(k)][mb * v_ + c]; };
        auto expect_count = [&](ActionKind k, int want) {
          int got = int(at(k).size());
          if (got != want)
            problem("stage %d: %d x %s for micro-batch %d chunk %d, expected %d", s, got, to_string(k), mb, c, want);
          return got == want;
        };
        // Position of the one action of kind k, or -1 when it is (rightly) absent.
        auto pos = [&](ActionKind k) { return at(k).empty() ? -1 : at(k)[0]; };
        auto expect_before = [&](ActionKind a, ActionKind b) {
          if (pos(a) >= 0 && pos(b) >= 0 && pos(a) > pos(b))
            problem("stage %d: %s of micro-batch %d chunk %d comes after its %s", s, to_string(a), mb, c,
                    to_string(b));
        };
        // One Backward, or (zero-bubble schedules) a BackwardInput and a
        // BackwardWeight after it; the receive and send go around the one
        // that computes the input gradient.
        const bool split = !at(ActionKind::BackwardInput).empty() || !at(ActionKind::BackwardWeight).empty();
        const ActionKind input_grad = split ? ActionKind::BackwardInput : ActionKind::Backward;
        bool ok = expect_count(ActionKind::Forward, 1);
        ok &= expect_count(ActionKind::Backward, split ? 0 : 1);
        ok &= expect_count(ActionKind::BackwardInput, split ? 1 : 0);
        ok &= expect_count(ActionKind::BackwardWeight, split ? 1 : 0);
        ok &= expect_count(ActionKind::RecvActivation, first(s, c) ? 0 : 1);
        ok &= expect_count(ActionKind::SendActivation, last(s, c) ? 0 : 1);
        ok &= expect_count(ActionKind::RecvGrad, last(s, c) ? 0 : 1);
        ok &= expect_count(ActionKind::SendGrad, first(s, c) ? 0 : 1);
        if (!ok) continue;
        expect_before(ActionKind::Forward, input_grad);
        expect_before(ActionKind::RecvActivation, ActionKind::Forward);
        expect_before(ActionKind::Forward, ActionKind::SendActivation);
        expect_before(ActionKind::RecvGrad, input_grad);
        expect_before(input_grad, ActionKind::SendGrad);
        if (split) expect_before(ActionKind::BackwardInput, ActionKind::BackwardWeight);
      }
    }
  }

  // Where a send from stage s goes: channel and the receive it must meet.
  // Returns false for a send off either end of the virtual pipeline.
  bool route_send(int s, const Action& a, Channel* channel, Action* recv) const {
    const bool grad = a.kind == ActionKind::SendGrad;
    const int to = virtual_stage(s, a.chunk) + (grad ? -1 : 1);
    if (to < 0 || to >= pp_ * v_) return false;
    *channel = {grad, s, map_.stage_of(to)};
    *recv = {grad ? ActionKind::RecvGrad : ActionKind::RecvActivation, a.microbatch, map_.chunk_of(to)};
    return true;
  }
  bool route_recv(int s, const Action& a, Channel* channel) const {
    const bool grad = a.kind == ActionKind::RecvGrad;
    const int from = virtual_stage(s, a.chunk) + (grad ? 1 : -1);
    if (from < 0 || from >= pp_ * v_) return false;
    *channel = {grad, map_.stage_of(from), s};
    return true;
  }

  void check_channels() {
    std::map<Channel, std::pair<std::vector<Action>, std::vector<Action>>> expected_and_posted;
    for (int s = 0; s < pp_; s++) {
      for (const Action& a : schedule_[s]) {
        Channel ch;
        Action recv;
        if (is_send(a.kind) && route_send(s, a, &ch, &recv)) expected_and_posted[ch].first.push_back(recv);
        if (is_recv(a.kind) && route_recv(s, a, &ch)) expected_and_posted[ch].second.push_back(a);
      }
    }
    for (const auto& [ch, lists] : expected_and_posted) {
      const auto& [is_grad, from, to] = ch;
      const auto& [expected, posted] = lists;
      const char* what = is_grad ? "gradient" : "activation";
      for (size_t i = 0; i < std::min(expected.size(), posted.size()); i++) {
        if (!(expected[i] == posted[i])) {
          problem("%s channel stage %d -> %d, message %zu: sent for %s but received as %s", what, from, to, i,
                  to_string(expected[i]).c_str(), to_string(posted[i]).c_str());
          break;
        }
      }
      if (expected.size() != posted.size())
        problem("%s channel stage %d -> %d: %zu sends but %zu receives", what, from, to, expected.size(),
                posted.size());
    }
  }

  // Blocking receives, eager sends: run every stage as far as it can go until
  // nothing moves; any stage left unfinished is deadlocked.
  void simulate() {
    std::map<Channel, std::deque<Action>> in_transit;
    std::vector<size_t> next(pp_, 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < pp_; s++) {
        const StageSchedule& actions = schedule_[s];
        while (next[s] < actions.size()) {
          const Action& a = actions[next[s]];
          Channel ch;
          Action recv;
          if (is_recv(a.kind) && route_recv(s, a, &ch)) {
            auto& queue = in_transit[ch];
            if (queue.empty()) break;  // blocked until the sender posts
            queue.pop_front();  // a mismatch here is reported by check_channels
          } else if (is_send(a.kind) && route_send(s, a, &ch, &recv)) {
            in_transit[ch].push_back(recv);
          }
          next[s]++;
          moved = true;
        }
      }
    }
    std::string stuck;
    for (int s = 0; s < pp_; s++)
      if (next[s] < schedule_[s].size())
        stuck += strprintf(" stage %d at action %zu %s;", s, next[s], to_string(schedule_[s][next[s]]).c_str());
    if (!stuck.empty()) problem("deadlock: no stage can advance:%s", stuck.c_str());
  }

  const Schedule& schedule_;
  ChunkMap map_;
  int pp_, m_, v_;
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> check_schedule(const Schedule& schedule, int pp, int m, int v, int max_in_flight) {
  return check_schedule(schedule, pp, m, v, std::vector<int>(std::max(pp, 0), max_in_flight));
}

std::vector<std::string> check_schedule(const Schedule& schedule, int pp, int m, int v,
                                        const std::vector<int>& max_in_flight_per_stage) {
  return check_schedule(schedule, ChunkMap{pp, v}, m, max_in_flight_per_stage);
}

std::vector<std::string> check_schedule(const Schedule& schedule, const ChunkMap& map, int m,
                                        const std::vector<int>& max_in_flight_per_stage) {
  return Checker(schedule, map, m).run(max_in_flight_per_stage);
}

}  // namespace loom::pp
