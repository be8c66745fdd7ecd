// Hugging Face tokenizers (issue 36): tokenizer.json files trained by the
// real `tokenizers` library in GPT-2's, Llama 3's and Qwen2's styles, and
// SentencePiece tokenizer.model files as Llama 2 and Mistral ship them
// (legacy on and off, checked against transformers' LlamaTokenizer) (tools/make_hf_tokenizer.py, the project's .venv; skipped without
// it unless LOOM_REQUIRE_HF_INTEROP=1) encode every test line to the
// library's ids and decode back to its text: Unicode letters and combining
// marks (NFC for Qwen2), emoji, digit runs, whitespace runs, contractions
// and special tokens inside the text. Malformed or unsupported files are
// refused naming the file and field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint/checkpoint_test_util.h"
#include "data_test_util.h"
#include "core/check.h"
#include "data/hf_bpe_tokenizer.h"
#include "cli/run_loom.h"
#include "data/corpus.h"
#include "data/dataset_manifest.h"
#include "data/text_codec.h"
#include "data/text_tokenizer.h"
#include "data/token_shard.h"

namespace loom {
namespace {

using test::hf_python;

std::string scratch(const std::string& name) {
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/test-data/hf-tok-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The data tests' own file helpers (data_test_util.h).
constexpr auto write = test::write_text;
constexpr auto slurp = test::read_text;

// Lines that exercise the split patterns and the byte mapping.
std::string test_lines() {
  std::string lines =
      "Hello, world! It's a test: we'll see, they've done it, I'm here, you'd know.\n"
      "Numbers 1 12 123 1234 12345 3.14159 and 2024-12-05\n"
      "   leading spaces, trailing spaces   \n"
      "tabs\tand\t\tmore\ttabs and\u00a0no-break\u2003em space\n"
      "caf\u00e9 cafe\u0301 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m A\u030angstro\u0308m\n"
      "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u03b3\u03b5\u03b9\u03ac \u05e9\u05dc\u05d5\u05dd "
      "\u0645\u0631\u062d\u0628\u0627\n"
      "\u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f \uc548\ub155\ud558\uc138\uc694\n"
      "emoji \U0001F600\U0001F680 \U0001F44D\U0001F3FD family \U0001F468\u200D\U0001F469\u200D\U0001F467 "
      "flag \U0001F1EB\U0001F1F7\n"
      "<|endoftext|>special<|im_start|>user\nhi<|im_end|><|begin_of_text|>x<|eot_id|><|end_of_text|>\n"
      "symbols #$%&*+/<=>@[\\]^_`{|}~ \"quoted\" (paren) --- ... !!!\n"
      "\n"
      "mixed CASE It'S DON'T We'LL\n"
      "<s>Hello</s> world <s> spaced </s><unk>unk\n"
      " leading<s>x <s>\n"
      "\u2581under\u2581score \u2581 and\u2581\u2581two\n"
      "  two leading spaces, it 's , they 're . why ?\n";
  // Text of the corpus too.
  const std::string kjv = slurp(LOOM_SOURCE_DIR "/data/sample/kjv.txt");
  lines += kjv.substr(10000, 200000);
  return lines;
}

class HfBpeTokenizerStyles : public testing::TestWithParam<const char*> {};

TEST_P(HfBpeTokenizerStyles, EncodesAndDecodesAsTheTokenizersLibrary) {
  SKIP_WITHOUT_HF_MODULE("tokenizers");
  const std::string py = hf_python();
  const std::string style = GetParam(), dir = scratch(style);
  const std::string corpus = dir + "/corpus.txt", lines_path = dir + "/lines.txt";
  const std::string lines = test_lines();
  write(corpus, slurp(LOOM_SOURCE_DIR "/data/sample/kjv.txt").substr(0, 300000) + lines);
  write(lines_path, lines);
  ASSERT_EQ(0, std::system(("'" + py + "' '" LOOM_SOURCE_DIR "/tools/make_hf_tokenizer.py' --style " + style +
                            " --corpus '" + corpus + "' --lines '" + lines_path + "' '" + dir + "' >/dev/null 2>&1")
                               .c_str()));
  // The folder as a checkpoint ships it: tokenizer.json and tokenizer_config.json.
  const std::unique_ptr<TextTokenizer> loaded = load_tokenizer(dir);
  const TextTokenizer& tok = *loaded;
  const bool sentencepiece = style.rfind("llama2", 0) == 0;
  EXPECT_EQ(tok.bos_id() >= 0, style == "llama3" || sentencepiece);
  EXPECT_EQ(tok.kind().find(sentencepiece ? "SentencePiece" : "byte-level BPE") != std::string::npos, true) << tok.kind();
  int fast_differs = 0;
  std::ifstream expected(dir + "/expected.jsonl");
  std::stringstream all(lines);
  std::string line, want_json;
  int checked = 0, mismatched = 0;
  while (std::getline(expected, want_json)) {
    std::getline(all, line);
    const auto want = nlohmann::json::parse(want_json);
    const std::vector<int32_t> ids = tok.encode(line);
    const auto want_ids = want.at("ids").get<std::vector<int32_t>>();
    if (ids != want_ids && mismatched++ < 5) ADD_FAILURE() << style << ": line \"" << line << "\" encodes differently";
    // As transformers' tokenizer(line) (BOS first for Llama 3) and decode() (Llama 3: clean-up on).
    std::vector<int32_t> with_special = ids;
    if (tok.bos_id() >= 0) with_special.insert(with_special.begin(), tok.bos_id());
    EXPECT_EQ(with_special, want.at("with_special").get<std::vector<int32_t>>()) << line;
    EXPECT_EQ(tok.decode(want_ids), want.at("hf_decoded").get<std::string>()) << line;
    if (style != "llama3") EXPECT_EQ(want.at("hf_decoded"), want.at("decoded")) << line;
    if (want.contains("fast_ids") && want.at("fast_ids") != want.at("ids")) fast_differs++;
    checked++;
  }
  EXPECT_GT(checked, 1500);
  EXPECT_EQ(mismatched, 0);
  // LlamaTokenizerFast (converted) and the slow LlamaTokenizer loom follows
  // disagree on some lines without legacy (leading spaces, U+2581): reported.
  if (sentencepiece)
    std::printf("%s: LlamaTokenizerFast differs from LlamaTokenizer on %d of %d lines\n", style.c_str(), fast_differs,
                checked);
}

// Byte-level BPE in GPT-2's, Llama 3's and Qwen2's styles; SentencePiece
// tokenizer.model files as Llama 2 and Mistral ship them, legacy off and on.
INSTANTIATE_TEST_SUITE_P(Styles, HfBpeTokenizerStyles,
                         testing::Values("gpt2", "llama3", "qwen2", "llama2", "llama2-legacy"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

std::string load_error(const std::string& json, const std::string& config = "") {
  const std::string dir = scratch("bad");
  write(dir + "/tokenizer.json", json);
  if (!config.empty()) write(dir + "/tokenizer_config.json", config);
  try {
    HfBpeTokenizer::load(dir + "/tokenizer.json");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(HfBpeTokenizer, UnsupportedFilesAreNamed) {
  const std::string pre = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  const std::string good = R"({"model": {"type": "BPE", "vocab": {"a": 0, "<|endoftext|>": 1}, "merges": []}, )" + pre + "}";
  EXPECT_EQ(load_error(good), "");
  // The end of text: tokenizer_config.json's eos_token, else <|endoftext|>.
  EXPECT_EQ(load_error(good, R"({"eos_token": {"content": "a"}})"), "");
  EXPECT_NE(load_error(good, R"({"eos_token": "</s>"})").find("tokenizer_config.json: field 'eos_token' names '</s>'"),
            std::string::npos);
  EXPECT_NE(load_error(good, R"({"eos_token": 3})").find("eos_token"), std::string::npos);
  EXPECT_NE(load_error(good, "[1,").find("tokenizer_config.json: not valid JSON"), std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, )" + pre + "}")
                .find("no end-of-text token"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "WordPiece", "vocab": {}}, )" + pre + "}").find("model.type"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": [], "byte_fallback": true}, )" + pre + "}")
                .find("byte_fallback"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}})")
                .find("pre_tokenizer"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": {"type": "NFKC"}, )" +
                       pre + "}")
                .find("normalizer.type"),
            std::string::npos);
  EXPECT_NE(load_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": ["ab"]}, )" + pre + "}").find("merge 0"),
            std::string::npos);
  EXPECT_NE(load_error("{not json").find("not valid JSON"), std::string::npos);
  const std::string dir = scratch("utf8");
  write(dir + "/tokenizer.json", good);
  const HfBpeTokenizer tok = HfBpeTokenizer::load(dir + "/tokenizer.json");
  EXPECT_THROW(tok.encode("bad \xff byte"), UserError);
}

