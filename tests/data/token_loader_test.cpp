#include "data/token_loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/check.h"
#include "data/content_hash.h"
#include "data/sample_order.h"
#include "data_test_util.h"

namespace {

using loom::test::user_error;

// A prepared dataset (small vocabulary, several shards) made once per test
// process from the KJV sample.
const std::string& prepared() {
  static const std::string out = [] {
    std::string in = loom::test::fresh_dir("loader_in"), out = loom::test::fresh_dir("loader_out");
    loom::test::write_sample_docs(in, 12, 25000);
    loom::prepare_dataset(loom::test::small_prepare(in, out), nullptr);
    return out;
  }();
  return out;
}

// A copy of the prepared dataset that a test may damage.
std::string copy_of_prepared(const std::string& name) {
  std::string dir = loom::test::fresh_dir(name);
  std::filesystem::copy(prepared(), dir, std::filesystem::copy_options::recursive);
  return dir;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
  bool operator==(const Batch&) const = default;
};

Batch train_batch(const loom::TokenSource& src, uint64_t seed, int64_t step, int B, int T, loom::RowRange rows) {
  Batch b{std::vector<int32_t>(size_t(rows.size()) * T), std::vector<int32_t>(size_t(rows.size()) * T)};
  src.train_batch(seed, step, B, T, rows, b.tokens.data(), b.targets.data());
  return b;
}

TEST(TokenLoader, OpensAndChecksThePreparedData) {
  loom::TokenLoader loader(prepared(), 4, 32, 400);
  EXPECT_EQ(loader.manifest().vocab_size, 400u);
  EXPECT_GE(loader.manifest().train.shards.size(), 2u);
  EXPECT_GT(loader.train_windows(), 100u);
  EXPECT_GT(loader.val_windows(), 0u);
}

TEST(TokenLoader, BatchIsAPureFunctionOfSeedAndStep) {
  const int B = 8, T = 32;
  loom::TokenLoader a(prepared(), B, T, 400), b(prepared(), B, T, 400);
  loom::RowRange all{0, B};
  Batch step5 = train_batch(a, 1337, 5, B, T, all);
  for (int64_t s = 0; s < 5; s++) train_batch(b, 1337, s, B, T, all);  // what was read before does not matter
  EXPECT_TRUE(train_batch(b, 1337, 5, B, T, all) == step5);
  EXPECT_TRUE(train_batch(a, 1337, 5, B, T, all) == step5);
  EXPECT_FALSE(train_batch(a, 1337, 6, B, T, all) == step5);
  EXPECT_FALSE(train_batch(a, 99, 5, B, T, all) == step5);
  // Targets are the tokens shifted by one.
  for (int r = 0; r < B; r++)
    for (int t = 0; t + 1 < T; t++) EXPECT_EQ(step5.targets[size_t(r) * T + t], step5.tokens[size_t(r) * T + t + 1]);
}

TEST(TokenLoader, DataParallelSlicesConcatenateToTheGlobalBatch) {
  const int B = 8, T = 32;
  loom::TokenLoader loader(prepared(), B, T, 400);
  for (int dp : {1, 2, 4, 8}) {
    Batch global = train_batch(loader, 7, 3, B, T, {0, B}), joined;
    for (int r = 0; r < dp; r++) {
      loom::RowRange rows = loom::data_parallel_rows(B, r, dp);
      EXPECT_EQ(rows.size(), B / dp);
      Batch part = train_batch(loader, 7, 3, B, T, rows);
      joined.tokens.insert(joined.tokens.end(), part.tokens.begin(), part.tokens.end());
      joined.targets.insert(joined.targets.end(), part.targets.begin(), part.targets.end());
    }
    EXPECT_TRUE(joined == global) << "dp = " << dp;
  }
}

TEST(TokenLoader, EveryWindowOncePerEpoch) {
  for (uint64_t n : {1ull, 2ull, 5ull, 17ull, 1000ull, 4097ull}) {
    loom::SampleOrder order(n);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
      std::set<uint64_t> seen;
      for (uint64_t i = 0; i < n; i++) seen.insert(order.window(1337, epoch * n + i));
      EXPECT_EQ(seen.size(), n);
      EXPECT_LT(*seen.rbegin(), n);
    }
  }
  loom::SampleOrder order(1000);  // a fresh order each epoch
  int same = 0;
  for (uint64_t i = 0; i < 1000; i++) same += order.window(1, i) == order.window(1, 1000 + i);
  EXPECT_LT(same, 20);
}

TEST(TokenLoader, ValidationIteratorIsTheSameEveryTime) {
  const int B = 4, T = 32;
  loom::TokenLoader loader(prepared(), B, T, 400);
  std::vector<int32_t> t1(B * T), y1(B * T), t2(B * T), y2(B * T);
  loom::ValidationIterator a(loader, B, T, {0, B}), b(loader, B, T, {0, B});
  for (int i = 0; i < 3; i++) {
    a.next(t1.data(), y1.data());
    b.next(t2.data(), y2.data());
    EXPECT_EQ(t1, t2);
    EXPECT_EQ(y1, y2);
  }
  EXPECT_EQ(a.position(), 3);
}

