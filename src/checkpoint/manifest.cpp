#include "checkpoint/manifest.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <set>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/sha256.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/regular_file.h"

namespace loom {

std::string manifest_to_text(const CheckpointManifest& m) {
  nlohmann::ordered_json j;
  j["format"] = "loom-checkpoint";
  j["version"] = m.version;
  j["step"] = m.step;
  j["config"] = m.config_toml;
  j["model"] = m.model;
  if (!m.model_real.empty()) j["model_real"] = m.model_real;
  j["layout"] = {{"dp", m.layout.dp},     {"tp", m.layout.tp},       {"pp", m.layout.pp},
                 {"zero", m.layout.zero}, {"order", m.layout.order}, {"world_size", m.layout.world_size}};
  j["data"] = {{"step", m.data.step}, {"consumed_samples", m.data.consumed_samples}};
  j["rng"] = {{"seed", m.seed}};
  j["loss_scaler"] = m.loss_scaler;
  j["extra"] = m.extra;
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& f : m.files) j["files"].push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  j["tensors"] = m.tensors;
  return j.dump(1) + "\n";
}

namespace {

// Typed access that names the manifest and the field when something is off.
class ManifestFields {
 public:
  ManifestFields(const nlohmann::json& root, std::string path) : root_(root), path_(std::move(path)) {}
  const nlohmann::json& at(const nlohmann::json& obj, const char* field, const char* parent = "") const {
    if (!obj.is_object() || !obj.contains(field))
      throw UserError(strprintf("checkpoint manifest '%s': missing field '%s%s'", path_.c_str(), parent, field));
    return obj[field];
  }
  template <class T>
  T get(const nlohmann::json& obj, const char* field, const char* parent = "") const {
    const nlohmann::json& v = at(obj, field, parent);
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw UserError(strprintf("checkpoint manifest '%s': field '%s%s' has the wrong type (%s)", path_.c_str(), parent,
                                field, v.dump().substr(0, 60).c_str()));
    }
  }

  // An integer in [lo, hi]: a float, a string or a number out of range is
  // named (get<int> would truncate 4294967298 to 2, or 1.5 to 1).
  int64_t integer(const nlohmann::json& obj, const char* field, const char* parent, int64_t lo, int64_t hi) const {
    const nlohmann::json& v = at(obj, field, parent);
    bool ok = v.is_number_integer();
    if (ok && v.is_number_unsigned()) ok = v.get<uint64_t>() <= uint64_t(hi);
    if (ok) ok = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    if (!ok)
      throw UserError(strprintf("checkpoint manifest '%s': field '%s%s' must be an integer in [%lld, %lld], not %s",
                                path_.c_str(), parent, field, (long long)lo, (long long)hi,
                                v.dump().substr(0, 60).c_str()));
    return v.get<int64_t>();
  }

 private:
  const nlohmann::json& root_;
  std::string path_;
};

}  // namespace

