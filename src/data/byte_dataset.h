// A byte-level dataset over one text file: every byte is a token (vocab 256).
//
// The file is split once into a training part (the first 1 - val_fraction
// of its bytes) and a validation part (the rest). Training batches are drawn
// at offsets fixed by (seed, step, row), so the data order depends on
// nothing but the seed and step; validation batches are consecutive windows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace loom {

class ByteDataset : public TokenSource {
 public:
  // Throws UserError naming the file if it is missing, unreadable or too short.
  ByteDataset(const std::string& path, float val_fraction, int seq_len);

  void train_batch(uint64_t seed, int64_t step, int B, int T, RowRange rows, int32_t* tokens, int32_t* targets,
                   int32_t* positions = nullptr) const override;
  void val_batch(int64_t index, int B, int T, RowRange rows, int32_t* tokens, int32_t* targets,
                 int32_t* positions = nullptr) const override;
  std::string describe() const override;

  size_t train_size() const { return train_end_; }
  size_t val_size() const { return bytes_.size() - train_end_; }

 private:
  void window(size_t offset, int T, int32_t* tokens, int32_t* targets) const;
  std::string path_;
  std::vector<uint8_t> bytes_;
  size_t train_end_ = 0;
};

}  // namespace loom
