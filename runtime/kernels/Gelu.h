//===- Gelu.h - GELU and its derivative, exact and tanh forms ---*- C++ -*-===//
//
// What the CPU kernels share: the elementwise gelu and the mixture of
// experts' GeGLU experts.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_KERNELS_GELU_H
#define MEGATRAIN_RUNTIME_KERNELS_GELU_H

#include <cmath>

namespace mtrt::cpu {

namespace gelu_constants {
constexpr float kSqrt1_2 = 0.70710678118654752f;     // 1/√2
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286536f; // √(2/π)
constexpr float kCubic = 0.044715f;
} // namespace gelu_constants

/// x·Φ(x), or with approximate_tanh 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))).
inline float gelu(float x, bool approximate_tanh) {
  using namespace gelu_constants;
  if (approximate_tanh)
    return 0.5f * x *
           (1.f + std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x)));
  // 1 + erf(z) = erfc(-z), without the cancellation for large negative x.
  return 0.5f * x * std::erfc(-x * kSqrt1_2);
}

inline float gelu_grad(float x, bool approximate_tanh) {
  using namespace gelu_constants;
  if (approximate_tanh) {
    const float t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi *
                                  (1.f + 3.f * kCubic * x * x);
  }
  // Φ(x) + x·φ(x)
  return 0.5f * std::erfc(-x * kSqrt1_2) +
         x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

} // namespace mtrt::cpu

#endif // MEGATRAIN_RUNTIME_KERNELS_GELU_H
