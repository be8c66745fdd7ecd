// Errors and checks.
//
// Two kinds of failure:
//   UserError  - something the user can fix (bad config, missing file, bad
//                layout). The CLI prints the message and exits with code 2.
//   Error      - a broken internal invariant (a bug). Exit code 1.
// LOOM_CHECK raises Error with file:line; LOOM_USER_CHECK raises UserError.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace loom {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// printf-style formatting into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vstrprintf(const char* fmt, va_list args);

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* fmt,
                               ...) __attribute__((format(printf, 4, 5)));

}  // namespace loom

#define LOOM_CHECK(cond, ...)                                            \
  do {                                                                   \
    if (!(cond)) ::loom::check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

#define LOOM_USER_CHECK(cond, ...)                                        \
  do {                                                                    \
    if (!(cond)) throw ::loom::UserError(::loom::strprintf(__VA_ARGS__)); \
  } while (0)
