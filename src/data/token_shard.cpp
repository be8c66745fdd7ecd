#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/regular_file.h"

namespace loom {
namespace {

template <class T>
void copy_ids(const T* src, size_t n, int32_t* out) {
  for (size_t i = 0; i < n; i++) out[i] = int32_t(src[i]);
}

template <class T>
uint64_t first_id_at_or_above(const T* ids, uint64_t n, uint32_t limit) {
  // Blocks of max-reductions (vectorized) find the block, then a scan the index.
  constexpr uint64_t kBlock = 4096;
  for (uint64_t b = 0; b < n; b += kBlock) {
    uint64_t e = std::min(n, b + kBlock);
    T m = 0;
    for (uint64_t i = b; i < e; i++) m = std::max(m, ids[i]);
    if (uint64_t(m) >= limit)
      for (uint64_t i = b; i < e; i++)
        if (uint64_t(ids[i]) >= limit) return i;
  }
  return n;
}

}  // namespace

void write_shard(const std::string& path, ShardHeader header, const int32_t* tokens, size_t count,
                 const uint8_t* target_mask, const uint64_t* sample_starts) {
  LOOM_CHECK(!target_mask || sample_starts || header.document_count == 0, "%s: a masked shard needs its sample starts",
             path.c_str());
  std::memcpy(header.magic, kShardMagic, sizeof kShardMagic);
  header.version = target_mask ? kMaskedShardVersion : kShardVersion;
  header.token_bytes = token_bytes_for(header.vocab_size);
  header.token_count = count;
  AtomicFile file(path);
  file.write(&header, sizeof header);
  std::vector<uint8_t> buf;
  constexpr size_t kChunk = 1 << 20;
  for (size_t begin = 0; begin < count; begin += kChunk) {
    size_t n = std::min(kChunk, count - begin);
    buf.resize(n * header.token_bytes);
    for (size_t i = 0; i < n; i++) {
      int32_t id = tokens[begin + i];
      LOOM_CHECK(id >= 0 && uint32_t(id) < header.vocab_size, "token %d outside the vocabulary (%u) in %s", id,
                 header.vocab_size, path.c_str());
      if (header.token_bytes == 2) {
        uint16_t v = uint16_t(id);
        std::memcpy(&buf[i * 2], &v, 2);
      } else {
        uint32_t v = uint32_t(id);
        std::memcpy(&buf[i * 4], &v, 4);
      }
    }
    file.write(buf.data(), buf.size());
  }
  if (target_mask) {
    std::vector<uint8_t> bits((count + 7) / 8, 0);
    for (size_t i = 0; i < count; i++)
      if (target_mask[i]) bits[i / 8] |= uint8_t(1u << (i % 8));
    file.write(bits.data(), bits.size());
    for (uint64_t k = 0; k < header.document_count; k++) {
      LOOM_CHECK(sample_starts[k] < count && (k == 0 ? sample_starts[k] == 0 : sample_starts[k] > sample_starts[k - 1]),
                 "%s: sample %llu starts at %llu", path.c_str(), (unsigned long long)k,
                 (unsigned long long)sample_starts[k]);
      file.write(&sample_starts[k], sizeof(uint64_t));
    }
  }
  file.commit();
}

ShardFile::ShardFile(const std::string& path) : path_(path) {
  require_regular_file(path, "token shard");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_USER_CHECK(fd >= 0, "token shard '%s' cannot be opened: %s", path.c_str(), std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  size_t bytes = size_t(st.st_size);
  if (bytes < sizeof(ShardHeader)) {
    ::close(fd);
    throw UserError(strprintf("token shard '%s' is truncated: %zu bytes, shorter than its 64-byte header",
                              path.c_str(), bytes));
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  LOOM_USER_CHECK(map != MAP_FAILED, "token shard '%s' cannot be mapped: %s", path.c_str(), std::strerror(errno));
  map_ = static_cast<const uint8_t*>(map);
  map_bytes_ = bytes;
  std::memcpy(&header_, map_, sizeof header_);
  tokens_ = map_ + sizeof(ShardHeader);

  // A header that fails a check throws from the constructor, so the
  // destructor does not run: the mapping is released here.
  try {
    check_header(path, bytes);
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
    map_ = nullptr;
    throw;
  }
}

void ShardFile::check_header(const std::string& path, size_t bytes) {
  const ShardHeader& h = header_;
  LOOM_USER_CHECK(std::memcmp(h.magic, kShardMagic, sizeof kShardMagic) == 0,
                  "'%s' is not a loom token shard (wrong magic)", path.c_str());
  LOOM_USER_CHECK(h.version == kShardVersion || h.version == kMaskedShardVersion,
                  "token shard '%s' has format version %u; this loom reads versions %u and %u", path.c_str(), h.version,
                  kShardVersion, kMaskedShardVersion);
  LOOM_USER_CHECK(h.token_bytes == token_bytes_for(h.vocab_size) && h.vocab_size > 0,
                  "token shard '%s' has a bad header: %u bytes per token for a vocabulary of %u", path.c_str(),
                  h.token_bytes, h.vocab_size);
  LOOM_USER_CHECK(h.eos_id < h.vocab_size, "token shard '%s' has a bad header: end-of-text id %u >= vocabulary %u",
                  path.c_str(), h.eos_id, h.vocab_size);
  // The count is checked by division first: a huge token_count times the
  // token size must not wrap around to the body's size.
  const uint64_t body = bytes - sizeof(ShardHeader);
  LOOM_USER_CHECK(h.token_count <= body / h.token_bytes,
                  "token shard '%s' is truncated: its header promises %llu tokens of %u bytes but the body has %llu "
                  "bytes",
                  path.c_str(), (unsigned long long)h.token_count, h.token_bytes, (unsigned long long)body);
  // Version 2: the mask and the sample starts after the ids (document_count
  // is at most token_count, checked below, so this cannot wrap either).
  const bool v2 = h.version == kMaskedShardVersion;
  const uint64_t mask_bytes = v2 ? (h.token_count + 7) / 8 : 0;
  const uint64_t start_bytes = v2 && h.document_count <= h.token_count ? h.document_count * 8 : 0;
  const uint64_t expected = h.token_count * h.token_bytes + mask_bytes + start_bytes;
  if (v2) mask_ = map_ + sizeof(ShardHeader) + h.token_count * h.token_bytes, starts_ = mask_ + mask_bytes;
  LOOM_USER_CHECK(body == expected,
                  "token shard '%s' does not have the size its header says: it promises %llu tokens (%llu bytes with "
                  "its mask) but the body has %llu bytes",
                  path.c_str(), (unsigned long long)h.token_count, (unsigned long long)expected,
                  (unsigned long long)body);
  // Every document ends with an end-of-text id: at most one per token, and
  // tokens without a document cannot be.
  LOOM_USER_CHECK(h.document_count <= h.token_count && (h.token_count == 0) == (h.document_count == 0),
                  "token shard '%s' has a bad header: %llu documents in %llu tokens", path.c_str(),
                  (unsigned long long)h.document_count, (unsigned long long)h.token_count);
  if (v2 && body == expected)
    for (uint64_t k = 0; k < h.document_count; k++) {
      const uint64_t at = sample_start(k), before = k == 0 ? 0 : sample_start(k - 1);
      LOOM_USER_CHECK(at < h.token_count && (k == 0 ? at == 0 : at > before),
                      "token shard '%s': sample %llu starts at token %llu, not after the one before and inside the "
                      "%llu tokens",
                      path.c_str(), (unsigned long long)k, (unsigned long long)at, (unsigned long long)h.token_count);
    }
  LOOM_USER_CHECK(h.reserved == 0,
                  "token shard '%s' has a bad header: its reserved bytes are not zero (a newer format, or damage)",
                  path.c_str());
}

ShardFile::~ShardFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

ShardFile::ShardFile(ShardFile&& o) noexcept
    : path_(std::move(o.path_)),
      header_(o.header_),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      tokens_(o.tokens_),
      mask_(o.mask_),
      starts_(o.starts_) {
  o.map_ = nullptr;
}

void ShardFile::read(uint64_t begin, size_t n, int32_t* out) const {
  LOOM_CHECK(begin + n <= header_.token_count, "read past the end of %s", path_.c_str());
  if (header_.token_bytes == 2) copy_ids(static_cast<const uint16_t*>(tokens_) + begin, n, out);
  else copy_ids(static_cast<const uint32_t*>(tokens_) + begin, n, out);
}

void ShardFile::read_mask(uint64_t begin, size_t n, uint8_t* out) const {
  LOOM_CHECK(begin + n <= header_.token_count, "read past the end of %s", path_.c_str());
  for (size_t i = 0; i < n; i++) {
    const uint64_t at = begin + i;
    out[i] = mask_ ? uint8_t((mask_[at / 8] >> (at % 8)) & 1u) : 1;
  }
}

uint64_t ShardFile::sample_start(uint64_t k) const {
  LOOM_CHECK(starts_ && k < header_.document_count, "%s: no sample %llu", path_.c_str(), (unsigned long long)k);
  uint64_t v;
  std::memcpy(&v, starts_ + k * 8, 8);
  return v;
}

uint64_t ShardFile::sample_length(uint64_t k) const {
  return (k + 1 < header_.document_count ? sample_start(k + 1) : header_.token_count) - sample_start(k);
}

void ShardFile::check_ids_below(uint32_t vocab_size) const {
  uint64_t n = header_.token_count, at;
  if (header_.token_bytes == 2) at = first_id_at_or_above(static_cast<const uint16_t*>(tokens_), n, vocab_size);
  else at = first_id_at_or_above(static_cast<const uint32_t*>(tokens_), n, vocab_size);
  if (at == n) return;
  int32_t id;
  read(at, 1, &id);
  throw UserError(strprintf("token shard '%s': token %llu has id %u, not below the vocabulary size %u",
                            path_.c_str(), (unsigned long long)at, uint32_t(id), vocab_size));
}

}  // namespace loom
