#include "data/token_loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/check.h"
#include "core/regular_file.h"
#include "data/content_hash.h"
#include "data/text_tokenizer.h"

namespace loom {

TokenLoader::TokenLoader(const std::string& dir, int batch_size, int seq_len, int model_vocab, bool padded,
                         bool skip_long)
    : dir_(dir), T_(seq_len), padded_(padded), skip_long_(skip_long) {
  std::error_code ec;
  LOOM_USER_CHECK(std::filesystem::is_directory(dir, ec),
                  "data folder '%s' (data.path) does not exist; `loom prepare --out %s` makes it", dir.c_str(),
                  dir.c_str());
  manifest_ = read_dataset_manifest(dir);
  const std::string tok_path = dir + "/" + manifest_.tokenizer;
  LOOM_USER_CHECK(tokenizer_files_hash(tokenizer_files_in(dir, manifest_.tokenizer)) == manifest_.tokenizer_hash,
                  "tokenizer model '%s' does not match the shards in %s: they were made with another model "
                  "(run `loom prepare` again)",
                  tok_path.c_str(), dir.c_str());
  LOOM_USER_CHECK(uint64_t(model_vocab) >= manifest_.vocab_size,
                  "config field 'model.vocab_size' (%d) is smaller than the vocabulary of the tokenizer '%s' (%u)",
                  model_vocab, tok_path.c_str(), manifest_.vocab_size);
  train_ = open_split(manifest_.train, "training");
  val_ = open_split(manifest_.val, "validation");
  if (padded_) {
    LOOM_USER_CHECK(train_.samples.size() >= uint64_t(batch_size) && !val_.samples.empty(),
                    "config field 'data.rows' = \"padded\": '%s' has %zu training samples (train.batch_size is %d) "
                    "and %zu validation samples%s",
                    dir.c_str(), train_.samples.size(), batch_size, val_.samples.size(),
                    skip_long_ ? " after skipping those longer than model.seq_len + 1" : "");
    order_ = SampleOrder(train_.samples.size());
    return;
  }
  LOOM_USER_CHECK(train_.windows >= uint64_t(batch_size),
                  "the training split of '%s' is smaller than one batch: %llu tokens give %llu windows of "
                  "model.seq_len + 1 = %d tokens, train.batch_size is %d",
                  dir.c_str(), (unsigned long long)train_.tokens, (unsigned long long)train_.windows, seq_len + 1,
                  batch_size);
  LOOM_USER_CHECK(val_.windows >= 1,
                  "the validation split of '%s' is too small: %llu tokens, no shard holds model.seq_len + 1 = %d",
                  dir.c_str(), (unsigned long long)val_.tokens, seq_len + 1);
  order_ = SampleOrder(train_.windows);
}

TokenLoader::Split TokenLoader::open_split(const SplitManifest& m, const char* name) const {
  Split s;
  LOOM_USER_CHECK(!m.shards.empty(), "dataset '%s' has no %s shards", dir_.c_str(), name);
  for (const auto& file : m.shards) {
    ShardFile shard(dir_ + "/" + file);
    const ShardHeader& h = shard.header();
    LOOM_USER_CHECK(h.tokenizer_hash == manifest_.tokenizer_hash,
                    "token shard '%s' was made with a different tokenizer than '%s/%s' (run `loom prepare` again)",
                    shard.path().c_str(), dir_.c_str(), manifest_.tokenizer.c_str());
    LOOM_USER_CHECK(h.dataset_id == manifest_.dataset_id,
                    "token shard '%s' belongs to another `loom prepare` run than '%s/%s' (run it again)",
                    shard.path().c_str(), dir_.c_str(), kManifestName);
    LOOM_USER_CHECK(h.vocab_size == manifest_.vocab_size,
                    "token shard '%s' says vocabulary %u, the dataset %u", shard.path().c_str(), h.vocab_size,
                    manifest_.vocab_size);
    shard.check_ids_below(manifest_.vocab_size);
    if (padded_) {
      LOOM_USER_CHECK(shard.has_mask(),
                      "config field 'data.rows' = \"padded\" needs instruction data (`loom prepare` on JSON Lines): "
                      "token shard '%s' is plain text (use data.rows = \"windows\")",
                      shard.path().c_str());
      for (uint64_t k = 0; k < shard.header().document_count; k++) {
        const uint64_t length = shard.sample_length(k);
        const bool too_long = length > uint64_t(T_) + 1;
        s.long_samples += too_long ? 1 : 0;
        if (!(too_long && skip_long_)) s.samples.push_back({uint32_t(s.shards.size()), shard.sample_start(k), length});
      }
    }
    uint64_t windows = shard.size() > 0 ? (shard.size() - 1) / uint64_t(T_) : 0;
    s.first_window.push_back(s.windows);
    s.windows += windows;
    s.tokens += shard.size();
    s.shards.push_back(std::move(shard));
  }
  LOOM_USER_CHECK(s.tokens == m.tokens, "dataset '%s': its %s shards hold %llu tokens, %s says %llu", dir_.c_str(),
                  name, (unsigned long long)s.tokens, kManifestName, (unsigned long long)m.tokens);
  return s;
}

void TokenLoader::read_window(const Split& split, uint64_t w, int32_t* tokens, int32_t* targets) const {
  // The last shard whose first window is <= w (shards without windows are skipped over).
  size_t s = size_t(std::upper_bound(split.first_window.begin(), split.first_window.end(), w) -
                    split.first_window.begin()) - 1;
  uint64_t start = (w - split.first_window[s]) * uint64_t(T_);
  split.shards[s].read(start, size_t(T_), tokens);
  split.shards[s].read(start + 1, size_t(T_), targets);
  if (split.shards[s].has_mask()) {
    // Instruction data: only the tokens the mask marks are predicted.
    std::vector<uint8_t> learn(static_cast<size_t>(T_));
    split.shards[s].read_mask(start + 1, size_t(T_), learn.data());
    for (int t = 0; t < T_; t++)
      if (!learn[size_t(t)]) targets[t] = -1;
  }
}

void TokenLoader::read_sample(const Split& split, uint64_t k, int32_t* tokens, int32_t* targets) const {
  const SampleRef& r = split.samples[k];
  const ShardFile& shard = split.shards[r.shard];
  const size_t n = size_t(std::min<uint64_t>(r.length, uint64_t(T_) + 1));  // truncated to T + 1
  std::vector<int32_t> ids(n);
  std::vector<uint8_t> learn(n);
  shard.read(r.start, n, ids.data());
  shard.read_mask(r.start, n, learn.data());
  for (size_t t = 0; t < size_t(T_); t++) {
    // Past the sample: end-of-text as input, no target (causal attention:
    // the sample's own tokens never see the padding).
    tokens[t] = t < n ? ids[t] : int32_t(manifest_.eos_id);
    targets[t] = t + 1 < n && learn[t + 1] ? ids[t + 1] : -1;
  }
}

void TokenLoader::train_batch(uint64_t seed, int64_t step, int B, int T, RowRange rows, int32_t* tokens,
                              int32_t* targets) const {
  LOOM_CHECK(T == T_, "the loader was opened for T = %d, asked for %d", T_, T);
  for (int b = rows.begin; b < rows.end; b++) {
    uint64_t w = order_.window(seed, uint64_t(step) * uint64_t(B) + uint64_t(b));
    size_t out = size_t(b - rows.begin) * size_t(T);
    if (padded_) read_sample(train_, w, tokens + out, targets + out);
    else read_window(train_, w, tokens + out, targets + out);
  }
}

void TokenLoader::val_batch(int64_t index, int B, int T, RowRange rows, int32_t* tokens, int32_t* targets) const {
  LOOM_CHECK(T == T_, "the loader was opened for T = %d, asked for %d", T_, T);
  for (int b = rows.begin; b < rows.end; b++) {
    uint64_t w = (uint64_t(index) * uint64_t(B) + uint64_t(b)) % row_count(val_);
    size_t out = size_t(b - rows.begin) * size_t(T);
    if (padded_) read_sample(val_, w, tokens + out, targets + out);
    else read_window(val_, w, tokens + out, targets + out);
  }
}

std::string TokenLoader::describe() const {
  const char* kind = manifest_.tokenizer == "tokenizer.json" ? "Hugging Face tokenizer.json" : "SentencePiece";
  const std::string rows =
      padded_ ? strprintf("; padded rows: %zu training samples, %llu of them longer than seq_len + 1 %s",
                          train_.samples.size(), (unsigned long long)train_.long_samples,
                          skip_long_ ? "skipped" : "truncated")
              : "";
  return strprintf("%s, %u-token %s vocabulary (%llu train tokens in %zu shard%s, %llu validation tokens%s)",
                   dir_.c_str(), manifest_.vocab_size, kind, (unsigned long long)train_.tokens, train_.shards.size(),
                   train_.shards.size() == 1 ? "" : "s", (unsigned long long)val_.tokens, rows.c_str());
}

}  // namespace loom
