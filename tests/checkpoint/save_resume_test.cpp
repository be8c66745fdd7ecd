#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/sha256.h"
#include "checkpoint_test_util.h"
#include "core/check.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using test::ckpt_dir;
using test::slurp;
using test::spit;
using test::spit_manifest;
using test::test_manifest;

// One tensor "w" [4, 3] filled with `value`, and "b" [3].
struct SmallState {
  std::vector<float> w, b;
  explicit SmallState(float value) : w(12, value), b(3, -value) {}
  std::vector<CheckpointPiece> pieces() const { return {{"w", {4, 3}, {}, {}, 0, -1, w.data()}, {"b", {3}, {}, {}, 0, -1, b.data()}}; }
};

std::string save_step(const std::string& root, int64_t step, int keep = 3) {
  SmallState s(static_cast<float>(step));
  return save_checkpoint(root, test_manifest(step), s.pieces(), keep).dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

void flip_byte(const std::string& path, size_t from_end) {
  std::string bytes = slurp(path);
  bytes[bytes.size() - from_end] ^= 0x40;
  spit(path, bytes);
}

TEST(CheckpointSave, ManifestRoundTripsAndKeepsTheLastK) {
  std::string root = ckpt_dir("save-keep");
  for (int64_t step : {10, 20, 30, 40}) save_step(root, step, 2);
  EXPECT_FALSE(fs::exists(root + "/step_000010"));
  EXPECT_FALSE(fs::exists(root + "/step_000020"));
  EXPECT_TRUE(fs::exists(root + "/step_000030"));
  EXPECT_EQ(slurp(root + "/latest"), "step_000040\n");
  ResumeChoice c = resolve_resume("auto", root);
  EXPECT_EQ(c.dir, root + "/step_000040");
  EXPECT_TRUE(c.warnings.empty());
  Checkpoint ckpt = Checkpoint::open(c.dir, true);
  const CheckpointManifest& m = ckpt.manifest();
  CheckpointManifest want = test_manifest(40);
  EXPECT_EQ(m.step, 40);
  EXPECT_EQ(m.config_toml, want.config_toml);
  EXPECT_EQ(m.model, want.model);
  EXPECT_EQ(m.layout.dp, 1);
  EXPECT_EQ(m.layout.zero, 0);
  EXPECT_EQ(m.layout.world_size, 1);
  EXPECT_EQ(m.data.consumed_samples, 320);
  EXPECT_EQ(m.seed, 1337);
  EXPECT_EQ(m.loss_scaler, want.loss_scaler);
  EXPECT_EQ(m.extra, want.extra);
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0].name, "rank_00000.safetensors");
  EXPECT_EQ(m.files[0].sha256, sha256_file(c.dir + "/rank_00000.safetensors"));
  EXPECT_EQ(m.tensors["w"]["global_shape"], nlohmann::json({4, 3}));
  EXPECT_EQ(ckpt.tensors().read_global("w"), std::vector<float>(12, 40.0f));
  EXPECT_EQ(ckpt.tensors().read_global("b"), std::vector<float>(3, -40.0f));
  // Only the manifest and the rank file are left in the folder; no temporary folders in the root.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(c.dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"manifest.json", "manifest.json.sha256", "rank_00000.safetensors"}));
  for (const auto& e : fs::directory_iterator(root)) EXPECT_NE(e.path().filename().string()[0], '.') << e.path();
}

