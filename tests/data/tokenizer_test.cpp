#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <string_view>

#include "core/check.h"
#include "data_test_util.h"

namespace {

using loom::Tokenizer;

// A small model trained on the KJV sample, once per test process.
const Tokenizer& sample_tokenizer() {
  static const Tokenizer tok = [] {
    std::string text = loom::test::sample_text().substr(0, 300000);
    std::vector<std::string_view> lines;
    std::string_view rest = text;
    while (!rest.empty()) {
      size_t nl = std::min(rest.find('\n'), rest.size());
      if (nl > 0) lines.push_back(rest.substr(0, nl));
      rest.remove_prefix(std::min(rest.size(), nl + 1));
    }
    return Tokenizer::from_model(Tokenizer::train(lines, 400, "kjv sample"), "kjv sample");
  }();
  return tok;
}

TEST(Tokenizer, RoundTripIsExactOnTrickyText) {
  const Tokenizer& tok = sample_tokenizer();
  const std::string cases[] = {
      "",
      "In the beginning God created the heaven and the earth.\n",
      "\n\n\n",
      "   three leading spaces, two trailing  ",
      "tabs\tinside\t\tand\ttrailing\t",
      "runs      of      spaces\n    indented code();\n",
      "windows\r\nline ends\r\n",
      "naïve café, Ελληνικά, русский, 日本語, emoji 😀🚀",  // mostly not in the training text: byte fallback
      "control \x01\x02\x1f\x7f bytes",
      std::string("a NUL \0 byte", 12),
      "SentencePiece's own space symbol \xE2\x96\x81 and \xE2\x96\x81\xE2\x96\x81 twice",
      "digits 1234567890 and 3.14159",
      " ",
      "\n",
      "no newline at the end",
  };
  for (const std::string& text : cases) {
    std::vector<int32_t> ids;
    tok.encode(text, &ids);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << id;
    EXPECT_EQ(tok.decode(ids), text) << "text: [" << text << "]";
  }
}

TEST(Tokenizer, RoundTripIsExactOnTheWholeSample) {
  const Tokenizer& tok = sample_tokenizer();
  std::string text = loom::test::sample_text();
  std::vector<int32_t> ids;
  tok.encode(text, &ids);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(ids.size(), text.size() * 2 / 3);  // it compresses: merges are learned and used
}

TEST(Tokenizer, NewlineIsOneTokenAndEosExists) {
  const Tokenizer& tok = sample_tokenizer();
  std::vector<int32_t> ids;
  tok.encode("\n", &ids);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_GE(tok.eos_id(), 0);
  EXPECT_NE(ids[0], tok.eos_id());
  EXPECT_EQ(tok.vocab_size(), 400);
}

TEST(Tokenizer, TrainingIsDeterministic) {
  std::string text = loom::test::sample_text().substr(0, 100000);
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < text.size();) {
    size_t nl = std::min(text.find('\n', at), text.size());
    if (nl > at) lines.push_back(std::string_view(text).substr(at, nl - at));
    at = nl + 1;
  }
  EXPECT_TRUE(Tokenizer::train(lines, 350, "a") == Tokenizer::train(lines, 350, "b"));
}

TEST(Tokenizer, BadModelFilesAreNamed) {
  std::string dir = loom::test::fresh_dir("tokenizer_bad");
  std::string garbage = dir + "/garbage.model", empty = dir + "/empty.model";
  loom::test::write_text(garbage, "this is not a protobuf");
  loom::test::write_text(empty, "");
  for (const std::string& path : {garbage, empty, dir + "/missing.model"}) {
    std::string e = loom::test::user_error([&] { Tokenizer::load(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
  }
}

TEST(Tokenizer, VocabularyTooLargeForTheTextIsAUserError) {
  std::vector<std::string_view> lines = {"tiny text", "very tiny"};
  std::string e = loom::test::user_error([&] { Tokenizer::train(lines, 5000, "tiny.txt"); });
  EXPECT_NE(e.find("tiny.txt"), std::string::npos) << e;
}

}  // namespace
