// main() of the single-process tests: GoogleTest after the instruction-set
// cap (LOOM_MAX_CPU_ISA, kernels/cpu/isa.h), so that a capped run exercises
// the portable kernel paths on any CPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/check.h"
#include "kernels/cpu/isa.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    loom::cpu::cap_isa(std::nullopt);
  } catch (const loom::UserError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return RUN_ALL_TESTS();
}