// Four tensor-parallel ranks write concurrently (threads stand in for
// processes); the lead commits; a tp = 1 reader gets whole tensors back.
TEST(CheckpointSave, ManyRanksWriteThenTheLeadCommits) {
  std::string root = ckpt_dir("save-ranks");
  auto model_owner = make_model(ModelConfig{64, 2, 4, 32, 16}, 1, 16);
  StageModule& model = *model_owner;
  model.init_parameters(3);
  const int tp = 4;
  CheckpointWriter w(root, 7);
  std::vector<test::RankPieces> rank_pieces;
  for (int r = 0; r < tp; r++) rank_pieces.push_back(test::tp_pieces(model, tp, r));
  std::vector<std::thread> writers;
  std::vector<FileRecord> records(tp);
  for (int r = 0; r < tp; r++) writers.emplace_back([&, r] { records[r] = w.write_rank_file(r, rank_pieces[r].pieces); });
  for (auto& t : writers) t.join();
  CommitResult done = w.commit(test_manifest(7, {1, 4, 1, 0, "tp-dp-pp", 4}), {0, 1, 2, 3}, 2);
  Checkpoint ckpt = Checkpoint::open(done.dir, true);
  ASSERT_EQ(ckpt.manifest().files.size(), 4u);
  EXPECT_EQ(ckpt.manifest().layout.tp, 4);
  EXPECT_EQ(ckpt.manifest().layout.world_size, 4);
  for (int r = 0; r < tp; r++) {
    EXPECT_EQ(ckpt.manifest().files[r].sha256, records[r].sha256);
    EXPECT_EQ(ckpt.manifest().files[r].bytes, records[r].bytes);
  }
  // The QKV weight of layer 1 is held as 3 pieces by each of the 4 ranks.
  EXPECT_EQ(ckpt.manifest().tensors["h.1.attn.c_attn.weight"]["pieces"].size(), 12u);
  for (size_t i = 0; i < model.layout().params.size(); i++) {
    const ParamSpec& p = model.layout().params[i];
    std::vector<float> got = ckpt.tensors().read_global(p.name);
    ASSERT_EQ(got, std::vector<float>(model.param(int(i)), model.param(int(i)) + p.numel)) << p.name;
  }
  // A tp = 2 rank's share of the QKV weight: its three row blocks.
  const ParamSpec* qkv = model.layout().find("h.0.attn.c_attn.weight");
  const float* data = model.param(int(qkv - model.layout().params.data()));
  std::vector<float> k_half = ckpt.tensors().read_region(qkv->name, {32 + 16, 0}, {16, 32});
  EXPECT_EQ(k_half, std::vector<float>(data + 48 * 32, data + 64 * 32));
}

TEST(CheckpointSave, AFailedCommitLeavesThePreviousCheckpoint) {
  std::string root = ckpt_dir("save-fail");
  save_step(root, 1);
  const std::string good_latest = slurp(root + "/latest");
  // Rank 1 never wrote its file.
  CheckpointWriter w(root, 2);
  SmallState s(2);
  w.write_rank_file(0, s.pieces());
  std::string err = error_of([&] { w.commit(test_manifest(2), {0, 1}, 1); });
  EXPECT_NE(err.find("rank_00001.safetensors"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(root + "/step_000002"));
  EXPECT_EQ(slurp(root + "/latest"), good_latest);
  EXPECT_EQ(checkpoint_problem(root + "/step_000001"), "");
  // Pieces that leave part of a tensor uncovered are refused too.
  CheckpointWriter w3(root, 3);
  std::vector<float> half(6, 1.0f);
  w3.write_rank_file(0, {{"w", {4, 3}, {0, 0}, {2, 3}, 0, -1, half.data()}});
  err = error_of([&] { w3.commit(test_manifest(3), {0}, 1); });
  EXPECT_NE(err.find("'w'"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(root + "/step_000003"));
  EXPECT_EQ(resolve_resume("auto", root).dir, root + "/step_000001");
  // The next good save cleans up what the failed ones left.
  save_step(root, 4);
  EXPECT_FALSE(fs::exists(root + "/.tmp_step_000002"));
  EXPECT_FALSE(fs::exists(root + "/.tmp_step_000003"));
  EXPECT_EQ(resolve_resume("auto", root).dir, root + "/step_000004");
}

TEST(CheckpointSave, LeftoversOfAnInterruptedSaveOfTheSameStepAreDropped) {
  std::string root = ckpt_dir("save-leftover");
  fs::create_directories(root + "/.tmp_step_000005");
  spit(root + "/.tmp_step_000005/rank_00007.safetensors", "junk from a bigger world");
  spit(root + "/.tmp_step_000005/rank_00000.safetensors.tmp.123", "half a file");
  std::string dir = save_step(root, 5);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"manifest.json", "manifest.json.sha256", "rank_00000.safetensors"}));
  EXPECT_EQ(checkpoint_problem(dir), "");
}

