// The vocabulary of a timeline: what kind of work a span is, which group a
// communication ran in, and a finished span as readers see it.
#pragma once

#include <string>
#include <vector>

namespace loom::obs {

enum class SpanKind : unsigned char {
  forward,    // forward of a micro-batch (or a chunk of one)
  backward,
  comm,       // a collective or send/recv; blocking on the compute track, or async on its own track
  wait,       // waiting for a non-blocking communication to finish (exposed communication)
  bubble,     // pipeline idle: waiting for a neighbour stage's activation or gradient
  optimizer,  // clipping, AdamW, ZeRO parameter gather
  data,       // reading the batch
  step,       // a whole training step (its index is the step number)
  other,
  backward_weight,  // a zero-bubble schedule's weight-gradient pass (W), apart from the input pass (backward)
};
inline constexpr int kSpanKindCount = 10;
const char* span_kind_name(SpanKind k);
bool parse_span_kind(const std::string& s, SpanKind* out);

enum class CommGroup : unsigned char { none, tp, dp, pp, world };
const char* comm_group_name(CommGroup g);  // "" for none
bool parse_comm_group(const std::string& s, CommGroup* out);

// Tracks (Chrome trace "tid") of one rank: the compute stream, where spans
// nest and block one another, and the communication that runs beside it.
inline constexpr int kComputeTrack = 0;
inline constexpr int kAsyncCommTrack = 1;

struct TraceSpan {
  std::string name;
  SpanKind kind = SpanKind::other;
  CommGroup group = CommGroup::none;
  int track = kComputeTrack;
  int index = -1;  // micro-batch for forward/backward, step number for step, else -1
  double begin_us = 0, end_us = 0;  // since the common origin
  bool instant = false;
  double duration_us() const { return end_us - begin_us; }
};

// Every span of one rank, and where the rank sits in the grid.
struct RankTrace {
  int rank = 0;
  int dp = 0, tp = 0, pp = 0;
  unsigned long long dropped = 0;  // spans not recorded because the buffer was full
  std::vector<TraceSpan> spans;
};

}  // namespace loom::obs
