//===- Gemm.h - single-precision matrix multiply -----------------*- C++
//-*-===//
//
// Row-major C = alpha·op(A)·op(B) + beta·C, the one GEMM every CPU kernel
// uses. op(A) is (M, K): A is (M, K) with leading dim lda, or (K, M) when
// trans_a. op(B) is (K, N): B is (K, N), or (N, K) when trans_b. C is (M, N)
// with leading dim ldc. beta == 0 overwrites C without reading it (NaN in C
// does not leak).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_KERNELS_GEMM_H
#define MEGATRAIN_RUNTIME_KERNELS_GEMM_H

#include <cstdint>

namespace mtrt::cpu {

/// CBLAS when the build found one (MEGATRAIN_HAVE_CBLAS), else gemm_blocked.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
          float beta, float *C, int64_t ldc);

/// The portable cache-blocked path, always compiled so that tests cover it on
/// machines that have a BLAS. Each C tile is owned by one thread and sums over
/// K in a fixed order, so results do not depend on the thread count.
void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc);

/// True when gemm() calls a CBLAS.
bool gemm_uses_blas();

} // namespace mtrt::cpu

#endif // MEGATRAIN_RUNTIME_KERNELS_GEMM_H
