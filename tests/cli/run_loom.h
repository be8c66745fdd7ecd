// Runs the `loom` executable as a user would and captures what it prints.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace loom::test {

struct CliResult {
  int code;            // exit code (-1 if killed by a signal)
  std::string output;  // stdout and stderr together
};

// env: VAR=value assignments put before the command ("" = none).
inline CliResult run_loom(const std::string& args, const std::string& env = "") {
  std::string cmd = env + (env.empty() ? "" : " ") + "'" + LOOM_EXE + "' " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace loom::test
