#include "obs/chrome_trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/communicator.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "obs/trace_recorder.h"

namespace loom::obs {
namespace {

using nlohmann::json;

const char* track_name(int track) {
  return track == kComputeTrack ? "compute" : track == kAsyncCommTrack ? "communication (async)" : "other";
}

json event(const char* ph, int pid, int tid, double ts) { return json{{"ph", ph}, {"pid", pid}, {"tid", tid}, {"ts", ts}}; }

json span_args(const TraceSpan& s) {
  json args = json::object();
  if (s.group != CommGroup::none) args["group"] = comm_group_name(s.group);
  if (s.index >= 0) args[s.kind == SpanKind::step ? "step" : "mb"] = s.index;
  return args;
}

// B/E events of one track, nested: spans sorted by start (longer first on a
// tie); a span that outlives its parent is cut at the parent's end, so every
// E closes the innermost open B.
void append_track(json& events, int pid, int tid, std::vector<const TraceSpan*> spans) {
  std::stable_sort(spans.begin(), spans.end(), [](const TraceSpan* a, const TraceSpan* b) {
    return a->begin_us != b->begin_us ? a->begin_us < b->begin_us : a->end_us > b->end_us;
  });
  std::vector<double> open_ends;
  auto close_until = [&](double t) {
    while (!open_ends.empty() && open_ends.back() <= t) {
      events.push_back(event("E", pid, tid, open_ends.back()));
      open_ends.pop_back();
    }
  };
  for (const TraceSpan* s : spans) {
    if (s->instant) {
      json e = event("i", pid, tid, s->begin_us);
      e["name"] = s->name, e["cat"] = span_kind_name(s->kind), e["s"] = "t";
      events.push_back(std::move(e));
      continue;
    }
    close_until(s->begin_us);
    double end = std::max(s->begin_us, s->end_us);
    if (!open_ends.empty()) end = std::min(end, open_ends.back());
    json b = event("B", pid, tid, s->begin_us);
    b["name"] = s->name, b["cat"] = span_kind_name(s->kind), b["args"] = span_args(*s);
    events.push_back(std::move(b));
    open_ends.push_back(end);
  }
  close_until(1e300);
}

json metadata(const char* what, int pid, int tid, const std::string& name) {
  return json{{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

std::string chrome_trace_json(const std::vector<RankTrace>& ranks) {
  json events = json::array();
  for (const RankTrace& r : ranks) {
    events.push_back(metadata("process_name", r.rank, 0, strprintf("rank %d (dp %d, tp %d, pp %d)", r.rank, r.dp, r.tp, r.pp)));
    json sort = metadata("process_sort_index", r.rank, 0, "");
    sort["args"] = {{"sort_index", r.rank}};
    events.push_back(std::move(sort));
    std::map<int, std::vector<const TraceSpan*>> by_track;
    for (const TraceSpan& s : r.spans) by_track[s.track].push_back(&s);
    for (auto& [track, spans] : by_track) {
      events.push_back(metadata("thread_name", r.rank, track, track_name(track)));
      append_track(events, r.rank, track, std::move(spans));
    }
  }
  json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  json dropped = json::object();
  for (const RankTrace& r : ranks)
    if (r.dropped) dropped[std::to_string(r.rank)] = r.dropped;
  if (!dropped.empty()) doc["otherData"] = {{"dropped_spans", dropped}};
  return doc.dump() + "\n";
}

void merge_chrome_trace(const std::vector<std::vector<uint8_t>>& per_rank, const std::string& path) {
  std::vector<RankTrace> ranks;
  for (const auto& bytes : per_rank) ranks.push_back(deserialize_rank_trace(bytes));
  std::sort(ranks.begin(), ranks.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  write_file_atomically(path, chrome_trace_json(ranks));
}

std::vector<RankTrace> gather_chrome_trace(Communicator& world, const TraceRecorder& recorder, const std::string& path) {
  std::vector<uint8_t> mine = recorder.serialize();
  int n = world.size();
  // Sizes as two exact 16-bit halves in floats, so no value is ever rounded.
  float size_words[2] = {float(mine.size() >> 16), float(mine.size() & 0xffff)};
  std::vector<float> sizes(2 * size_t(n));
  world.all_gather(size_words, sizes.data(), 2, DType::f32);
  std::vector<size_t> bytes_of(n);
  size_t longest = 0;
  for (int r = 0; r < n; r++) {
    bytes_of[r] = (size_t(sizes[2 * r]) << 16) | size_t(sizes[2 * r + 1]);
    longest = std::max(longest, bytes_of[r]);
  }
  size_t words = (longest + 3) / 4;
  std::vector<float> send(words, 0.0f), all(words * size_t(n));
  std::memcpy(send.data(), mine.data(), mine.size());
  world.all_gather(send.data(), all.data(), words, DType::f32);
  if (world.rank() != 0) return {};
  std::vector<RankTrace> ranks;
  for (int r = 0; r < n; r++) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(all.data() + size_t(r) * words);
    ranks.push_back(deserialize_rank_trace(std::vector<uint8_t>(p, p + bytes_of[r])));
  }
  write_file_atomically(path, chrome_trace_json(ranks));
  return ranks;
}

namespace {
std::vector<RankTrace> read_chrome_trace_events(const std::string& path, std::vector<std::string>* notes);
}  // namespace

std::vector<RankTrace> read_chrome_trace(const std::string& path, std::vector<std::string>* notes) {
  try {
    return read_chrome_trace_events(path, notes);
  } catch (const json::exception& e) {
    throw UserError(strprintf("'%s': an event has a field of the wrong type (%s)", path.c_str(), e.what()));
  }
}

namespace {

std::vector<RankTrace> read_chrome_trace_events(const std::string& path, std::vector<std::string>* notes) {
  std::ifstream in(path);
  LOOM_USER_CHECK(in.good(), "cannot read '%s'", path.c_str());
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  LOOM_USER_CHECK(!doc.is_discarded(), "'%s' is not valid JSON (cut off by a crash?)", path.c_str());
  const json& events = doc.is_array() ? doc : doc.value("traceEvents", json::array());
  LOOM_USER_CHECK(events.is_array(), "'%s' has no traceEvents array", path.c_str());

  std::map<int, RankTrace> ranks;
  std::map<std::pair<int, int>, std::vector<TraceSpan>> open;  // (pid, tid) -> stack
  double last_ts = 0;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    std::string ph = e.value("ph", "");
    int pid = e.value("pid", 0), tid = e.value("tid", 0);
    RankTrace& r = ranks[pid];
    r.rank = pid;
    if (ph == "M") {
      if (e.value("name", "") == "process_name") {
        std::string label = e.contains("args") ? e["args"].value("name", "") : "";
        std::sscanf(label.c_str(), "rank %*d (dp %d, tp %d, pp %d)", &r.dp, &r.tp, &r.pp);
      }
      continue;
    }
    double ts = e.value("ts", 0.0);
    last_ts = std::max(last_ts, ts);
    TraceSpan s;
    s.name = e.value("name", "");
    s.track = tid;
    s.begin_us = s.end_us = ts;
    parse_span_kind(e.value("cat", "other"), &s.kind);
    if (auto a = e.find("args"); a != e.end() && a->is_object()) {
      parse_comm_group(a->value("group", ""), &s.group);
      s.index = a->value(s.kind == SpanKind::step ? "step" : "mb", -1);
    }
    if (ph == "B") {
      open[{pid, tid}].push_back(std::move(s));
    } else if (ph == "E") {
      auto& stack = open[{pid, tid}];
      if (stack.empty()) continue;
      stack.back().end_us = ts;
      r.spans.push_back(std::move(stack.back()));
      stack.pop_back();
    } else if (ph == "X") {
      s.end_us = ts + e.value("dur", 0.0);
      r.spans.push_back(std::move(s));
    } else if (ph == "i" || ph == "I") {
      s.instant = true;
      r.spans.push_back(std::move(s));
    }
  }
  size_t unclosed = 0;
  for (auto& [key, stack] : open)
    for (TraceSpan& s : stack) {
      s.end_us = last_ts;
      ranks[key.first].spans.push_back(std::move(s));
      unclosed++;
    }
  if (unclosed && notes) notes->push_back(strprintf("%s: %zu spans had no end (closed at the last timestamp)", path.c_str(), unclosed));
  std::vector<RankTrace> out;
  for (auto& [pid, r] : ranks) {
    std::sort(r.spans.begin(), r.spans.end(),
              [](const TraceSpan& a, const TraceSpan& b) { return a.begin_us < b.begin_us; });
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace
}  // namespace loom::obs
