//===- Gemm.cpp - CBLAS dispatch and the portable blocked GEMM ------------===//

#include "runtime/kernels/Gemm.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>

#ifdef MEGATRAIN_HAVE_CBLAS
#include <cblas.h>
#endif

namespace mtrt::cpu {
namespace {

// Register tile (kMR x kNR accumulators: 12 of the 16 vector registers of
// SSE) and cache blocks: an A panel (kMR x kKC) stays in L1 while it sweeps a
// packed B block (kKC x kNC) held in L2.
constexpr int64_t kMR = 6;
constexpr int64_t kNR = 8;
constexpr int64_t kMC = 72;
constexpr int64_t kNC = 256;
constexpr int64_t kKC = 256;
static_assert(kMC % kMR == 0 && kNC % kNR == 0, "blocks are whole tiles");
// Multiply-adds below which waking the other threads costs more than it saves.
constexpr int64_t kParallelWork = int64_t(1) << 18;

// Packs op(A)[i0 : i0+mc, p0 : p0+kc] as panels of kMR rows, k-major inside a
// panel, zero-padded to a multiple of kMR rows.
void pack_a(float *dst, const float *A, int64_t lda, bool trans, int64_t i0,
            int64_t mc, int64_t p0, int64_t kc) {
  for (int64_t ir = 0; ir < mc; ir += kMR)
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t r = 0; r < kMR; ++r) {
        const int64_t i = i0 + ir + r, k = p0 + p;
        *dst++ = ir + r < mc ? (trans ? A[k * lda + i] : A[i * lda + k]) : 0.f;
      }
}

// Packs op(B)[p0 : p0+kc, j0 : j0+nc] as panels of kNR columns, k-major
// inside a panel, zero-padded to a multiple of kNR columns.
void pack_b(float *dst, const float *B, int64_t ldb, bool trans, int64_t p0,
            int64_t kc, int64_t j0, int64_t nc) {
  for (int64_t jr = 0; jr < nc; jr += kNR)
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t c = 0; c < kNR; ++c) {
        const int64_t j = j0 + jr + c, k = p0 + p;
        *dst++ = jr + c < nc ? (trans ? B[j * ldb + k] : B[k * ldb + j]) : 0.f;
      }
}

// acc (kMR, kNR) = a-panel · b-panel over kc. GNU vector types (GCC, Clang)
// keep the kMR x kNR accumulators in registers, which plain loops do not get
// the compiler to do; 16-byte lanes exist on every x86-64 and AArch64.
typedef float Lanes __attribute__((vector_size(16)));
constexpr int64_t kLanes = 4;
static_assert(kNR % kLanes == 0, "a B panel row is whole lanes");

void micro_tile(int64_t kc, const float *a, const float *b,
                float acc[kMR][kNR]) {
  Lanes c[kMR][kNR / kLanes] = {};
  for (int64_t p = 0; p < kc; ++p) {
    Lanes bp[kNR / kLanes];
    std::memcpy(bp, b + p * kNR, sizeof(bp));
    for (int64_t r = 0; r < kMR; ++r) {
      const float ar = a[p * kMR + r];
      for (int64_t v = 0; v < kNR / kLanes; ++v)
        c[r][v] += ar * bp[v];
    }
  }
  std::memcpy(&acc[0][0], c, sizeof(c));
}

void scale_c(int64_t M, int64_t N, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
}

} // namespace

void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  const int64_t m_blocks = (M + kMC - 1) / kMC;
  const int64_t n_blocks = (N + kNC - 1) / kNC;
#pragma omp parallel if (M * N * K >= kParallelWork)
  {
    // Left uninitialized: packing writes every element the tiles read.
    // a_pack (kMC/kMR, kKC, kMR), b_pack (kNC/kNR, kKC, kNR)
    std::unique_ptr<float[]> a_pack(new float[kMC * kKC]);
    std::unique_ptr<float[]> b_pack(new float[kKC * kNC]);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t mb = 0; mb < m_blocks; ++mb)
      for (int64_t nb = 0; nb < n_blocks; ++nb) {
        const int64_t i0 = mb * kMC, mc = std::min(kMC, M - i0);
        const int64_t j0 = nb * kNC, nc = std::min(kNC, N - j0);
        for (int64_t p0 = 0; p0 < K; p0 += kKC) {
          const int64_t kc = std::min(kKC, K - p0);
          pack_a(a_pack.get(), A, lda, trans_a, i0, mc, p0, kc);
          pack_b(b_pack.get(), B, ldb, trans_b, p0, kc, j0, nc);
          const bool first = p0 == 0;
          for (int64_t ir = 0; ir < mc; ir += kMR)
            for (int64_t jr = 0; jr < nc; jr += kNR) {
              float acc[kMR][kNR];
              micro_tile(kc, a_pack.get() + ir * kc, b_pack.get() + jr * kc,
                         acc);
              const int64_t rows = std::min(kMR, mc - ir);
              const int64_t cols = std::min(kNR, nc - jr);
              for (int64_t r = 0; r < rows; ++r) {
                float *c = C + (i0 + ir + r) * ldc + j0 + jr;
                for (int64_t j = 0; j < cols; ++j) {
                  const float prior =
                      !first ? c[j] : (beta == 0.f ? 0.f : beta * c[j]);
                  c[j] = prior + alpha * acc[r][j];
                }
              }
            }
        }
      }
  }
}

bool gemm_uses_blas() {
#ifdef MEGATRAIN_HAVE_CBLAS
  return true;
#else
  return false;
#endif
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
          float beta, float *C, int64_t ldc) {
#ifdef MEGATRAIN_HAVE_CBLAS
  // CBLAS takes int dims; anything larger goes to the blocked path.
  const int64_t largest = std::max({M, N, K, lda, ldb, ldc});
  if (largest <= INT_MAX) {
    if (M <= 0 || N <= 0)
      return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
                alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
    return;
  }
#endif
  gemm_blocked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

} // namespace mtrt::cpu
