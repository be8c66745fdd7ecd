// Arena: one aligned allocation, carved into tensors by a plan made up front.
//
// Usage: reserve() every tensor (returns an offset), then allocate() once
// from a memory resource (the backend's), then at(offset) gives the
// pointer. Nothing is allocated after that, so a training step never
// touches the heap for its tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/memory_resource.h"

namespace loom {

class Arena {
 public:
  static constexpr size_t kAlignment = MemoryResource::kAlignment;

  Arena() = default;
  ~Arena() { reset(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& other) noexcept { *this = std::move(other); }
  Arena& operator=(Arena&& other) noexcept;

  // Reserves nbytes (rounded up to the alignment); returns its byte offset.
  size_t reserve(size_t nbytes);
  // Makes the single allocation, zero-filled. Call once, after all reserves.
  void allocate(MemoryResource& memory);

  bool allocated() const { return base_ != nullptr; }
  size_t size() const { return size_; }
  std::byte* base() const { return base_; }
  template <class T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  void reset();
  size_t size_ = 0;
  std::byte* base_ = nullptr;
  size_t allocated_bytes_ = 0;
  MemoryResource* memory_ = nullptr;  // where base_ came from
};

}  // namespace loom
