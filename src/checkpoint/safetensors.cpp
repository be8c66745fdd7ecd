#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/sha256.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/dtype.h"

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian");

namespace loom {

size_t st_dtype_size(StDType t) { return t == StDType::F32 || t == StDType::I32 ? 4 : 2; }

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::F32: return "F32";
    case StDType::BF16: return "BF16";
    case StDType::F16: return "F16";
    case StDType::I32: return "I32";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, StDType* out) {
  for (StDType t : {StDType::F32, StDType::BF16, StDType::F16, StDType::I32})
    if (s == st_dtype_name(t)) return *out = t, true;
  return false;
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

WrittenFile write_safetensors(const std::string& path, const std::vector<StEntry>& entries,
                              const std::map<std::string, std::string>& metadata,
                              const std::function<void()>& half_written) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  std::set<std::string> seen;
  for (const auto& e : entries) {
    LOOM_USER_CHECK(seen.insert(e.name).second, "safetensors file '%s': tensor '%s' given twice", path.c_str(),
                    e.name.c_str());
    LOOM_USER_CHECK(e.name != "__metadata__" && !e.name.empty(), "safetensors file '%s': bad tensor name '%s'",
                    path.c_str(), e.name.c_str());
    for (int64_t d : e.shape) LOOM_CHECK(d >= 0, "negative dimension in '%s'", e.name.c_str());
    uint64_t bytes = uint64_t(shape_numel(e.shape)) * st_dtype_size(e.dtype);
    header[e.name] = {{"dtype", st_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data start 8-byte aligned, as HF's writer does
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  AtomicFile file(path);
  Sha256 hash;
  auto put = [&](const void* p, size_t n) {
    file.write(p, n);
    hash.update(p, n);
  };
  put(len, 8);
  put(text.data(), text.size());
  uint64_t done = 0;
  bool halfway_seen = !half_written;
  for (const auto& e : entries) {
    const auto* bytes = static_cast<const uint8_t*>(e.data);
    const uint64_t n = uint64_t(shape_numel(e.shape)) * st_dtype_size(e.dtype);
    const uint64_t first = halfway_seen || done + n < at / 2 ? n : at / 2 - done;
    put(bytes, first);
    if (!halfway_seen && done + first >= at / 2) halfway_seen = true, half_written();
    if (first < n) put(bytes + first, n - first);
    done += n;
  }
  if (!halfway_seen) half_written();  // no data at all
  file.commit();
  return WrittenFile{8 + text.size() + at, hash.hex_digest()};
}

namespace {

std::vector<int64_t> parse_shape(const nlohmann::json& j, const std::string& where) {
  LOOM_USER_CHECK(j.is_array(), "%s: 'shape' is not a list", where.c_str());
  std::vector<int64_t> shape;
  for (const auto& d : j) {
    LOOM_USER_CHECK(d.is_number_unsigned() && d.get<uint64_t>() < (uint64_t(1) << 40),
                    "%s: 'shape' holds something other than a non-negative integer", where.c_str());
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_USER_CHECK(fd >= 0, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(strprintf("'%s' is not a regular file", path.c_str()));
  }
  f.size_ = uint64_t(st.st_size);
  if (f.size_ > 0) {
    f.map_ = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f.map_ == MAP_FAILED) f.map_ = nullptr;
  }
  ::close(fd);
  LOOM_USER_CHECK(f.size_ == 0 || f.map_, "cannot map '%s': %s", path.c_str(), std::strerror(errno));
  const uint8_t* bytes = static_cast<const uint8_t*>(f.map_);

  const char* p = path.c_str();
  LOOM_USER_CHECK(f.size_ >= 8, "safetensors file '%s' is truncated: %llu bytes, not even a header length", p,
                  (unsigned long long)f.size_);
  uint64_t n = 0;
  for (int i = 0; i < 8; i++) n |= uint64_t(bytes[i]) << (8 * i);
  LOOM_USER_CHECK(n <= (uint64_t(100) << 20), "safetensors file '%s': header length %llu is implausible", p,
                  (unsigned long long)n);
  LOOM_USER_CHECK(8 + n <= f.size_, "safetensors file '%s' is truncated: its header needs %llu bytes, the file has %llu",
                  p, (unsigned long long)(8 + n), (unsigned long long)f.size_);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(strprintf("safetensors file '%s': the header is not JSON (%s)", p, e.what()));
  }
  LOOM_USER_CHECK(header.is_object(), "safetensors file '%s': the header is not a JSON object", p);
  f.data_ = bytes + 8 + n;
  const uint64_t data_bytes = f.size_ - 8 - n;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      LOOM_USER_CHECK(it->is_object(), "safetensors file '%s': __metadata__ is not an object", p);
      for (auto m = it->begin(); m != it->end(); ++m) {
        LOOM_USER_CHECK(m->is_string(), "safetensors file '%s': __metadata__ value '%s' is not a string", p,
                        m.key().c_str());
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    std::string where = strprintf("safetensors file '%s', tensor '%s'", p, name.c_str());
    const nlohmann::json& t = *it;
    LOOM_USER_CHECK(t.is_object() && t.contains("dtype") && t.contains("shape") && t.contains("data_offsets"),
                    "%s: expected {dtype, shape, data_offsets}", where.c_str());
    StTensorInfo info;
    LOOM_USER_CHECK(t["dtype"].is_string() && parse_st_dtype(t["dtype"].get<std::string>(), &info.dtype),
                    "%s: unsupported dtype %s (F32, BF16, F16, I32)", where.c_str(), t["dtype"].dump().c_str());
    info.shape = parse_shape(t["shape"], where);
    const nlohmann::json& off = t["data_offsets"];
    LOOM_USER_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                    "%s: data_offsets must be two non-negative integers", where.c_str());
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    LOOM_USER_CHECK(info.begin <= info.end && info.end <= data_bytes,
                    "%s: data_offsets [%llu, %llu] lie outside the %llu data bytes (truncated file?)", where.c_str(),
                    (unsigned long long)info.begin, (unsigned long long)info.end, (unsigned long long)data_bytes);
    uint64_t want = uint64_t(shape_numel(info.shape)) * st_dtype_size(info.dtype);
    LOOM_USER_CHECK(info.end - info.begin == want, "%s: data_offsets hold %llu bytes, its shape needs %llu",
                    where.c_str(), (unsigned long long)(info.end - info.begin), (unsigned long long)want);
    f.tensors_[name] = std::move(info);
  }

  // The tensors must tile the data exactly: no overlap, no gap, nothing after.
  std::vector<std::pair<uint64_t, const std::string*>> order;
  for (const auto& [name, t] : f.tensors_) order.push_back({t.begin, &name});
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    const StTensorInfo &x = f.tensors_.at(*a.second), &y = f.tensors_.at(*b.second);
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  uint64_t at = 0;
  for (const auto& [begin, name] : order) {
    const StTensorInfo& t = f.tensors_.at(*name);
    LOOM_USER_CHECK(t.begin == at, "safetensors file '%s': tensor '%s' %s at byte %llu, expected %llu", p,
                    name->c_str(), t.begin < at ? "overlaps the one before it" : "leaves a gap", (unsigned long long)t.begin,
                    (unsigned long long)at);
    at = t.end;
  }
  LOOM_USER_CHECK(at == data_bytes, "safetensors file '%s': %llu bytes after the last tensor", p,
                  (unsigned long long)(data_bytes - at));
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept { *this = std::move(o); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
    data_ = std::exchange(o.data_, nullptr);
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() {
  if (map_) ::munmap(map_, size_);
  map_ = nullptr;
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read_floats(const StTensorInfo& t, int64_t first, int64_t n, float* out) const {
  LOOM_CHECK(first >= 0 && n >= 0 && first + n <= shape_numel(t.shape), "read outside a tensor of %s", path_.c_str());
  const uint8_t* src = data_ + t.begin + uint64_t(first) * st_dtype_size(t.dtype);
  switch (t.dtype) {
    case StDType::F32: std::memcpy(out, src, size_t(n) * 4); break;
    case StDType::BF16: {
      for (int64_t i = 0; i < n; i++) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = bf16_to_float(bf16{b});
      }
      break;
    }
    case StDType::F16: {
      for (int64_t i = 0; i < n; i++) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = f16_to_float(f16{b});
      }
      break;
    }
    case StDType::I32: {
      for (int64_t i = 0; i < n; i++) {
        int32_t v;
        std::memcpy(&v, src + 4 * i, 4);
        out[i] = float(v);
      }
      break;
    }
  }
}

}  // namespace loom
