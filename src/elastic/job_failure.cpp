#include "elastic/job_failure.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/check.h"

namespace loom::elastic {

RankDeath parse_rank_death(const std::string& line) {
  // OpenMPI 4: "mpirun noticed that process rank 1 with PID 811 on node vm
  // exited on signal 9 (Killed)."
  static const std::regex death(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)(?: \(([^)]*)\))?)");
  std::smatch m;
  RankDeath d;
  if (!std::regex_search(line, m, death)) return d;
  d.rank = std::stoi(m[1].str());
  d.reason = strprintf("rank %d exited on signal %s", d.rank, m[2].str().c_str());
  if (m[3].matched) d.reason += " (" + m[3].str() + ")";
  return d;
}

std::vector<RankDeath> parse_rank_deaths(const std::string& line) {
  if (RankDeath d = parse_rank_death(line); d.rank >= 0) return {d};
  // Slurm: "srun: error: nid001: tasks 0,2-3: Killed", "srun: error: n1: task 1: Segmentation fault (core dumped)".
  static const std::regex srun(R"(srun: error: (\S+): tasks? ([0-9,-]+): (.+))");
  std::smatch m;
  std::vector<RankDeath> out;
  if (!std::regex_search(line, m, srun)) return out;
  std::string what = m[3].str();
  while (!what.empty() && (what.back() == '\n' || what.back() == '\r')) what.pop_back();
  if (what.rfind("Exited with exit code", 0) == 0 || what.rfind("Terminated", 0) == 0) return out;
  // "0,2-3": ranks and ranges; anything malformed or absurd is skipped.
  auto number = [](const std::string& t, int* v) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
    return ec == std::errc() && end == t.data() + t.size() && *v >= 0 && *v < (1 << 24);
  };
  std::stringstream list(m[2].str());
  for (std::string item; std::getline(list, item, ',');) {
    const size_t dash = item.find('-');
    int first = 0, last = 0;
    if (!number(item.substr(0, dash), &first)) continue;
    if (dash == std::string::npos) last = first;
    else if (!number(item.substr(dash + 1), &last) || last < first || last - first > (1 << 16)) continue;
    for (int r = first; r <= last; r++)
      out.push_back({r, strprintf("rank %d on %s: %s (srun)", r, m[1].str().c_str(), what.c_str())});
  }
  return out;
}

JobFailure classify_failure(int exit_code, const std::string& hang_json, const std::vector<RankDeath>& deaths,
                            const std::string& last_error, const std::string& timeout_line) {
  JobFailure f;
  // A hang first: when the deadline expires, mpirun's own clean-up may also
  // report ranks it killed; the flight records say who held the others up.
  if (!hang_json.empty()) {
    nlohmann::json j = nlohmann::json::parse(hang_json, nullptr, false);
    if (j.is_object() && j.contains("culprits") && j["culprits"].is_array() && !j["culprits"].empty()) {
      for (const auto& c : j["culprits"])
        if (c.is_number_integer()) f.ranks.push_back(c.get<int>());
      if (j.contains("frozen") && j["frozen"].is_array())
        for (const auto& p : j["frozen"])
          if (p.is_object() && p.value("pid", 0) > 0)
            f.frozen.push_back({p.value("rank", -1), p.value("pid", 0), p.value("host", std::string())});
      if (!f.ranks.empty()) {
        f.rank_failure = true;
        // One line: the explanation's lines joined.
        std::string why = j.value("explanation", std::string("a collective timed out"));
        while (!why.empty() && why.back() == '\n') why.pop_back();
        if (why.rfind("flight recorder: ", 0) == 0) why.erase(0, 17);
        if (size_t at = why.find(":\n  "); at != std::string::npos) why.replace(at, 4, ": ");
        for (size_t at; (at = why.find("\n  ")) != std::string::npos;) why.replace(at, 3, "; ");
        f.reason = "hang in " + why;
      }
    }
  }
  if (!f.rank_failure && !deaths.empty()) {
    f.rank_failure = true;
    for (const RankDeath& d : deaths) f.ranks.push_back(d.rank);
    f.reason = deaths.front().reason;
  }
  std::sort(f.ranks.begin(), f.ranks.end());
  f.ranks.erase(std::unique(f.ranks.begin(), f.ranks.end()), f.ranks.end());
  if (!f.rank_failure && !timeout_line.empty()) {
    std::string line = timeout_line;
    if (line.rfind("loom: ", 0) == 0) line.erase(0, 6);
    f.reason = "hang: " + line + " (no rank died and no flight record names a culprit: a lost link or node?)";
  } else if (!f.rank_failure) {
    f.reason = last_error.empty() ? strprintf("the job exited with code %d and no rank failed", exit_code)
                                  : last_error;
  }
  return f;
}

}  // namespace loom::elastic
