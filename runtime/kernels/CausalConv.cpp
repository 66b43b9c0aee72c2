//===- CausalConv.cpp - a depthwise causal convolution over positions -----===//
//
// Each channel's row of positions convolved with its own K taps, reading
// only the current position and the K − 1 before it (docs/primitives.md,
// causal_conv). Rows are independent: one per (batch, channel), in
// parallel; each tap's gradient sums its channel's rows in batch order, so
// the bits do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"

#include <vector>

namespace mtrt::cpu {

void causal_conv_forward(float *y, const float *x, const float *w,
                         const float *bias, int64_t B, int64_t C, int64_t S,
                         int64_t K) {
#pragma omp parallel for schedule(static) if (B * C > 1)
  for (int64_t r = 0; r < B * C; ++r) {
    const float *xr = x + r * S, *wc = w + (r % C) * K;
    float *yr = y + r * S;
    for (int64_t s = 0; s < S; ++s) {
      float acc = 0.f;
      for (int64_t j = 0; j < K; ++j)
        if (const int64_t t = s - (K - 1) + j; t >= 0)
          acc += wc[j] * xr[t];
      yr[s] = bias ? acc + bias[r % C] : acc;
    }
  }
}

void causal_conv_backward(float *dx, float *dw, float *db, const float *dy,
                          const float *x, const float *w, int64_t B, int64_t C,
                          int64_t S, int64_t K) {
  if (dx) {
#pragma omp parallel for schedule(static) if (B * C > 1)
    for (int64_t r = 0; r < B * C; ++r) {
      const float *dyr = dy + r * S, *wc = w + (r % C) * K;
      float *dxr = dx + r * S;
      for (int64_t t = 0; t < S; ++t) {
        float acc = 0.f;
        for (int64_t j = 0; j < K; ++j)
          if (const int64_t s = t + (K - 1) - j; s < S)
            acc += wc[j] * dyr[s];
        dxr[t] += acc;
      }
    }
  }
  if (db)
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0.f;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
          acc += dy[(b * C + c) * S + s];
      db[c] += acc;
    }
  if (!dw)
    return;
#pragma omp parallel for schedule(static) if (C > 1)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K; ++j) {
      float acc = 0.f;
      for (int64_t b = 0; b < B; ++b) {
        const float *dyr = dy + (b * C + c) * S, *xr = x + (b * C + c) * S;
        for (int64_t s = K - 1 - j; s < S; ++s)
          acc += dyr[s] * xr[s - (K - 1) + j];
      }
      dw[c * K + j] += acc;
    }
}

} // namespace mtrt::cpu
