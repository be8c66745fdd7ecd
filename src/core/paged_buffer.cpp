#include "core/paged_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace loom {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
size_t small_page() { return size_t(sysconf(_SC_PAGESIZE)); }
}  // namespace

PagedBuffer::PagedBuffer(int64_t floats, bool huge_pages) : floats_(floats) {
  // Huge pages need 2 MiB alignment: map one extra and start on a boundary.
  // MADV_HUGEPAGE is only advice; where it is refused, 4 KiB pages remain.
  page_bytes_ = small_page();
  const size_t want = std::max<size_t>(1, size_t(floats) * sizeof(float));
  const size_t align = huge_pages ? kHugePage : page_bytes_;
  bytes_ = (want + align - 1) / align * align;
  mapping_bytes_ = bytes_ + (huge_pages ? kHugePage : 0);
  // Anonymous private pages: zero-filled, and MADV_DONTNEED makes them so again.
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping_ == MAP_FAILED)
    throw UserError(strprintf("out of memory: could not map a %.1f MiB gradient buffer", double(bytes_) / (1 << 20)));
  uintptr_t start = (reinterpret_cast<uintptr_t>(mapping_) + align - 1) / align * align;
  data_ = reinterpret_cast<float*>(start);
  if (huge_pages && madvise(data_, bytes_, MADV_HUGEPAGE) == 0) page_bytes_ = kHugePage;
}

PagedBuffer::~PagedBuffer() {
  if (mapping_) munmap(mapping_, mapping_bytes_);
}

void PagedBuffer::zero() { std::memset(data_, 0, size_t(floats_) * sizeof(float)); }

void PagedBuffer::release(FlatRange r) {
  const size_t begin = size_t(r.begin) * sizeof(float);
  const size_t end = r.end >= floats_ ? bytes_ : size_t(r.end) * sizeof(float);  // the tail page goes with the end
  LOOM_CHECK(begin % page_bytes_ == 0 && end % page_bytes_ == 0 && begin <= end,
             "release of [%lld, %lld) is not on %zu-byte pages", (long long)r.begin, (long long)r.end, page_bytes_);
  if (end > begin)
    LOOM_CHECK(madvise(reinterpret_cast<char*>(data_) + begin, end - begin, MADV_DONTNEED) == 0, "madvise failed: %s",
               std::strerror(errno));
}

size_t PagedBuffer::resident_bytes() const {
  const size_t page = small_page();
  std::vector<unsigned char> in_core(bytes_ / page);
  LOOM_CHECK(mincore(data_, bytes_, in_core.data()) == 0, "mincore failed: %s", std::strerror(errno));
  size_t pages = 0;
  for (unsigned char c : in_core) pages += c & 1;
  return pages * page;
}

}  // namespace loom
