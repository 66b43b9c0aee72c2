//===- Rope.cpp - rotary position embedding, rotate-half form -------------===//

#include "runtime/kernels/Kernels.h"

#include <algorithm>

namespace mtrt::cpu {
namespace {

// Calls row(offset, s) for every D-vector of x: its element offset and its
// sequence position, for both layouts.
template <class Row>
void for_each_row(int64_t B, int64_t H, int64_t S, int64_t D, int seq_axis,
                  Row row) {
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t offset = seq_axis == 2
                                   ? ((b * H + h) * S + s) * D  // (B, H, S, D)
                                   : ((b * S + s) * H + h) * D; // (B, S, H, D)
        row(offset, s);
      }
}

} // namespace

void rope_forward(float *y, const float *x, const float *cos, const float *sin,
                  int64_t B, int64_t H, int64_t S, int64_t D, int64_t R,
                  int seq_axis) {
  const int64_t half = R / 2;
  for_each_row(B, H, S, D, seq_axis, [&](int64_t offset, int64_t s) {
    const float *xr = x + offset, *c = cos + s * R, *sn = sin + s * R;
    float *yr = y + offset;
    for (int64_t i = 0; i < half; ++i) {
      yr[i] = xr[i] * c[i] - xr[i + half] * sn[i];
      yr[i + half] = xr[i + half] * c[i + half] + xr[i] * sn[i + half];
    }
    std::copy(xr + R, xr + D, yr + R);
  });
}

void rope_backward(float *dx, const float *dy, const float *cos,
                   const float *sin, int64_t B, int64_t H, int64_t S, int64_t D,
                   int64_t R, int seq_axis) {
  // The rotation's transpose: each output pair feeds back through the same
  // cos/sin entries it was produced with.
  const int64_t half = R / 2;
  for_each_row(B, H, S, D, seq_axis, [&](int64_t offset, int64_t s) {
    const float *g = dy + offset, *c = cos + s * R, *sn = sin + s * R;
    float *dxr = dx + offset;
    for (int64_t i = 0; i < half; ++i) {
      dxr[i] += g[i] * c[i] + g[i + half] * sn[i + half];
      dxr[i + half] += g[i + half] * c[i + half] - g[i] * sn[i];
    }
    for (int64_t i = R; i < D; ++i)
      dxr[i] += g[i];
  });
}

} // namespace mtrt::cpu
