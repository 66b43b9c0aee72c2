//===- Gelu.cuh - GELU and its derivative on the device ---------*- C++ -*-===//
//
// Exact and tanh forms, as runtime/kernels/Gelu.h on the CPU: the
// elementwise gelu kernels and the mixture of experts' GeGLU experts.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_GELU_CUH
#define MEGATRAIN_RUNTIME_CUDA_GELU_CUH

#include "runtime/cuda/CudaCompat.h"

namespace mtrt::MT_KNS {

namespace gelu_constants {
constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kCubic = 0.044715f;
} // namespace gelu_constants

__device__ __forceinline__ float gelu(float x, bool tanh_form) {
  using namespace gelu_constants;
  if (tanh_form)
    return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
  return 0.5f * x * erfcf(-x * kSqrt1_2);
}
__device__ __forceinline__ float gelu_grad(float x, bool tanh_form) {
  using namespace gelu_constants;
  if (tanh_form) {
    const float t = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi *
                                  (1.f + 3.f * kCubic * x * x);
  }
  return 0.5f * erfcf(-x * kSqrt1_2) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}

} // namespace mtrt::MT_KNS

#endif // MEGATRAIN_RUNTIME_CUDA_GELU_CUH
