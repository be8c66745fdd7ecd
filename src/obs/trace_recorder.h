// TraceRecorder: one rank's timeline, recorded cheaply enough to leave on.
//
// Spans go into a vector reserved up front (no allocation while recording;
// once it is full, further spans are counted as dropped). Times are
// steady-clock nanoseconds since an origin that every rank resets right
// after a barrier, so the ranks of one machine line up. Names must be
// string literals (or outlive the recorder): only the pointer is stored.
//
//   TraceRecorder trace(rank, {dp, tp, pp});
//   world.barrier(); trace.set_origin_now();
//   { ScopedSpan s(&trace, "forward", SpanKind::forward, CommGroup::none, mb); ... }
//   auto id = trace.begin("all_reduce grads", SpanKind::comm, CommGroup::dp, kAsyncCommTrack);
//   ... trace.end(id);
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "obs/trace_span.h"

namespace loom {
class FlightRecorder;
}

namespace loom::obs {

struct GridPlace {
  int dp = 0, tp = 0, pp = 0;
};

class TraceRecorder {
 public:
  using SpanId = uint32_t;
  static constexpr SpanId kNotRecorded = UINT32_MAX;

  // Room for `capacity` spans (40 bytes each; 65536 is a few hundred steps of
  // a deep pipeline: clear() between steps you do not want). 0 records nothing
  // (every call is a cheap no-op).
  TraceRecorder(int rank, GridPlace place, size_t capacity = size_t(1) << 16);

  void set_origin_now() { origin_ = Clock::now(); }
  // Every span begun is also noted in `flight` (what a hung rank did last).
  void set_flight(FlightRecorder* flight) { flight_ = flight; }
  double now_us() const;

  SpanId begin(const char* name, SpanKind kind, CommGroup group = CommGroup::none, int track = kComputeTrack,
               int index = -1);
  void end(SpanId id);
  void end();  // the innermost span still open
  void instant(const char* name, SpanKind kind = SpanKind::other, int track = kComputeTrack);

  // Forgets every span (e.g. to keep only the last steps); keeps the origin.
  void clear();
  size_t size() const { return spans_.size(); }
  uint64_t dropped() const { return dropped_; }

  // This rank's spans as bytes (see chrome_trace.h to merge them), and as a
  // value. Spans still open end now.
  std::vector<uint8_t> serialize() const;
  RankTrace snapshot() const;
  // The spans ended since the last call, in the order they began, up to the
  // first one still open (it and those after it come in a later call);
  // instants included. For writing the trace as it grows (trace_file.h).
  std::vector<TraceSpan> take_finished();
  const GridPlace& place() const { return place_; }
  int rank() const { return rank_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Raw {
    const char* name;
    SpanKind kind;
    CommGroup group;
    bool instant;
    int16_t track;
    int32_t index;
    int64_t begin_ns, end_ns;  // end_ns < 0 while open
  };
  int64_t now_ns() const;

  int rank_;
  GridPlace place_;
  size_t capacity_;
  Clock::time_point origin_;
  std::vector<Raw> spans_;
  std::vector<SpanId> open_;  // begun, not yet ended, innermost last
  size_t taken_ = 0;          // spans before this index were handed out by take_finished()
  uint64_t dropped_ = 0;
  FlightRecorder* flight_ = nullptr;
};

// RAII span; a null recorder makes it a no-op, so code can trace optionally.
class ScopedSpan {
 public:
  ScopedSpan(TraceRecorder* recorder, const char* name, SpanKind kind, CommGroup group = CommGroup::none,
             int index = -1)
      : recorder_(recorder), id_(recorder ? recorder->begin(name, kind, group, kComputeTrack, index) : 0) {}
  ~ScopedSpan() {
    if (recorder_) recorder_->end(id_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  TraceRecorder* recorder_;
  TraceRecorder::SpanId id_;
};

// Bytes back to a RankTrace; throws Error on bytes serialize() did not make.
RankTrace deserialize_rank_trace(const std::vector<uint8_t>& bytes);

}  // namespace loom::obs
