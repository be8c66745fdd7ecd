#include "obs/run_reader.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "obs/chrome_trace.h"
#include "obs/trace_file.h"

namespace loom::obs {
namespace {

using nlohmann::json;

// A JSON file parsed whole; nullopt (with a note) when unreadable.
std::optional<json> read_json(const std::string& file, std::vector<std::string>& notes) {
  std::ifstream in(file);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    notes.push_back(file + ": not a JSON object (cut off or damaged); ignored");
    return std::nullopt;
  }
  return j;
}

void read_metrics(const std::string& file, RunData& run) {
  std::ifstream in(file);
  std::string line;
  std::vector<int> bad_lines;
  int number = 0, replayed = 0;
  bool last_bad = false;
  while (std::getline(in, line)) {
    number++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    last_bad = true;
    if (!j.is_discarded() && j.is_object() && j.contains("resumed_at_step") && j["resumed_at_step"].is_number_integer()) {
      // A run resumed from a checkpoint (a restart) appends from there on:
      // its lines replace those a failed run wrote past the checkpoint.
      const int64_t from = j["resumed_at_step"].get<int64_t>();
      while (!run.steps.empty() && run.steps.back().step > from) run.steps.pop_back(), replayed++;
      last_bad = false;
      continue;
    }
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      bad_lines.push_back(number);
      continue;
    }
    try {
      run.steps.push_back(j.get<StepMetrics>());
      last_bad = false;
    } catch (const json::exception&) {
      bad_lines.push_back(number);
    }
  }
  if (number == 0) run.notes.push_back(file + ": empty (the run stopped before its first step)");
  if (replayed > 0)
    run.notes.push_back(strprintf("%s: %d steps of a failed run replaced by a resumed run's", file.c_str(),
                                  replayed));
  if (!bad_lines.empty() && last_bad && bad_lines.size() == 1 && bad_lines[0] == number)
    run.notes.push_back(strprintf("%s: last line (%d) is cut off (a crashed or still-running run); read %zu steps before it",
                                  file.c_str(), number, run.steps.size()));
  else if (!bad_lines.empty())
    run.notes.push_back(strprintf("%s: %zu unreadable lines skipped (first: line %d)", file.c_str(), bad_lines.size(),
                                  bad_lines[0]));
}

void read_restarts(const std::string& file, RunData& run) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    try {
      run.restarts.push_back(j.get<RestartRecord>());
    } catch (const json::exception&) {
      run.notes.push_back(file + ": a line that is not a restart record; skipped");
    }
  }
}

}  // namespace

RunData read_run_dir(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;  // the error_code forms: a loop or an unreadable entry is "not there", never a throw
  LOOM_USER_CHECK(fs::is_directory(path, ec), "'%s' is not a run directory (no such folder)", path.c_str());
  RunData run;
  run.path = path;
  auto file = [&](const char* name) { return path + "/" + name; };
  auto present = [&](const char* name) {
    bool there = fs::is_regular_file(file(name), ec);
    if (!there) run.missing.push_back(name);
    return there;
  };

  run.has_config = present("config.toml");
  if (run.has_config) {
    try {
      run.config = load_run_config(file("config.toml"), {});
    } catch (const UserError& e) {
      run.notes.push_back(std::string("config.toml: ") + e.what() + "; the advice does not use it");
    }
  }
  // A field of the wrong type makes the whole file a note, like a cut one.
  auto typed = [&](const char* name, auto& out) {
    if (auto j = read_json(file(name), run.notes)) {
      try {
        out = j->get<typename std::decay_t<decltype(out)>::value_type>();
      } catch (const json::exception& e) {
        run.notes.push_back(strprintf("%s: a field has the wrong type (%s); ignored", file(name).c_str(), e.what()));
      }
    }
  };
  if (present("layout.json")) typed("layout.json", run.layout);
  if (present("metrics.jsonl")) read_metrics(file("metrics.jsonl"), run);
  if (fs::is_regular_file(file("elastic.jsonl"), ec)) read_restarts(file("elastic.jsonl"), run);
  if (present("summary.json")) typed("summary.json", run.summary);
  // trace.json unless the ranks' files are newer (a run that crashed after
  // `loom report` merged an earlier state of them).
  bool from_rank_files = !std::filesystem::is_regular_file(file("trace.json"), ec);
  if (!from_rank_files && std::filesystem::is_directory(file("trace"), ec)) {
    const auto merged = std::filesystem::last_write_time(file("trace.json"), ec);
    for (const auto& e : std::filesystem::directory_iterator(file("trace"), ec))
      if (e.is_regular_file(ec) && e.last_write_time(ec) > merged) from_rank_files = true;
  }
  if (from_rank_files) {
    if (!std::filesystem::is_regular_file(file("trace.json"), ec)) run.missing.push_back("trace.json");
    // A run that did not end: each rank's spans up to its last flush.
    run.trace = read_rank_trace_files(file("trace"), &run.notes);
    run.trace_from_rank_files = !run.trace.empty();
    if (!run.trace.empty())
      run.notes.push_back(strprintf("the timeline comes from trace/rank-*.jsonl (%zu ranks, up to each one's last "
                                    "flush): trace.json is missing or older",
                                    run.trace.size()));
  }
  if (!from_rank_files && present("trace.json")) {
    try {
      run.trace = read_chrome_trace(file("trace.json"), &run.notes);
    } catch (const UserError& e) {
      run.notes.push_back(std::string(e.what()) + "; ignored");
    }
  }
  if (!run.summary && !run.steps.empty())
    run.notes.push_back("no summary.json: the run did not finish (crashed, killed or still running)");
  else if (run.summary && !run.summary->finished)
    run.notes.push_back("summary.json says the run did not finish");
  LOOM_USER_CHECK(run.anything(), "nothing readable in '%s' (expected metrics.jsonl, summary.json, layout.json or trace.json)",
                  path.c_str());
  return run;
}

}  // namespace loom::obs
