// The CPU backend's memory: aligned heap allocations for arenas, and
// releasable buffers in pages of their own (core/paged_buffer.h: mmap'd,
// handed back with madvise) — the page release ZeRO-2 and ZeRO-3 use is
// this resource's feature.
#pragma once

#include "core/memory_resource.h"

namespace loom::cpu {

class HostMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) override;
  void free(void* p, size_t bytes) override;
  std::unique_ptr<ReleasableBuffer> releasable(int64_t floats, bool huge_pages = true) override;
  const char* name() const override { return "host"; }
};

}  // namespace loom::cpu
