#include "cli/command_util.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/rng.h"
#include "core/check.h"

namespace loom::cli {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

double json_number(const std::string& line, const char* key) {
  std::string k = std::string("\"") + key + "\"";
  size_t at = line.find(k);
  if (at == std::string::npos) return -1;
  at = line.find(':', at);
  return at == std::string::npos ? -1 : std::atof(line.c_str() + at + 1);
}

CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) r.output += buf;
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string run_for_json(const std::string& command) {
  const CommandResult r = run_command(command);
  const std::string& out = r.output;
  size_t brace = out.rfind('{');
  if (r.status != 0 || brace == std::string::npos) {
    std::fprintf(stderr, "bench: command failed (status %d): %s\n%s", r.status, command.c_str(), out.c_str());
    return "";
  }
  return out.substr(brace, out.find('\n', brace) - brace);
}

std::string mpirun_prefix(int ranks, int threads_per_rank) {
  if (::geteuid() == 0) {
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  return strprintf("OMP_NUM_THREADS=%d mpirun --oversubscribe --bind-to none -np %d ", threads_per_rank, ranks);
}

MpiFigures measure_all_reduce(const std::string& launcher, const std::string& max_bytes) {
  const CommandResult r = run_command(launcher + " '" + self_exe() + "' bench comm-child --min-bytes 4K --max-bytes " +
                                      max_bytes + " 2>&1");
  MpiFigures f;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    unsigned long long bytes, floats;
    char op[32];
    double us, algbw, busbw;
    if (std::sscanf(line.c_str(), "%llu %llu %31s %lf %lf %lf", &bytes, &floats, op, &us, &algbw, &busbw) != 6)
      continue;
    if (std::strcmp(op, "all_reduce") != 0) continue;
    if (bytes == 4096) f.latency_s = us * 1e-6 / 2;
    // The largest size comes last; a 2-rank all-reduce moves 2 (n - 1) / n = 1 buffer per rank.
    f.bus_bytes_per_s = double(bytes) / (us * 1e-6);
  }
  f.ok = r.status == 0 && f.bus_bytes_per_s > 0;
  return f;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  LOOM_CHECK(n > 0, "cannot read /proc/self/exe");
  return std::string(buf, size_t(n));
}

int int_option(const std::string& text, const char* command, const char* flag, int min, int max) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  LOOM_USER_CHECK(!text.empty() && *end == 0 && errno == 0 && v >= min && v <= max,
                  "%s: %s must be an integer in [%d, %d], got '%s'", command, flag, min, max, text.c_str());
  return int(v);
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void random_batch(int vocab, std::vector<int32_t>* tokens, std::vector<int32_t>* targets) {
  for (size_t i = 0; i < tokens->size(); i++) {
    (*tokens)[i] = int32_t(rng_uniform(7, 1, i) * vocab);
    (*targets)[i] = int32_t(rng_uniform(7, 2, i) * vocab);
  }
}

}  // namespace loom::cli
