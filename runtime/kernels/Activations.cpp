//===- Activations.cpp - relu, silu, gelu, swiglu, scale ------------------===//

#include "runtime/kernels/Kernels.h"

#include <cmath>

namespace mtrt::cpu {
namespace {

// Below this many elements a parallel region costs more than the loop.
constexpr int64_t kParallelMin = 1 << 15;

constexpr float kSqrt1_2 = 0.70710678118654752f;     // 1/√2
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286536f; // √(2/π)
constexpr float kGeluCubic = 0.044715f;

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

float silu(float x) { return x * sigmoid(x); }

float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.f + x * (1.f - s));
}

float gelu(float x, bool approximate_tanh) {
  if (approximate_tanh)
    return 0.5f * x *
           (1.f + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  // 1 + erf(z) = erfc(-z), without the cancellation for large negative x.
  return 0.5f * x * std::erfc(-x * kSqrt1_2);
}

float gelu_grad(float x, bool approximate_tanh) {
  if (approximate_tanh) {
    const float t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi *
                                  (1.f + 3.f * kGeluCubic * x * x);
  }
  // Φ(x) + x·φ(x)
  return 0.5f * std::erfc(-x * kSqrt1_2) +
         x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

} // namespace

void relu_forward(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] > 0.f ? x[i] : 0.f;
}

// The gradient at 0 is 0, as in torch.
void relu_backward(float *dx, const float *dy, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > 0.f)
      dx[i] += dy[i];
}

void silu_forward(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = silu(x[i]);
}

void silu_backward(float *dx, const float *dy, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    dx[i] += dy[i] * silu_grad(x[i]);
}

void gelu_forward(float *y, const float *x, int64_t n, bool approximate_tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = gelu(x[i], approximate_tanh);
}

void gelu_backward(float *dx, const float *dy, const float *x, int64_t n,
                   bool approximate_tanh) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    dx[i] += dy[i] * gelu_grad(x[i], approximate_tanh);
}

void softcap_forward(float *y, const float *x, int64_t n, float cap) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = cap * std::tanh(x[i] / cap);
}

void softcap_backward(float *dx, const float *dy, const float *x, int64_t n,
                      float cap) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::tanh(x[i] / cap);
    dx[i] += dy[i] * (1.f - t * t);
  }
}

void swiglu_forward(float *y, const float *gate, const float *up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = silu(gate[i]) * up[i];
}

void swiglu_backward(float *dgate, float *dup, const float *dy,
                     const float *gate, const float *up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    if (dgate)
      dgate[i] += dy[i] * up[i] * silu_grad(gate[i]);
    if (dup)
      dup[i] += dy[i] * silu(gate[i]);
  }
}

void scale_forward(float *y, const float *x, int64_t n, float factor) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = factor * x[i];
}

void scale_backward(float *dx, const float *dy, int64_t n, float factor) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    dx[i] += factor * dy[i];
}

} // namespace mtrt::cpu
