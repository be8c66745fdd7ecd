// Arena: one aligned allocation, carved into tensors by a plan made up front.
//
// Usage: reserve() every tensor (returns an offset), then allocate() once,
// then at(offset) gives the pointer. Nothing is allocated after that, so a
// training step never touches the heap for its tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace loom {

class Arena {
 public:
  static constexpr size_t kAlignment = 64;  // one cache line, one AVX-512 vector

  // Reserves nbytes (rounded up to the alignment); returns its byte offset.
  size_t reserve(size_t nbytes);
  // Makes the single allocation, zero-filled. Call once, after all reserves.
  void allocate();

  bool allocated() const { return base_ != nullptr; }
  size_t size() const { return size_; }
  std::byte* base() const { return base_.get(); }
  template <class T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(base_.get() + offset);
  }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  size_t size_ = 0;
  std::unique_ptr<std::byte, Free> base_;
};

}  // namespace loom
