// Where training and validation tokens come from: one small interface over
// the byte-level file (data.format = "bytes") and prepared token shards
// (data.format = "shards").
//
// The global batch of a step is a pure function of (seed, step): it does not
// depend on the parallel layout, on the rank, or on what was read before. A
// data-parallel rank reads only its rows of it; a run resumed at step s reads
// the batches the uninterrupted run would have read, so the data position in
// the training state is just (seed, step).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/run_config.h"

namespace loom {

// Rows [begin, end) of a global batch.
struct RowRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};
// The rows that data-parallel rank `rank` of `ranks` reads: [rank*B/ranks, (rank+1)*B/ranks).
RowRange data_parallel_rows(int batch_size, int rank, int ranks);

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Whether a row holds several documents (packed rows): then the batch
  // calls also give each token's position in its document, and the model
  // keeps the documents apart (StageModule::set_documents).
  virtual bool packs() const { return false; }
  // Rows `rows` of the global training batch of `step` (batch_size windows
  // of T + 1 tokens): tokens and targets (shifted by one), rows.size() x T
  // each; positions the same size where packs() (else not written).
  virtual void train_batch(uint64_t seed, int64_t step, int batch_size, int T, RowRange rows, int32_t* tokens,
                           int32_t* targets, int32_t* positions = nullptr) const = 0;
  // Validation batch `index`: consecutive windows of the validation split,
  // wrapping around, the same for every run.
  virtual void val_batch(int64_t index, int batch_size, int T, RowRange rows, int32_t* tokens, int32_t* targets,
                         int32_t* positions = nullptr) const = 0;
  // One line for the log: what was opened and how big it is.
  virtual std::string describe() const = 0;
};

// Walks the validation batches from the first; each evaluation starts a new one.
class ValidationIterator {
 public:
  ValidationIterator(const TokenSource& source, int batch_size, int T, RowRange rows)
      : source_(source), batch_size_(batch_size), T_(T), rows_(rows) {}
  void next(int32_t* tokens, int32_t* targets, int32_t* positions = nullptr) {
    source_.val_batch(index_++, batch_size_, T_, rows_, tokens, targets, positions);
  }
  int64_t position() const { return index_; }

 private:
  const TokenSource& source_;
  int batch_size_, T_;
  RowRange rows_;
  int64_t index_ = 0;
};

// Opens the data a config names and checks it fits the model and batch
// (vocabulary, at least one batch of training data); throws UserError
// naming the file or field otherwise.
std::unique_ptr<TokenSource> open_token_source(const DataConfig& data, int batch_size, int seq_len, int model_vocab);

}  // namespace loom
