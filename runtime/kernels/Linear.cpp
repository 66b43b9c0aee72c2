//===- Linear.cpp - y = x·Wᵀ + b and y = x·W + b --------------------------===//

#include "runtime/kernels/Gemm.h"
#include "runtime/kernels/Kernels.h"

#include <algorithm>

namespace mtrt::cpu {

void linear_forward(float *y, const float *x, const float *w, const float *b,
                    int64_t M, int64_t K, int64_t N, bool w_in_out,
                    bool accumulate) {
  // y (M, N) starts as the bias rows (or has them added) so the GEMM can
  // add onto it.
  if (b) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      float *row = y + m * N;
      if (accumulate)
        for (int64_t j = 0; j < N; ++j)
          row[j] += b[j];
      else
        std::copy(b, b + N, row);
    }
  }
  // w (K, N) when in_out, (N, K) otherwise.
  gemm(false, !w_in_out, M, N, K, 1.f, x, K, w, w_in_out ? N : K,
       b || accumulate ? 1.f : 0.f, y, N);
}

void linear_backward(float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *w, int64_t M, int64_t K,
                     int64_t N, bool w_in_out, bool accumulate_dx) {
  // dx (M, K) (+)= dy (M, N) · op(w)ᵀ, op(w) being the (K, N) view of w.
  if (dx)
    gemm(false, w_in_out, M, K, N, 1.f, dy, N, w, w_in_out ? N : K,
         accumulate_dx ? 1.f : 0.f, dx, K);
  // dw (K, N) += xᵀ · dy when in_out; dw (N, K) += dyᵀ · x otherwise.
  if (dw) {
    if (w_in_out)
      gemm(true, false, K, N, M, 1.f, x, K, dy, N, 1.f, dw, N);
    else
      gemm(true, false, N, K, M, 1.f, dy, N, x, K, 1.f, dw, K);
  }
  if (db) {
    // Column blocks own their sums, and rows are added in order: the result
    // does not depend on the thread count.
    constexpr int64_t kBlock = 256;
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < N; j0 += kBlock) {
      const int64_t cols = std::min(kBlock, N - j0);
      double sum[kBlock] = {};
      for (int64_t m = 0; m < M; ++m) {
        const float *row = dy + m * N + j0;
        for (int64_t j = 0; j < cols; ++j)
          sum[j] += row[j];
      }
      for (int64_t j = 0; j < cols; ++j)
        db[j0 + j] += float(sum[j]);
    }
  }
}

} // namespace mtrt::cpu
