#include "parallel/pp/schedule.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <utility>

#include "core/check.h"

namespace loom::pp {
namespace {

void check_sizes(int pp, int m, int v) {
  LOOM_USER_CHECK(pp >= 1, "parallel.pp must be at least 1 (got %d)", pp);
  LOOM_USER_CHECK(m >= 1, "micro-batches must be at least 1 (got %d)", m);
  LOOM_USER_CHECK(v >= 1, "chunks (model chunks per stage) must be at least 1 (got %d)", v);
}

// Appends one stage's compute actions with the communication around them.
class StageWriter {
 public:
  StageWriter(const ChunkMap& map, int stage) : map_(map), stage_(stage) {}

  void forward(int mb, int chunk) {
    if (!first(chunk)) emit(ActionKind::RecvActivation, mb, chunk);
    emit(ActionKind::Forward, mb, chunk);
    if (!last(chunk)) emit(ActionKind::SendActivation, mb, chunk);
  }
  void backward(int mb, int chunk, ActionKind kind = ActionKind::Backward) {
    if (!last(chunk)) emit(ActionKind::RecvGrad, mb, chunk);
    emit(kind, mb, chunk);
    if (!first(chunk)) emit(ActionKind::SendGrad, mb, chunk);
  }
  void backward_weight(int mb, int chunk) { emit(ActionKind::BackwardWeight, mb, chunk); }
  StageSchedule finish() {
    emit(ActionKind::ReduceGrads, -1, -1);
    emit(ActionKind::OptimizerStep, -1, -1);
    return std::move(actions_);
  }

 private:
  int virtual_stage(int chunk) const { return map_.virtual_stage(stage_, chunk); }
  bool first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last(int chunk) const { return virtual_stage(chunk) == map_.virtual_stages() - 1; }
  void emit(ActionKind kind, int mb, int chunk) { actions_.push_back({kind, mb, chunk}); }

