#include "obs/trace_recorder.h"

#include "comm/flight_recorder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"

namespace loom::obs {
namespace {

constexpr uint32_t kMagic = 0x52544d4c;  // "LMTR"
constexpr uint32_t kVersion = 1;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

struct Reader {
  const std::vector<uint8_t>& bytes;
  size_t at = 0;
  template <typename T>
  T get() {
    LOOM_CHECK(at + sizeof(T) <= bytes.size(), "trace bytes end early (%zu of %zu)", at, bytes.size());
    T v;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string get_string(size_t n) {
    LOOM_CHECK(at + n <= bytes.size(), "trace bytes end early in a name");
    std::string s(reinterpret_cast<const char*>(bytes.data() + at), n);
    at += n;
    return s;
  }
};

}  // namespace

TraceRecorder::TraceRecorder(int rank, GridPlace place, size_t capacity)
    : rank_(rank), place_(place), capacity_(capacity), origin_(Clock::now()) {
  spans_.reserve(capacity);
  open_.reserve(64);
}

int64_t TraceRecorder::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - origin_).count();
}

double TraceRecorder::now_us() const { return double(now_ns()) * 1e-3; }

TraceRecorder::SpanId TraceRecorder::begin(const char* name, SpanKind kind, CommGroup group, int track, int index) {
  SpanId id = kNotRecorded;
  if (flight_) flight_->note_span(name);
  if (spans_.size() < capacity_) {
    id = SpanId(spans_.size());
    spans_.push_back(Raw{name, kind, group, false, int16_t(track), int32_t(index), now_ns(), -1});
  } else if (capacity_ > 0) {
    dropped_++;
  }
  if (capacity_ > 0) open_.push_back(id);
  return id;
}

void TraceRecorder::end(SpanId id) {
  if (capacity_ == 0) return;
  // Usually the innermost; async spans may end out of order.
  for (size_t i = open_.size(); i-- > 0;)
    if (open_[i] == id) {
      open_.erase(open_.begin() + long(i));
      break;
    }
  if (id != kNotRecorded && id < spans_.size()) spans_[id].end_ns = now_ns();
}

void TraceRecorder::end() {
  if (!open_.empty()) end(open_.back());
}

void TraceRecorder::instant(const char* name, SpanKind kind, int track) {
  if (spans_.size() < capacity_) {
    int64_t t = now_ns();
    spans_.push_back(Raw{name, kind, CommGroup::none, true, int16_t(track), -1, t, t});
  } else if (capacity_ > 0) {
    dropped_++;
  }
}

std::vector<TraceSpan> TraceRecorder::take_finished() {
  std::vector<TraceSpan> out;
  for (; taken_ < spans_.size() && spans_[taken_].end_ns >= 0; taken_++) {
    const Raw& r = spans_[taken_];
    TraceSpan s;
    s.name = r.name, s.kind = r.kind, s.group = r.group, s.track = r.track, s.index = r.index;
    s.instant = r.instant;
    s.begin_us = double(r.begin_ns) * 1e-3, s.end_us = double(r.end_ns) * 1e-3;
    out.push_back(std::move(s));
  }
  return out;
}

void TraceRecorder::clear() {
  spans_.clear();
  open_.clear();
  taken_ = 0;
  dropped_ = 0;
}

std::vector<uint8_t> TraceRecorder::serialize() const {
  std::vector<uint8_t> out;
  out.reserve(48 + spans_.size() * 48);
  put(out, kMagic);
  put(out, kVersion);
  put<int32_t>(out, rank_);
  put<int32_t>(out, place_.dp);
  put<int32_t>(out, place_.tp);
  put<int32_t>(out, place_.pp);
  put<uint64_t>(out, dropped_);
  put<uint32_t>(out, uint32_t(spans_.size()));
  int64_t now = now_ns();
  for (const Raw& s : spans_) {
    put<uint8_t>(out, uint8_t(s.kind));
    put<uint8_t>(out, uint8_t(s.group));
    put<uint8_t>(out, s.instant ? 1 : 0);
    put<int16_t>(out, s.track);
    put<int32_t>(out, s.index);
    put<int64_t>(out, s.begin_ns);
    put<int64_t>(out, s.end_ns < 0 ? now : s.end_ns);
    uint32_t n = uint32_t(std::strlen(s.name));
    put(out, n);
    out.insert(out.end(), s.name, s.name + n);
  }
  return out;
}

RankTrace TraceRecorder::snapshot() const { return deserialize_rank_trace(serialize()); }

RankTrace deserialize_rank_trace(const std::vector<uint8_t>& bytes) {
  Reader r{bytes};
  LOOM_CHECK(r.get<uint32_t>() == kMagic, "not a serialized trace");
  uint32_t version = r.get<uint32_t>();
  LOOM_CHECK(version == kVersion, "trace version %u, expected %u", version, kVersion);
  RankTrace t;
  t.rank = r.get<int32_t>();
  t.dp = r.get<int32_t>();
  t.tp = r.get<int32_t>();
  t.pp = r.get<int32_t>();
  t.dropped = r.get<uint64_t>();
  uint32_t n = r.get<uint32_t>();
  LOOM_CHECK(n <= bytes.size() / 27, "trace claims %u spans in %zu bytes", n, bytes.size());
  t.spans.reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    TraceSpan s;
    uint8_t kind = r.get<uint8_t>(), group = r.get<uint8_t>();
    LOOM_CHECK(kind < kSpanKindCount && group <= uint8_t(CommGroup::world), "bad span kind %u / group %u", kind,
               group);
    s.kind = SpanKind(kind);
    s.group = CommGroup(group);
    s.instant = r.get<uint8_t>() != 0;
    s.track = r.get<int16_t>();
    s.index = r.get<int32_t>();
    s.begin_us = double(r.get<int64_t>()) * 1e-3;
    s.end_us = double(r.get<int64_t>()) * 1e-3;
    s.name = r.get_string(r.get<uint32_t>());
    t.spans.push_back(std::move(s));
  }
  LOOM_CHECK(r.at == bytes.size(), "%zu bytes after the last span", bytes.size() - r.at);
  return t;
}

}  // namespace loom::obs
