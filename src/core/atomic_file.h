// Files that appear whole or not at all.
//
// AtomicFile writes to a temporary name beside the target (unique to this
// process), and commit() fsyncs it, renames it over the target and fsyncs
// the folder. If commit() is never reached (an error, a crash), the target
// is untouched and the temporary file is removed (or, after a crash, left
// under a name no reader looks for).
#pragma once

#include <cstddef>
#include <string>

namespace loom {

class AtomicFile {
 public:
  // Throws UserError naming `path` if the temporary file cannot be created.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
};

// The whole file in one call.
void write_file_atomically(const std::string& path, const void* data, size_t bytes);
inline void write_file_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, text.data(), text.size());
}

}  // namespace loom