// `loom prepare --tokenizer DIR` with a Hugging Face tokenizer folder (Llama
// 3 style: a BOS first, <|end_of_text|> as EOS): the folder's files copied,
// every document BOS + its ids + EOS in the shards; then `loom train` on
// them and `loom generate` through the same tokenizer.
TEST(HfBpeTokenizer, PrepareTrainAndGenerateWithAHuggingFaceTokenizer) {
  SKIP_WITHOUT_HF_MODULE("transformers");
  const std::string dir = scratch("prepare"), tok_dir = dir + "/tok", in = dir + "/in", out = dir + "/data";
  std::filesystem::create_directories(in);
  const std::string kjv = slurp(LOOM_SOURCE_DIR "/data/sample/kjv.txt");
  write(dir + "/corpus.txt", kjv.substr(0, 200000));
  write(dir + "/lines.txt", "x");
  ASSERT_EQ(0, std::system(("'" + hf_python() + "' '" LOOM_SOURCE_DIR "/tools/make_hf_tokenizer.py' --style llama3 "
                            "--corpus '" + dir + "/corpus.txt' --lines '" + dir + "/lines.txt' '" + tok_dir +
                            "' >/dev/null 2>&1")
                               .c_str()));
  for (int d = 0; d < 4; d++) write(in + "/doc" + std::to_string(d) + ".txt", kjv.substr(size_t(d) * 30000, 30000));
  test::CliResult r = test::run_loom("prepare --input '" + in + "' --out '" + out + "' --tokenizer '" + tok_dir +
                                     "' --val-fraction 0.25");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Hugging Face byte-level BPE"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(out + "/tokenizer.json"), slurp(tok_dir + "/tokenizer.json"));
  EXPECT_EQ(slurp(out + "/tokenizer_config.json"), slurp(tok_dir + "/tokenizer_config.json"));
  const DatasetManifest m = read_dataset_manifest(out);
  EXPECT_EQ(m.tokenizer, "tokenizer.json");
  const std::unique_ptr<TextTokenizer> tok = load_tokenizer(tok_dir);
  EXPECT_EQ(int(m.vocab_size), tok->vocab_size());
  EXPECT_EQ(int(m.eos_id), tok->eos_id());
  // The training shard: documents as BOS, ids, EOS, in corpus order.
  ShardFile shard(out + "/" + m.train.shards.at(0));
  std::vector<int32_t> want;
  const Corpus corpus = read_corpus(in);
  const CorpusSplit split = split_corpus(corpus, 0.25);
  for (const Document* d : split.train) {
    want.push_back(tok->bos_id());
    tok->encode(d->text, &want);
    want.push_back(tok->eos_id());
  }
  ASSERT_EQ(shard.size(), want.size());
  std::vector<int32_t> got(want.size());
  shard.read(0, got.size(), got.data());
  EXPECT_EQ(got, want);
  r = test::run_loom("prepare --input '" + in + "' --out '" + out + "' --tokenizer '" + tok_dir + "'" +
                     " --val-fraction 0.25");
  EXPECT_NE(r.output.find("up to date"), std::string::npos) << r.output;

  const std::string ckpt = dir + "/ckpt";
  r = test::run_loom("train --config configs/llama-tiny.toml --set data.format=shards --set data.path=" + out +
                     " --set model.vocab_size=" + std::to_string(tok->vocab_size()) +
                     " --set train.steps=2 --set train.checkpoint_every=2 --set train.checkpoint_dir=" + ckpt +
                     " --set train.sample_tokens=4 --set train.eval_every=0 --set 'train.run_dir=' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Hugging Face tokenizer.json vocabulary"), std::string::npos) << r.output;
  r = test::run_loom("generate --checkpoint " + ckpt + " --prompt 'And God said' --temperature 0 --max-tokens 6");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("And God said", 0), 0u) << r.output;
  r = test::run_loom("generate --checkpoint " + ckpt + " --tokenizer '" + tok_dir +
                     "' --prompt 'And God said' --temperature 0 --max-tokens 6");
  EXPECT_EQ(r.code, 0) << r.output;

  // The same folder prepared again with a Llama 2 style tokenizer.model:
  // the byte-level files go, the shards are BOS ids EOS of that tokenizer.
  const std::string sp_dir = dir + "/sp";
  ASSERT_EQ(0, std::system(("'" + hf_python() + "' '" LOOM_SOURCE_DIR "/tools/make_hf_tokenizer.py' --style llama2 "
                            "--corpus '" + dir + "/corpus.txt' --lines '" + dir + "/lines.txt' '" + sp_dir +
                            "' >/dev/null 2>&1")
                               .c_str()));
  r = test::run_loom("prepare --input '" + in + "' --out '" + out + "' --tokenizer '" + sp_dir + "' --val-fraction 0.25");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Hugging Face SentencePiece"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/tokenizer.json"));
  EXPECT_EQ(read_dataset_manifest(out).tokenizer, "tokenizer.model");
  const TextCodec codec = TextCodec::for_data("shards", out, "test");
  EXPECT_NE(codec.tokenizer->kind().find("SentencePiece (" + out + "/tokenizer.model, legacy false)"), std::string::npos)
      << codec.tokenizer->kind();
  const std::unique_ptr<TextTokenizer> sp = load_tokenizer(sp_dir);
  std::vector<int32_t> first = {sp->bos_id()};
  sp->encode(split.train.front()->text, &first);
  first.push_back(sp->eos_id());
  const DatasetManifest again = read_dataset_manifest(out);
  ShardFile sp_shard(out + "/" + again.train.shards.at(0));
  std::vector<int32_t> head(first.size());
  sp_shard.read(0, head.size(), head.data());
  EXPECT_EQ(head, first);
}

}  // namespace
}  // namespace loom
