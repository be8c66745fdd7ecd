// Vector math for `#pragma omp simd` loops, from glibc's libmvec.
//
// glibc marks expf/tanhf `omp declare simd` only under -ffast-math, which we
// do not use (it would license reassociation everywhere). Redeclaring them
// here lets GCC call libmvec's vector variants (_ZGVeN16v_expf, ...) inside
// simd loops of the files that include this header; the loop remainders
// still call the scalar libm functions. Both are within a few ulp of the
// correctly rounded result. Needs glibc >= 2.35 (tanhf variants).
#pragma once

#include <cmath>

extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
}
