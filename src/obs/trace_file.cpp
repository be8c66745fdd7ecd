#include "obs/trace_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace loom::obs {

using nlohmann::json;

RankTraceFile::RankTraceFile(const std::string& dir, int rank, int dp, int tp, int pp) : rank_(rank) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  path_ = dir + "/rank-" + std::to_string(rank) + ".jsonl";
  file_ = std::fopen(path_.c_str(), "w");
  LOOM_USER_CHECK(file_, "cannot write '%s': %s", path_.c_str(), std::strerror(errno));
  const json name = {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"tid", 0},
                     {"args", {{"name", strprintf("rank %d (dp %d, tp %d, pp %d)", rank, dp, tp, pp)}}}};
  const std::string line = name.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

RankTraceFile::~RankTraceFile() {
  if (file_) std::fclose(file_);
}

void RankTraceFile::append(const std::vector<TraceSpan>& spans) {
  std::string text;
  for (const TraceSpan& s : spans) {
    json e = {{"ph", s.instant ? "i" : "X"}, {"pid", rank_},         {"tid", s.track},
              {"ts", s.begin_us},             {"name", s.name},       {"cat", span_kind_name(s.kind)}};
    if (s.instant) e["s"] = "t";
    else e["dur"] = std::max(0.0, s.end_us - s.begin_us);
    json args = json::object();
    if (s.group != CommGroup::none) args["group"] = comm_group_name(s.group);
    if (s.index >= 0) args[s.kind == SpanKind::step ? "step" : "mb"] = s.index;
    if (!args.empty()) e["args"] = std::move(args);
    text += e.dump() + "\n";
  }
  // One write and a flush: a crash cuts at most the last line.
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

std::vector<RankTrace> read_rank_trace_files(const std::string& dir, std::vector<std::string>* notes) {
  std::vector<RankTrace> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank-", 0) == 0 && e.path().extension() == ".jsonl" && e.is_regular_file(ec)) files.push_back(e.path());
  }
  for (const std::string& file : files) {
    std::ifstream in(file);
    RankTrace r;
    r.rank = -1;
    size_t bad = 0;
    for (std::string line; std::getline(in, line);) {
      const json e = json::parse(line, nullptr, false);
      if (!e.is_object()) {
        bad++;
        continue;
      }
      try {
      const std::string ph = e.value("ph", "");
      r.rank = e.value("pid", r.rank);
      if (ph == "M") {
        const std::string label = e.contains("args") && e["args"].is_object() ? e["args"].value("name", "") : "";
        std::sscanf(label.c_str(), "rank %*d (dp %d, tp %d, pp %d)", &r.dp, &r.tp, &r.pp);
        continue;
      }
      TraceSpan s;
      s.name = e.value("name", "");
      s.track = e.value("tid", 0);
      s.begin_us = e.value("ts", 0.0);
      s.instant = ph == "i";
      s.end_us = s.begin_us + (s.instant ? 0.0 : e.value("dur", 0.0));
      parse_span_kind(e.value("cat", "other"), &s.kind);
      if (auto a = e.find("args"); a != e.end() && a->is_object()) {
        parse_comm_group(a->value("group", ""), &s.group);
        s.index = a->value(s.kind == SpanKind::step ? "step" : "mb", -1);
      }
      r.spans.push_back(std::move(s));
      } catch (const json::exception&) {  // valid JSON, wrong types: as unreadable
        bad++;
      }
    }
    if (bad && notes) notes->push_back(strprintf("%s: %zu unreadable lines skipped (cut off by a crash?)", file.c_str(), bad));
    if (r.rank < 0) continue;
    std::sort(r.spans.begin(), r.spans.end(),
              [](const TraceSpan& a, const TraceSpan& b) { return a.begin_us < b.begin_us; });
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace loom::obs
