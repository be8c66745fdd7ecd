#include "data/token_source.h"

#include "core/check.h"
#include "data/byte_dataset.h"
#include "data/token_loader.h"

namespace loom {

RowRange data_parallel_rows(int batch_size, int rank, int ranks) {
  LOOM_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank %d of %d", rank, ranks);
  return {int(int64_t(rank) * batch_size / ranks), int(int64_t(rank + 1) * batch_size / ranks)};
}

std::unique_ptr<TokenSource> open_token_source(const DataConfig& data, int batch_size, int seq_len,
                                               int model_vocab) {
  if (data.format == "bytes") return std::make_unique<ByteDataset>(data.path, data.val_fraction, seq_len);
  LOOM_CHECK(data.format == "shards", "data.format '%s'", data.format.c_str());
  const TokenLoader::Rows rows = data.rows == "padded"   ? TokenLoader::Rows::padded
                                 : data.rows == "packed" ? TokenLoader::Rows::packed
                                                         : TokenLoader::Rows::windows;
  return std::make_unique<TokenLoader>(data.path, batch_size, seq_len, model_vocab, rows, data.long_samples == "skip");
}

}  // namespace loom