TEST(CheckpointSave, SavingAStepAgainReplacesIt) {
  std::string root = ckpt_dir("save-again");
  save_step(root, 5);
  SmallState s(99);
  save_checkpoint(root, test_manifest(5), s.pieces(), 3);
  Checkpoint ckpt = Checkpoint::open(root + "/step_000005", true);
  EXPECT_EQ(ckpt.tensors().read_global("w"), std::vector<float>(12, 99.0f));
  EXPECT_FALSE(fs::exists(root + "/.old_step_000005"));
}

// A process killed at a random moment of a save: the previous checkpoint
// stays good and `auto` finds a good one; the next save cleans up.
TEST(CheckpointSave, AKillDuringSaveLeavesThePreviousCheckpoint) {
  std::string root = ckpt_dir("save-kill");
  save_step(root, 1);
  std::vector<float> big(size_t(8) << 20, 0.25f);  // 32 MB per save
  for (int delay_ms : {0, 5, 20, 60}) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // saves until killed; never returns into the test runner
      try {
        for (int64_t step = 2;; step++)
          save_checkpoint(root, test_manifest(step), {{"w", {int64_t(big.size())}, {}, {}, 0, -1, big.data()}}, 100);
      } catch (...) {
      }
      _exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    EXPECT_EQ(checkpoint_problem(root + "/step_000001"), "") << delay_ms;
    ResumeChoice c = resolve_resume("auto", root);
    EXPECT_FALSE(c.dir.empty());
    EXPECT_EQ(checkpoint_problem(c.dir), "") << c.dir;
  }
  save_step(root, 1000, 1000);
  for (const auto& e : fs::directory_iterator(root)) EXPECT_NE(e.path().filename().string()[0], '.') << e.path();
}

TEST(CheckpointResume, CorruptTruncatedOrHalfWrittenCheckpointsAreSkippedAndNamed) {
  std::string root = ckpt_dir("resume-damage");
  for (int64_t step : {1, 2, 3, 4}) save_step(root, step, 10);
  flip_byte(root + "/step_000004/rank_00000.safetensors", 3);  // a bit flip in the data
  std::string bytes = slurp(root + "/step_000003/rank_00000.safetensors");
  spit(root + "/step_000003/rank_00000.safetensors", bytes.substr(0, bytes.size() - 8));  // truncated
  fs::remove(root + "/step_000002/manifest.json");  // half-written
  ResumeChoice c = resolve_resume("auto", root);
  EXPECT_EQ(c.dir, root + "/step_000001");
  ASSERT_EQ(c.warnings.size(), 3u);
  EXPECT_NE(c.warnings[0].find("step_000004/rank_00000.safetensors' is corrupt"), std::string::npos) << c.warnings[0];
  EXPECT_NE(c.warnings[1].find("step_000003/rank_00000.safetensors' is truncated"), std::string::npos) << c.warnings[1];
  EXPECT_NE(c.warnings[2].find("step_000002' has no readable manifest.json"), std::string::npos) << c.warnings[2];
  // Named explicitly, a damaged checkpoint stops the run, naming the file.
  std::string err = error_of([&] { resolve_resume(root + "/step_000004", root); });
  EXPECT_NE(err.find("step_000004/rank_00000.safetensors"), std::string::npos) << err;
  err = error_of([&] { resolve_resume(root + "/step_000003", root); });
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_EQ(resolve_resume(root + "/step_000001", root).dir, root + "/step_000001");
  // A root given as the path follows its `latest` strictly.
  EXPECT_NE(error_of([&] { resolve_resume(root, ""); }).find("step_000004"), std::string::npos);
  // Nothing good at all: auto refuses naming every problem; auto-or-fresh
  // starts afresh with every problem reported.
  flip_byte(root + "/step_000001/rank_00000.safetensors", 1);
  EXPECT_NE(error_of([&] { resolve_resume("auto", root); }).find("step_000001/rank_00000.safetensors' is corrupt"),
            std::string::npos);
  c = resolve_resume("auto-or-fresh", root);
  EXPECT_EQ(c.dir, "");
  EXPECT_EQ(c.warnings.size(), 4u);
}

