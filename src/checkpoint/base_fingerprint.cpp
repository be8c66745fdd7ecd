#include "checkpoint/base_fingerprint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "checkpoint/sha256.h"
#include "core/check.h"

namespace loom {
namespace {

constexpr uint64_t kSample = 64 << 10;

std::vector<char> read_at(std::ifstream& in, uint64_t offset, uint64_t n, const std::string& path) {
  std::vector<char> buf(n);
  in.seekg(std::streamoff(offset));
  in.read(buf.data(), std::streamsize(n));
  LOOM_USER_CHECK(in.good() || uint64_t(in.gcount()) == n, "%s: could not read %llu bytes at %llu", path.c_str(),
                  (unsigned long long)n, (unsigned long long)offset);
  return buf;
}

void add_file(Sha256& h, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in.good(), "%s: cannot open", path.c_str());
  const uint64_t size = std::filesystem::file_size(path);
  h.update(&size, sizeof size);
  if (!path.ends_with(".safetensors")) {  // config.json: all of it
    const std::vector<char> all = read_at(in, 0, size, path);
    h.update(all.data(), all.size());
    return;
  }
  LOOM_USER_CHECK(size >= 8, "%s: too short for a safetensors file", path.c_str());
  uint64_t header = 0;
  const std::vector<char> len = read_at(in, 0, 8, path);
  std::memcpy(&header, len.data(), 8);
  LOOM_USER_CHECK(header <= size - 8, "%s: header length %llu is past the end of the file", path.c_str(),
                  (unsigned long long)header);
  const std::vector<char> head = read_at(in, 8, header, path);
  h.update(head.data(), head.size());
  const uint64_t data = 8 + header, n = size - data;
  const std::vector<char> first = read_at(in, data, std::min(n, kSample), path);
  h.update(first.data(), first.size());
  const std::vector<char> last = read_at(in, size - std::min(n, kSample), std::min(n, kSample), path);
  h.update(last.data(), last.size());
}

}  // namespace

std::string hf_folder_fingerprint(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
  LOOM_USER_CHECK(!ec, "%s: cannot list the folder (%s)", dir.c_str(), ec.message().c_str());
  std::sort(files.begin(), files.end());
  Sha256 h;
  add_file(h, dir + "/config.json");
  for (const std::string& f : files) {
    h.update(f.data(), f.size());
    add_file(h, dir + "/" + f);
  }
  return h.hex_digest();
}

std::string lora_base_identity(const std::string& init_from, int64_t seed) {
  if (init_from.rfind("hf:", 0) == 0)
    return "hf sha256:" + hf_folder_fingerprint(init_from.substr(3));
  return "init seed " + std::to_string(seed);
}

}  // namespace loom
