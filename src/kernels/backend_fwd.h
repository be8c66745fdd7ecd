// The backend's name without its kernels (kernels/backend.h has the class).
#pragma once

namespace loom {
class CpuBackend;
using Backend = CpuBackend;
}  // namespace loom
