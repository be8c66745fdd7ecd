#include "data/token_shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <filesystem>
#include <numeric>

#include "core/atomic_file.h"
#include "core/check.h"
#include "data_test_util.h"

namespace {

using loom::test::user_error;

loom::ShardHeader header_for(uint32_t vocab) {
  loom::ShardHeader h{};
  h.vocab_size = vocab;
  h.eos_id = 1;
  h.tokenizer_hash = 42;
  h.dataset_id = 7;
  h.document_count = 3;
  return h;
}

std::vector<int32_t> ramp(size_t n, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = int32_t((i * 7919) % size_t(vocab));
  return v;
}

TEST(TokenShard, WriteThenReadBothWidths) {
  std::string dir = loom::test::fresh_dir("shard_rw");
  for (uint32_t vocab : {8192u, 100000u}) {
    std::string path = dir + "/s" + std::to_string(vocab) + ".bin";
    auto ids = ramp(5000, int32_t(vocab));
    loom::write_shard(path, header_for(vocab), ids.data(), ids.size());
    EXPECT_EQ(std::filesystem::file_size(path), 64 + ids.size() * (vocab <= 65536 ? 2 : 4));
    loom::ShardFile shard(path);
    EXPECT_EQ(shard.size(), ids.size());
    EXPECT_EQ(shard.header().token_bytes, vocab <= 65536 ? 2u : 4u);
    EXPECT_EQ(shard.header().tokenizer_hash, 42u);
    EXPECT_EQ(shard.header().document_count, 3u);
    std::vector<int32_t> back(ids.size());
    shard.read(0, back.size(), back.data());
    EXPECT_EQ(back, ids);
    EXPECT_NO_THROW(shard.check_ids_below(vocab));
  }
  for (const auto& e : std::filesystem::directory_iterator(dir))  // no temporary left behind
    EXPECT_EQ(e.path().extension(), ".bin") << e.path();
}

// Version 2: the ids, then one bit per token saying it is learned from.
TEST(TokenShard, MaskedShardsKeepTheirMaskAndPlainOnesHaveNone) {
  std::string dir = loom::test::fresh_dir("shard_mask");
  for (uint32_t vocab : {8192u, 100000u}) {
    const std::string path = dir + "/m" + std::to_string(vocab) + ".bin";
    auto ids = ramp(1003, int32_t(vocab));  // not a multiple of 8
    std::vector<uint8_t> mask(ids.size());
    for (size_t i = 0; i < mask.size(); i++) mask[i] = uint8_t((i * 13) % 5 < 2);
    const std::vector<uint64_t> starts = {0, 400, 1000};  // header_for: 3 documents (samples)
    loom::write_shard(path, header_for(vocab), ids.data(), ids.size(), mask.data(), starts.data());
    EXPECT_EQ(std::filesystem::file_size(path),
              64 + ids.size() * (vocab <= 65536 ? 2 : 4) + (ids.size() + 7) / 8 + 3 * 8);
    loom::ShardFile shard(path);
    EXPECT_TRUE(shard.has_mask());
    EXPECT_EQ(shard.sample_start(1), 400u);
    EXPECT_EQ(shard.sample_length(1), 600u);
    EXPECT_EQ(shard.sample_length(2), 3u);
    EXPECT_EQ(shard.header().version, loom::kMaskedShardVersion);
    std::vector<int32_t> back(ids.size());
    std::vector<uint8_t> back_mask(ids.size());
    shard.read(0, back.size(), back.data());
    shard.read_mask(0, back_mask.size(), back_mask.data());
    EXPECT_EQ(back, ids);
    EXPECT_EQ(back_mask, mask);
    shard.read_mask(501, 7, back_mask.data());
    EXPECT_TRUE(std::equal(back_mask.begin(), back_mask.begin() + 7, mask.begin() + 501));
    // Sample starts out of order, and a file cut short, are named.
    const std::vector<uint64_t> bad = {0, 1000, 400};
    const std::string bad_path = dir + "/bad.bin";
    {
      loom::ShardHeader h = header_for(vocab);
      h.document_count = 2;  // written with two good starts, then the third patched in by hand
      loom::write_shard(bad_path, h, ids.data(), ids.size(), mask.data(), bad.data());
    }
    std::string bytes = loom::test::read_text(bad_path);
    loom::ShardHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    h.document_count = 3;
    std::memcpy(bytes.data(), &h, sizeof h);
    bytes.append(reinterpret_cast<const char*>(&bad[2]), 8);
    loom::test::write_text(bad_path, bytes);
    EXPECT_NE(user_error([&] { loom::ShardFile b(bad_path); }).find("sample 2 starts at token 400"), std::string::npos);
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
    EXPECT_NE(user_error([&] { loom::ShardFile cut(path); }).find("does not have the size its header says"),
              std::string::npos);
  }
  const std::string plain = dir + "/plain.bin";
  auto ids = ramp(100, 8192);
  loom::write_shard(plain, header_for(8192), ids.data(), ids.size());
  loom::ShardFile shard(plain);
  EXPECT_FALSE(shard.has_mask());
  EXPECT_EQ(shard.header().version, loom::kShardVersion);
  std::vector<uint8_t> all(ids.size());
  shard.read_mask(0, all.size(), all.data());
  EXPECT_EQ(std::count(all.begin(), all.end(), 1), 100);
}

TEST(TokenShard, WrongMagicIsNamed) {
  std::string dir = loom::test::fresh_dir("shard_magic");
  std::string path = dir + "/bad.bin";
  loom::test::write_text(path, std::string(64, 'x') + std::string(20, '\0'));
  std::string e = user_error([&] { loom::ShardFile s(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("magic"), std::string::npos) << e;
}

TEST(TokenShard, TruncatedBodyAndHeaderAreNamed) {
  std::string dir = loom::test::fresh_dir("shard_truncated");
  std::string path = dir + "/t.bin";
  auto ids = ramp(1000, 500);
  loom::write_shard(path, header_for(500), ids.data(), ids.size());
  std::filesystem::resize_file(path, 64 + 1000 * 2 - 10);
  std::string e = user_error([&] { loom::ShardFile s(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  std::filesystem::resize_file(path, 30);
  e = user_error([&] { loom::ShardFile s(path); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

// A token count so large that count x 2 bytes wraps around to the body's
// size: refused as truncated, not mapped and read past its end.
TEST(TokenShard, ACountThatWrapsAroundIsRefused) {
  std::string dir = loom::test::fresh_dir("shard_wrap");
  std::string path = dir + "/w.bin";
  auto ids = ramp(500, 500);
  loom::write_shard(path, header_for(500), ids.data(), ids.size());
  std::string bytes = loom::test::read_text(path);
  const uint64_t wrapping = (uint64_t(1) << 63) + 500;  // x 2 = 1000 (mod 2^64): the body's bytes
  std::memcpy(bytes.data() + offsetof(loom::ShardHeader, token_count), &wrapping, sizeof wrapping);
  loom::test::write_text(path, bytes);
  std::string e = user_error([&] { loom::ShardFile s(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

// Header fields that no shard loom writes can have: more documents than
// tokens (each ends with an end-of-text id), tokens with no document, and
// reserved bytes that are not zero.
TEST(TokenShard, ImpossibleHeaderFieldsAreNamed) {
  std::string dir = loom::test::fresh_dir("shard_header_fields");
  std::string path = dir + "/h.bin";
  auto ids = ramp(500, 500);
  loom::write_shard(path, header_for(500), ids.data(), ids.size());
  const std::string good = loom::test::read_text(path);
  EXPECT_NO_THROW(loom::ShardFile s(path));
  struct Case {
    size_t offset;
    uint64_t value;
    const char* says;
  } cases[] = {
      {offsetof(loom::ShardHeader, document_count), 501, "501 documents in 500 tokens"},
      {offsetof(loom::ShardHeader, document_count), 0, "0 documents in 500 tokens"},
      {offsetof(loom::ShardHeader, document_count), ~uint64_t(0), "documents in 500 tokens"},
      {offsetof(loom::ShardHeader, reserved), 1, "reserved bytes are not zero"},
  };
  for (const Case& c : cases) {
    std::string bytes = good;
    std::memcpy(bytes.data() + c.offset, &c.value, sizeof c.value);
    loom::test::write_text(path, bytes);
    std::string e = user_error([&] { loom::ShardFile s(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
  }
}

TEST(TokenShard, TokenIdAtOrAboveVocabIsNamed) {
  std::string dir = loom::test::fresh_dir("shard_vocab");
  std::string path = dir + "/v.bin";
  auto ids = ramp(10000, 500);
  loom::write_shard(path, header_for(1000), ids.data(), ids.size());
  loom::ShardFile shard(path);
  EXPECT_NO_THROW(shard.check_ids_below(500));
  std::string e = user_error([&] { shard.check_ids_below(400); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("vocabulary size 400"), std::string::npos) << e;
}

TEST(TokenShard, FailedWriteLeavesNothingBehind) {
  std::string dir = loom::test::fresh_dir("shard_failed");
  std::string path = dir + "/f.bin";
  std::vector<int32_t> ids = {1, 2, 3, 999};  // 999 is outside the vocabulary: the write stops
  EXPECT_THROW(loom::write_shard(path, header_for(100), ids.data(), ids.size()), loom::Error);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  // An existing file is untouched by a failed rewrite.
  std::vector<int32_t> good = {1, 2, 3};
  loom::write_shard(path, header_for(100), good.data(), good.size());
  auto before = loom::test::read_text(path);
  EXPECT_THROW(loom::write_shard(path, header_for(100), ids.data(), ids.size()), loom::Error);
  EXPECT_EQ(loom::test::read_text(path), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
}

TEST(AtomicFile, UncommittedWriteLeavesTargetAlone) {
  std::string dir = loom::test::fresh_dir("atomic_file");
  std::string path = dir + "/x.txt";
  loom::write_file_atomically(path, std::string("old"));
  {
    loom::AtomicFile f(path);
    f.write("new", 3);
  }  // no commit
  EXPECT_EQ(loom::test::read_text(path), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  std::string e = user_error([&] { loom::AtomicFile f(dir + "/no/such/dir/y.txt"); });
  EXPECT_NE(e.find("no/such/dir/y.txt"), std::string::npos) << e;
}

}  // namespace
