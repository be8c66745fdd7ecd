#include "cli/bench_util.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/check.h"

namespace loom::cli {

double json_number(const std::string& line, const char* key) {
  std::string k = std::string("\"") + key + "\"";
  size_t at = line.find(k);
  if (at == std::string::npos) return -1;
  at = line.find(':', at);
  return at == std::string::npos ? -1 : std::atof(line.c_str() + at + 1);
}

std::string run_for_json(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return "";
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  int status = ::pclose(pipe);
  size_t brace = out.rfind('{');
  if (status != 0 || brace == std::string::npos) {
    std::fprintf(stderr, "bench: command failed (status %d): %s\n%s", status, command.c_str(), out.c_str());
    return "";
  }
  return out.substr(brace, out.find('\n', brace) - brace);
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  LOOM_CHECK(n > 0, "cannot read /proc/self/exe");
  return std::string(buf, size_t(n));
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace loom::cli
