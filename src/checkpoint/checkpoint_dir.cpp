#include "checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "core/check.h"

namespace loom {

std::string step_dir_name(int64_t step) { return strprintf("step_%06lld", (long long)step); }

std::string rank_file_name(int rank) { return strprintf("rank_%05d.safetensors", rank); }

int64_t parse_step_dir_name(const std::string& name) {
  const std::string prefix = "step_";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 18) return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); i++) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<StepDir> list_step_dirs(const std::string& root) {
  std::vector<StepDir> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    int64_t step = parse_step_dir_name(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) out.push_back({step, e.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const StepDir& a, const StepDir& b) { return a.step < b.step; });
  return out;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace loom
