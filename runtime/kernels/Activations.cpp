//===- Activations.cpp - relu, silu, gelu, xielu, swiglu, scale ----------===//

#include "runtime/kernels/Kernels.h"

#include "runtime/kernels/Gelu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mtrt::cpu {
namespace {

// Below this many elements a parallel region costs more than the loop.
constexpr int64_t kParallelMin = 1 << 15;

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

float silu(float x) { return x * sigmoid(x); }

float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.f + x * (1.f - s));
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

void xielu_forward(float *y, const float *x, int64_t n, float ap, float an,
                   float beta, float eps) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v > 0.f ? ap * v * v + beta * v
                   : an * (std::expm1(std::min(v, eps)) - v) + beta * v;
  }
}

XieluAlphas xielu_alphas(float p, float n, float beta, bool softplus) {
  if (!softplus)
    return {p, n, 1.f, 1.f};
  auto sp = [](float a) { return a > 20.f ? a : std::log1p(std::exp(a)); };
  return {sp(p), beta + sp(n), sigmoid(p), sigmoid(n)};
}

// d/dx: 2·ap·x + beta above 0; an·(exp(x) − 1) + beta below eps, where
// min(x, eps) passes x; −an + beta between eps and 0, where it is constant.
// The param gradients sum fixed chunks in order: the same bits on any
// thread count.
void xielu_backward(float *dx, float *dap, float *dan, const float *dy,
                    const float *x, int64_t n, float ap, float an, float beta,
                    float eps) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> sp(chunks, 0.0), sn(chunks, 0.0);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
      const float v = x[i], g = dy[i];
      if (v > 0.f) {
        if (dx)
          dx[i] += g * (2.f * ap * v + beta);
        sp[c] += double(g) * v * v;
      } else {
        if (dx)
          dx[i] += g * (an * ((v < eps ? std::exp(v) : 0.f) - 1.f) + beta);
        sn[c] += double(g) * (std::expm1(std::min(v, eps)) - v);
      }
    }
  }
  double tp = 0, tn = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    tp += sp[c];
    tn += sn[c];
  }
  if (dap)
    *dap += float(tp);
  if (dan)
    *dan += float(tn);
}

void sigmoid_forward(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = sigmoid(x[i]);
}

void sigmoid_backward(float *dx, const float *dy, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(x[i]);
    dx[i] += dy[i] * s * (1.f - s);
  }
}

void exp_forward(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = std::exp(x[i]);
}

void softplus_forward(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = std::max(x[i], 0.f) + std::log1p(std::exp(-std::abs(x[i])));
}

void softplus_backward(float *dx, const float *dy, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    dx[i] += dy[i] * sigmoid(x[i]);
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
                     const float *gate, const float *up, int64_t n,
                     bool accumulate) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    if (dgate)
      dgate[i] =
          (accumulate ? dgate[i] : 0.f) + dy[i] * up[i] * silu_grad(gate[i]);
    if (dup)
      dup[i] = (accumulate ? dup[i] : 0.f) + dy[i] * silu(gate[i]);
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
