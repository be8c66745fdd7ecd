#include "data/dataset_manifest.h"

#include <filesystem>
#include <sstream>
#include <set>
#include <toml++/toml.h>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/regular_file.h"
#include "data/content_hash.h"

namespace loom {
namespace {

constexpr int64_t kManifestVersion = 1;

toml::table split_table(const SplitManifest& s) {
  toml::array shards;
  for (const auto& name : s.shards) shards.push_back(name);
  return toml::table{{"shards", shards}, {"tokens", int64_t(s.tokens)}, {"documents", int64_t(s.documents)}};
}

// Typed access that names the file and key when something is off.
class ManifestReader {
 public:
  ManifestReader(const toml::table& t, std::string path) : t_(t), path_(std::move(path)) {}

  template <class T>
  T get(const char* key) const {
    used_.insert(key);
    auto v = t_.at_path(key).value<T>();
    LOOM_USER_CHECK(v.has_value(), "dataset manifest '%s': missing or malformed '%s'", path_.c_str(), key);
    return *v;
  }
  uint64_t count(const char* key) const {
    int64_t v = get<int64_t>(key);
    LOOM_USER_CHECK(v >= 0, "dataset manifest '%s': '%s' is negative", path_.c_str(), key);
    return uint64_t(v);
  }
  uint64_t hash(const char* key) const {
    std::string s = get<std::string>(key);
    LOOM_USER_CHECK(s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos,
                    "dataset manifest '%s': '%s' is not 16 hex digits", path_.c_str(), key);
    return std::stoull(s, nullptr, 16);
  }
  SplitManifest split(const std::string& name) const {
    SplitManifest s;
    used_.insert(name + ".shards");
    const toml::array* shards = t_.at_path(name + ".shards").as_array();
    LOOM_USER_CHECK(shards != nullptr, "dataset manifest '%s': missing '%s.shards'", path_.c_str(), name.c_str());
    for (const auto& node : *shards) {
      auto v = node.value<std::string>();
      LOOM_USER_CHECK(v && !v->empty() && v->find('/') == std::string::npos && (*v)[0] != '.',
                      "dataset manifest '%s': '%s.shards' must list file names in the same folder", path_.c_str(),
                      name.c_str());
      s.shards.push_back(*v);
    }
    s.tokens = count((name + ".tokens").c_str());
    s.documents = count((name + ".documents").c_str());
    return s;
  }
  // As config files do: a key no reader asked for is a mistake to name, not to ignore.
  void reject_unknown() const { walk(t_, ""); }

 private:
  void walk(const toml::table& t, const std::string& prefix) const {
    for (auto&& [k, v] : t) {
      const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (const toml::table* sub = v.as_table()) walk(*sub, key);
      else
        LOOM_USER_CHECK(used_.count(key), "dataset manifest '%s': unknown key '%s'", path_.c_str(), key.c_str());
    }
  }
  const toml::table& t_;
  std::string path_;
  mutable std::set<std::string> used_;
};

}  // namespace

void write_dataset_manifest(const std::string& dir, const DatasetManifest& m) {
  toml::table t{
      {"version", kManifestVersion},
      {"tokenizer", m.tokenizer},
      {"tokenizer_hash", hash_hex(m.tokenizer_hash)},
      {"vocab_size", int64_t(m.vocab_size)},
      {"eos_id", int64_t(m.eos_id)},
      {"dataset_id", hash_hex(m.dataset_id)},
      {"tokenizer_stamp", hash_hex(m.tokenizer_stamp)},
      {"input", m.input},
      {"input_bytes", int64_t(m.input_bytes)},
      {"train", split_table(m.train)},
      {"val", split_table(m.val)},
  };
  std::ostringstream out;
  out << "# Written by `loom prepare`; the shards and tokenizer beside it belong together.\n" << t << "\n";
  write_file_atomically(dir + "/" + kManifestName, out.str());
}

DatasetManifest read_dataset_manifest(const std::string& dir) {
  std::string path = dir + "/" + kManifestName;
  std::error_code ec;
  LOOM_USER_CHECK(std::filesystem::exists(path, ec),
                  "'%s' not found: '%s' is not a prepared dataset (run `loom prepare --out %s`)", path.c_str(),
                  dir.c_str(), dir.c_str());
  require_regular_file(path, "dataset manifest");
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw UserError(strprintf("dataset manifest '%s': %s", path.c_str(), std::string(e.description()).c_str()));
  }
  ManifestReader r(t, path);
  LOOM_USER_CHECK(r.get<int64_t>("version") == kManifestVersion,
                  "dataset manifest '%s' has version %lld; this loom reads version %lld (run `loom prepare` again)",
                  path.c_str(), (long long)r.get<int64_t>("version"), (long long)kManifestVersion);
  DatasetManifest m;
  m.tokenizer = r.get<std::string>("tokenizer");
  LOOM_USER_CHECK(!m.tokenizer.empty() && m.tokenizer.find('/') == std::string::npos,
                  "dataset manifest '%s': 'tokenizer' must be a file name in the same folder", path.c_str());
  m.tokenizer_hash = r.hash("tokenizer_hash");
  const uint64_t vocab = r.count("vocab_size"), eos = r.count("eos_id");
  LOOM_USER_CHECK(vocab >= 1 && vocab < (uint64_t(1) << 31), "dataset manifest '%s': 'vocab_size' (%llu) must be in "
                  "[1, 2^31)", path.c_str(), (unsigned long long)vocab);
  LOOM_USER_CHECK(eos < vocab, "dataset manifest '%s': 'eos_id' (%llu) must be below vocab_size (%llu)", path.c_str(),
                  (unsigned long long)eos, (unsigned long long)vocab);
  m.vocab_size = uint32_t(vocab);
  m.eos_id = uint32_t(eos);
  m.dataset_id = r.hash("dataset_id");
  m.tokenizer_stamp = r.hash("tokenizer_stamp");
  m.input = r.get<std::string>("input");
  m.input_bytes = r.count("input_bytes");
  m.train = r.split("train");
  m.val = r.split("val");
  r.reject_unknown();
  return m;
}

}  // namespace loom
