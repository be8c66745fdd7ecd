// Reads the token shards that `loom prepare` wrote, memory-mapped.
//
// A training sample is a window of T + 1 tokens (inputs and shifted
// targets); window k of a shard starts at token k*T, so windows tile each
// shard and never straddle two. Training reads windows in SampleOrder (every
// window once per epoch); validation reads the validation windows in order.
// Instruction data (version 2 shards) marks the tokens not learned from:
// their targets are -1.
//
// Padded rows (data.rows = "padded", instruction data only): a row is one
// sample from its first token, cut at T + 1 tokens ("truncate") or left out
// when longer ("skip"), the rest of the row padded with ignored targets, so
// no sample sees another and positions start at 0 for each; rows are read
// in SampleOrder over the samples.
//
// Packed rows (data.rows = "packed"): the samples, cut or left out the same
// way, are laid end to end in dataset order, as many as fit a row (a sample
// of n tokens fills n - 1 of its T places: its last token is only a target,
// which the next document never predicts); the rest of a row is padding.
// Rows are fixed once and read in SampleOrder over the rows, like windows.
// Each token's position in its document comes with the batch, and the model
// keeps the documents apart: the same loss and gradients as padded rows of
// the same samples, in fewer rows.
#pragma once

#include <string>
#include <vector>

#include "data/dataset_manifest.h"
#include "data/sample_order.h"
#include "data/token_shard.h"
#include "data/token_source.h"

namespace loom {

class TokenLoader : public TokenSource {
 public:
  // Opens the dataset in `dir` for windows of seq_len + 1 tokens and checks
  // it: manifest, every shard's header and size, every id below the
  // vocabulary, the tokenizer model matching the shards, the vocabulary
  // fitting the model (model_vocab), at least one batch of training windows
  // and one validation window. Throws UserError naming the file otherwise.
  enum class Rows { windows, padded, packed };
  TokenLoader(const std::string& dir, int batch_size, int seq_len, int model_vocab, Rows rows = Rows::windows,
              bool skip_long = false);

  bool packs() const override { return rows_ == Rows::packed; }
  void train_batch(uint64_t seed, int64_t step, int B, int T, RowRange rows, int32_t* tokens, int32_t* targets,
                   int32_t* positions = nullptr) const override;
  void val_batch(int64_t index, int B, int T, RowRange rows, int32_t* tokens, int32_t* targets,
                 int32_t* positions = nullptr) const override;
  std::string describe() const override;

  const DatasetManifest& manifest() const { return manifest_; }
  uint64_t train_windows() const { return row_count(train_); }
  uint64_t val_windows() const { return row_count(val_); }

 private:
  struct SampleRef {
    uint32_t shard;
    uint64_t start, length;
  };
  struct Split {
    std::vector<ShardFile> shards;
    std::vector<uint64_t> first_window;  // per shard: windows before it (prefix sums)
    uint64_t windows = 0, tokens = 0;
    std::vector<SampleRef> samples;  // padded / packed rows: the samples kept
    uint64_t long_samples = 0;       // longer than T + 1 (truncated or skipped)
    std::vector<uint64_t> packed;    // packed rows: row r holds samples [packed[r], packed[r + 1])
  };
  Split open_split(const SplitManifest& m, const char* name) const;
  void pack_rows(Split& s) const;
  const char* rows_name() const {
    return rows_ == Rows::padded ? "padded" : rows_ == Rows::packed ? "packed" : "windows";
  }
  // tokens/targets of row w of the split: window w, (padded) sample w or
  // (packed) row w with its positions.
  void read_row(const Split& split, uint64_t w, int32_t* tokens, int32_t* targets, int32_t* positions) const;
  void read_window(const Split& split, uint64_t w, int32_t* tokens, int32_t* targets) const;
  void read_sample(const Split& split, uint64_t k, int32_t* tokens, int32_t* targets) const;
  void read_packed(const Split& split, uint64_t r, int32_t* tokens, int32_t* targets, int32_t* positions) const;
  uint64_t row_count(const Split& split) const {
    return rows_ == Rows::padded ? split.samples.size()
           : rows_ == Rows::packed ? split.packed.size() - 1
                                   : split.windows;
  }

  std::string dir_;
  int T_;
  Rows rows_ = Rows::windows;
  bool skip_long_ = false;
  DatasetManifest manifest_;
  Split train_, val_;
  SampleOrder order_{1};
};

}  // namespace loom
