// Where a device's memory comes from. Parameters, gradients, optimizer state
// and activations are allocated through the backend's resource (host memory
// today: kernels/cpu/host_memory.h; device memory for a GPU backend, see
// docs/backends.md), so dp/, zero/, optim/ and model/ never assume a kind
// of memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/flat_layout.h"

namespace loom {

// A flat fp32 buffer whose ranges can be handed back: they then take no
// memory and read as zeros until written again (the gradient buffer a
// ZeRO-2 rank keeps only its shard of, ZeRO-3's gathered windows).
class ReleasableBuffer {
 public:
  virtual ~ReleasableBuffer() = default;
  virtual float* data() const = 0;
  virtual int64_t size() const = 0;
  // The release granularity, in floats: release() takes ranges that start
  // and end on it (or end at size()).
  virtual int64_t page_floats() const = 0;
  virtual void zero() = 0;  // writes zeros over the whole buffer
  virtual void release(FlatRange r) = 0;
  void release_all() { release({0, size()}); }
  // Bytes of the buffer now held in memory.
  virtual size_t resident_bytes() const = 0;
};

class MemoryResource {
 public:
  static constexpr size_t kAlignment = 64;  // one cache line, one AVX-512 vector
  virtual ~MemoryResource() = default;
  // `bytes` (> 0), aligned to kAlignment and zero-filled; UserError when
  // out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* p, size_t bytes) = 0;
  // huge_pages: release in large pages where the resource has them (fewer
  // faults when written again); false: the finest granularity.
  virtual std::unique_ptr<ReleasableBuffer> releasable(int64_t floats, bool huge_pages = true) = 0;
  virtual const char* name() const = 0;
};

}  // namespace loom