TEST(CheckpointResume, BadManifestsAndMissingShardsAreNamed) {
  std::string root = ckpt_dir("resume-manifest");
  std::string dir = save_step(root, 1);
  const std::string manifest = slurp(dir + "/manifest.json");
  spit_manifest(dir, "{\"format\": \"loom-checkpoint\", ");
  std::string err = error_of([&] { resolve_resume(dir, ""); });
  EXPECT_NE(err.find(dir + "/manifest.json"), std::string::npos) << err;
  EXPECT_NE(err.find("does not parse"), std::string::npos) << err;
  spit_manifest(dir, "{\"format\": \"loom-checkpoint\", \"version\": 1}");
  EXPECT_NE(error_of([&] { resolve_resume(dir, ""); }).find("missing field 'step'"), std::string::npos);
  spit_manifest(dir, manifest);
  fs::remove(dir + "/rank_00000.safetensors");
  err = error_of([&] { resolve_resume(dir, ""); });
  EXPECT_NE(err.find("rank_00000.safetensors' is missing"), std::string::npos) << err;
  EXPECT_NE(error_of([&] { resolve_resume(root + "/step_000777", ""); }).find("does not exist"), std::string::npos);
  EXPECT_EQ(resolve_resume("none", root).dir, "");
  EXPECT_EQ(resolve_resume("auto", ckpt_dir("resume-empty")).dir, "");
}

// Every checkpoint damaged: auto refuses, naming each and why; auto-or-fresh
// starts afresh, with the same names as warnings.
TEST(CheckpointResume, OnlyDamagedCheckpointsAreRefusedUnlessFreshIsAskedFor) {
  std::string root = ckpt_dir("resume-all-damaged");
  for (int64_t step : {1, 2}) save_step(root, step, 10);
  for (const char* step : {"/step_000001", "/step_000002"}) spit(root + step + "/manifest.json", "{");
  const std::string err = error_of([&] { resolve_resume("auto", root); });
  EXPECT_NE(err.find("every checkpoint under"), std::string::npos) << err;
  EXPECT_NE(err.find("step_000001"), std::string::npos) << err;
  EXPECT_NE(err.find("step_000002"), std::string::npos) << err;
  EXPECT_NE(err.find("auto-or-fresh"), std::string::npos) << err;
  ResumeChoice fresh = resolve_resume("auto-or-fresh", root);
  EXPECT_EQ(fresh.dir, "");
  EXPECT_EQ(fresh.warnings.size(), 2u);
}

// Fields out of range or contradicting each other: the manifest is refused
// naming the field, before anything is loaded.
TEST(CheckpointResume, AManifestOutOfRangeIsRefusedNamingTheField) {
  std::string root = ckpt_dir("resume-ranges");
  std::string dir = save_step(root, 1);
  const nlohmann::json good = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  struct Case {
    const char* pointer;
    nlohmann::json value;
    const char* field;
  } cases[] = {
      {"/step", -1, "'step'"},
      {"/step", int64_t(1) << 50, "'step'"},
      {"/layout/dp", 0, "'layout.dp'"},
      {"/layout/zero", 7, "'layout.zero'"},
      {"/layout/world_size", 5, "'layout.world_size'"},
      // Not truncated into range: 2^32 + 2 is not 2, 1.5 is not 1; no product overflows.
      {"/layout/dp", uint64_t(1) << 32 | 2, "'layout.dp' must be an integer in [1, 16777216]"},
      {"/layout/tp", 2147483647, "'layout.tp' must be an integer"},
      {"/version", 1.5, "'version' must be an integer"},
      {"/data/step", 2, "'data.step'"},
      {"/data/consumed_samples", -4, "'data.consumed_samples'"},
      {"/extra/adam_steps", -1, "'extra.adam_steps'"},
      {"/extra/data_skip", "lots", "'extra.data_skip'"},
      {"/extra/loss_guard", "history", "'extra.loss_guard'"},
      {"/files/0/name", "rank_00001.safetensors", "below layout.world_size = 1"},
      {"/files/0/name", "../rank_00000.safetensors", "is not rank_NNNNN.safetensors"},
      {"/files/0/sha256", "abc", "files[].sha256"},
      // ZeRO over 2 ranks: both write, but one file is listed.
      {"/layout", {{"dp", 2}, {"tp", 1}, {"pp", 1}, {"zero", 1}, {"order", "tp-dp-pp"}, {"world_size", 2}},
       "writes 2 rank files, 'files' lists 1"},
      {"/version", 3, "format version 3"},
  };
  for (const Case& c : cases) {
    nlohmann::json bad = good;
    bad[nlohmann::json::json_pointer(c.pointer)] = c.value;
    spit_manifest(dir, bad.dump());
    const std::string err = error_of([&] { resolve_resume(dir, ""); });
    EXPECT_NE(err.find(c.field), std::string::npos) << c.pointer << ": " << err;
    EXPECT_NE(err.find("manifest.json"), std::string::npos) << c.pointer << ": " << err;
  }
  spit_manifest(dir, good.dump());
  EXPECT_EQ(resolve_resume(dir, "").dir, dir);
}

