//===- OptimizerKernelsScalar.cpp - Portable optimizer inner loops --------===//
//
// The fallback for CPUs without AVX2, and the tails of the vector paths.
//
//===----------------------------------------------------------------------===//

#include "runtime/host/OptimizerKernels.h"

#include <cmath>

namespace mtrt::host::detail {

namespace {
// One element's update, in the order OptimizerKernels.h gives; returns p.
inline float update(float p, float &m, float &v, float g, const AdamWCoeffs &c) {
  float gi = g * c.grad_scale;
  float pi = p * c.decay;
  m = m * c.beta1 + c.one_minus_beta1 * gi;
  v = v * c.beta2 + (c.one_minus_beta2 * gi) * gi;
  float denom = std::sqrt(v) / c.sqrt_bc2 + c.eps;
  return pi + (c.neg_step_size * m) / denom;
}
} // namespace

void adamw_scalar(float *p, float *m, float *v, const float *g, int64_t n,
                  const AdamWCoeffs &c) {
  for (int64_t i = 0; i < n; ++i)
    p[i] = update(p[i], m[i], v[i], g[i], c);
}

void adamw_bf16_scalar(uint16_t *p, float *m, float *v, const uint16_t *g,
                       int64_t n, const AdamWCoeffs &c, uint32_t noise_key,
                       uint32_t index0) {
  for (int64_t i = 0; i < n; ++i)
    p[i] = bf16_stochastic(
        update(bf16_widen(p[i]), m[i], v[i], bf16_widen(g[i]), c),
        rounding_noise(noise_key, index0 + static_cast<uint32_t>(i)));
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
