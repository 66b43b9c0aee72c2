//===- OptimizerKernelsScalar.cpp - Portable optimizer inner loops --------===//
//
// The fallback for CPUs without AVX2, and the tails of the vector paths.
//
//===----------------------------------------------------------------------===//

#include "runtime/host/OptimizerKernels.h"

#include <cmath>

namespace mtrt::host::detail {

void adamw_scalar(float *p, float *m, float *v, const float *g, int64_t n,
                  const AdamWCoeffs &c) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * c.grad_scale;
    float pi = p[i] * c.decay;
    float mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    float vi = v[i] * c.beta2 + (c.one_minus_beta2 * gi) * gi;
    float denom = std::sqrt(vi) / c.sqrt_bc2 + c.eps;
    p[i] = pi + (c.neg_step_size * mi) / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

void adamw_bf16_scalar(uint16_t *p, float *m, float *v, const uint16_t *g,
                       int64_t n, const AdamWCoeffs &c, uint32_t noise_key,
                       uint32_t index0) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = bf16_widen(g[i]) * c.grad_scale;
    float pi = bf16_widen(p[i]) * c.decay;
    float mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    float vi = v[i] * c.beta2 + (c.one_minus_beta2 * gi) * gi;
    float denom = std::sqrt(vi) / c.sqrt_bc2 + c.eps;
    pi = pi + (c.neg_step_size * mi) / denom;
    p[i] = bf16_stochastic(
        pi, rounding_noise(noise_key, index0 + static_cast<uint32_t>(i)));
    m[i] = mi;
    v[i] = vi;
  }
}

void sum_squares_scalar(const float *x, int64_t n, double *lanes) {
  for (int64_t i = 0; i < n; ++i) {
    double xi = x[i];
    lanes[i % kSumSquaresLanes] += xi * xi;
  }
}

void sum_squares_bf16_scalar(const uint16_t *x, int64_t n, double *lanes) {
  for (int64_t i = 0; i < n; ++i) {
    double xi = bf16_widen(x[i]);
    lanes[i % kSumSquaresLanes] += xi * xi;
  }
}

} // namespace mtrt::host::detail
