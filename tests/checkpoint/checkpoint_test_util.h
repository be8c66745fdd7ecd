// Helpers for the checkpoint tests: scratch folders, binary-safe command
// output, a manifest, and a GPT's parameters as a tensor-parallel rank holds
// them (the model's own sharded layout).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/layout_pieces.h"
#include "checkpoint/sha256.h"
#include "checkpoint/tensor_piece.h"
#include "model/stage_module.h"

namespace loom::test {

struct CkptScratch {
  std::vector<std::string> dirs;
  ~CkptScratch() {
    std::error_code ec;
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};

// An empty folder under the build tree, private to this process, removed at exit.
inline std::string ckpt_dir(const std::string& name) {
  static CkptScratch scratch;
  std::string dir = std::string(LOOM_BINARY_DIR) + "/test-data/ckpt-" + name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  scratch.dirs.push_back(dir);
  return dir;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A hand-edited manifest.json with manifest.json.sha256 updated to match, as
// someone re-hashing their edit would: what the manifest's own checks see.
inline void spit_manifest(const std::string& dir, const std::string& text) {
  spit(dir + "/manifest.json", text);
  spit(dir + "/" + kManifestHashFile, sha256_hex(text.data(), text.size()) + "  manifest.json\n");
}

struct CommandResult {
  int code;
  std::string output;  // every byte, NULs included
};

inline CommandResult run_command(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline CommandResult run_loom_cmd(const std::string& args) { return run_command(std::string("'") + LOOM_EXE + "' " + args); }

// The python with transformers: LOOM_HF_PYTHON, else the project's .venv.
inline std::string hf_python() {
  const char* p = std::getenv("LOOM_HF_PYTHON");
  return p && *p ? p : LOOM_SOURCE_DIR "/.venv/bin/python";
}

// Empty when `module` imports in hf_python(); else why not.
inline std::string hf_module_missing(const std::string& module = "transformers") {
  const std::string py = hf_python();
  if (!std::filesystem::exists(py)) return py + " does not exist (scripts/setup.sh makes .venv)";
  auto r = run_command("'" + py + "' -c 'import " + module + "' 2>&1");
  return r.code == 0 ? "" : py + " cannot import " + module + ": " + r.output;
}

inline bool interop_required() {
  const char* v = std::getenv("LOOM_REQUIRE_HF_INTEROP");
  return v && std::string(v) == "1";
}

// Skips the test when transformers is missing, fails it under LOOM_REQUIRE_HF_INTEROP=1.
#define SKIP_WITHOUT_HF_MODULE(module)                                     \
  do {                                                                     \
    const std::string why = ::loom::test::hf_module_missing(module);       \
    if (!why.empty()) {                                                    \
      if (::loom::test::interop_required()) FAIL() << why;                 \
      GTEST_SKIP() << why << " (LOOM_REQUIRE_HF_INTEROP=1 makes it fail)"; \
    }                                                                      \
  } while (0)

// One writing rank unless `layout` says otherwise (the manifest's layout must
// account for the files: every rank under ZeRO, else tp x pp).
inline CheckpointManifest test_manifest(int64_t step, CheckpointLayout layout = {1, 1, 1, 0, "tp-dp-pp", 1}) {
  CheckpointManifest m;
  m.step = step;
  m.config_toml = "[model]\nn_layer = 2\n";
  m.model = {{"n_layer", 2}, {"d_model", 32}};
  m.layout = layout;
  m.data = {step, step * 8};
  m.seed = 1337;
  m.loss_scaler = {{"scale", 65536.0}, {"good_steps", 12}};
  m.extra = {{"optimizer_steps", step}};
  return m;
}

// Tensor-parallel rank `rank` of `tp`: the model's own sharded layout
// (ParamLayout::gpt2 with a ModelShard), its buffer filled from the global
// tensors of a single-process model, and that buffer as checkpoint pieces.
// Not copyable: the pieces point into the buffer.
struct RankPieces {
  ParamLayout layout;
  std::vector<float> buffer;
  std::vector<CheckpointPiece> pieces;
  RankPieces() = default;
  RankPieces(RankPieces&&) = default;
  RankPieces(const RankPieces&) = delete;
};

inline RankPieces tp_pieces(StageModule& model, int tp, int rank) {
  RankPieces out;
  ModelShard shard;
  shard.tp_rank = rank;
  shard.tp_size = tp;
  out.layout = ParamLayout::for_model(model.config(), shard);
  out.buffer.assign(size_t(out.layout.total), 0.f);
  for (size_t i = 0; i < out.layout.params.size(); i++) {
    const ParamSpec& local = out.layout.params[i];
    const ParamSpec* global = model.layout().find(local.name);
    const float* src = model.params() + global->offset;
    const int64_t global_cols = global->shape.size() > 1 ? global->shape[1] : 1;
    for (const TensorPiece& piece : out.layout.pieces(int(i))) {
      const int64_t rows = piece.shape[0], cols = piece.shape.size() > 1 ? piece.shape[1] : 1;
      const int64_t col0 = piece.shape.size() > 1 ? piece.global_offset[1] : 0;
      for (int64_t r = 0; r < rows; r++)
        std::copy_n(src + (piece.global_offset[0] + r) * global_cols + col0, cols,
                    out.buffer.data() + local.offset + piece.local_offset + r * cols);
    }
  }
  out.pieces = layout_pieces(out.layout, out.buffer.data());
  return out;
}

}  // namespace loom::test
