// `loom prepare`: text in, tokenizer and token shards out.
//
//   1. read the corpus (a folder of UTF-8 files, or one file) and split it
//      into training and validation by document;
//   2. train a SentencePiece BPE tokenizer on a sample of its lines (or use
//      a given one: a .model, or a Hugging Face tokenizer folder, whose files
//      are copied beside the shards);
//   3. tokenize every document (OpenMP over documents, output in corpus
//      order), after the tokenizer's BOS if it adds one, followed by the
//      end-of-text id;
//   4. write the shards, then dataset.toml, each atomically.
//
// JSON Lines (data/chat_sample.h: prompt / completion pairs, or chat
// messages through a chat template) is read line by line instead: each
// sample's ids with a target mask (only completions and assistant turns are
// learned), written as version 2 shards (data/token_shard.h).
//
// Idempotent: a stamp of the inputs (every document's name and content) and
// options is kept in dataset.toml; when it matches, nothing is redone. The
// tokenizer has a stamp of its own, so changing only the split or the shard
// size does not retrain it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "data/dataset_manifest.h"

namespace loom {

struct PrepareOptions {
  std::string input = ".cache/corpus/text";  // folder or file
  std::string out = ".cache/data";
  std::string tokenizer;  // a tokenizer to use instead of training one (load_tokenizer's paths)
  // JSON Lines input (a .jsonl file, or a folder of them): the chat template
  // for "messages" lines by name (data/chat_template.h); "" = the one the
  // tokenizer's tokenizer_config.json holds, recognised.
  std::string chat_template;
  int vocab_size = 8192;
  double val_fraction = 0.02;               // of the bytes, by document
  uint64_t shard_tokens = uint64_t(1) << 24;  // a shard closes once it holds this many tokens
  double sample_mb = 24;                    // text the tokenizer is trained on
  int threads = 0;                          // 0 = all cores
  bool force = false;                       // redo everything
};

struct PrepareResult {
  bool up_to_date = false;  // nothing needed doing
  bool tokenizer_trained = false;
  DatasetManifest manifest;
  double seconds = 0;
};

// Throws UserError naming the file or option for bad input; writes nothing
// half-way. Progress goes to `log` (nullptr: silent).
PrepareResult prepare_dataset(const PrepareOptions& options, FILE* log);

}  // namespace loom
