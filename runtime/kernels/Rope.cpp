//===- Rope.cpp - rotary position embedding, half or interleaved pairs ----===//

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

// The dims (a, b) of rotated pair i.
struct Pair {
  int64_t a, b;
};
Pair pair(int64_t i, int64_t R, bool interleaved) {
  return interleaved ? Pair{2 * i, 2 * i + 1} : Pair{i, i + R / 2};
}

} // namespace

void rope_forward(float *y, const float *x, const float *cos, const float *sin,
                  int64_t B, int64_t H, int64_t S, int64_t D, int64_t R,
                  int seq_axis, bool interleaved) {
  for_each_row(B, H, S, D, seq_axis, [&](int64_t offset, int64_t s) {
    const float *xr = x + offset, *c = cos + s * R, *sn = sin + s * R;
    float *yr = y + offset;
    for (int64_t i = 0; i < R / 2; ++i) {
      const auto [a, b] = pair(i, R, interleaved);
      yr[a] = xr[a] * c[a] - xr[b] * sn[a];
      yr[b] = xr[b] * c[b] + xr[a] * sn[b];
    }
    std::copy(xr + R, xr + D, yr + R);
  });
}

void rope_backward(float *dx, const float *dy, const float *cos,
                   const float *sin, int64_t B, int64_t H, int64_t S, int64_t D,
                   int64_t R, int seq_axis, bool interleaved, bool accumulate) {
  // The rotation's transpose: each output pair feeds back through the same
  // cos/sin entries it was produced with.
  for_each_row(B, H, S, D, seq_axis, [&](int64_t offset, int64_t s) {
    const float *g = dy + offset, *c = cos + s * R, *sn = sin + s * R;
    float *dxr = dx + offset;
    for (int64_t i = 0; i < R / 2; ++i) {
      const auto [a, b] = pair(i, R, interleaved);
      const float va = g[a] * c[a] + g[b] * sn[b];
      const float vb = g[b] * c[b] - g[a] * sn[a];
      dxr[a] = accumulate ? dxr[a] + va : va;
      dxr[b] = accumulate ? dxr[b] + vb : vb;
    }
    for (int64_t i = R; i < D; ++i)
      dxr[i] = accumulate ? dxr[i] + g[i] : g[i];
  });
}

} // namespace mtrt::cpu
