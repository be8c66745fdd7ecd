#include "core/arena.h"

#include <utility>

#include "core/check.h"

namespace loom {

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    reset();
    size_ = std::exchange(other.size_, 0);
    base_ = std::exchange(other.base_, nullptr);
    allocated_bytes_ = std::exchange(other.allocated_bytes_, 0);
    memory_ = std::exchange(other.memory_, nullptr);
  }
  return *this;
}

size_t Arena::reserve(size_t nbytes) {
  LOOM_CHECK(!allocated(), "reserve() after allocate()");
  size_t offset = size_;
  size_ += (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return offset;
}

void Arena::allocate(MemoryResource& memory) {
  LOOM_CHECK(!allocated(), "allocate() twice");
  allocated_bytes_ = size_ == 0 ? kAlignment : size_;
  base_ = static_cast<std::byte*>(memory.allocate(allocated_bytes_));
  memory_ = &memory;
}

void Arena::reset() {
  if (base_) memory_->free(base_, allocated_bytes_);
  base_ = nullptr;
}

}  // namespace loom
