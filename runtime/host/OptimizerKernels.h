//===- OptimizerKernels.h - Per-path inner loops of the optimizer -*- C++
//-*-===//
//
// Internal to runtime/host. Every path performs the same IEEE float
// operations in the same order with no FMA contraction (the library is built
// with -ffp-contract=off), so scalar, AVX2 and AVX-512 results are bitwise
// equal; the vector paths only do 8 or 16 elements at a time.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_HOST_OPTIMIZERKERNELS_H
#define MEGATRAIN_RUNTIME_HOST_OPTIMIZERKERNELS_H

#include "runtime/host/Bf16.h"

#include <cstdint>
#include <cstring>

namespace mtrt::host::detail {

// Per-call constants, rounded to float once from double so that every path
// and every part of a split range sees the same values.
struct AdamWCoeffs {
  float grad_scale;
  float decay; // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float sqrt_bc2; // sqrt(1 - beta2^t)
  float eps;
  float neg_step_size; // -lr / (1 - beta1^t)
};

// Over n elements, as torch.optim.AdamW orders it:
//   g = grad * grad_scale
//   p = p * decay
//   m = m * beta1 + one_minus_beta1 * g
//   v = v * beta2 + (one_minus_beta2 * g) * g
//   p = p + (neg_step_size * m) / (sqrt(v) / sqrt_bc2 + eps)
void adamw_scalar(float *p, float *m, float *v, const float *g, int64_t n,
                  const AdamWCoeffs &c);
void adamw_avx2(float *p, float *m, float *v, const float *g, int64_t n,
                const AdamWCoeffs &c);
void adamw_avx512(float *p, float *m, float *v, const float *g, int64_t n,
                  const AdamWCoeffs &c);

// The bf16-master variant: p and g hold bf16 bits, m and v stay float. The
// same float operations as adamw_*, on p and g widened to float; the new p
// is written back with stochastic rounding (bf16_stochastic below) using the
// noise of element i = index0 + k, so a split range rounds as the whole does.
void adamw_bf16_scalar(uint16_t *p, float *m, float *v, const uint16_t *g,
                       int64_t n, const AdamWCoeffs &c, uint32_t noise_key,
                       uint32_t index0);
void adamw_bf16_avx2(uint16_t *p, float *m, float *v, const uint16_t *g,
                     int64_t n, const AdamWCoeffs &c, uint32_t noise_key,
                     uint32_t index0);
void adamw_bf16_avx512(uint16_t *p, float *m, float *v, const uint16_t *g,
                       int64_t n, const AdamWCoeffs &c, uint32_t noise_key,
                       uint32_t index0);

// 16 uniform bits for element `index` under `key`: the top half of a
// full-avalanche 32-bit mix (Wellons' lowbias32) of index ^ key.
inline uint32_t rounding_noise(uint32_t key, uint32_t index) {
  uint32_t x = index ^ key;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x >> 16;
}

// Stochastic rounding to bf16: adding 16 uniform bits below the kept ones
// and truncating rounds the magnitude up with probability equal to the
// dropped fraction, so the expected result is the float itself. NaN stays
// a (quiet) NaN; a finite value may round to infinity as it would upward.
inline uint16_t bf16_stochastic(float f, uint32_t noise) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u | 0x00400000u) >> 16);
  return uint16_t((u + noise) >> 16);
}

// Sum of squares in double with a fixed lane layout: element i of x adds
// x[i]^2 to lanes[i % kSumSquaresLanes]. A float's square is exact in double,
// so every path gives the same lanes bit for bit.
constexpr int kSumSquaresLanes = 16;
void sum_squares_scalar(const float *x, int64_t n, double *lanes);
void sum_squares_avx2(const float *x, int64_t n, double *lanes);
void sum_squares_avx512(const float *x, int64_t n, double *lanes);
// The same over bf16 bits (a bf16 gradient accumulator).
void sum_squares_bf16_scalar(const uint16_t *x, int64_t n, double *lanes);
void sum_squares_bf16_avx2(const uint16_t *x, int64_t n, double *lanes);
void sum_squares_bf16_avx512(const uint16_t *x, int64_t n, double *lanes);

} // namespace mtrt::host::detail

#endif // MEGATRAIN_RUNTIME_HOST_OPTIMIZERKERNELS_H
