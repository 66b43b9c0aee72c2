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

#include <cstdint>

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

// Sum of squares in double with a fixed lane layout: element i of x adds
// x[i]^2 to lanes[i % kSumSquaresLanes]. A float's square is exact in double,
// so every path gives the same lanes bit for bit.
constexpr int kSumSquaresLanes = 16;
void sum_squares_scalar(const float *x, int64_t n, double *lanes);
void sum_squares_avx2(const float *x, int64_t n, double *lanes);
void sum_squares_avx512(const float *x, int64_t n, double *lanes);

} // namespace mtrt::host::detail

#endif // MEGATRAIN_RUNTIME_HOST_OPTIMIZERKERNELS_H
