// Pipeline schedules as data (DESIGN.md, "Pipeline schedule as data").
//
// A schedule is one action list per pipeline stage. The executor runs the
// lists; the checker (schedule_check.h) and the planner read the same lists.
// Sends and receives are explicit actions placed where an executor posts them.
//
// Interleaved schedules give each stage v model chunks; chunk c of stage s is
// virtual stage c * pp + s, so activations flow stage 0 -> pp-1, then wrap to
// stage 0's next chunk. ZB-V gives each stage two chunks in a V: virtual
// stages s and 2 pp - 1 - s (down the stages, then back up; stage 0 holds
// the first and the last). ChunkMap says which. An Action's chunk is always
// the chunk of the stage that holds the action (a receive names the
// receiving chunk).
#pragma once

#include <string>
#include <vector>

namespace loom::pp {

enum class ActionKind {
  Forward,
  Backward,        // input and weight gradients together
  BackwardInput,   // zero-bubble schedules: the input gradient alone (sent upstream at once) ...
  BackwardWeight,  // ... and later the weight gradients (fills the bubble); after its BackwardInput
  SendActivation,  // after a Forward, unless on the last virtual stage
  RecvActivation,  // before a Forward, unless on the first virtual stage
  SendGrad,        // after a Backward (BackwardInput), unless on the first virtual stage
  RecvGrad,        // before a Backward (BackwardInput), unless on the last virtual stage
  ReduceGrads,     // once, after every Backward (microbatch and chunk are -1)
  OptimizerStep,   // once, last (microbatch and chunk are -1)
};

struct Action {
  ActionKind kind;
  int microbatch;
  int chunk;  // model chunk on this stage; 0 unless interleaved
  bool operator==(const Action&) const = default;
};

using StageSchedule = std::vector<Action>;
using Schedule = std::vector<StageSchedule>;  // one list per stage

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1, ZeroBubbleV };

// Which virtual stage chunk c of stage s is (see above).
struct ChunkMap {
  int pp = 1, v = 1;
  bool v_shape = false;  // ZB-V's two chunks per stage
  int virtual_stages() const { return pp * v; }
  int virtual_stage(int stage, int chunk) const {
    return v_shape && chunk == 1 ? 2 * pp - 1 - stage : chunk * pp + stage;
  }
  int stage_of(int vs) const { return v_shape && vs >= pp ? 2 * pp - 1 - vs : vs % pp; }
  int chunk_of(int vs) const { return vs / pp; }
};
ChunkMap chunk_map(ScheduleKind kind, int pp, int v);

// Whether a (micro-batch, chunk) still holds its activations after `kind`
// ran: Forward takes a set; Backward, or BackwardWeight when split, frees it.
bool frees_activations(ActionKind kind);

// All forwards, then all backwards. Keeps every micro-batch in flight.
Schedule gpipe(int pp, int m);
// Warm-up forwards, then one forward / one backward, then cool-down backwards.
Schedule one_f_one_b(int pp, int m);
// Megatron's interleaved 1F1B with v chunks per stage; needs m % pp == 0.
Schedule interleaved_1f1b(int pp, int m, int v);
// Zero Bubble's ZB-H1 (Qi et al., ICLR 2024): each backward split into its
// input part (B) and weight part (W). 1F1B's order of F and B, with stage s
// running each W s micro-batches after its B, the rest at the end: the W
// passes fill the idle time 1F1B leaves. Every stage holds at most pp
// micro-batches until their W (1F1B's first stage: the same peak
// activation memory); with the paper's unit F, B and W the bubble is
// (pp - 1) units, a third of 1F1B's 3 (pp - 1).
Schedule zero_bubble_h1(int pp, int m);
// One chunk's pass times relative to each other (any unit): what a
// schedule built by list scheduling is placed with.
struct PassRatios {
  double forward = 1, backward_input = 1, backward_weight = 1;
};
// Zero Bubble's ZB-V: two chunks per stage in a V (ChunkMap), backward split
// as in ZB-H1. Built by list scheduling with the given pass times: each
// round places the pass that can start earliest; a stage runs an F only
// while fewer than 2 pp (micro-batch, chunk) pairs wait for their W (half a
// stage's layers each: 1F1B's first stage's peak activations), and a
// waiting W when no B or F can start at once. Two preferences among passes
// that can start together are tried (B first; or the V's second half's F
// first) and the one that ends sooner kept. With equal times its bubble is
// at most pp - 1 units of one chunk's pass, a sixth of 1F1B's 3 (pp - 1)
// stage passes; built with times near the real ones it stays near that (a
// schedule built for equal times loses most of its gain when B is longer
// than F).
Schedule zero_bubble_v(int pp, int m, const PassRatios& times = {});
// Dispatch on kind; v must be 1 unless kind is Interleaved1F1B (any v) or
// ZeroBubbleV (2).
Schedule build_schedule(ScheduleKind kind, int pp, int m, int v, const PassRatios& ratios = {});

// Most (micro-batch, chunk) pairs whose Forward has run and Backward (or
// BackwardWeight) has not,
// on `stage` at any moment: how many activation sets the stage must hold.
//   GPipe:       m
//   1F1B:        min(m, pp - stage)
//   ZB-H1:       min(m, pp), counted until each W (until each B: 1F1B's
//                min(m, pp - stage))
//   ZB-V:        min(2 m, 2 pp) (micro-batch, chunk) pairs, counted until each W
//   interleaved: min(m * v, warmup + 1) (micro-batch, chunk) pairs, with
//                Megatron's warm-up count warmup = (pp - stage - 1) * 2 + (v - 1) * pp
//                (1F1B's pp - stage - 1 when v == 1); the +1 is the steady
//                phase's forward that runs before its paired backward.
int max_in_flight(ScheduleKind kind, int pp, int m, int v, int stage);
std::vector<int> max_in_flight_per_stage(ScheduleKind kind, int pp, int m, int v);

// The peak in-flight count each stage of `schedule` actually reaches.
std::vector<int> peak_in_flight(const Schedule& schedule);

const char* to_string(ActionKind kind);
std::string to_string(const Action& action);  // e.g. "Forward(mb 3, chunk 1)"

}  // namespace loom::pp
