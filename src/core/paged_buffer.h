// The host's releasable buffer (core/memory_resource.h; HostMemory makes
// them): a flat fp32 buffer in pages of its own (mmap), whose ranges can be handed
// back to the OS: they then take no memory and read as zeros until written
// again. Data parallelism's gradient buffer (a ZeRO-2 rank hands back what
// its shard now holds), ZeRO-3's gathered-parameter windows and the fp32
// values a sharded-master model reads all live in one.
//
// Pages are 2 MiB transparent huge pages where the kernel allows them: on
// virtual machines a 4 KiB page handed back costs a fault of ~10 us when
// written again (measured here: 150 ms per step for 47 MiB), a huge page
// ~100 times less per byte.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/flat_layout.h"
#include "core/memory_resource.h"

namespace loom {

class PagedBuffer final : public ReleasableBuffer {
 public:
  // Zero-filled. huge_pages = false: 4 KiB pages only.
  explicit PagedBuffer(int64_t floats, bool huge_pages = true);
  ~PagedBuffer() override;
  PagedBuffer(const PagedBuffer&) = delete;
  PagedBuffer& operator=(const PagedBuffer&) = delete;

  float* data() const override { return data_; }
  int64_t size() const override { return floats_; }
  // The release granularity, in floats.
  int64_t page_floats() const override { return int64_t(page_bytes_ / sizeof(float)); }

  void zero() override;  // writes zeros over the whole buffer
  // Hands the pages of r back to the OS; they read as zeros. r must start
  // and end on pages (page_floats()), or end at size().
  void release(FlatRange r) override;
  // Bytes of the buffer now in memory (mincore).
  size_t resident_bytes() const override;

 private:
  float* data_ = nullptr;
  int64_t floats_ = 0;
  size_t bytes_ = 0;       // usable: a whole number of pages
  size_t page_bytes_ = 0;  // release granularity
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
};

}  // namespace loom
