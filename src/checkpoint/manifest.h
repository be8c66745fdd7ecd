// manifest.json of a checkpoint directory: what the run was, where it
// stood, and the size and sha256 of every file. manifest.json.sha256 beside
// it ("<hex>  manifest.json", as sha256sum writes it) covers the manifest
// itself, so an edited manifest is caught like an edited rank file.
//
//   {"format": "loom-checkpoint", "version": 1, "step": 123,
//    "config": "<the run's TOML>", "model": {"n_layer": 6, ...},
//    "layout": {"dp": 2, "tp": 2, "pp": 2, "zero": 1, "order": "tp-dp-pp", "world_size": 8},
//    "data": {"step": 123, "consumed_samples": 984},
//    "rng": {"seed": 1337}, "loss_scaler": {...}, "extra": {...},
//    "files": [{"name": "rank_00000.safetensors", "bytes": 123, "sha256": "..."}, ...],
//    "tensors": {"wte.weight": {"global_shape": [V, C],
//                "pieces": [{"file": "rank_00000.safetensors", "key": "wte.weight@0,0", "offset": [0, 0],
//                            "shape": [V/2, C]}, ...]}, ...}}
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom {

// 2: manifest.json.sha256 is required. 1 (loom before it): still read, without it.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr int kOldestCheckpointFormatVersion = 1;
inline constexpr const char* kManifestHashFile = "manifest.json.sha256";

struct CheckpointLayout {
  int dp = 1, tp = 1, pp = 1, zero = 0;
  std::string order = "tp-dp-pp";
  int world_size = 1;
};

struct DataPosition {
  int64_t step = 0;              // the next step to run after resuming
  int64_t consumed_samples = 0;  // training samples read so far
};

struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  std::string sha256;
};

struct CheckpointManifest {
  int version = kCheckpointFormatVersion;
  int64_t step = 0;
  std::string config_toml;               // the run's config, as TOML text
  std::map<std::string, int64_t> model;  // the model section (n_layer, d_model, ...), checked on resume
  std::map<std::string, double> model_real;  // its real-valued fields (LLaMA's rope_theta, norm_eps), not checked
  CheckpointLayout layout;
  DataPosition data;
  int64_t seed = 0;
  nlohmann::json loss_scaler = nlohmann::json::object();  // the caller's, given back as is
  nlohmann::json extra = nlohmann::json::object();        // anything else the trainer wants back
  std::vector<FileRecord> files;                          // filled by CheckpointWriter::commit
  nlohmann::json tensors = nlohmann::json::object();      // index of pieces, filled by commit
};

std::string manifest_to_text(const CheckpointManifest& m);
// Throws UserError naming `path` (the manifest's file) if the text does not
// parse or lacks a field.
CheckpointManifest parse_manifest(const std::string& text, const std::string& path);
// Reads <dir>/manifest.json, checks it against manifest.json.sha256 (which
// format version 2 requires) and parses it. Throws UserError naming the file.
CheckpointManifest read_manifest(const std::string& dir);
// Writes <dir>/manifest.json.sha256 then <dir>/manifest.json, each atomically.
void write_manifest(const std::string& dir, const CheckpointManifest& m);

// The model fields a resumed run must match, e.g. {"n_layer", 6}: throws
// UserError naming the first field that differs (or is missing) and `path`.
void check_model_matches(const CheckpointManifest& m, const std::map<std::string, int64_t>& expected,
                         const std::string& path);

}  // namespace loom
