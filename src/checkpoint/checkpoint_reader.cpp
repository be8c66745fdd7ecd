#include "checkpoint/checkpoint_reader.h"

#include <sys/stat.h>

#include <fstream>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/sha256.h"
#include "checkpoint/tensor_index.h"
#include "core/check.h"

namespace loom {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The step `latest` names, or -1 if it is missing or unreadable.
int64_t latest_step(const std::string& root) {
  std::ifstream in(root + "/latest");
  std::string name;
  if (!(in >> name)) return -1;
  return parse_step_dir_name(name);
}

}  // namespace

std::string checkpoint_problem(const std::string& dir, bool check_hashes) {
  CheckpointManifest m;
  try {
    m = read_manifest(dir);
  } catch (const UserError& e) {
    return e.what();
  }
  for (const FileRecord& f : m.files) {
    const std::string path = dir + "/" + f.name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return strprintf("checkpoint file '%s' is missing", path.c_str());
    if (uint64_t(st.st_size) != f.bytes)
      return strprintf("checkpoint file '%s' is %s: %lld bytes, the manifest records %llu", path.c_str(),
                       uint64_t(st.st_size) < f.bytes ? "truncated" : "the wrong size", (long long)st.st_size,
                       (unsigned long long)f.bytes);
  }
  if (check_hashes) {
    for (const FileRecord& f : m.files) {
      const std::string path = dir + "/" + f.name;
      std::string got;
      try {
        got = sha256_file(path);
      } catch (const UserError& e) {
        return e.what();
      }
      if (got != f.sha256)
        return strprintf("checkpoint file '%s' is corrupt: its sha256 is %s, the manifest records %s", path.c_str(),
                         got.c_str(), f.sha256.c_str());
    }
  }
  // The manifest's index of pieces agrees with the files, and the pieces
  // cover every element (the places only: no tensor data is read).
  try {
    std::vector<std::string> paths;
    for (const FileRecord& f : m.files) paths.push_back(dir + "/" + f.name);
    check_tensor_index(m.tensors, tensor_index(dir, m.files), dir + "/manifest.json");
    ShardedTensors(paths).check_complete();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

void verify_checkpoint(const std::string& dir, bool check_hashes) {
  std::string problem = checkpoint_problem(dir, check_hashes);
  if (!problem.empty()) throw UserError(problem);
}

ResumeChoice resolve_resume(const std::string& spec, const std::string& root) {
  ResumeChoice choice;
  if (spec.empty() || spec == "none") return choice;
  if (spec != "auto" && spec != "auto-or-fresh") {
    std::string dir = spec;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (!exists(dir + "/manifest.json") && exists(dir + "/latest")) {
      int64_t step = latest_step(dir);
      LOOM_USER_CHECK(step >= 0, "checkpoint pointer '%s/latest' does not name a step_N folder", dir.c_str());
      dir = strprintf("%s/%s", dir.c_str(), step_dir_name(step).c_str());
    }
    LOOM_USER_CHECK(exists(dir), "checkpoint '%s' does not exist", dir.c_str());
    verify_checkpoint(dir);
    choice.dir = dir;
    return choice;
  }
  const int64_t latest = latest_step(root);
  std::vector<StepDir> dirs = list_step_dirs(root);
  if (latest < 0 && !dirs.empty())
    choice.warnings.push_back(strprintf("no readable '%s/latest'; taking the newest good checkpoint", root.c_str()));
  if (latest >= 0 && !exists(root + "/" + step_dir_name(latest)))
    choice.warnings.push_back(strprintf("'%s/latest' names %s, which does not exist", root.c_str(),
                                        step_dir_name(latest).c_str()));
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (latest >= 0 && it->step > latest) continue;
    std::string problem = checkpoint_problem(it->path);
    if (problem.empty()) {
      choice.dir = it->path;
      return choice;
    }
    choice.warnings.push_back(strprintf("skipping damaged checkpoint %s: %s", it->path.c_str(), problem.c_str()));
  }
  // Checkpoints there, none usable: starting afresh would throw the run away
  // without a word, so only auto-or-fresh does it.
  bool damaged = false;
  for (const std::string& w : choice.warnings) damaged = damaged || w.rfind("skipping damaged", 0) == 0;
  if (damaged && spec == "auto") {
    std::string list;
    for (const std::string& w : choice.warnings)
      if (w.rfind("skipping damaged", 0) == 0) list += "\n  " + w.substr(9);
    throw UserError(strprintf("--resume auto: every checkpoint under %s is damaged:%s\n(--resume auto-or-fresh "
                              "starts afresh instead)",
                              root.c_str(), list.c_str()));
  }
  return choice;
}

Checkpoint Checkpoint::open(const std::string& dir, bool check_hashes) {
  Checkpoint c;
  c.dir_ = dir;
  if (check_hashes) verify_checkpoint(dir);
  c.manifest_ = read_manifest(dir);
  std::vector<std::string> paths;
  for (const FileRecord& f : c.manifest_.files) paths.push_back(dir + "/" + f.name);
  c.tensors_ = std::make_unique<ShardedTensors>(paths);
  return c;
}

void Checkpoint::check_model(const std::map<std::string, int64_t>& expected) const {
  check_model_matches(manifest_, expected, dir_ + "/manifest.json");
}

}  // namespace loom
