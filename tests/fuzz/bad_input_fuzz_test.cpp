// Bounded, deterministic mutation tests of loom's readers: configs (files
// and --set), token shards, checkpoint manifests, safetensors files and
// `loom plan`'s arguments. Each mutant must be accepted or refused with a
// UserError (exit 2 at the command line): never another exception (an
// internal error), a signal or a hang. Seeded, so a failure names the case
// that reproduces it; a few hundred cases in seconds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/manifest.h"
#include "checkpoint/sha256.h"
#include "checkpoint/safetensors.h"
#include "cli/run_loom.h"
#include "config/run_config.h"
#include "core/check.h"
#include "data/chat_sample.h"
#include "data/dataset_manifest.h"
#include "data/prepare.h"
#include "data/text_tokenizer.h"
#include "data/tokenizer.h"
#include "data/token_loader.h"
#include "data/token_shard.h"
#include "fuzz/fuzz_util.h"
#include "planner/cluster.h"
#include "planner/model_presets.h"
#include "planner/search.h"
#include "../data/data_test_util.h"

namespace loom {
namespace {

using test::expect_accepted_or_refused;
using test::fuzz_dir;
using test::kValues;
using test::mutate_text;
using test::read_bytes;
using test::Rng;
using test::write_bytes;

TEST(Fuzz, ConfigFilesAndOverrides) {
  const std::string dir = fuzz_dir("config");
  const std::string base = read_bytes(LOOM_SOURCE_DIR "/configs/tiny.toml");
  ASSERT_FALSE(base.empty());
  const std::vector<std::string> keys = {
      "model.n_layer", "model.d_model", "model.n_head", "model.seq_len", "model.vocab_size", "model.family",
      "model.n_kv_head", "model.attention", "train.batch_size", "train.micro_batch_size", "train.lr", "train.steps",
      "train.run_name", "train.grad_clip", "train.trace_flush_every", "train.checkpoint_every", "parallel.tp",
      "parallel.pp", "parallel.cp", "parallel.zero", "parallel.order", "parallel.bucket_mb", "precision.compute",
      "precision.loss_scale", "runtime.threads", "runtime.comm_timeout_s", "data.format", "data.val_fraction"};
  Rng rng(20261204);
  int refused = 0, cases = 0;
  for (int i = 0; i < 200; i++, cases++) {
    const std::string path = dir + "/c.toml";
    write_bytes(path, mutate_text(rng, base, kValues));
    expect_accepted_or_refused("config mutant " + std::to_string(i),
                               [&] { load_run_config(path, {}); }, &refused);
  }
  for (int i = 0; i < 150; i++, cases++) {
    const std::string set = rng.pick(keys) + "=" + rng.pick(kValues);
    expect_accepted_or_refused("--set " + set, [&] { load_run_config("", {set}); }, &refused);
  }
  EXPECT_GT(refused, cases / 4) << "the mutants should mostly be refused";
}

TEST(Fuzz, TokenShards) {
  const std::string dir = fuzz_dir("shard");
  std::vector<int32_t> ids(3000);
  for (size_t i = 0; i < ids.size(); i++) ids[i] = int32_t((i * 7919) % 500);
  ShardHeader h{};
  h.vocab_size = 500, h.eos_id = 1, h.document_count = 3;
  write_shard(dir + "/good.bin", h, ids.data(), ids.size());
  const std::string good = read_bytes(dir + "/good.bin");
  Rng rng(7);
  int refused = 0;
  for (int i = 0; i < 200; i++) {
    std::string bytes = good;
    const size_t kind = rng.below(4);
    if (kind == 0) {  // header bytes changed
      for (size_t k = 0, n = 1 + rng.below(4); k < n; k++) bytes[rng.below(64)] = char(rng.below(256));
    } else if (kind == 1) {  // a header field set to an extreme
      // (2^63 + 3000) x 2 bytes wraps around to the 6000-byte body.
      const uint64_t extreme[] = {0, 1, ~uint64_t(0), uint64_t(1) << 63, (uint64_t(1) << 63) + 3000, 0xFFFFFFFFull};
      const size_t field[] = {8, 12, 16, 24, 32, 36};
      const size_t at = field[rng.below(6)];
      const uint64_t v = extreme[rng.below(6)];
      std::memcpy(bytes.data() + at, &v, at == 8 || at == 12 || at == 32 || at == 36 ? 4 : 8);
    } else if (kind == 2) {  // cut short or grown
      bytes.resize(rng.below(2) ? rng.below(bytes.size()) : bytes.size() + rng.below(100));
    } else {  // body bytes changed: ids beyond the vocabulary
      for (size_t k = 0; k < 8; k++) bytes[64 + rng.below(bytes.size() - 64)] = char(0xFF);
    }
    const std::string path = dir + "/m.bin";
    write_bytes(path, bytes);
    expect_accepted_or_refused("shard mutant " + std::to_string(i), [&] {
      ShardFile s(path);
      s.check_ids_below(500);
      std::vector<int32_t> out(size_t(std::min<uint64_t>(s.size(), 4096)));
      s.read(0, out.size(), out.data());
    }, &refused);
  }
  EXPECT_GT(refused, 100);
}

TEST(Fuzz, CheckpointManifests) {
  const nlohmann::json good = {
      {"format", "loom-checkpoint"}, {"version", kCheckpointFormatVersion}, {"step", 4}, {"config", "[train]\n"},
      {"model", {{"n_layer", 2}, {"d_model", 32}}},
      {"layout", {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"zero", 1}, {"order", "tp-dp-pp"}, {"world_size", 1}}},
      {"data", {{"step", 4}, {"consumed_samples", 32}}}, {"rng", {{"seed", 1337}}}, {"loss_scaler", nlohmann::json::object()},
      {"extra", {{"adam_steps", 4}, {"data_skip", 0}, {"loss_guard", nlohmann::json::object()}}},
      {"files", {{{"name", "rank_00000.safetensors"}, {"bytes", 100}, {"sha256", std::string(64, 'a')}}}},
      {"tensors", nlohmann::json::object()}};
  ASSERT_NO_THROW(parse_manifest(good.dump(), "good"));
  const std::vector<nlohmann::json> values = {-1, 0, int64_t(1) << 62, 1e300, "x", nullptr, nlohmann::json::array(),
                                              nlohmann::json::object(), true, -3.5, "../x", 2147483647,
                                              uint64_t(1) << 32 | 2, 1.5, ~uint64_t(0)};
  const std::vector<std::string> pointers = {
      "/step", "/version", "/format", "/config", "/model", "/model/n_layer", "/layout", "/layout/dp", "/layout/tp",
      "/layout/zero", "/layout/world_size", "/layout/order", "/data", "/data/step", "/data/consumed_samples", "/rng",
      "/rng/seed", "/extra", "/extra/adam_steps", "/extra/data_skip", "/extra/loss_guard", "/files",
      "/files/0/name", "/files/0/bytes", "/files/0/sha256", "/tensors", "/loss_scaler"};
  Rng rng(11);
  int refused = 0;
  for (int i = 0; i < 250; i++) {
    std::string text;
    if (rng.below(4) == 0) {
      text = mutate_text(rng, good.dump(2), {"-1", "null", "\"x\"", "[]", "{}", "1e400"});
    } else {
      nlohmann::json m = good;
      const std::string ptr = rng.pick(pointers);
      if (rng.below(4) == 0) {
        const size_t slash = ptr.rfind('/');
        nlohmann::json& parent = m[nlohmann::json::json_pointer(slash ? ptr.substr(0, slash) : "")];
        if (parent.is_object()) parent.erase(ptr.substr(slash + 1));
      } else {
        m[nlohmann::json::json_pointer(ptr)] = rng.pick(values);
      }
      text = m.dump();
    }
    expect_accepted_or_refused("manifest mutant " + std::to_string(i), [&] { parse_manifest(text, "fuzz"); },
                               &refused);
  }
  EXPECT_GT(refused, 150);
}

// A whole checkpoint folder: its manifest edited (and re-hashed, so the
// manifest's own checks are what is tested) or a rank file's bytes changed,
// then resumed from and every tensor read.
TEST(Fuzz, CheckpointFolders) {
  const std::string root = fuzz_dir("ckpt");
  std::vector<float> w(24), b(6);
  for (size_t i = 0; i < w.size(); i++) w[i] = float(i);
  CheckpointWriter writer(root, 5);
  for (int r = 0; r < 2; r++)
    writer.write_rank_file(r, {{"w", {4, 6}, {2 * r, 0}, {2, 6}, 0, -1, w.data() + 12 * r},
                               {"b", {6}, {}, {}, 3 * r, 3 * r + 3, b.data() + 3 * r}});
  CheckpointManifest m;
  m.step = 5, m.data = {5, 40}, m.config_toml = "[train]\n";
  m.layout = {2, 1, 1, 1, "tp-dp-pp", 2};
  const std::string dir = writer.commit(m, {0, 1}, 1).dir;
  const std::string manifest = read_bytes(dir + "/manifest.json"), rank1 = read_bytes(dir + "/rank_00001.safetensors");
  const std::vector<std::string> pointers = {
      "/files/0/name", "/files/1/bytes", "/files/1/sha256", "/tensors/w/global_shape", "/tensors/w/global_shape/0",
      "/tensors/w/pieces/0/offset", "/tensors/w/pieces/1/shape/1", "/tensors/w/pieces/1/file", "/tensors/w/pieces/0/key",
      "/tensors/b/pieces/1/flat_range", "/tensors/b/pieces/1/flat_range/0", "/tensors/b", "/tensors", "/layout/dp",
      "/layout/world_size", "/files"};
  const std::vector<nlohmann::json> values = {-1, 0, 1, 3, int64_t(1) << 62, "x", nullptr, nlohmann::json::array(),
                                              nlohmann::json::object(), "rank_00001.safetensors", "w@0,0"};
  Rng rng(17);
  int refused = 0;
  for (int i = 0; i < 150; i++) {
    write_bytes(dir + "/rank_00001.safetensors", rank1);
    nlohmann::json j = nlohmann::json::parse(manifest);
    if (rng.below(3) == 0) {  // the rank file's bytes, the manifest recording them (a consistent forgery)
      std::string bytes = rank1;
      for (size_t k = 0, n = 1 + rng.below(3); k < n; k++) bytes[rng.below(bytes.size())] = char(rng.below(256));
      write_bytes(dir + "/rank_00001.safetensors", bytes);
      j["files"][1]["sha256"] = sha256_hex(bytes.data(), bytes.size());
    } else {
      const std::string ptr = rng.pick(pointers);
      try {
        j[nlohmann::json::json_pointer(ptr)] = rng.pick(values);
      } catch (const nlohmann::json::exception&) {  // a path through a value just replaced: leave it
      }
    }
    const std::string text = j.dump(1) + "\n";
    write_bytes(dir + "/manifest.json", text);
    write_bytes(dir + "/" + kManifestHashFile, sha256_hex(text.data(), text.size()) + "  manifest.json\n");
    expect_accepted_or_refused("checkpoint mutant " + std::to_string(i), [&] {
      Checkpoint c = Checkpoint::open(resolve_resume(dir, "").dir);
      for (const std::string& name : c.tensors().names()) c.tensors().read_global(name);
    }, &refused);
  }
  EXPECT_GT(refused, 90);
}

TEST(Fuzz, SafetensorsFiles) {
  const std::string dir = fuzz_dir("safetensors");
  std::vector<float> a(60, 1.5f), b(24, -2.f);
  write_safetensors(dir + "/good.safetensors",
                    {{"a", StDType::F32, {6, 10}, a.data()}, {"b", StDType::F32, {24}, b.data()}}, {{"k", "v"}});
  const std::string good = read_bytes(dir + "/good.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  ASSERT_LT(header_len, good.size());
  Rng rng(3);
  int refused = 0;
  for (int i = 0; i < 200; i++) {
    std::string bytes = good;
    const size_t kind = rng.below(3);
    if (kind == 0) {  // header JSON bytes changed
      for (size_t k = 0, n = 1 + rng.below(3); k < n; k++) bytes[8 + rng.below(size_t(header_len))] = char(rng.below(128));
    } else if (kind == 1) {  // the header length
      const uint64_t v = rng.pick(std::vector<uint64_t>{0, 1, header_len - 1, header_len + 1, ~uint64_t(0),
                                                        uint64_t(1) << 40, good.size()});
      std::memcpy(bytes.data(), &v, 8);
    } else {
      bytes.resize(rng.below(bytes.size()));
    }
    const std::string path = dir + "/m.safetensors";
    write_bytes(path, bytes);
    expect_accepted_or_refused("safetensors mutant " + std::to_string(i), [&] {
      SafetensorsFile f = SafetensorsFile::open(path);
      for (const auto& [name, t] : f.tensors()) {
        const int64_t n = shape_numel(t.shape);
        std::vector<float> out(size_t(std::min<int64_t>(n, 4096)));
        f.read_floats(t, 0, int64_t(out.size()), out.data());
      }
    }, &refused);
  }
  EXPECT_GT(refused, 100);
}

// A prepared dataset's dataset.toml, mutated, then opened by the loader the
// trainer uses (which reads the tokenizer and every shard it names).
TEST(Fuzz, DatasetManifests) {
  const std::string in = fuzz_dir("dataset-in"), out = fuzz_dir("dataset");
  loom::test::write_sample_docs(in, 6, 6000);
  prepare_dataset(loom::test::small_prepare(in, out), nullptr);
  const std::string good = read_bytes(out + "/" + kManifestName);
  ASSERT_NO_THROW(TokenLoader(out, 2, 16, 400));
  const std::vector<std::string> values = {"-1", "0", "1", "400", "4294967297", "\"..\"", "\".\"", "[\"..\"]",
                                           "[\"tokenizer.model\"]", "\"0123456789abcdef\"", "\"/dev/zero\"", "[]",
                                           "nan", "1e300", "\"\"", "[1]", "{}", "9223372036854775807"};
  Rng rng(23);
  int refused = 0;
  for (int i = 0; i < 150; i++) {
    write_bytes(out + "/" + kManifestName, mutate_text(rng, good, values));
    expect_accepted_or_refused("dataset.toml mutant " + std::to_string(i), [&] { TokenLoader(out, 2, 16, 400); },
                               &refused);
  }
  write_bytes(out + "/" + kManifestName, good);
  EXPECT_GT(refused, 75);
}

// Hugging Face checkpoint folders (train.init_from = "hf:DIR", loom plan
// --model DIR): config.json and model.safetensors.index.json mutated, each
// mutant read as a run's model and its weights opened.
TEST(Fuzz, HfCheckpointFolders) {
  const std::string dir = fuzz_dir("hf");
  const std::string config = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 300,
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
  "original_max_position_embeddings": 32}, "hidden_act": "silu", "tie_word_embeddings": false, "pretraining_tp": 1})";
  write_bytes(dir + "/config.json", config);
  const std::string init = "train.init_from=\"hf:" + dir + "\"";
  const RunConfig good = load_run_config("", {init});
  std::vector<float> zeros(size_t(1) << 16, 0.f);
  std::vector<StEntry> entries;
  for (const HfTensorMap& m : hf_tensor_map(good.model))
    for (const HfPart& p : m.parts) {
      std::vector<int64_t> shape = m.shape;
      shape[0] = p.rows;
      entries.push_back({p.name, StDType::F32, shape, zeros.data()});
    }
  write_safetensors(dir + "/model-00001-of-00001.safetensors", entries, {{"format", "pt"}});
  nlohmann::json index;
  for (const StEntry& e : entries) index["weight_map"][e.name] = "model-00001-of-00001.safetensors";
  const std::string good_index = index.dump(1);
  write_bytes(dir + "/model.safetensors.index.json", good_index);
  auto open = [&] { HfCheckpoint::open(dir, load_run_config("", {init}).model); };
  ASSERT_NO_THROW(open());
  const std::vector<std::string> values = {"-1", "0", "1", "2", "3", "300", "64", "4096", "null", "true", "false",
                                           "\"silu\"", "\"gelu\"", "[]", "{}", "1e300", "nan", "\"\"",
                                           "\"GPT2LMHeadModel\"", "[\"GPT2LMHeadModel\"]", "\"../x\"",
                                           "\"model-00001-of-00001.safetensors\"", "2147483648"};
  Rng rng(36);
  int refused = 0, cases = 0;
  for (int i = 0; i < 150; i++, cases++) {
    write_bytes(dir + "/config.json", mutate_text(rng, config, values));
    expect_accepted_or_refused("config.json mutant " + std::to_string(i), open, &refused);
  }
  write_bytes(dir + "/config.json", config);
  for (int i = 0; i < 100; i++, cases++) {
    write_bytes(dir + "/model.safetensors.index.json", mutate_text(rng, good_index, values));
    expect_accepted_or_refused("index mutant " + std::to_string(i), open, &refused);
  }
  EXPECT_GT(refused, cases / 4);
}

