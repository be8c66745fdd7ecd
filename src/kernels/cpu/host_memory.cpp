#include "kernels/cpu/host_memory.h"

#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/paged_buffer.h"

namespace loom::cpu {

void* HostMemory::allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) throw UserError(strprintf("out of memory: could not allocate %.1f MiB", double(bytes) / (1 << 20)));
  std::memset(p, 0, rounded);
  return p;
}

void HostMemory::free(void* p, size_t) { std::free(p); }

std::unique_ptr<ReleasableBuffer> HostMemory::releasable(int64_t floats, bool huge_pages) {
  return std::make_unique<PagedBuffer>(floats, huge_pages);
}

}  // namespace loom::cpu
