// dataset.toml: what `loom prepare` wrote into its output folder, written
// last, so a folder with a manifest holds a complete dataset.
//
//   tokenizer.model, train_000000.bin ..., val_000000.bin ..., dataset.toml
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct SplitManifest {
  std::vector<std::string> shards;  // file names inside the folder, in order
  uint64_t tokens = 0;
  uint64_t documents = 0;
};

struct DatasetManifest {
  std::string tokenizer = "tokenizer.model";
  uint64_t tokenizer_hash = 0;  // content_hash of the model file
  uint32_t vocab_size = 0;
  uint32_t eos_id = 0;
  uint64_t dataset_id = 0;       // stamp of the inputs and options; in every shard header
  uint64_t tokenizer_stamp = 0;  // inputs and options the tokenizer was made from
  std::string input;             // the input as given, for people
  uint64_t input_bytes = 0;
  SplitManifest train, val;
};

constexpr const char* kManifestName = "dataset.toml";

// Writes dir/dataset.toml atomically.
void write_dataset_manifest(const std::string& dir, const DatasetManifest& m);
// Reads dir/dataset.toml; throws UserError naming the file if it is missing
// (with a hint to run `loom prepare`) or malformed.
DatasetManifest read_dataset_manifest(const std::string& dir);

}  // namespace loom
