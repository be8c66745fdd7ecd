#include <cmath>
// `loom prepare`: corpus -> tokenizer (trained, or given: loom's SentencePiece
// or a Hugging Face tokenizer folder) -> token shards.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/check.h"
#include "data/prepare.h"

namespace loom::cli {
namespace {

double parse_number(const std::string& s, const char* flag) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (...) {
  }
  throw UserError(strprintf("prepare: %s expects a number, got '%s'", flag, s.c_str()));
}

int64_t parse_integer(const std::string& s, const char* flag) {
  try {
    size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (...) {
  }
  throw UserError(strprintf("prepare: %s expects an integer, got '%s'", flag, s.c_str()));
}

}  // namespace

int cmd_prepare(const Args& args) {
  PrepareOptions o;
  bool vocab_given = false;
  for (size_t i = 0; i < args.size(); i++) {
    std::string a = args[i], inline_value;
    bool has_inline = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1), a = a.substr(0, eq), has_inline = true;
    }
    auto value = [&]() -> std::string {
      if (has_inline) return inline_value;
      LOOM_USER_CHECK(i + 1 < args.size(), "prepare: %s needs a value", a.c_str());
      return args[++i];
    };
    if (a == "--input") o.input = value();
    else if (a == "--out") o.out = value();
    else if (a == "--tokenizer") o.tokenizer = value();
    else if (a == "--chat-template") o.chat_template = value();
    else if (a == "--vocab-size") {
      int64_t v = parse_integer(value(), "--vocab-size");
      LOOM_USER_CHECK(v > 0 && v <= (1 << 30), "prepare: --vocab-size must be in [1, 2^30], got %lld", (long long)v);
      o.vocab_size = int(v), vocab_given = true;
    }
    else if (a == "--val-fraction") o.val_fraction = parse_number(value(), "--val-fraction");
    else if (a == "--shard-tokens") {
      int64_t v = parse_integer(value(), "--shard-tokens");
      LOOM_USER_CHECK(v > 0, "prepare: --shard-tokens must be positive");
      o.shard_tokens = uint64_t(v);
    } else if (a == "--sample-mb") {
      o.sample_mb = parse_number(value(), "--sample-mb");
      LOOM_USER_CHECK(std::isfinite(o.sample_mb) && o.sample_mb > 0 && o.sample_mb <= 1e6,
                      "prepare: --sample-mb must be in (0, 1e6]");
    } else if (a == "--threads") {
      int64_t v = parse_integer(value(), "--threads");
      LOOM_USER_CHECK(v >= 0 && v <= 1024, "prepare: --threads must be in [0, 1024] (0 = all cores)");
      o.threads = int(v);
    }
    else if (a == "--force") o.force = true;
    else throw UserError(strprintf("prepare: unknown option '%s' (try loom prepare --help)", a.c_str()));
  }
  LOOM_USER_CHECK(!(vocab_given && !o.tokenizer.empty()),
                  "prepare: --vocab-size and --tokenizer: a given tokenizer brings its own vocabulary");
  // The defaults live in the project (.cache/ beside configs/), wherever loom runs.
  if (o.input == PrepareOptions{}.input) {
    o.input = resolve_path(o.input);
    LOOM_USER_CHECK(std::filesystem::exists(o.input),
                    "prepare: the corpus '%s' is not there yet: scripts/fetch_corpus.sh fetches it (or give --input)",
                    o.input.c_str());
  }
  if (o.out == PrepareOptions{}.out) o.out = project_root() + "/" + o.out;
  prepare_dataset(o, stdout);
  return 0;
}

}  // namespace loom::cli
