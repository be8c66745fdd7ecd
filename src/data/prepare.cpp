#include "data/prepare.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>
#include <regex>
#include <set>

#include "core/atomic_file.h"
#include "core/check.h"
#include "data/content_hash.h"
#include "data/chat_sample.h"
#include "data/corpus.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "obs/progress.h"

namespace loom {
namespace fs = std::filesystem;

namespace {

// Bump when prepare would write different tokens or shards from the same
// inputs and options, so that old outputs are not taken as up to date.
constexpr uint64_t kRecipeVersion = 1;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void say(FILE* log, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void say(FILE* log, const char* fmt, ...) {
  if (!log) return;
  va_list args;
  va_start(args, fmt);
  std::fprintf(log, "prepare: %s\n", vstrprintf(fmt, args).c_str());
  va_end(args);
  std::fflush(log);
}

void check_options(const PrepareOptions& o) {
  LOOM_USER_CHECK(!o.input.empty(), "prepare: --input is empty");
  LOOM_USER_CHECK(!o.out.empty(), "prepare: --out is empty");
  LOOM_USER_CHECK(o.vocab_size >= 300 && o.vocab_size <= (1 << 20),
                  "prepare: --vocab-size must be in [300, 1048576] (256 byte tokens come first), got %d", o.vocab_size);
  LOOM_USER_CHECK(o.val_fraction > 0 && o.val_fraction < 1, "prepare: --val-fraction must be in (0, 1), got %g",
                  o.val_fraction);
  LOOM_USER_CHECK(o.shard_tokens >= 1024, "prepare: --shard-tokens must be >= 1024");
  LOOM_USER_CHECK(o.sample_mb > 0, "prepare: --sample-mb must be > 0");
  LOOM_USER_CHECK(o.threads >= 0, "prepare: --threads must be >= 0 (0 = all cores)");
}

uint64_t corpus_hash(const Corpus& c) {
  ContentHash h;
  for (const auto& d : c.documents) h.add(d.hash);
  return h.value();
}

// Every `stride`-th non-empty line, so that training fits the time budget.
std::vector<std::string_view> sample_lines(const Corpus& c, double sample_mb, uint64_t* sample_bytes) {
  uint64_t budget = uint64_t(sample_mb * 1e6);
  uint64_t stride = std::max<uint64_t>(1, (c.bytes + budget - 1) / std::max<uint64_t>(1, budget));
  std::vector<std::string_view> lines;
  uint64_t counter = 0;
  *sample_bytes = 0;
  for (const auto& d : c.documents) {
    std::string_view text = d.text;
    while (!text.empty()) {
      size_t nl = std::min(text.find('\n'), text.size());
      std::string_view line = text.substr(0, nl);
      text.remove_prefix(std::min(text.size(), nl + 1));
      if (line.empty() || counter++ % stride != 0) continue;
      lines.push_back(line);
      *sample_bytes += line.size();
    }
  }
  return lines;
}

// The current outputs are exactly what these stamps describe.
bool outputs_match(const std::string& out, uint64_t dataset_id, uint64_t tokenizer_stamp, DatasetManifest* found) {
  std::error_code missing;
  if (!fs::exists(out + "/" + kManifestName, missing)) return false;
  try {
    DatasetManifest m = read_dataset_manifest(out);
    if (m.dataset_id != dataset_id || m.tokenizer_stamp != tokenizer_stamp) return false;
    if (tokenizer_files_hash(tokenizer_files_in(out, m.tokenizer)) != m.tokenizer_hash) return false;
    for (const SplitManifest* split : {&m.train, &m.val}) {
      uint64_t tokens = 0;
      for (const auto& name : split->shards) {
        ShardFile shard(out + "/" + name);
        if (shard.header().dataset_id != dataset_id) return false;
        tokens += shard.size();
      }
      if (tokens != split->tokens) return false;
    }
    *found = m;
    return true;
  } catch (const UserError&) {
    return false;  // damaged outputs are remade
  }
}

// The tokenizer: the given one (its files copied into `out`), the one
// already in `out` if it was made from the same inputs and options, or a new one.
std::unique_ptr<TextTokenizer> get_tokenizer(const PrepareOptions& o, std::unique_ptr<TextTokenizer>& given,
                                             const Corpus& corpus, uint64_t tokenizer_stamp,
                                             const std::string& model_path, bool* trained, FILE* log) {
  *trained = false;
  if (given) {
    say(log, "tokenizer: %s, %s (%d tokens)", o.tokenizer.c_str(), given->kind().c_str(), given->vocab_size());
    std::error_code ec;
    const fs::path from = fs::is_directory(o.tokenizer, ec) ? fs::path(o.tokenizer) : fs::path(o.tokenizer).parent_path();
    for (const auto& [name, bytes] : given->files()) {
      const std::string to = o.out + "/" + name;
      if (!(fs::exists(to, ec) && fs::equivalent(from / name, to, ec)))
        write_file_atomically(to, bytes);
    }
    return std::move(given);
  }
  if (!o.force && fs::exists(o.out + "/" + kManifestName)) {
    try {
      DatasetManifest m = read_dataset_manifest(o.out);
      if (m.tokenizer_stamp == tokenizer_stamp) {
        auto t = std::make_unique<Tokenizer>(Tokenizer::load(model_path));
        if (t->model_hash() == m.tokenizer_hash) {
          say(log, "tokenizer: %s is up to date (%d pieces)", model_path.c_str(), t->vocab_size());
          return t;
        }
      }
    } catch (const UserError&) {
      // fall through: train a new one
    }
  }
  auto t0 = Clock::now();
  uint64_t sample_bytes = 0;
  std::vector<std::string_view> lines = sample_lines(corpus, o.sample_mb, &sample_bytes);
  say(log, "training the tokenizer: BPE, vocabulary %d, byte fallback, on %zu lines (%.1f MB) of the corpus ...",
      o.vocab_size, lines.size(), double(sample_bytes) / 1e6);
  std::string model = Tokenizer::train(lines, o.vocab_size, o.input);
  auto t = std::make_unique<Tokenizer>(Tokenizer::from_model(std::move(model), model_path));
  write_file_atomically(model_path, t->model_bytes());
  say(log, "tokenizer trained in %.1f s: %s", seconds_since(t0), model_path.c_str());
  *trained = true;
  return t;
}

// Token ids per document, and (chat data) which of them are learned from.
struct Tokenized {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<uint8_t>> targets;  // empty for plain text
  std::vector<std::vector<uint64_t>> starts;  // chat: where each sample starts in its document's ids
  uint64_t samples = 0, target_tokens = 0;
};

// A chat document's lines (JSON Lines), each a sample: its segments
// encoded with their target marks; prompt / completion wrapped in BOS and a
// learned EOS.
void tokenize_chat(const Document& d, const TextTokenizer& tok, const ChatFormat& format, std::vector<int32_t>& ids,
                   std::vector<uint8_t>& targets, std::vector<uint64_t>& starts, uint64_t* samples) {
  uint64_t line = d.first_line;
  std::vector<TextSegment> segments;
  for (size_t begin = 0; begin < d.text.size(); line++) {
    size_t end = d.text.find('\n', begin);
    if (end == std::string::npos) end = d.text.size();
    const std::string_view text = std::string_view(d.text).substr(begin, end - begin);
    begin = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const ChatSampleText sample = chat_sample_segments(text, d.file, line, format);
    starts.push_back(ids.size());
    if (sample.wrap && tok.bos_id() >= 0) ids.push_back(tok.bos_id()), targets.push_back(0);
    segments.clear();
    for (const ChatSegment& s : sample.segments) segments.push_back({s.text, s.target});
    tok.encode_segments(segments, &ids, &targets);
    if (sample.wrap) ids.push_back(tok.eos_id()), targets.push_back(1);
    (*samples)++;
  }
}

// Each document's ids (after the tokenizer's BOS, if it adds one) followed
// by end-of-text, or (chat) its samples; parallel over documents (largest
// first), the result in corpus order whatever the thread count.
Tokenized tokenize(const Corpus& corpus, const TextTokenizer& tok, const std::optional<ChatFormat>& chat, int threads,
                   FILE* log) {
  const auto& docs = corpus.documents;
  Tokenized t;
  t.ids.resize(docs.size());
  if (chat) t.targets.resize(docs.size()), t.starts.resize(docs.size());
  std::vector<size_t> order(docs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return docs[a].text.size() > docs[b].text.size(); });
  uint64_t done_bytes = 0;
  std::optional<obs::Progress> progress;
  if (log) {
    obs::ProgressOptions po;
    po.out = log, po.unit = "MB", po.scale = 1e-6;
    progress.emplace("prepare: tokenizing", int64_t(corpus.bytes), po);
  }
  std::exception_ptr error;  // the first document's error, rethrown after the loop (none may leave OpenMP's)
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (size_t k = 0; k < order.size(); k++) {
    const Document& d = docs[order[k]];
    std::vector<int32_t>& out = t.ids[order[k]];
    out.reserve(d.text.size() / 3);
    uint64_t samples = 0;
    try {
      if (chat) {
        tokenize_chat(d, tok, *chat, out, t.targets[order[k]], t.starts[order[k]], &samples);
      } else {
        if (tok.bos_id() >= 0) out.push_back(tok.bos_id());
        tok.encode(d.text, &out);
        out.push_back(tok.eos_id());
      }
    } catch (...) {
#pragma omp critical(prepare_error)
      if (!error) error = std::current_exception();
    }
#pragma omp critical(prepare_progress)
    {
      done_bytes += d.text.size();
      t.samples += samples;
      if (progress) progress->update(int64_t(done_bytes));
    }
  }
  if (progress) progress->finish();
  if (error) std::rethrow_exception(error);
  for (const auto& v : t.targets)
    for (uint8_t m : v) t.target_tokens += m;
  return t;
}

// Writes the documents of one split into shards named PREFIX_NNNNNN.bin.
SplitManifest write_split(const std::string& out, const char* prefix, const std::vector<const Document*>& docs,
                          const Corpus& corpus, const Tokenized& tokens, ShardHeader header, uint64_t shard_tokens) {
  SplitManifest m;
  std::vector<int32_t> buffer;
  std::vector<uint8_t> targets;
  std::vector<uint64_t> starts;  // chat: the shard's samples (its version 2 "documents")
  const bool masked = !tokens.targets.empty();
  uint64_t buffer_docs = 0;
  auto flush = [&] {
    std::string name = strprintf("%s_%06zu.bin", prefix, m.shards.size());
    header.document_count = masked ? starts.size() : buffer_docs;
    write_shard(out + "/" + name, header, buffer.data(), buffer.size(), masked ? targets.data() : nullptr,
                masked ? starts.data() : nullptr);
    m.shards.push_back(name);
    m.tokens += buffer.size();
    m.documents += header.document_count;
    buffer.clear();
    targets.clear();
    starts.clear();
    buffer_docs = 0;
  };
  for (const Document* d : docs) {
    const size_t i = size_t(d - corpus.documents.data());
    if (tokens.ids[i].empty()) continue;  // a chat document of blank lines
    if (masked) {
      for (uint64_t at : tokens.starts[i]) starts.push_back(buffer.size() + at);
      targets.insert(targets.end(), tokens.targets[i].begin(), tokens.targets[i].end());
    }
    buffer.insert(buffer.end(), tokens.ids[i].begin(), tokens.ids[i].end());
    buffer_docs++;
    if (buffer.size() >= shard_tokens) flush();
  }
  if (!buffer.empty()) flush();
  return m;
}

// Shards of an earlier run that the new manifest no longer lists.
void remove_stale_shards(const std::string& out, const DatasetManifest& m) {
  std::set<std::string> keep(m.train.shards.begin(), m.train.shards.end());
  keep.insert(m.val.shards.begin(), m.val.shards.end());
  const std::regex shard_name(R"((train|val)_\d{6}\.bin)");
  for (const auto& e : fs::directory_iterator(out)) {
    std::string name = e.path().filename().string();
    if (std::regex_match(name, shard_name) && !keep.count(name)) fs::remove(e.path());
  }
}

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& o, FILE* log) {
  check_options(o);
  auto t0 = Clock::now();
  const int threads = o.threads > 0 ? o.threads : omp_get_num_procs();
  PrepareResult result;

  Corpus corpus = read_corpus(o.input);
  CorpusSplit split = split_corpus(corpus, o.val_fraction);
  uint64_t val_bytes = 0;
  for (const Document* d : split.val) val_bytes += d->text.size();
  say(log, "input %s: %zu documents, %.1f MB (train %zu, validation %zu documents, %.1f MB)", o.input.c_str(),
      corpus.documents.size(), double(corpus.bytes) / 1e6, split.train.size(), split.val.size(),
      double(val_bytes) / 1e6);

  // The stamps: what the outputs would be made from.
  const uint64_t documents = corpus_hash(corpus);
  std::unique_ptr<TextTokenizer> given;
  uint64_t tokenizer_stamp;
  if (!o.tokenizer.empty()) {
    given = load_tokenizer(o.tokenizer);
    ContentHash stamp;
    stamp.add("given");
    for (const auto& [name, bytes] : given->files()) stamp.add(name).add(content_hash(bytes));
    tokenizer_stamp = stamp.value();
  } else {
    tokenizer_stamp = ContentHash().add("trained").add(kRecipeVersion).add(uint64_t(o.vocab_size))
                          .add(uint64_t(o.sample_mb * 1e6)).add(documents).value();
  }
  // JSON Lines: instruction or chat samples, through the tokenizer's chat template.
  auto is_jsonl = [](const Document& d) { return fs::path(d.file).extension() == ".jsonl"; };
  const bool jsonl = std::all_of(corpus.documents.begin(), corpus.documents.end(), is_jsonl);
  LOOM_USER_CHECK(jsonl || std::none_of(corpus.documents.begin(), corpus.documents.end(), is_jsonl),
                  "prepare: '%s' mixes JSON Lines (.jsonl) and plain text files: give one kind", o.input.c_str());
  std::optional<ChatFormat> chat;
  if (jsonl) {
    LOOM_USER_CHECK(given != nullptr,
                    "prepare: '%s' is JSON Lines (instruction or chat data): give the model's tokenizer with "
                    "--tokenizer DIR",
                    o.input.c_str());
    chat.emplace();
    if (!o.chat_template.empty()) {
      chat->chat_template = parse_chat_template(o.chat_template);
      LOOM_USER_CHECK(chat->chat_template.has_value(),
                      "prepare: --chat-template '%s' is not one loom has (chatml, llama3, llama31, llama2, mistral)",
                      o.chat_template.c_str());
      say(log, "chat template: %s (--chat-template)", o.chat_template.c_str());
    } else if (!given->chat_template().empty()) {
      chat->chat_template = recognise_chat_template(given->chat_template());
      if (chat->chat_template)
        say(log, "chat template: the tokenizer's chat_template, rendered as loom's built-in %s", 
            chat_template_name(*chat->chat_template));
      else
        say(log, "chat template: the tokenizer's chat_template is none loom renders exactly; 'messages' lines are "
                 "refused (--chat-template NAME picks a built-in one)");
    } else {
      say(log, "chat template: none (the tokenizer has no chat_template; --chat-template NAME picks one)");
    }
    if (chat->chat_template == ChatTemplate::chatml && recognise_chat_template(given->chat_template()))
      chat->chatml_system = chatml_default_system(given->chat_template());  // the tokenizer's own (Qwen2.5's, or none)
    if (given->bos_id() >= 0) chat->bos = given->decode({given->bos_id()});
    chat->eos = given->decode({given->eos_id()});
  }
  const uint64_t dataset_id = ContentHash().add(kRecipeVersion).add(tokenizer_stamp).add(documents)
                                  .add(uint64_t(std::llround(o.val_fraction * 1e9))).add(o.shard_tokens)
                                  .add(chat ? (chat->chat_template ? chat_template_name(*chat->chat_template) : "-")
                                            : "text")
                                  .value();

  std::error_code ec;  // made only once the inputs have been checked
  fs::create_directories(o.out, ec);
  LOOM_USER_CHECK(fs::is_directory(o.out), "prepare: output folder '%s' cannot be made: %s", o.out.c_str(),
                  ec ? ec.message().c_str() : "a file of that name is in the way");

  if (!o.force && outputs_match(o.out, dataset_id, tokenizer_stamp, &result.manifest)) {
    result.up_to_date = true;
    result.seconds = seconds_since(t0);
    say(log, "%s is up to date (same inputs and options): nothing to do", o.out.c_str());
    return result;
  }

  const std::string model_path = o.out + "/tokenizer.model";
  const std::unique_ptr<TextTokenizer> tok_owner =
      get_tokenizer(o, given, corpus, tokenizer_stamp, model_path, &result.tokenizer_trained, log);
  const TextTokenizer& tok = *tok_owner;
  // Another tokenizer's files from an earlier run would be read in its place
  // (a tokenizer_config.json beside loom's tokenizer.model makes it Hugging
  // Face's); none is touched when the output is the tokenizer's own folder.
  std::error_code same;
  fs::path tok_dir = fs::is_directory(o.tokenizer, same) ? fs::path(o.tokenizer) : fs::path(o.tokenizer).parent_path();
  if (tok_dir.empty()) tok_dir = ".";
  const bool own_folder = !o.tokenizer.empty() && fs::equivalent(tok_dir, o.out, same);
  for (const char* name : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json"}) {
    if (own_folder) break;
    bool ours = false;
    for (const auto& f : tok.files()) ours = ours || f.first == name;
    std::error_code ec;
    if (!ours) fs::remove(o.out + "/" + name, ec);
  }

  auto t1 = Clock::now();
  const Tokenized ids = tokenize(corpus, tok, chat, threads, log);
  uint64_t total = 0;
  for (const auto& v : ids.ids) total += v.size();
  if (chat) {
    LOOM_USER_CHECK(ids.samples > 0, "prepare: '%s' holds no samples (only blank lines)", o.input.c_str());
    say(log, "samples: %llu, %llu of %llu tokens learned from (%.1f%%)", (unsigned long long)ids.samples,
        (unsigned long long)ids.target_tokens, (unsigned long long)total, 100.0 * double(ids.target_tokens) / double(total));
  }
  say(log, "tokenized in %.1f s: %llu tokens, %.2f bytes per token", seconds_since(t1), (unsigned long long)total,
      double(corpus.bytes) / double(total));

  DatasetManifest& m = result.manifest;
  // The file that identifies the tokenizer (tokenizer.model, or a Hugging
  // Face tokenizer.json with its tokenizer_config.json beside it).
  m.tokenizer = tok.files().front().first;
  m.tokenizer_hash = tokenizer_files_hash(tok.files());
  m.vocab_size = uint32_t(tok.vocab_size());
  m.eos_id = uint32_t(tok.eos_id());
  m.dataset_id = dataset_id;
  m.tokenizer_stamp = tokenizer_stamp;
  m.input = o.input;
  m.input_bytes = corpus.bytes;
  ShardHeader header{};
  header.vocab_size = m.vocab_size;
  header.eos_id = m.eos_id;
  header.tokenizer_hash = m.tokenizer_hash;
  header.dataset_id = dataset_id;
  m.train = write_split(o.out, "train", split.train, corpus, ids, header, o.shard_tokens);
  m.val = write_split(o.out, "val", split.val, corpus, ids, header, o.shard_tokens);
  write_dataset_manifest(o.out, m);
  remove_stale_shards(o.out, m);
  result.seconds = seconds_since(t0);
  say(log, "wrote %s: train %llu tokens in %zu shard(s), validation %llu tokens in %zu shard(s), %s ids; %.1f s in all",
      o.out.c_str(), (unsigned long long)m.train.tokens, m.train.shards.size(), (unsigned long long)m.val.tokens,
      m.val.shards.size(), token_bytes_for(m.vocab_size) == 2 ? "uint16" : "uint32", result.seconds);
  return result;
}

}  // namespace loom
