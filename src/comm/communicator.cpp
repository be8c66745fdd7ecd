#include "comm/communicator.h"

#include "core/check.h"

namespace loom {

// A communicator without a transport for it (test doubles) says so.
std::unique_ptr<Work> Communicator::all_to_all_rows_async(const void*, const int*, const int*, void*, const int*,
                                                          const int*, size_t, DType) {
  throw Error("the " + name() + " group's communicator has no all-to-all");
}

}  // namespace loom
