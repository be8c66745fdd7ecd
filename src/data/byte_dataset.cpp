#include "data/byte_dataset.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "core/check.h"
#include "core/regular_file.h"
#include "core/rng.h"

namespace loom {

ByteDataset::ByteDataset(const std::string& path, float val_fraction, int seq_len) : path_(path) {
  require_regular_file(path, "data file (data.path)");
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in.good(), "data file '%s' (data.path) cannot be opened", path.c_str());
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  LOOM_USER_CHECK(!in.bad(), "data file '%s' (data.path) could not be read", path.c_str());
  train_end_ = size_t(double(bytes_.size()) * (1.0 - double(val_fraction)));
  size_t need = size_t(seq_len) + 1;
  LOOM_USER_CHECK(train_end_ >= need && bytes_.size() - train_end_ >= need,
                  "data file '%s' (data.path) is too short: %zu bytes gives %zu training and %zu validation "
                  "bytes, each part needs at least model.seq_len + 1 = %zu",
                  path.c_str(), bytes_.size(), train_end_, bytes_.size() - train_end_, need);
}

void ByteDataset::window(size_t offset, int T, int32_t* tokens, int32_t* targets) const {
  for (int t = 0; t < T; t++) {
    tokens[t] = bytes_[offset + t];
    targets[t] = bytes_[offset + t + 1];
  }
}

void ByteDataset::train_batch(uint64_t seed, int64_t step, int B, int T, RowRange rows, int32_t* tokens,
                              int32_t* targets, int32_t*) const {
  const uint64_t stream = stable_hash("data.train");
  size_t range = train_end_ - size_t(T);  // offsets in [0, range)
  for (int b = rows.begin; b < rows.end; b++) {
    double u = rng_uniform(seed, stream, uint64_t(step) * uint64_t(B) + uint64_t(b));
    size_t offset = std::min(range - 1, size_t(u * double(range)));
    size_t out = size_t(b - rows.begin) * T;
    window(offset, T, tokens + out, targets + out);
  }
}

void ByteDataset::val_batch(int64_t index, int B, int T, RowRange rows, int32_t* tokens, int32_t* targets,
                            int32_t*) const {
  size_t windows = (val_size() - 1) / size_t(T);  // whole windows in the validation part
  for (int b = rows.begin; b < rows.end; b++) {
    size_t w = (size_t(index) * size_t(B) + size_t(b)) % windows;
    size_t out = size_t(b - rows.begin) * T;
    window(train_end_ + w * size_t(T), T, tokens + out, targets + out);
  }
}

std::string ByteDataset::describe() const {
  return strprintf("%s, one token per byte (%zu train / %zu validation bytes)", path_.c_str(), train_size(),
                   val_size());
}

}  // namespace loom