CheckpointManifest parse_manifest(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(strprintf("checkpoint manifest '%s' does not parse: %s", path.c_str(), e.what()));
  }
  LOOM_USER_CHECK(j.is_object(), "checkpoint manifest '%s' is not a JSON object", path.c_str());
  ManifestFields f(j, path);
  LOOM_USER_CHECK(f.get<std::string>(j, "format") == "loom-checkpoint",
                  "checkpoint manifest '%s': format is not \"loom-checkpoint\"", path.c_str());
  CheckpointManifest m;
  m.version = int(f.integer(j, "version", "", 0, 1 << 30));
  LOOM_USER_CHECK(m.version >= kOldestCheckpointFormatVersion && m.version <= kCheckpointFormatVersion,
                  "checkpoint manifest '%s': format version %d, this loom reads versions %d to %d", path.c_str(),
                  m.version, kOldestCheckpointFormatVersion, kCheckpointFormatVersion);
  constexpr int64_t kMaxStep = int64_t(1) << 40, kMaxRanks = int64_t(1) << 24;
  m.step = f.integer(j, "step", "", 0, kMaxStep);
  m.config_toml = f.get<std::string>(j, "config");
  m.model = f.get<std::map<std::string, int64_t>>(j, "model");
  if (j.contains("model_real")) m.model_real = f.get<std::map<std::string, double>>(j, "model_real");
  const nlohmann::json& lay = f.at(j, "layout");
  m.layout.dp = int(f.integer(lay, "dp", "layout.", 1, kMaxRanks));
  m.layout.tp = int(f.integer(lay, "tp", "layout.", 1, kMaxRanks));
  m.layout.pp = int(f.integer(lay, "pp", "layout.", 1, kMaxRanks));
  m.layout.zero = int(f.integer(lay, "zero", "layout.", 0, 3));
  m.layout.order = f.get<std::string>(lay, "order", "layout.");
  m.layout.world_size = int(f.integer(lay, "world_size", "layout.", 1, kMaxRanks));
  const nlohmann::json& data = f.at(j, "data");
  m.data.step = f.integer(data, "step", "data.", 0, kMaxStep);
  m.data.consumed_samples = f.integer(data, "consumed_samples", "data.", 0, int64_t(1) << 62);
  m.seed = f.get<int64_t>(f.at(j, "rng"), "seed", "rng.");
  // Ranges and cross-checks: a manifest is trusted only once they hold.
  auto require = [&](bool ok, const char* field, const char* rule) {
    LOOM_USER_CHECK(ok, "checkpoint manifest '%s': field '%s' must be %s", path.c_str(), field, rule);
  };
  require(int64_t(m.layout.world_size) == int64_t(m.layout.dp) * m.layout.tp * m.layout.pp, "layout.world_size",
          "dp x tp x pp");
  require(m.data.step <= m.step, "data.step", "in [0, step]");
  m.loss_scaler = f.at(j, "loss_scaler");
  m.extra = j.contains("extra") ? j["extra"] : nlohmann::json::object();
  require(m.extra.is_object(), "extra", "an object");
  for (const char* count : {"adam_steps", "data_skip"})
    if (m.extra.contains(count))
      require(m.extra[count].is_number_integer() && m.extra[count].get<int64_t>() >= 0,
              count == std::string("adam_steps") ? "extra.adam_steps" : "extra.data_skip", "an integer >= 0");
  if (m.extra.contains("loss_guard")) require(m.extra["loss_guard"].is_object(), "extra.loss_guard", "an object");
  const nlohmann::json& files = f.at(j, "files");
  LOOM_USER_CHECK(files.is_array() && !files.empty(), "checkpoint manifest '%s': 'files' is not a non-empty list",
                  path.c_str());
  // The layout says who writes: every rank under ZeRO, else one data-parallel
  // replica (tp x pp ranks).
  const int64_t writers = m.layout.zero > 0 ? int64_t(m.layout.world_size) : int64_t(m.layout.tp) * m.layout.pp;
  LOOM_USER_CHECK(int64_t(files.size()) == writers,
                  "checkpoint manifest '%s': its layout (dp %d x tp %d x pp %d, ZeRO-%d) writes %lld rank files, "
                  "'files' lists %zu", path.c_str(), m.layout.dp, m.layout.tp, m.layout.pp, m.layout.zero,
                  (long long)writers, files.size());
  std::set<std::string> names;
  for (const auto& e : files) {
    FileRecord r{f.get<std::string>(e, "name", "files[]."), f.get<uint64_t>(e, "bytes", "files[]."),
                 f.get<std::string>(e, "sha256", "files[].")};
    // Rank files only, each once, of ranks the layout has.
    const std::string digits = r.name.size() > 17 ? r.name.substr(5, r.name.size() - 17) : "";
    const bool numeric = !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
    const int rank = numeric ? std::stoi(digits) : -1;
    LOOM_USER_CHECK(rank >= 0 && rank < m.layout.world_size && r.name == rank_file_name(rank), "checkpoint manifest '%s': file '%s' is not rank_NNNNN.safetensors of a rank below "
                    "layout.world_size = %d", path.c_str(), r.name.substr(0, 80).c_str(), m.layout.world_size);
    LOOM_USER_CHECK(names.insert(r.name).second, "checkpoint manifest '%s': file '%s' is listed twice", path.c_str(),
                    r.name.c_str());
    LOOM_USER_CHECK(r.sha256.size() == 64 && r.sha256.find_first_not_of("0123456789abcdef") == std::string::npos,
                    "checkpoint manifest '%s': files[].sha256 of '%s' is not 64 hex digits", path.c_str(),
                    r.name.c_str());
    m.files.push_back(std::move(r));
  }
  m.tensors = f.at(j, "tensors");
  return m;
}

namespace {

// The whole file; *found = false when there is none. A folder, device or
// pipe under the name is refused (reading one throws, or never ends).
std::string read_whole(const std::string& path, const std::string& dir, bool* found) {
  struct stat st {};
  *found = ::stat(path.c_str(), &st) == 0;
  if (!*found) return "";
  require_regular_file(path, strprintf("checkpoint '%s':", dir.c_str()));
  std::ifstream in(path, std::ios::binary);
  *found = in.good();
  if (!*found) return "";
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOOM_USER_CHECK(!in.bad(), "cannot read '%s' (checkpoint '%s')", path.c_str(), dir.c_str());
  return text;
}

}  // namespace

CheckpointManifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json", hash_path = dir + "/" + kManifestHashFile;
  bool found = false;
  const std::string text = read_whole(path, dir, &found);
  LOOM_USER_CHECK(found, "checkpoint '%s' has no readable manifest.json (missing or half-written checkpoint)",
                  dir.c_str());
  const std::string note = read_whole(hash_path, dir, &found);
  if (found) {
    // "<64 hex digits>  manifest.json\n"
    const std::string recorded = note.substr(0, note.find_first_of(" \t\n"));
    LOOM_USER_CHECK(recorded.size() == 64 && recorded.find_first_not_of("0123456789abcdef") == std::string::npos,
                    "checkpoint '%s': '%s' does not hold a sha256 (64 hex digits)", dir.c_str(), hash_path.c_str());
    const std::string actual = sha256_hex(text.data(), text.size());
    LOOM_USER_CHECK(actual == recorded,
                    "checkpoint manifest '%s' was changed after it was written: its sha256 is %s, '%s' records %s",
                    path.c_str(), actual.c_str(), kManifestHashFile, recorded.c_str());
  }
  CheckpointManifest m = parse_manifest(text, path);
  LOOM_USER_CHECK(found || m.version < 2,
                  "checkpoint '%s' has no %s: a version %d manifest is trusted only with its hash (a damaged or "
                  "hand-assembled checkpoint)",
                  dir.c_str(), kManifestHashFile, m.version);
  return m;
}

void write_manifest(const std::string& dir, const CheckpointManifest& m) {
  const std::string text = manifest_to_text(m);
  write_file_atomically(dir + "/" + kManifestHashFile, sha256_hex(text.data(), text.size()) + "  manifest.json\n");
  write_file_atomically(dir + "/manifest.json", text);
}

void check_model_matches(const CheckpointManifest& m, const std::map<std::string, int64_t>& expected,
                         const std::string& path) {
  LOOM_USER_CHECK(!expected.count("n_experts") || m.model.count("n_experts"),
                  "checkpoint '%s' is a dense model; this run's is a mixture of experts (model.n_experts = %lld): "
                  "its MLP tensors are not in the checkpoint",
                  path.c_str(), (long long)(expected.count("n_experts") ? expected.at("n_experts") : 0));
  for (const auto& [field, want] : expected) {
    auto it = m.model.find(field);
    if (field == "family") {
      // Checkpoints written before LLaMA are GPT-2's and do not record it.
      const int64_t there = it == m.model.end() ? 0 : it->second;
      LOOM_USER_CHECK(there == want, "checkpoint '%s' is a %s model; this run's model.family is \"%s\"", path.c_str(),
                      there == 1 ? "LLaMA" : "GPT-2", want == 1 ? "llama" : "gpt2");
      continue;
    }
    // LoRA's fields are its section's ("lora_rank": lora.rank).
    const std::string shown = field.rfind("lora_", 0) == 0 ? "lora." + field.substr(5) : "model." + field;
    LOOM_USER_CHECK(it != m.model.end(), "checkpoint '%s' does not record %s; it cannot be checked against this run",
                    path.c_str(), shown.c_str());
    LOOM_USER_CHECK(it->second == want,
                    "checkpoint '%s' is from a different model: %s is %lld there, %lld in this run's config",
                    path.c_str(), shown.c_str(), (long long)it->second, (long long)want);
  }
  // A mixture of experts resumed as a dense model: the MLP tensors differ.
  const auto experts = m.model.find("n_experts");
  LOOM_USER_CHECK(experts == m.model.end() || expected.count("n_experts"),
                  "checkpoint '%s' is a mixture of experts (%lld experts: model.family = \"mixtral\"); this run's model "
                  "is dense",
                  path.c_str(), (long long)(experts == m.model.end() ? 0 : experts->second));
  // Adapters without the run's [lora]: the checkpoint holds no base to resume.
  const auto rank = m.model.find("lora_rank");
  LOOM_USER_CHECK(rank == m.model.end() || expected.count("lora_rank"),
                  "checkpoint '%s' holds LoRA adapters (rank %lld) and not their base; this run has no [lora] section",
                  path.c_str(), (long long)(rank == m.model.end() ? 0 : rank->second));
}

}  // namespace loom