// The manifest is covered by its own hash, as the rank files are by theirs:
// an edit is caught, and so is a missing hash; `sha256sum -c` reads the note.
TEST(CheckpointResume, AnEditedManifestIsCaughtByItsHash) {
  std::string root = ckpt_dir("resume-manifest-hash");
  std::string dir = save_step(root, 2);
  const std::string good = slurp(dir + "/manifest.json");
  EXPECT_EQ(test::run_command("cd '" + dir + "' && sha256sum -c --quiet manifest.json.sha256 2>&1").code, 0);
  std::string edited = good;
  const size_t at = edited.find("\"consumed_samples\": 16");
  ASSERT_NE(at, std::string::npos) << good;
  edited.replace(at, 22, "\"consumed_samples\": 17");
  spit(dir + "/manifest.json", edited);
  std::string err = error_of([&] { resolve_resume(dir, ""); });
  EXPECT_NE(err.find("manifest.json' was changed after it was written"), std::string::npos) << err;
  EXPECT_NE(error_of([&] { Checkpoint::open(dir); }).find("was changed after"), std::string::npos);
  // auto skips it as damaged and says why.
  save_step(root, 1);
  spit(root + "/latest", "step_000002\n");
  ResumeChoice c = resolve_resume("auto", root);
  EXPECT_EQ(c.dir, root + "/step_000001");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("was changed after it was written"), std::string::npos) << c.warnings[0];
  // No hash at all: a version-2 manifest is not trusted; one of version 1
  // (written by loom before the hash) still is.
  spit(dir + "/manifest.json", good);
  fs::remove(dir + "/manifest.json.sha256");
  err = error_of([&] { resolve_resume(dir, ""); });
  EXPECT_NE(err.find("has no manifest.json.sha256"), std::string::npos) << err;
  nlohmann::json v1 = nlohmann::json::parse(good);
  v1["version"] = 1;
  spit(dir + "/manifest.json", v1.dump());
  EXPECT_EQ(resolve_resume(dir, "").dir, dir);
  spit(dir + "/manifest.json.sha256", "not a hash\n");
  EXPECT_NE(error_of([&] { resolve_resume(dir, ""); }).find("does not hold a sha256"), std::string::npos);
}

// A folder (or device, or pipe) under the manifest's names is named, and
// auto skips that checkpoint as damaged.
TEST(CheckpointResume, AManifestThatIsNotAFileIsNamed) {
  std::string root = ckpt_dir("resume-manifest-folder");
  save_step(root, 1);
  std::string dir = save_step(root, 2);
  fs::remove(dir + "/manifest.json.sha256");
  fs::create_directory(dir + "/manifest.json.sha256");
  std::string err = error_of([&] { resolve_resume(dir, ""); });
  EXPECT_NE(err.find("manifest.json.sha256' is not a regular file (a folder)"), std::string::npos) << err;
  ResumeChoice c = resolve_resume("auto", root);
  EXPECT_EQ(c.dir, root + "/step_000001");
  fs::remove(dir + "/manifest.json");
  fs::create_directory(dir + "/manifest.json");
  err = error_of([&] { resolve_resume(dir, ""); });
  EXPECT_NE(err.find("manifest.json' is not a regular file (a folder)"), std::string::npos) << err;
}

