// The flat fp32 gradient buffer of data parallelism, in pages of its own
// (mmap), so that a range whose reduced gradients now live elsewhere (a
// ZeRO-2 shard) can be handed back to the OS: it then takes no memory and
// reads as zeros until backward writes it again.
//
// Pages are 2 MiB transparent huge pages where the kernel allows them: on
// virtual machines a 4 KiB page handed back costs a fault of ~10 us when
// written again (measured here: 150 ms per step for 47 MiB), a huge page
// ~100 times less per byte.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/flat_layout.h"

namespace loom {

class GradBuffer {
 public:
  // Zero-filled. huge_pages = false: 4 KiB pages only.
  explicit GradBuffer(int64_t floats, bool huge_pages = true);
  ~GradBuffer();
  GradBuffer(const GradBuffer&) = delete;
  GradBuffer& operator=(const GradBuffer&) = delete;

  float* data() const { return data_; }
  int64_t size() const { return floats_; }
  // The release granularity, in floats.
  int64_t page_floats() const { return int64_t(page_bytes_ / sizeof(float)); }

  void zero();  // writes zeros over the whole buffer
  // Hands the pages of r back to the OS; they read as zeros. r must start
  // and end on pages (page_floats()), or end at size().
  void release(FlatRange r);
  void release_all() { release({0, floats_}); }
  // Bytes of the buffer now in memory (mincore).
  size_t resident_bytes() const;

 private:
  float* data_ = nullptr;
  int64_t floats_ = 0;
  size_t bytes_ = 0;       // usable: a whole number of pages
  size_t page_bytes_ = 0;  // release granularity
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
};

}  // namespace loom
