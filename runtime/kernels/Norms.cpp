//===- Norms.cpp - RMSNorm and LayerNorm over the last dim ----------------===//
//
// Row statistics are summed in double; the backward recomputes them, writes
// dx row by row, then sums dw/db over rows by column blocks so every column
// is added in row order whatever the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mtrt::cpu {
namespace {

constexpr int64_t kColumnBlock = 256;

struct RowStats {
  float mean; // 0 for RMSNorm
  float rstd; // 1 / sqrt(mean square (of deviations) + eps)
};

RowStats rms_stats(const float *x, int64_t D, float eps) {
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < D; ++j)
    ss += double(x[j]) * x[j];
  return {0.f, float(1.0 / std::sqrt(ss / D + eps))};
}

RowStats layer_stats(const float *x, int64_t D, float eps) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < D; ++j)
    sum += x[j];
  const double mean = sum / D;
  double ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < D; ++j)
    ss += (x[j] - mean) * (x[j] - mean);
  return {float(mean), float(1.0 / std::sqrt(ss / D + eps))};
}

// dw[j] += Σ_m dy[m, j] · xhat[m, j] and db[j] += Σ_m dy[m, j], with
// xhat = (x - mean) · rstd of each row.
void norm_param_grads(float *dw, float *db, const float *dy, const float *x,
                      const std::vector<RowStats> &stats, int64_t M,
                      int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < D; j0 += kColumnBlock) {
    const int64_t cols = std::min(kColumnBlock, D - j0);
    double sw[kColumnBlock] = {}, sb[kColumnBlock] = {};
    for (int64_t m = 0; m < M; ++m) {
      const float *g = dy + m * D + j0, *xr = x + m * D + j0;
      const RowStats st = stats[m];
      for (int64_t j = 0; j < cols; ++j) {
        sw[j] += g[j] * ((xr[j] - st.mean) * st.rstd);
        sb[j] += g[j];
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      if (dw)
        dw[j0 + j] += float(sw[j]);
      if (db)
        db[j0 + j] += float(sb[j]);
    }
  }
}

} // namespace

void rms_norm_forward(float *y, const float *x, const float *w, int64_t M,
                      int64_t D, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const float *xr = x + m * D;
    float *yr = y + m * D;
    const float rstd = rms_stats(xr, D, eps).rstd;
    for (int64_t j = 0; j < D; ++j)
      yr[j] = xr[j] * rstd * (w ? w[j] : 1.f);
  }
}

void rms_norm_backward(float *dx, float *dw, const float *dy, const float *x,
                       const float *w, int64_t M, int64_t D, float eps,
                       bool accumulate_dx) {
  std::vector<RowStats> stats(M); // (M)
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const float *xr = x + m * D, *g = dy + m * D;
    stats[m] = rms_stats(xr, D, eps);
    if (!dx)
      continue;
    // dx = rstd · gw - rstd³ / D · (gw · x) · x, with gw = dy ⊙ w.
    const float rstd = stats[m].rstd;
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < D; ++j)
      dot += double(g[j]) * (w ? w[j] : 1.f) * xr[j];
    const float c = float(double(rstd) * rstd * rstd * dot / D);
    float *dxr = dx + m * D;
    for (int64_t j = 0; j < D; ++j) {
      const float v = rstd * (g[j] * (w ? w[j] : 1.f)) - c * xr[j];
      dxr[j] = accumulate_dx ? dxr[j] + v : v;
    }
  }
  if (dw)
    norm_param_grads(dw, nullptr, dy, x, stats, M, D);
}

void layer_norm_forward(float *y, const float *x, const float *w,
                        const float *b, int64_t M, int64_t D, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const float *xr = x + m * D;
    float *yr = y + m * D;
    const RowStats st = layer_stats(xr, D, eps);
    for (int64_t j = 0; j < D; ++j)
      yr[j] = (xr[j] - st.mean) * st.rstd * (w ? w[j] : 1.f) + (b ? b[j] : 0.f);
  }
}

void layer_norm_backward(float *dx, float *dw, float *db, const float *dy,
                         const float *x, const float *w, int64_t M, int64_t D,
                         float eps, bool accumulate_dx) {
  std::vector<RowStats> stats(M); // (M)
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const float *xr = x + m * D, *g = dy + m * D;
    const RowStats st = stats[m] = layer_stats(xr, D, eps);
    if (!dx)
      continue;
    // dx = rstd · (gw - mean(gw) - xhat · mean(gw ⊙ xhat)), gw = dy ⊙ w.
    double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t j = 0; j < D; ++j) {
      const double gw = double(g[j]) * (w ? w[j] : 1.f);
      sum_g += gw;
      sum_gx += gw * ((xr[j] - st.mean) * st.rstd);
    }
    const float mean_g = float(sum_g / D), mean_gx = float(sum_gx / D);
    float *dxr = dx + m * D;
    for (int64_t j = 0; j < D; ++j) {
      const float xhat = (xr[j] - st.mean) * st.rstd;
      const float v =
          st.rstd * (g[j] * (w ? w[j] : 1.f) - mean_g - xhat * mean_gx);
      dxr[j] = accumulate_dx ? dxr[j] + v : v;
    }
  }
  if (dw || db)
    norm_param_grads(dw, db, dy, x, stats, M, D);
}

} // namespace mtrt::cpu
