// Helpers of the bounded, seeded mutation tests: scratch folders, a seeded
// generator, text mutations, and the one rule every case must keep.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"

namespace loom::test {

inline std::string fuzz_dir(const std::string& name) {
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/test-data/fuzz-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The engine's raw output only (its sequence is the same everywhere).
struct Rng {
  std::mt19937_64 engine;
  explicit Rng(uint64_t seed) : engine(seed) {}
  size_t below(size_t n) { return n ? size_t(engine() % n) : 0; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }
};

// Runs `body`; a UserError is a refusal (fine), any other exception fails
// the case, naming it.
inline void expect_accepted_or_refused(const std::string& what, const std::function<void()>& body, int* refused) {
  try {
    body();
  } catch (const UserError&) {
    ++*refused;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not a user error: " << e.what();
  }
}

inline const std::vector<std::string> kValues = {"-1", "0", "1", "1e308", "-1e308", "nan", "inf", "\"x\"", "\"\"",
                                          "[1, 2]", "true", "{}", "99999999999999999999", "0.5", "-0.0",
                                          "\"../../etc\"", "\"/dev/zero\"", "2147483648", "[]"};

inline std::string mutate_text(Rng& rng, std::string text, const std::vector<std::string>& values) {
  switch (rng.below(5)) {
    case 0:  // a byte changed
      if (!text.empty()) text[rng.below(text.size())] = char(rng.below(256));
      break;
    case 1:  // cut short
      text.resize(rng.below(text.size() + 1));
      break;
    case 2: {  // a value replaced (TOML's `key = value` or JSON's `"key": value`)
      size_t eq = text.find_first_of("=:", rng.below(text.size() + 1));
      if (eq != std::string::npos) {
        size_t end = text[eq] == '=' ? text.find('\n', eq) : text.find_first_of(",}\n", eq);
        text = text.substr(0, eq + 1) + " " + rng.pick(values) + (end == std::string::npos ? "" : text.substr(end));
      }
      break;
    }
    case 3: {  // a line repeated
      size_t at = text.find('\n', rng.below(text.size() + 1));
      if (at != std::string::npos) {
        size_t prev = text.rfind('\n', at ? at - 1 : 0);
        text.insert(at + 1, text.substr(prev == std::string::npos ? 0 : prev + 1, at - prev));
      }
      break;
    }
    default:  // a stray line
      text.insert(rng.below(text.size() + 1), "\n" + rng.pick(values) + " = " + rng.pick(values) + "\n");
  }
  return text;
}

}  // namespace loom::test