// Cluster files, as `loom plan --cluster FILE` and `loom train --cluster`
// read them, then planned for: every figure the planner divides by or
// multiplies must be refused if absurd, not turned into inf or NaN.
// A Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json),
// each file mutated: loaded or refused; what loads encodes and decodes text
// (or refuses it) without another error.
TEST(Fuzz, HfTokenizerFolders) {
  const std::string dir = fuzz_dir("hf-tokenizer");
  const std::string tokenizer = R"({"added_tokens": [{"id": 6, "content": "<|endoftext|>", "special": true},
  {"id": 7, "content": "<|begin_of_text|>", "special": true}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\p{N}{1,3}|\\s+"},
  "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
  {"Sequence": {"id": "A", "type_id": 0}}]},
  "model": {"type": "BPE", "ignore_merges": true, "byte_fallback": false,
  "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120a": 4, "1": 5}, "merges": ["a b", "\u0120 a"]}})";
  const std::string config = R"({"eos_token": "<|endoftext|>", "bos_token": {"content": "<|begin_of_text|>"},
  "clean_up_tokenization_spaces": true})";
  write_bytes(dir + "/tokenizer.json", tokenizer);
  write_bytes(dir + "/tokenizer_config.json", config);
  auto use = [&] {
    const std::unique_ptr<TextTokenizer> t = load_tokenizer(dir);
    const std::vector<int32_t> ids = t->encode("ab a<|endoftext|>ba 1");
    t->decode(ids);
  };
  ASSERT_NO_THROW(use());
  const std::vector<std::string> values = {"-1", "0", "1", "7", "99", "null", "true", "false", "[]", "{}", "\"\"",
                                           "\"BPE\"", "\"WordPiece\"", "\"(\"", "\"<|begin_of_text|>\"",
                                           "[\"a\", \"b\"]", "2147483648"};
  Rng rng(361);
  int refused = 0, cases = 0;
  for (int i = 0; i < 150; i++, cases++) {
    write_bytes(dir + "/tokenizer.json", mutate_text(rng, tokenizer, values));
    expect_accepted_or_refused("tokenizer.json mutant " + std::to_string(i), use, &refused);
  }
  write_bytes(dir + "/tokenizer.json", tokenizer);
  for (int i = 0; i < 60; i++, cases++) {
    write_bytes(dir + "/tokenizer_config.json", mutate_text(rng, config, values));
    expect_accepted_or_refused("tokenizer_config.json mutant " + std::to_string(i), use, &refused);
  }
  EXPECT_GT(refused, cases / 4);

  // A tokenizer.model with the tokenizer_config.json that makes it Llama 2's.
  const std::string sp = fuzz_dir("hf-sentencepiece");
  std::vector<std::string> text;
  for (int i = 0; i < 200; i++) text.push_back("line " + std::to_string(i) + " of some text, and more words");
  std::vector<std::string_view> lines(text.begin(), text.end());
  write_bytes(sp + "/tokenizer.model", Tokenizer::train(lines, 300, "fuzz"));
  // (loom's trainer makes <unk> 0 and </s> 1, no BOS.)
  const std::string sp_config = R"({"bos_token": null, "eos_token": {"content": "</s>"}, "unk_token": "<unk>",
  "add_bos_token": false, "add_eos_token": false, "legacy": false, "add_prefix_space": true,
  "added_tokens_decoder": {"0": {"content": "<unk>", "special": true}, "1": {"content": "</s>", "special": true}}})";
  write_bytes(sp + "/tokenizer_config.json", sp_config);
  auto use_sp = [&] {
    const std::unique_ptr<TextTokenizer> t = load_tokenizer(sp);
    t->decode(t->encode("<s>line 1</s> of\u2581text <unk>"));
  };
  ASSERT_NO_THROW(use_sp());
  for (int i = 0; i < 80; i++, cases++) {
    write_bytes(sp + "/tokenizer_config.json", mutate_text(rng, sp_config, values));
    expect_accepted_or_refused("Llama 2 tokenizer_config.json mutant " + std::to_string(i), use_sp, &refused);
  }
}

