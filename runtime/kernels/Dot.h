//===- Dot.h - the f32 dot product the CPU kernels share --------*- C++ -*-===//
#ifndef MEGATRAIN_RUNTIME_KERNELS_DOT_H
#define MEGATRAIN_RUNTIME_KERNELS_DOT_H

#include <cstdint>

namespace mtrt::cpu {

/// Σ a[i]·b[i] in f32, vectorized (the order of a SIMD reduction).
inline float dot(const float *a, const float *b, int64_t n) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

} // namespace mtrt::cpu

#endif // MEGATRAIN_RUNTIME_KERNELS_DOT_H
