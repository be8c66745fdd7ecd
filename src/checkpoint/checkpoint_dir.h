// Names and file-system steps shared by the checkpoint writer and reader.
//
//   <root>/step_000123/        a complete checkpoint (manifest.json, manifest.json.sha256, rank files)
//   <root>/.tmp_step_000123/   one being written (ignored by readers, removed by the next save)
//   <root>/.old_step_000123/   a replaced one on its way out
//   <root>/latest              "step_000123\n", rewritten atomically after each save
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

std::string step_dir_name(int64_t step);       // "step_000123"
std::string rank_file_name(int rank);          // "rank_00003.safetensors"
// The step of a "step_NNNNNN" name, or -1.
int64_t parse_step_dir_name(const std::string& name);

struct StepDir {
  int64_t step;
  std::string path;
};
// The complete-looking checkpoint folders under root, oldest first (none if
// root does not exist).
std::vector<StepDir> list_step_dirs(const std::string& root);

// fsync of a folder, so that renames and new entries inside it are durable.
void fsync_dir(const std::string& dir);
// Removes a file or folder tree; errors are ignored (best effort clean-up).
void remove_tree(const std::string& path);

}  // namespace loom
