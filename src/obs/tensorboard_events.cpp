#include "obs/tensorboard_events.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>

#include "core/check.h"

namespace loom::obs {
namespace {

// Reflected Castagnoli polynomial.
std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protocol-buffer wire format: (field << 3 | wire type) keys, varints,
// length-delimited bytes, little-endian fixed32 / fixed64.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out += char(uint8_t(v | 0x80)), v >>= 7;
  out += char(uint8_t(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);  // little-endian hosts only (x86, arm64)
  out.append(b, sizeof v);
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// A reader over one message's bytes.
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  bool done() const { return p >= end || !ok; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) return ok = false, 0;
      const uint8_t b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return ok = false, 0;
  }
  template <typename T>
  T fixed() {
    T v{};
    if (end - p < long(sizeof v)) return ok = false, v;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return v;
  }
  Wire sub() {
    const uint64_t n = varint();
    if (!ok || uint64_t(end - p) < n) return ok = false, Wire{end, end, false};
    Wire w{p, p + n};
    p += n;
    return w;
  }
  void skip(int wire) {
    if (wire == 0) varint();
    else if (wire == 1) fixed<uint64_t>();
    else if (wire == 2) sub();
    else if (wire == 5) fixed<uint32_t>();
    else ok = false;
  }
};

}  // namespace

uint32_t crc32c(const void* data, size_t bytes) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < bytes; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t c = crc32c(data, bytes);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  // The pid too: a restart within the same second must not replace the file.
  path_ = dir + "/events.out.tfevents." + std::to_string(std::time(nullptr)) + "." + host + "." +
          std::to_string(::getpid()) + ".loom";
  file_ = std::fopen(path_.c_str(), "wb");
  LOOM_USER_CHECK(file_, "cannot write '%s': %s", path_.c_str(), std::strerror(errno));
  std::string event;
  put_key(event, 1, 1);
  put_fixed(event, double(std::time(nullptr)));
  put_bytes(event, 3, "brain.Event:2");
  record(event);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  if (!std::isfinite(value)) return;
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_fixed(v, float(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string event;
  put_key(event, 1, 1);
  put_fixed(event, wall_time);
  put_key(event, 2, 0);
  put_varint(event, uint64_t(step));
  put_bytes(event, 5, summary);
  record(event);
}

void TensorBoardWriter::record(const std::string& event) {
  std::string r;
  put_fixed(r, uint64_t(event.size()));
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += event;
  put_fixed(r, masked_crc32c(event.data(), event.size()));
  std::fwrite(r.data(), 1, r.size(), file_);
}

void TensorBoardWriter::flush() { std::fflush(file_); }

EventFile read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_USER_CHECK(in, "cannot read event file '%s'", path.c_str());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EventFile out;
  size_t at = 0;
  for (int n = 0; at < bytes.size(); n++) {
    LOOM_USER_CHECK(bytes.size() - at >= 12, "%s: record %d is truncated (its header)", path.c_str(), n);
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, bytes.data() + at, 8);
    std::memcpy(&len_crc, bytes.data() + at + 8, 4);
    LOOM_USER_CHECK(len_crc == masked_crc32c(bytes.data() + at, 8), "%s: record %d: the length's CRC does not match",
                    path.c_str(), n);
    LOOM_USER_CHECK(len <= bytes.size() - at - 12 && bytes.size() - at - 12 - len >= 4,
                    "%s: record %d is truncated (%llu bytes announced)", path.c_str(), n, (unsigned long long)len);
    const char* data = bytes.data() + at + 12;
    uint32_t data_crc;
    std::memcpy(&data_crc, data + len, 4);
    LOOM_USER_CHECK(data_crc == masked_crc32c(data, len), "%s: record %d: the data's CRC does not match",
                    path.c_str(), n);
    at += 12 + len + 4;

    Wire event{reinterpret_cast<const uint8_t*>(data), reinterpret_cast<const uint8_t*>(data) + len};
    ScalarEvent e;
    std::vector<std::pair<std::string, float>> values;
    while (!event.done()) {
      const uint64_t key = event.varint();
      const int field = int(key >> 3), wire = int(key & 7);
      if (field == 1 && wire == 1) e.wall_time = event.fixed<double>();
      else if (field == 2 && wire == 0) e.step = int64_t(event.varint());
      else if (field == 3 && wire == 2) {
        Wire s = event.sub();
        if (n == 0) out.file_version.assign(reinterpret_cast<const char*>(s.p), size_t(s.end - s.p));
      } else if (field == 5 && wire == 2) {
        Wire summary = event.sub();
        while (!summary.done()) {
          const uint64_t k = summary.varint();
          if (k != (1 << 3 | 2)) {
            summary.skip(int(k & 7));
            continue;
          }
          Wire value = summary.sub();
          std::string tag;
          float v = NAN;
          while (!value.done()) {
            const uint64_t vk = value.varint();
            if (vk == (1 << 3 | 2)) {
              Wire t = value.sub();
              tag.assign(reinterpret_cast<const char*>(t.p), size_t(t.end - t.p));
            } else if (vk == (2 << 3 | 5)) {
              v = value.fixed<float>();
            } else {
              value.skip(int(vk & 7));
            }
          }
          LOOM_USER_CHECK(value.ok, "%s: record %d: a malformed summary value", path.c_str(), n);
          values.emplace_back(tag, v);
        }
        LOOM_USER_CHECK(summary.ok, "%s: record %d: a malformed summary", path.c_str(), n);
      } else {
        event.skip(wire);
      }
    }
    LOOM_USER_CHECK(event.ok, "%s: record %d: a malformed event", path.c_str(), n);
    for (auto& [tag, v] : values) out.scalars.push_back({tag, e.step, v, e.wall_time});
  }
  return out;
}

}  // namespace loom::obs