TEST(TokenLoader, TokenizerThatDoesNotMatchTheShardsIsNamed) {
  std::string dir = copy_of_prepared("loader_mismatch");
  // Another tokenizer (a different vocabulary) in place of the one the shards were made with.
  std::string other_in = loom::test::fresh_dir("loader_mismatch_in"), other = loom::test::fresh_dir("loader_other");
  loom::test::write_sample_docs(other_in, 4, 20000);
  auto o = loom::test::small_prepare(other_in, other);
  o.vocab_size = 350;
  loom::prepare_dataset(o, nullptr);
  std::filesystem::copy_file(other + "/tokenizer.model", dir + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  std::string e = user_error([&] { loom::TokenLoader l(dir, 4, 32, 400); });
  EXPECT_NE(e.find(dir + "/tokenizer.model"), std::string::npos) << e;
  EXPECT_NE(e.find("does not match"), std::string::npos) << e;
  // A shard from another run (and so another tokenizer) among the right ones.
  dir = copy_of_prepared("loader_foreign_shard");
  std::filesystem::copy_file(other + "/val_000000.bin", dir + "/val_000000.bin",
                             std::filesystem::copy_options::overwrite_existing);
  e = user_error([&] { loom::TokenLoader l(dir, 4, 32, 400); });
  EXPECT_NE(e.find(dir + "/val_000000.bin"), std::string::npos) << e;
}

TEST(TokenLoader, DamagedShardsAreNamed) {
  std::string dir = copy_of_prepared("loader_damaged");
  std::string shard = dir + "/train_000001.bin";
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 3);
  std::string e = user_error([&] { loom::TokenLoader l(dir, 4, 32, 400); });
  EXPECT_NE(e.find(shard), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  dir = copy_of_prepared("loader_big_id");
  shard = dir + "/train_000000.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 2 * 100);
    uint16_t big = 400;  // == vocabulary size
    f.write(reinterpret_cast<const char*>(&big), 2);
  }
  e = user_error([&] { loom::TokenLoader l(dir, 4, 32, 400); });
  EXPECT_NE(e.find(shard), std::string::npos) << e;
  EXPECT_NE(e.find("token 100 has id 400"), std::string::npos) << e;
}

TEST(TokenLoader, CorpusSmallerThanOneBatchIsNamed) {
  std::string e = user_error([&] { loom::TokenLoader l(prepared(), 100000, 256, 400); });
  EXPECT_NE(e.find(prepared()), std::string::npos) << e;
  EXPECT_NE(e.find("smaller than one batch"), std::string::npos) << e;
}

TEST(TokenLoader, ModelVocabularyMustHoldTheTokenizers) {
  std::string e = user_error([&] { loom::TokenLoader l(prepared(), 4, 32, 300); });
  EXPECT_NE(e.find("model.vocab_size"), std::string::npos) << e;
  EXPECT_NO_THROW(loom::TokenLoader(prepared(), 4, 32, 512));  // a padded vocabulary is fine
}

// dataset.toml's fields out of range, or naming files outside its folder.
TEST(TokenLoader, ADatasetManifestOutOfRangeIsNamed) {
  const std::string dir = copy_of_prepared("loader_manifest_ranges");
  const std::string path = dir + "/dataset.toml", good = loom::test::read_text(path);
  struct Case {
    std::string from, to, says;
  } cases[] = {
      {"vocab_size = 400", "vocab_size = 4294967696", "'vocab_size' (4294967696) must be in [1, 2^31)"},
      {"vocab_size = 400", "vocab_size = 0", "'vocab_size' (0) must be in"},
      {"eos_id = ", "eos_id = 4000 #", "'eos_id' (4000) must be below vocab_size"},
      {"'train_000000.bin'", "'..'", "'train.shards' must list file names"},
      {"'train_000001.bin'", "'.hidden'", "'train.shards' must list file names"},
      {"tokens = ", "tokens = -5 #", "is negative"},
      // Unknown keys are refused, as in config files: a misspelt key is not silently ignored.
      {"eos_id = ", "eos_idd = 3\neos_id = ", "unknown key 'eos_idd'"},
      {"[train]", "[train]\nshard = 'x'", "unknown key 'train.shard'"},
  };
  for (const Case& c : cases) {
    std::string text = good;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from << " in\n" << good;
    text.replace(at, c.from.size(), c.to);
    std::ofstream(path, std::ios::trunc) << text;
    const std::string e = user_error([&] { loom::TokenLoader l(dir, 4, 32, 400); });
    EXPECT_NE(e.find(c.says), std::string::npos) << c.to << ": " << e;
    EXPECT_NE(e.find(path), std::string::npos) << e;
  }
  std::ofstream(path, std::ios::trunc) << good;
  EXPECT_NO_THROW(loom::TokenLoader(dir, 4, 32, 400));
  // Not a regular file where one is expected.
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  EXPECT_NE(user_error([&] { loom::TokenLoader l(dir, 4, 32, 400); }).find("is not a regular file (a folder)"),
            std::string::npos);
}

TEST(TokenLoader, MissingFolderOrManifestIsNamed) {
  std::string e = user_error([&] { loom::TokenLoader l("/no/such/data", 4, 32, 400); });
  EXPECT_NE(e.find("/no/such/data"), std::string::npos) << e;
  std::string empty = loom::test::fresh_dir("loader_empty");
  e = user_error([&] { loom::TokenLoader l(empty, 4, 32, 400); });
  EXPECT_NE(e.find(empty + "/dataset.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("loom prepare"), std::string::npos) << e;
}

}  // namespace