  ChunkMap map_;
  int stage_;
  StageSchedule actions_;
};

// Forwards a stage runs before its first backward in the interleaved schedule:
// Megatron's count, which with v > 1 also covers the round trip through the
// later stages. With one chunk it is plain 1F1B's warm-up (as in Megatron,
// which falls back to the non-interleaved schedule there).
int interleaved_warmup(int pp, int m, int v, int stage) {
  if (v == 1) return std::min(m, pp - stage - 1);
  return std::min(m * v, (pp - stage - 1) * 2 + (v - 1) * pp);
}

}  // namespace

Schedule gpipe(int pp, int m) {
  check_sizes(pp, m, 1);
  Schedule schedule;
  for (int s = 0; s < pp; s++) {
    StageWriter w(ChunkMap{pp, 1}, s);
    for (int mb = 0; mb < m; mb++) w.forward(mb, 0);
    for (int mb = 0; mb < m; mb++) w.backward(mb, 0);
    schedule.push_back(w.finish());
  }
  return schedule;
}

Schedule one_f_one_b(int pp, int m) {
  check_sizes(pp, m, 1);
  Schedule schedule;
  for (int s = 0; s < pp; s++) {
    StageWriter w(ChunkMap{pp, 1}, s);
    const int warmup = std::min(pp - s - 1, m);
    for (int mb = 0; mb < warmup; mb++) w.forward(mb, 0);
    for (int i = 0; i < m - warmup; i++) {
      w.forward(warmup + i, 0);
      w.backward(i, 0);
    }
    for (int mb = m - warmup; mb < m; mb++) w.backward(mb, 0);
    schedule.push_back(w.finish());
  }
  return schedule;
}

// Megatron's order: micro-batches go in groups of pp; a group runs through
// chunk 0, then chunk 1, ... (backwards through the chunks in reverse).
Schedule interleaved_1f1b(int pp, int m, int v) {
  check_sizes(pp, m, v);
  LOOM_USER_CHECK(m % pp == 0,
                  "interleaved 1F1B needs micro-batches (%d) to be a multiple of parallel.pp (%d)", m, pp);
  const int total = m * v;
  auto microbatch = [&](int k) { return (k / (pp * v)) * pp + k % pp; };
  auto forward_chunk = [&](int k) { return (k / pp) % v; };
  auto backward_chunk = [&](int k) { return v - 1 - (k / pp) % v; };
  Schedule schedule;
  for (int s = 0; s < pp; s++) {
    StageWriter w(ChunkMap{pp, v}, s);
    const int warmup = interleaved_warmup(pp, m, v, s);
    for (int k = 0; k < warmup; k++) w.forward(microbatch(k), forward_chunk(k));
    for (int k = 0; k < total - warmup; k++) {
      w.forward(microbatch(warmup + k), forward_chunk(warmup + k));
      w.backward(microbatch(k), backward_chunk(k));
    }
    for (int k = total - warmup; k < total; k++) w.backward(microbatch(k), backward_chunk(k));
    schedule.push_back(w.finish());
  }
  return schedule;
}

Schedule zero_bubble_h1(int pp, int m) {
  check_sizes(pp, m, 1);
  Schedule schedule;
  for (int s = 0; s < pp; s++) {
    StageWriter w(ChunkMap{pp, 1}, s);
    // Stage s runs micro-batch k's W right after B of micro-batch k + s: the
    // later a stage, the longer its W waits, filling the time 1F1B leaves
    // it idle while the earlier stages are still warming up or draining.
    int next_w = 0;
    auto backward = [&](int k) {
      w.backward(k, 0, ActionKind::BackwardInput);
      for (; next_w <= k - s; next_w++) w.backward_weight(next_w, 0);
    };
    const int warmup = std::min(pp - s - 1, m);
    for (int mb = 0; mb < warmup; mb++) w.forward(mb, 0);
    for (int i = 0; i < m - warmup; i++) {
      w.forward(warmup + i, 0);
      backward(i);
    }
    for (int mb = m - warmup; mb < m; mb++) backward(mb);
    for (; next_w < m; next_w++) w.backward_weight(next_w, 0);
    schedule.push_back(w.finish());
  }
  return schedule;
}

namespace {

// ZB-V by list scheduling: each round places the pass that can start
// earliest; a stage takes the first of `order` ((kind, chunk) pairs) among
// those that can start soonest, and a waiting W when none can start at once.
// reserve_turn: a first-half forward also keeps a set free for its second
// half, so the sets can never all hold first halves (slower, never stuck).
// Returns the schedule and when its last pass ends, or nothing when the
// stages get stuck (every set held by first halves whose second halves
// cannot start).
std::optional<std::pair<Schedule, double>> list_schedule_v(int pp, int m, const PassRatios& t,
                                                           const std::vector<std::pair<ActionKind, int>>& order,
                                                           bool reserve_turn) {
  const ChunkMap map = chunk_map(ScheduleKind::ZeroBubbleV, pp, 2);
  const int stages = 2 * pp;
  // end_f[vs][mb] / end_b[vs][mb]: when that pass ends (-1: not placed yet).
  std::vector<std::vector<double>> end_f(size_t(stages), std::vector<double>(size_t(m), -1)), end_b = end_f;
  struct StageState {
    double free = 0;  // when the stage's last placed pass ends
    int next_f[2] = {0, 0}, next_b[2] = {0, 0};
    std::deque<std::pair<int, int>> waiting_w;  // (micro-batch, chunk) after B, in order
    int held = 0;                               // pairs whose F ran and W has not
  };
  struct Choice {
    ActionKind kind;
    int mb, chunk;
    double start;
  };
  std::vector<StageState> st(static_cast<size_t>(pp));
  std::vector<StageWriter> writers;
  for (int s = 0; s < pp; s++) writers.emplace_back(map, s);
  double makespan = 0;
  for (int left = 3 * stages * m; left > 0; left--) {
    std::optional<std::pair<int, Choice>> best;
    for (int s = 0; s < pp; s++) {
      StageState& x = st[size_t(s)];
      std::optional<Choice> pick;
      for (const auto& [kind, c] : order) {
        const int vs = map.virtual_stage(s, c);
        const bool b = kind == ActionKind::BackwardInput;
        const int mb = b ? x.next_b[c] : x.next_f[c];
        if (mb >= m) continue;
        double ready;
        if (b) {
          const double own = end_f[size_t(vs)][size_t(mb)];
          const double later = vs == stages - 1 ? 0 : end_b[size_t(vs + 1)][size_t(mb)];
          if (own < 0 || later < 0) continue;
          ready = std::max(own, later);
        } else {
          if (x.held >= 2 * pp) continue;  // 1F1B's first-stage activations
          // A first half whose second half could not start.
          if (reserve_turn && c == 0 && x.held + (x.next_f[0] - x.next_f[1]) + 1 > 2 * pp) continue;
          ready = vs == 0 ? 0 : end_f[size_t(vs - 1)][size_t(mb)];
          if (ready < 0) continue;
        }
        const Choice cand{kind, mb, c, std::max(x.free, ready)};
        if (!pick || cand.start < pick->start) pick = cand;
      }
      // A waiting W fills the time until a B or F can start.
      if (!x.waiting_w.empty() && (!pick || pick->start > x.free))
        pick = Choice{ActionKind::BackwardWeight, x.waiting_w.front().first, x.waiting_w.front().second, x.free};
      if (pick && (!best || pick->start < best->second.start)) best = {{s, *pick}};
    }
    if (!best) return std::nullopt;
    const auto& [s, a] = *best;
    StageState& x = st[size_t(s)];
    const int vs = map.virtual_stage(s, a.chunk);
    if (a.kind == ActionKind::Forward) {
      writers[size_t(s)].forward(a.mb, a.chunk);
      x.free = end_f[size_t(vs)][size_t(a.mb)] = a.start + t.forward;
      x.next_f[a.chunk]++, x.held++;
    } else if (a.kind == ActionKind::BackwardInput) {
      writers[size_t(s)].backward(a.mb, a.chunk, ActionKind::BackwardInput);
      x.free = end_b[size_t(vs)][size_t(a.mb)] = a.start + t.backward_input;
      x.next_b[a.chunk]++;
      x.waiting_w.push_back({a.mb, a.chunk});
    } else {
      writers[size_t(s)].backward_weight(a.mb, a.chunk);
      x.free = a.start + t.backward_weight;
      x.waiting_w.pop_front(), x.held--;
    }
    makespan = std::max(makespan, x.free);
  }
  Schedule schedule;
  for (StageWriter& w : writers) schedule.push_back(w.finish());
  return std::pair{std::move(schedule), makespan};
}

}  // namespace

Schedule zero_bubble_v(int pp, int m, const PassRatios& t) {
  check_sizes(pp, m, 2);
  LOOM_CHECK(t.forward > 0 && t.backward_input > 0 && t.backward_weight > 0, "zero_bubble_v: pass times must be > 0");
  using K = ActionKind;
  // Backward first (the oldest work first), or the V's second half's
  // forward first (sooner to the loss, so backwards start sooner): which is
  // better depends on the pass times; keep the shorter. When forwards are
  // much longer than weight passes both can fill every set with first
  // halves and stop; the reserving one never does.
  const std::vector<std::pair<ActionKind, int>> backward_first = {
      {K::BackwardInput, 1}, {K::BackwardInput, 0}, {K::Forward, 1}, {K::Forward, 0}};
  const std::vector<std::pair<ActionKind, int>> turn_first = {
      {K::Forward, 1}, {K::BackwardInput, 1}, {K::BackwardInput, 0}, {K::Forward, 0}};
  std::optional<std::pair<Schedule, double>> best;
  for (const auto& [order, reserve] : {std::pair{backward_first, false}, std::pair{turn_first, false},
                                       std::pair{backward_first, true}}) {
    auto s = list_schedule_v(pp, m, t, order, reserve);
    if (s && (!best || s->second < best->second)) best = std::move(s);
  }
  LOOM_CHECK(best.has_value(), "zero_bubble_v(%d, %d): no schedule", pp, m);
  return std::move(best->first);
}

ChunkMap chunk_map(ScheduleKind kind, int pp, int v) {
  return ChunkMap{pp, v, kind == ScheduleKind::ZeroBubbleV};
}

Schedule build_schedule(ScheduleKind kind, int pp, int m, int v, const PassRatios& ratios) {
  if (kind == ScheduleKind::Interleaved1F1B) return interleaved_1f1b(pp, m, v);
  if (kind == ScheduleKind::ZeroBubbleV) {
    LOOM_USER_CHECK(v == 2, "ZB-V runs 2 chunks per stage (parallel.virtual_stages = 2); got %d", v);
    return zero_bubble_v(pp, m, ratios);
  }
  if (kind == ScheduleKind::ZeroBubbleH1) {
    LOOM_USER_CHECK(v == 1, "chunks must be 1 for ZB-H1 (got %d)", v);
    return zero_bubble_h1(pp, m);
  }
  LOOM_USER_CHECK(v == 1, "chunks must be 1 unless the schedule is interleaved (got %d)", v);
  return kind == ScheduleKind::GPipe ? gpipe(pp, m) : one_f_one_b(pp, m);
}

int max_in_flight(ScheduleKind kind, int pp, int m, int v, int stage) {
  check_sizes(pp, m, v);
  LOOM_CHECK(stage >= 0 && stage < pp, "stage %d outside [0, %d)", stage, pp);
  switch (kind) {
    case ScheduleKind::GPipe: return m;
    case ScheduleKind::OneFOneB: return std::min(m, pp - stage);
    case ScheduleKind::ZeroBubbleH1: return std::min(m, pp);
    case ScheduleKind::ZeroBubbleV: return std::min(2 * m, 2 * pp);
    case ScheduleKind::Interleaved1F1B:
      return std::min(m * v, interleaved_warmup(pp, m, v, stage) + 1);
  }
  LOOM_CHECK(false, "unknown schedule kind %d", int(kind));
}

std::vector<int> max_in_flight_per_stage(ScheduleKind kind, int pp, int m, int v) {
  std::vector<int> bounds;
  for (int s = 0; s < pp; s++) bounds.push_back(max_in_flight(kind, pp, m, v, s));
  return bounds;
}

std::vector<int> peak_in_flight(const Schedule& schedule) {
  std::vector<int> peaks;
  for (const StageSchedule& stage : schedule) {
    std::set<std::pair<int, int>> live;  // (microbatch, chunk)
    int peak = 0;
    for (const Action& a : stage) {
      if (a.kind == ActionKind::Forward) live.insert({a.microbatch, a.chunk});
      if (frees_activations(a.kind)) live.erase({a.microbatch, a.chunk});
      peak = std::max(peak, int(live.size()));
    }
    peaks.push_back(peak);
  }
  return peaks;
}

bool frees_activations(ActionKind kind) {
  return kind == ActionKind::Backward || kind == ActionKind::BackwardWeight;
}

const char* to_string(ActionKind kind) {
  switch (kind) {
    case ActionKind::Forward: return "Forward";
    case ActionKind::Backward: return "Backward";
    case ActionKind::BackwardInput: return "BackwardInput";
    case ActionKind::BackwardWeight: return "BackwardWeight";
    case ActionKind::SendActivation: return "SendActivation";
    case ActionKind::RecvActivation: return "RecvActivation";
    case ActionKind::SendGrad: return "SendGrad";
    case ActionKind::RecvGrad: return "RecvGrad";
    case ActionKind::ReduceGrads: return "ReduceGrads";
    case ActionKind::OptimizerStep: return "OptimizerStep";
  }
  return "?";
}

std::string to_string(const Action& a) {
  return strprintf("%s(mb %d, chunk %d)", to_string(a.kind), a.microbatch, a.chunk);
}

}  // namespace loom::pp
