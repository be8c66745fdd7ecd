#include "data/prepare.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/check.h"
#include "data/corpus.h"
#include "data/token_loader.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace {

namespace fs = std::filesystem;
using loom::test::user_error;

std::map<std::string, fs::file_time_type> mtimes(const std::string& dir) {
  std::map<std::string, fs::file_time_type> m;
  for (const auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = e.last_write_time();
  return m;
}

TEST(Prepare, WritesTokenizerShardsAndManifest) {
  std::string in = loom::test::fresh_dir("prep_in"), out = loom::test::fresh_dir("prep_out");
  loom::test::write_sample_docs(in, 10, 20000);
  auto r = loom::prepare_dataset(loom::test::small_prepare(in, out), nullptr);
  EXPECT_FALSE(r.up_to_date);
  EXPECT_TRUE(r.tokenizer_trained);
  const auto& m = r.manifest;
  EXPECT_EQ(m.vocab_size, 400u);
  EXPECT_EQ(m.train.documents + m.val.documents, 10u);
  EXPECT_GE(m.val.documents, 1u);
  EXPECT_GE(m.train.shards.size(), 2u);  // shard_tokens is small
  for (const auto& e : fs::directory_iterator(out))  // nothing half-written
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  // The shards decode back to the documents, each followed by end-of-text.
  loom::Tokenizer tok = loom::Tokenizer::load(out + "/tokenizer.model");
  loom::ShardFile first(out + "/" + m.train.shards[0]);
  std::vector<int32_t> ids(first.size());
  first.read(0, ids.size(), ids.data());
  auto eos = std::find(ids.begin(), ids.end(), tok.eos_id());
  ASSERT_NE(eos, ids.end());
  std::string doc = tok.decode(ids.data(), size_t(eos - ids.begin()));
  bool found = false;
  for (const auto& e : fs::directory_iterator(in)) found |= loom::test::read_text(e.path()) == doc;
  EXPECT_TRUE(found) << "the first document of the first shard is not one of the inputs";
}

TEST(Prepare, SecondRunSkipsAndChangesRedoOnlyWhatTheyMust) {
  std::string in = loom::test::fresh_dir("prep_idem_in"), out = loom::test::fresh_dir("prep_idem_out");
  loom::test::write_sample_docs(in, 6, 20000);
  auto o = loom::test::small_prepare(in, out);
  auto first = loom::prepare_dataset(o, nullptr);
  auto before = mtimes(out);
  auto second = loom::prepare_dataset(o, nullptr);
  EXPECT_TRUE(second.up_to_date);
  EXPECT_EQ(mtimes(out), before);
  EXPECT_EQ(second.manifest.dataset_id, first.manifest.dataset_id);

  // Another split: new shards, same tokenizer.
  o.val_fraction = 0.3;
  auto third = loom::prepare_dataset(o, nullptr);
  EXPECT_FALSE(third.up_to_date);
  EXPECT_FALSE(third.tokenizer_trained);
  EXPECT_EQ(third.manifest.tokenizer_hash, first.manifest.tokenizer_hash);

  // Changed text: everything again.
  loom::test::write_text(in + "/doc100.txt", "A new first document.\n");
  auto fourth = loom::prepare_dataset(o, nullptr);
  EXPECT_TRUE(fourth.tokenizer_trained);
  EXPECT_NE(fourth.manifest.dataset_id, third.manifest.dataset_id);
  EXPECT_NO_THROW(loom::TokenLoader(out, 2, 16, 400));
}

TEST(Prepare, GivenTokenizerIsUsed) {
  std::string in = loom::test::fresh_dir("prep_given_in"), a = loom::test::fresh_dir("prep_given_a"),
              b = loom::test::fresh_dir("prep_given_b");
  loom::test::write_sample_docs(in, 6, 20000);
  auto made = loom::prepare_dataset(loom::test::small_prepare(in, a), nullptr);
  auto o = loom::test::small_prepare(in, b);
  o.tokenizer = a + "/tokenizer.model";
  auto given = loom::prepare_dataset(o, nullptr);
  EXPECT_FALSE(given.tokenizer_trained);
  EXPECT_EQ(given.manifest.tokenizer_hash, made.manifest.tokenizer_hash);
  EXPECT_EQ(given.manifest.train.tokens, made.manifest.train.tokens);
  EXPECT_TRUE(loom::test::read_text(a + "/train_000000.bin").substr(64) ==
              loom::test::read_text(b + "/train_000000.bin").substr(64));
}

TEST(Prepare, SameInputsGiveIdenticalShardsWhateverTheThreads) {
  std::string in = loom::test::fresh_dir("prep_threads_in"), a = loom::test::fresh_dir("prep_threads_a"),
              b = loom::test::fresh_dir("prep_threads_b");
  loom::test::write_sample_docs(in, 6, 15000);
  auto o = loom::test::small_prepare(in, a);
  o.threads = 1;
  loom::prepare_dataset(o, nullptr);
  o.out = b;
  o.threads = 2;
  loom::prepare_dataset(o, nullptr);
  for (const char* f : {"tokenizer.model", "train_000000.bin", "val_000000.bin", "dataset.toml"})
    EXPECT_TRUE(loom::test::read_text(a + "/" + f) == loom::test::read_text(b + "/" + f)) << f;
}

TEST(Prepare, BadInputIsNamed) {
  std::string out = loom::test::fresh_dir("prep_bad_out");
  auto attempt = [&](const std::string& input) {
    return user_error([&] { loom::prepare_dataset(loom::test::small_prepare(input, out), nullptr); });
  };
  std::string e = attempt("/no/such/corpus");
  EXPECT_NE(e.find("/no/such/corpus"), std::string::npos) << e;

  std::string empty_dir = loom::test::fresh_dir("prep_empty_dir");
  e = attempt(empty_dir);
  EXPECT_NE(e.find(empty_dir), std::string::npos) << e;
  EXPECT_NE(e.find("no text"), std::string::npos) << e;

  std::string empty_file = empty_dir + "/empty.txt";
  loom::test::write_text(empty_file, "");
  e = attempt(empty_file);
  EXPECT_NE(e.find(empty_file), std::string::npos) << e;
  EXPECT_NE(e.find("empty"), std::string::npos) << e;

  std::string latin1 = loom::test::fresh_dir("prep_latin1");
  loom::test::write_sample_docs(latin1, 3, 5000);
  loom::test::write_text(latin1 + "/bad.txt", "caf\xe9\n");
  e = attempt(latin1);
  EXPECT_NE(e.find(latin1 + "/bad.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("offset 3"), std::string::npos) << e;

  std::string one_doc = loom::test::fresh_dir("prep_one_doc");
  loom::test::write_text(one_doc + "/only.txt", "just one document\n");
  e = attempt(one_doc);
  EXPECT_NE(e.find(one_doc), std::string::npos) << e;
  EXPECT_TRUE(fs::is_empty(out)) << "bad input must not write anything";
}

TEST(Corpus, SingleFileIsCutIntoDocumentsAtLineEnds) {
  loom::Corpus c = loom::read_corpus(LOOM_SOURCE_DIR "/data/sample/kjv.txt");
  EXPECT_GT(c.documents.size(), 10u);
  std::string joined;
  for (const auto& d : c.documents) {
    EXPECT_EQ(d.text.back(), '\n');
    joined += d.text;
  }
  EXPECT_EQ(joined, loom::test::sample_text());
  auto split = loom::split_corpus(c, 0.1);
  EXPECT_FALSE(split.val.empty());
  EXPECT_FALSE(split.train.empty());
  EXPECT_EQ(split.train.size() + split.val.size(), c.documents.size());
}

TEST(Corpus, HiddenFilesAreSkippedAndOrderIsByName) {
  std::string dir = loom::test::fresh_dir("corpus_hidden");
  fs::create_directories(dir + "/b/.git");
  loom::test::write_text(dir + "/b/2.txt", "two\n");
  loom::test::write_text(dir + "/a.txt", "one\n");
  loom::test::write_text(dir + "/.hidden.txt", "hidden\n");
  loom::test::write_text(dir + "/b/.git/HEAD", "ref\n");
  loom::Corpus c = loom::read_corpus(dir);
  ASSERT_EQ(c.documents.size(), 2u);
  EXPECT_EQ(c.documents[0].name, "a.txt");
  EXPECT_EQ(c.documents[1].name, "b/2.txt");
}

TEST(Corpus, Utf8Validation) {
  EXPECT_EQ(loom::find_invalid_utf8("plain ascii"), std::string::npos);
  EXPECT_EQ(loom::find_invalid_utf8("naïve 日本語 😀"), std::string::npos);
  EXPECT_EQ(loom::find_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(loom::find_invalid_utf8("a\xc3"), 1u);               // cut short
  EXPECT_EQ(loom::find_invalid_utf8("\xc0\xaf"), 0u);            // overlong
  EXPECT_EQ(loom::find_invalid_utf8("x\xed\xa0\x80"), 1u);       // surrogate
  EXPECT_EQ(loom::find_invalid_utf8("\xf4\x90\x80\x80"), 0u);    // past U+10FFFF
}

}  // namespace
