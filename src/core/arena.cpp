#include "core/arena.h"

#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace loom {

size_t Arena::reserve(size_t nbytes) {
  LOOM_CHECK(!allocated(), "reserve() after allocate()");
  size_t offset = size_;
  size_ += (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return offset;
}

void Arena::allocate() {
  LOOM_CHECK(!allocated(), "allocate() twice");
  size_t bytes = size_ == 0 ? kAlignment : size_;
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (!p) throw UserError(strprintf("out of memory: could not allocate %.1f MiB", double(bytes) / (1 << 20)));
  std::memset(p, 0, bytes);
  base_.reset(static_cast<std::byte*>(p));
}

void Arena::Free::operator()(std::byte* p) const { std::free(p); }

}  // namespace loom
