#include "core/check.h"

#include <vector>

namespace loom {

std::string vstrprintf(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::vector<char> buf(size_t(n) + 1);
  std::vsnprintf(buf.data(), buf.size(), fmt, args);
  return std::string(buf.data(), size_t(n));
}

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vstrprintf(fmt, args);
  va_end(args);
  return s;
}

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string msg = vstrprintf(fmt, args);
  va_end(args);
  throw Error(strprintf("%s:%d: check failed: %s: %s", file, line, cond, msg.c_str()));
}

}  // namespace loom