// Two rank files, rows split: the manifest's index of pieces must agree with
// the files, and the files must cover every element, before the run trusts it.
TEST(CheckpointResume, AManifestWhoseTensorIndexDisagreesWithTheFilesIsRefused) {
  std::string root = ckpt_dir("resume-index");
  std::vector<float> w(24, 0.5f);
  CheckpointWriter writer(root, 3);
  for (int r = 0; r < 2; r++)
    writer.write_rank_file(r, {{"w", {4, 6}, {2 * r, 0}, {2, 6}, 0, -1, w.data() + 12 * r}});
  CheckpointManifest m = test_manifest(3);
  m.layout = {1, 2, 1, 0, "tp-dp-pp", 2};
  const std::string dir = writer.commit(m, {0, 1}, 2).dir;
  EXPECT_EQ(Checkpoint::open(dir, true).tensors().read_global("w"), w);
  const nlohmann::json good = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    const char* says;
  } cases[] = {
      {[](nlohmann::json& j) { j["tensors"]["v"] = j["tensors"]["w"]; }, "lists tensor 'v', which no rank file holds"},
      {[](nlohmann::json& j) { j["tensors"].erase("w"); }, "does not list tensor 'w'"},
      {[](nlohmann::json& j) { j["tensors"]["w"]["global_shape"] = {4, 7}; }, "has global shape [4,7] there"},
      {[](nlohmann::json& j) { j["tensors"]["w"]["pieces"][1]["offset"] = {1, 0}; }, "piece 1 is"},
      {[](nlohmann::json& j) { j["tensors"]["w"]["pieces"].erase(1); }, "lacks the piece"},
      {[](nlohmann::json& j) { j["tensors"] = "w"; }, "'tensors' must be an object"},
      {[](nlohmann::json& j) { j["tensors"]["w"] = 5; }, "needs 'global_shape'"},
      // A file left out: the layout no longer accounts for the files.
      {[](nlohmann::json& j) { j["files"].erase(1); }, "writes 2 rank files, 'files' lists 1"},
      // ... and with the layout and index edited to match: the index agrees,
      // but half of "w" is held by no file.
      {[](nlohmann::json& j) {
         j["files"].erase(1);
         j["layout"] = {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero", 0}, {"order", "tp-dp-pp"}, {"world_size", 1}};
         j["tensors"]["w"]["pieces"].erase(1);
       },
       "no piece holds element [2,0]"},
  };
  for (const Case& c : cases) {
    nlohmann::json bad = good;
    c.edit(bad);
    spit_manifest(dir, bad.dump(1));
    const std::string err = error_of([&] { Checkpoint::open(dir, true); });
    EXPECT_NE(err.find(c.says), std::string::npos) << c.says << ": " << err;
  }
  spit_manifest(dir, good.dump(1));
  EXPECT_EQ(Checkpoint::open(dir, true).tensors().read_global("w"), w);
}

TEST(CheckpointResume, ADifferentModelIsRefusedNamingTheField) {
  std::string root = ckpt_dir("resume-model");
  Checkpoint ckpt = Checkpoint::open(save_step(root, 1));
  ckpt.check_model({{"n_layer", 2}, {"d_model", 32}});
  std::string err = error_of([&] { ckpt.check_model({{"n_layer", 4}, {"d_model", 32}}); });
  EXPECT_NE(err.find("model.n_layer"), std::string::npos) << err;
  EXPECT_NE(err.find("manifest.json"), std::string::npos) << err;
  EXPECT_NE(error_of([&] { ckpt.check_model({{"vocab_size", 256}}); }).find("model.vocab_size"), std::string::npos);
}

// `latest` marks the current history: after resuming from step 2 and saving
// step 3, an older run's step 5 is neither taken by auto nor pruned.
TEST(CheckpointResume, AutoFollowsLatestNotAnAbandonedHistory) {
  std::string root = ckpt_dir("resume-history");
  for (int64_t step : {1, 2, 5}) save_step(root, step, 10);
  save_step(root, 3, 2);  // the resumed run
  EXPECT_EQ(resolve_resume("auto", root).dir, root + "/step_000003");
  EXPECT_FALSE(fs::exists(root + "/step_000001"));  // beyond the last 2 of this history
  EXPECT_TRUE(fs::exists(root + "/step_000005"));
  // Without `latest`, the newest good one, with a warning.
  fs::remove(root + "/latest");
  ResumeChoice c = resolve_resume("auto", root);
  EXPECT_EQ(c.dir, root + "/step_000005");
  EXPECT_EQ(c.warnings.size(), 1u);
}

}  // namespace
}  // namespace loom
