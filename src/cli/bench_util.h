// Small helpers the `loom bench` commands share: running a child command
// and reading the JSON line it prints, this executable's path, peak RSS.
#pragma once

#include <string>

namespace loom::cli {

// The number after "key": in a one-line JSON object (-1 if absent).
double json_number(const std::string& line, const char* key);
// Runs `command` (stderr included if it says 2>&1); returns its last JSON
// line, or "" (after printing the output) if it failed or printed none.
std::string run_for_json(const std::string& command);
std::string self_exe();
double peak_rss_mib();  // of this process so far

}  // namespace loom::cli
