// Helpers for the data tests: scratch folders under the build tree and a
// small corpus cut from the bundled KJV sample (never the big corpus).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/check.h"
#include "data/prepare.h"

namespace loom::test {

// Removes the folders it was given when the test process ends.
struct ScratchFolders {
  std::vector<std::string> dirs;
  ~ScratchFolders() {
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};

// An empty folder of this name under the build tree, private to this
// process (CTest runs tests in parallel processes), removed at exit.
inline std::string fresh_dir(const std::string& name) {
  static ScratchFolders scratch;
  std::string dir = std::string(LOOM_BINARY_DIR) + "/test-data/" + name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  scratch.dirs.push_back(dir);
  return dir;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string sample_text() { return read_text(LOOM_SOURCE_DIR "/data/sample/kjv.txt"); }

// `docs` documents of about `bytes_each` bytes (cut at line ends) from the
// KJV sample, written as files into `dir`.
inline void write_sample_docs(const std::string& dir, int docs, size_t bytes_each) {
  std::string text = sample_text();
  size_t at = 0;
  for (int i = 0; i < docs; i++) {
    size_t end = text.find('\n', at + bytes_each);
    end = end == std::string::npos ? text.size() : end + 1;
    write_text(dir + "/doc" + std::to_string(100 + i) + ".txt", text.substr(at, end - at));
    at = end;
  }
}

// Options for a quick prepare: a small vocabulary and small shards.
inline PrepareOptions small_prepare(const std::string& input, const std::string& out) {
  PrepareOptions o;
  o.input = input;
  o.out = out;
  o.vocab_size = 400;
  o.val_fraction = 0.1;
  o.shard_tokens = 20000;
  o.threads = 2;
  return o;
}

// The message of the UserError that f throws ("" if none).
template <class F>
std::string user_error(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace loom::test