// Lines of instruction and chat data, mutated: a sample or a UserError, in
// every built-in chat template.
TEST(Fuzz, ChatJsonLines) {
  const std::vector<std::string> lines = {
      R"({"prompt": "What is 2+2?", "completion": " 4."})",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
          {"role": "assistant", "content": "Bye."}]})"};
  const std::vector<std::string> values = {"-1", "0", "null", "true", "[]", "{}", "\"\"", "\"user\"",
                                           "\"assistant\"", "\"system\"", "\"tool\"", "[{}]",
                                           "{\"role\": \"user\"}", "\"\\u0000\""};
  Rng rng(37);
  int refused = 0, cases = 0;
  for (ChatTemplate t : {ChatTemplate::chatml, ChatTemplate::llama3, ChatTemplate::llama31, ChatTemplate::llama2,
                         ChatTemplate::mistral}) {
    const ChatFormat format{t, "<s>", "</s>"};
    for (const std::string& good : lines) {
      ASSERT_NO_THROW(chat_sample_segments(good, "x.jsonl", 1, format)) << chat_template_name(t);
      for (int i = 0; i < 60; i++, cases++)
        expect_accepted_or_refused(std::string(chat_template_name(t)) + " line mutant " + std::to_string(i),
                                   [&] { chat_sample_segments(mutate_text(rng, good, values), "x.jsonl", 1, format); },
                                   &refused);
    }
  }
  EXPECT_GT(refused, cases / 4);
}

