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

TokenLoader::TokenLoader(const std::string& dir, int batch_size, int seq_len, int model_vocab, Rows rows,
                         bool skip_long)
    : dir_(dir), T_(seq_len), rows_(rows), skip_long_(skip_long) {
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
  if (rows_ != Rows::windows) {
    LOOM_USER_CHECK(row_count(train_) >= uint64_t(batch_size) && row_count(val_) >= 1,
                    "config field 'data.rows' = \"%s\": '%s' gives %llu training rows from %zu samples "
                    "(train.batch_size is %d) and %llu validation rows%s",
                    rows_name(), dir.c_str(), (unsigned long long)row_count(train_), train_.samples.size(),
                    batch_size, (unsigned long long)row_count(val_),
                    skip_long_ ? " after skipping the samples longer than model.seq_len + 1" : "");
    order_ = SampleOrder(row_count(train_));
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
    if (rows_ != Rows::windows) {
      LOOM_USER_CHECK(shard.has_mask(),
                      "config field 'data.rows' = \"%s\" needs instruction data (`loom prepare` on JSON Lines): "
                      "token shard '%s' is plain text (use data.rows = \"windows\")",
                      rows_name(), shard.path().c_str());
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
  if (rows_ == Rows::packed) pack_rows(s);
  return s;
}

// Greedy, in dataset order: a sample goes into the current row while its
// places fit, else it starts the next row.
void TokenLoader::pack_rows(Split& s) const {
  s.packed.assign(1, 0);
  uint64_t used = 0;
  for (uint64_t k = 0; k < s.samples.size(); k++) {
    const uint64_t places = std::min<uint64_t>(s.samples[k].length, uint64_t(T_) + 1) - 1;
    if (used > 0 && used + places > uint64_t(T_)) s.packed.push_back(k), used = 0;
    used += places;
  }
  if (s.packed.back() == s.samples.size()) return;
  // Samples of one token (nothing to learn from) at the end join the row before.
  if (used == 0 && s.packed.size() > 1) s.packed.back() = s.samples.size();
  else s.packed.push_back(s.samples.size());
}

void TokenLoader::read_row(const Split& split, uint64_t w, int32_t* tokens, int32_t* targets,
                           int32_t* positions) const {
  switch (rows_) {
    case Rows::windows: return read_window(split, w, tokens, targets);
    case Rows::padded: return read_sample(split, w, tokens, targets);
    case Rows::packed: return read_packed(split, w, tokens, targets, positions);
  }
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

void TokenLoader::read_packed(const Split& split, uint64_t r, int32_t* tokens, int32_t* targets,
                              int32_t* positions) const {
  LOOM_CHECK(positions, "packed rows come with their positions");
  size_t at = 0;
  std::vector<int32_t> ids;
  std::vector<uint8_t> learn;
  for (uint64_t k = split.packed[r]; k < split.packed[r + 1]; k++) {
    const SampleRef& s = split.samples[k];
    const size_t n = size_t(std::min<uint64_t>(s.length, uint64_t(T_) + 1));
    ids.resize(n), learn.resize(n);
    split.shards[s.shard].read(s.start, n, ids.data());
    split.shards[s.shard].read_mask(s.start, n, learn.data());
    for (size_t i = 0; i + 1 < n; i++, at++) {
      tokens[at] = ids[i];
      targets[at] = learn[i + 1] ? ids[i + 1] : -1;
      positions[at] = int32_t(i);
    }
  }
  for (size_t t = at; t < size_t(T_); t++) {  // padding: a document of its own, nothing learned
    tokens[t] = int32_t(manifest_.eos_id);
    targets[t] = -1;
    positions[t] = int32_t(t - at);
  }
}

void TokenLoader::train_batch(uint64_t seed, int64_t step, int B, int T, RowRange rows, int32_t* tokens,
                              int32_t* targets, int32_t* positions) const {
  LOOM_CHECK(T == T_, "the loader was opened for T = %d, asked for %d", T_, T);
  for (int b = rows.begin; b < rows.end; b++) {
    uint64_t w = order_.window(seed, uint64_t(step) * uint64_t(B) + uint64_t(b));
    size_t out = size_t(b - rows.begin) * size_t(T);
    read_row(train_, w, tokens + out, targets + out, positions ? positions + out : nullptr);
  }
}

void TokenLoader::val_batch(int64_t index, int B, int T, RowRange rows, int32_t* tokens, int32_t* targets,
                            int32_t* positions) const {
  LOOM_CHECK(T == T_, "the loader was opened for T = %d, asked for %d", T_, T);
  for (int b = rows.begin; b < rows.end; b++) {
    uint64_t w = (uint64_t(index) * uint64_t(B) + uint64_t(b)) % row_count(val_);
    size_t out = size_t(b - rows.begin) * size_t(T);
    read_row(val_, w, tokens + out, targets + out, positions ? positions + out : nullptr);
  }
}

std::string TokenLoader::describe() const {
  const char* kind = manifest_.tokenizer == "tokenizer.json" ? "Hugging Face tokenizer.json" : "SentencePiece";
  std::string rows;
  if (rows_ != Rows::windows)
    rows = strprintf("; %s rows: %zu training samples, %llu of them longer than seq_len + 1 %s", rows_name(),
                     train_.samples.size(), (unsigned long long)train_.long_samples,
                     skip_long_ ? "skipped" : "truncated");
  if (rows_ == Rows::packed) {
    uint64_t places = 0;  // the rows' places samples fill
    for (const SampleRef& s : train_.samples) places += std::min<uint64_t>(s.length, uint64_t(T_) + 1) - 1;
    const uint64_t n = row_count(train_);
    rows += strprintf(", packed into %llu rows (%.1f samples a row, %.0f%% of the places filled)",
                      (unsigned long long)n, double(train_.samples.size()) / double(n),
                      100.0 * double(places) / (double(n) * T_));
  }
  return strprintf("%s, %u-token %s vocabulary (%llu train tokens in %zu shard%s, %llu validation tokens%s)",
                   dir_.c_str(), manifest_.vocab_size, kind, (unsigned long long)train_.tokens, train_.shards.size(),
                   train_.shards.size() == 1 ? "" : "s", (unsigned long long)val_.tokens, rows.c_str());
}

}  // namespace loom
