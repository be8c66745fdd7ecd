#include "data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/check.h"
#include "core/regular_file.h"
#include "data/content_hash.h"

namespace loom {
namespace fs = std::filesystem;

namespace {

constexpr size_t kChunkBytes = 64 << 10;  // document size when one file is cut up

std::string read_file(const fs::path& path, const std::string& shown) {
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in.good(), "input file '%s' cannot be opened", shown.c_str());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOOM_USER_CHECK(!in.bad(), "input file '%s' could not be read", shown.c_str());
  return text;
}

void add_document(Corpus& c, std::string name, std::string text, const std::string& shown, uint64_t first_line = 1) {
  size_t bad = find_invalid_utf8(text);
  LOOM_USER_CHECK(bad == std::string::npos, "input file '%s' is not UTF-8 text: invalid byte 0x%02x at offset %zu",
                  shown.c_str(), unsigned(uint8_t(text[bad])), bad);
  if (text.empty()) return;
  Document d{std::move(name), std::move(text), 0, shown, first_line};
  d.hash = ContentHash().add(d.name).add(d.text).value();
  c.bytes += d.text.size();
  c.documents.push_back(std::move(d));
}

bool hidden(const fs::path& p) {
  std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > n) return i;
    for (size_t k = 1; k < len; k++)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF.
    unsigned c1 = p[i + 1];
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

Corpus read_corpus(const std::string& path) {
  Corpus c;
  c.path = path;
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  LOOM_USER_CHECK(fs::exists(st), "input '%s' does not exist", path.c_str());
  if (fs::is_directory(st)) {
    std::vector<fs::path> files;
    fs::recursive_directory_iterator it(path, ec), end;
    LOOM_USER_CHECK(!ec, "input folder '%s' cannot be read: %s", path.c_str(), ec.message().c_str());
    for (; it != end; it.increment(ec)) {
      LOOM_USER_CHECK(!ec, "input folder '%s' cannot be read: %s", path.c_str(), ec.message().c_str());
      if (hidden(it->path())) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) files.push_back(it->path());  // a broken link or a loop: skipped
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string shown = f.string();
      add_document(c, fs::relative(f, path).generic_string(), read_file(f, shown), shown);
    }
    LOOM_USER_CHECK(!c.documents.empty(), "input folder '%s' holds no text (no non-empty files)", path.c_str());
  } else {
    require_regular_file(path, "input");
    std::string text = read_file(path, path);
    LOOM_USER_CHECK(!text.empty(), "input file '%s' is empty", path.c_str());
    std::string base = fs::path(path).filename().string();
    size_t begin = 0;
    uint64_t line = 1;
    // JSON Lines (one sample a line): pieces of about a 64th of the file, so
    // that even a small file splits into training and validation samples.
    const size_t chunk = fs::path(path).extension() == ".jsonl" ? std::clamp<size_t>(text.size() / 64, 1, kChunkBytes)
                                                                 : kChunkBytes;
    for (int part = 0; begin < text.size(); part++) {
      size_t end = text.find('\n', std::min(text.size(), begin + chunk));
      end = end == std::string::npos ? text.size() : end + 1;
      add_document(c, base + "#" + std::to_string(part), text.substr(begin, end - begin), path, line);
      line += uint64_t(std::count(text.begin() + std::ptrdiff_t(begin), text.begin() + std::ptrdiff_t(end), '\n'));
      begin = end;
    }
  }
  return c;
}

CorpusSplit split_corpus(const Corpus& corpus, double val_fraction) {
  const auto& docs = corpus.documents;
  LOOM_USER_CHECK(docs.size() >= 2,
                  "input '%s' has %zu document(s): a training and a validation split need at least 2 "
                  "(give a folder of files, or a larger file)",
                  corpus.path.c_str(), docs.size());
  std::vector<size_t> by_hash(docs.size());
  std::iota(by_hash.begin(), by_hash.end(), 0);
  std::sort(by_hash.begin(), by_hash.end(), [&](size_t a, size_t b) {
    return content_hash(docs[a].name) < content_hash(docs[b].name);
  });
  std::vector<bool> is_val(docs.size(), false);
  const double target = val_fraction * double(corpus.bytes);
  double val_bytes = 0;
  for (size_t k = 0; k + 1 < by_hash.size() && (k == 0 || val_bytes < target); k++) {
    is_val[by_hash[k]] = true;
    val_bytes += double(docs[by_hash[k]].text.size());
  }
  CorpusSplit split;
  for (size_t i = 0; i < docs.size(); i++) (is_val[i] ? split.val : split.train).push_back(&docs[i]);
  return split;
}

}  // namespace loom