TEST(Fuzz, ClusterFiles) {
  const std::string dir = fuzz_dir("cluster");
  const std::string good = read_bytes(LOOM_SOURCE_DIR "/configs/clusters/a100-80gb.toml");
  ASSERT_FALSE(good.empty());
  const std::vector<std::string> values = {"-1", "0", "1", "1e300", "1e-300", "nan", "inf", "\"x\"", "[1]",
                                           "16777216", "2147483648", "0.5", "true", "\"a\\\"b\""};
  Rng rng(29);
  int refused = 0;
  for (int i = 0; i < 150; i++) {
    const std::string path = dir + "/c" + std::to_string(i % 4) + ".toml";
    write_bytes(path, mutate_text(rng, good, values));
    std::optional<planner::ClusterSpec> c;
    expect_accepted_or_refused("cluster mutant " + std::to_string(i),
                               [&] { c = planner::load_cluster(path, LOOM_SOURCE_DIR); }, &refused);
    if (!c) continue;
    // What loom accepts it writes back as a file it accepts, and plans for
    // with finite figures.
    EXPECT_NO_THROW(planner::parse_cluster_toml(c->to_toml(), "round trip")) << "cluster mutant " << i;
    if (c->devices() > 64) continue;  // a large cluster's search is slow, not different
    const planner::ModelPreset& gpt2 = planner::model_preset("gpt2-124m");
    planner::SearchSpace space;
    space.precision = {ComputePrecision::fp32};
    const planner::SearchResult r = planner::search_layouts({gpt2.model, gpt2.global_batch}, *c, space, 1);
    for (const planner::Candidate& k : r.top)
      EXPECT_TRUE(std::isfinite(k.time.step) && k.time.step > 0) << "cluster mutant " << i << ": " << k.time.step;
  }
  EXPECT_GT(refused, 75);
  for (const char* special : {"/dev/null", "/dev/zero"}) {
    int refused_special = 0;
    expect_accepted_or_refused(special, [&] { planner::load_cluster(special, LOOM_SOURCE_DIR); }, &refused_special);
    EXPECT_EQ(refused_special, 1) << special;
  }
}

// The command line: exit 0 or 2, never a signal, an internal error or a hang.
TEST(Fuzz, PlannerArguments) {
  const std::vector<std::string> flags = {"--model", "--cluster", "--devices", "--dp", "--tp", "--pp", "--cp",
                                          "--micro-batch", "--zero", "--seq", "--batch", "--tokens", "--layers",
                                          "--d-model", "--heads", "--top", "--precision", "--recompute", "--v"};
  const std::vector<std::string> values = {"0", "-1", "1", "3", "1e30", "nan", "x", "gpt3-175b", "a100-80gb",
                                           "99999999", "1,2,x", "", "4096", "bf16", "full", "/dev/null"};
  Rng rng(5);
  for (int i = 0; i < 40; i++) {
    std::string args = "plan";
    for (size_t k = 0, n = 1 + rng.below(3); k < n; k++)
      args += " " + rng.pick(flags) + " '" + rng.pick(values) + "'";
    const auto r = loom::test::run_loom(args, "timeout 60");
    EXPECT_TRUE(r.code == 0 || r.code == 2) << args << " -> exit " << r.code << "\n" << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace loom
