#include "checkpoint/checkpoint_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/sharded_tensors.h"
#include "checkpoint/tensor_index.h"
#include "core/atomic_file.h"
#include "core/check.h"

namespace loom {
namespace {

const char* kHashNote = ".sha256";  // suffix of the note write_rank_file leaves beside its file

void make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LOOM_USER_CHECK(!ec, "cannot create checkpoint folder '%s': %s", dir.c_str(), ec.message().c_str());
}

FileRecord read_hash_note(const std::string& dir, const std::string& name) {
  std::string note = dir + "/" + name + kHashNote;
  std::ifstream in(note);
  FileRecord r;
  r.name = name;
  LOOM_USER_CHECK(in >> r.sha256 >> r.bytes && r.sha256.size() == 64,
                  "checkpoint file '%s/%s' was not finished by its writer (no valid '%s')", dir.c_str(), name.c_str(),
                  note.c_str());
  struct stat st;
  LOOM_USER_CHECK(::stat((dir + "/" + name).c_str(), &st) == 0, "checkpoint file '%s/%s' is missing", dir.c_str(),
                  name.c_str());
  LOOM_USER_CHECK(uint64_t(st.st_size) == r.bytes, "checkpoint file '%s/%s' is %lld bytes, its writer wrote %llu",
                  dir.c_str(), name.c_str(), (long long)st.st_size, (unsigned long long)r.bytes);
  return r;
}

// Names in a folder, read before anything in it is removed.
std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

void rename_or_throw(const std::string& from, const std::string& to) {
  LOOM_USER_CHECK(::rename(from.c_str(), to.c_str()) == 0, "cannot rename checkpoint folder '%s' to '%s': %s",
                  from.c_str(), to.c_str(), std::strerror(errno));
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string root, int64_t step) : root_(std::move(root)), step_(step) {
  LOOM_USER_CHECK(step >= 0, "checkpoint step must be >= 0, got %lld", (long long)step);
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  staging_ = root_ + "/.tmp_" + step_dir_name(step);
  final_ = root_ + "/" + step_dir_name(step);
}

FileRecord CheckpointWriter::write_rank_file(int rank, const std::vector<CheckpointPiece>& pieces,
                                             const std::function<void()>& half_written) const {
  LOOM_USER_CHECK(rank >= 0, "checkpoint writer rank must be >= 0, got %d", rank);
  make_dir(staging_);
  const std::string name = rank_file_name(rank);
  const std::string note = staging_ + "/" + name + kHashNote;
  ::unlink(note.c_str());  // a note left by an interrupted save must not vouch for the new file
  WrittenFile w = write_piece_file(staging_ + "/" + name, pieces, {{"loom.rank", std::to_string(rank)},
                                                                    {"loom.step", std::to_string(step_)}},
                                   half_written);
  write_file_atomically(note, w.sha256 + " " + std::to_string(w.bytes) + "\n");
  return FileRecord{name, w.bytes, w.sha256};
}

std::vector<int> CheckpointWriter::unfinished_ranks(const std::vector<int>& writer_ranks) const {
  std::vector<int> missing;
  struct stat st;
  for (int r : writer_ranks)
    if (::stat((staging_ + "/" + rank_file_name(r) + kHashNote).c_str(), &st) != 0) missing.push_back(r);
  return missing;
}

CommitResult CheckpointWriter::commit(CheckpointManifest manifest, const std::vector<int>& writer_ranks,
                                      int keep_last) const {
  LOOM_USER_CHECK(keep_last >= 1, "checkpoint keep_last must be >= 1, got %d", keep_last);
  LOOM_USER_CHECK(!writer_ranks.empty(), "checkpoint commit of '%s' without writer ranks", final_.c_str());
  if (manifest.step == 0) manifest.step = step_;
  LOOM_USER_CHECK(manifest.step == step_, "checkpoint manifest step %lld does not match the folder '%s'",
                  (long long)manifest.step, final_.c_str());

  // 1. Every expected file is whole; the pieces cover every tensor.
  std::set<std::string> expected = {"manifest.json", kManifestHashFile};
  manifest.files.clear();
  for (int r : writer_ranks) {
    FileRecord rec = read_hash_note(staging_, rank_file_name(r));
    LOOM_USER_CHECK(expected.insert(rec.name).second, "checkpoint commit: rank %d listed twice", r);
    manifest.files.push_back(std::move(rec));
  }
  std::vector<std::string> paths;
  for (const auto& f : manifest.files) paths.push_back(staging_ + "/" + f.name);
  ShardedTensors(paths).check_complete();
  manifest.tensors = tensor_index(staging_, manifest.files);

  // 2. Nothing else goes into the checkpoint: notes, files of an earlier
  //    interrupted save with more ranks, temporary files.
  for (const std::string& name : entries_of(staging_))
    if (!expected.count(name)) remove_tree(staging_ + "/" + name);

  // 3. The manifest (never one a reader would refuse), then the folder under
  //    its final name, then `latest`.
  parse_manifest(manifest_to_text(manifest), staging_ + "/manifest.json");
  write_manifest(staging_, manifest);
  fsync_dir(staging_);
  CommitResult result;
  result.dir = final_;
  std::string replaced;
  struct stat st;
  if (::stat(final_.c_str(), &st) == 0) {  // the same step saved before (a rerun after a resume)
    replaced = root_ + "/.old_" + step_dir_name(step_);
    remove_tree(replaced);
    rename_or_throw(final_, replaced);
  }
  rename_or_throw(staging_, final_);
  fsync_dir(root_);
  write_file_atomically(root_ + "/latest", step_dir_name(step_) + "\n");

  // 4. Only now that the new one is complete: clean up.
  if (!replaced.empty()) remove_tree(replaced), result.removed.push_back(replaced);
  std::vector<StepDir> dirs = list_step_dirs(root_);
  int kept = 0;
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (it->step > step_) continue;
    if (++kept > keep_last) remove_tree(it->path), result.removed.push_back(it->path);
  }
  for (const std::string& name : entries_of(root_))
    if (name.rfind(".tmp_step_", 0) == 0 || name.rfind(".old_step_", 0) == 0)
      remove_tree(root_ + "/" + name), result.removed.push_back(root_ + "/" + name);
  fsync_dir(root_);
  return result;
}

CommitResult save_checkpoint(const std::string& root, const CheckpointManifest& manifest,
                             const std::vector<CheckpointPiece>& pieces, int keep_last) {
  CheckpointWriter w(root, manifest.step);
  w.write_rank_file(0, pieces);
  return w.commit(manifest, {0}, keep_last);
}

}  // namespace loom
