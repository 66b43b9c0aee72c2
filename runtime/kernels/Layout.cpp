//===- Layout.cpp - transpose and slice -----------------------------------===//

#include "runtime/kernels/Kernels.h"
#include "runtime/kernels/Strided.h"

#include <algorithm>

namespace mtrt::cpu {
namespace {

constexpr int kY = 0, kX = 1;

// The index space of y, with x's strides permuted onto it.
StridedSpace transpose_space(const int64_t *x_shape, const int64_t *perm,
                             int rank) {
  int64_t x_stride[kMaxRank];
  for (int64_t d = rank - 1, contiguous = 1; d >= 0; --d) {
    x_stride[d] = contiguous;
    contiguous *= x_shape[d];
  }
  StridedSpace s;
  s.rank = rank;
  for (int64_t d = rank - 1, contiguous = 1; d >= 0; --d) {
    s.shape[d] = x_shape[perm[d]];
    s.stride[kY][d] = contiguous;
    s.stride[kX][d] = x_stride[perm[d]];
    contiguous *= s.shape[d];
  }
  coalesce(s);
  return s;
}

} // namespace

void transpose_forward(float *y, const float *x, const int64_t *x_shape,
                       const int64_t *perm, int rank) {
  const StridedSpace s = transpose_space(x_shape, perm, rank);
  const int64_t n = numel(s), sx = s.stride[kX][s.rank - 1];
  const int64_t chunks = walk_chunks(n);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    walk(s, c * kWalkChunk, std::min(n, (c + 1) * kWalkChunk),
         [&](const int64_t *off, int64_t len) {
           float *yr = y + off[kY];
           const float *xr = x + off[kX];
           for (int64_t t = 0; t < len; ++t)
             yr[t] = xr[t * sx];
         });
}

void transpose_backward(float *dx, const float *dy, const int64_t *x_shape,
                        const int64_t *perm, int rank) {
  // A permutation: every dx element receives exactly one dy element, so the
  // chunks never collide.
  const StridedSpace s = transpose_space(x_shape, perm, rank);
  const int64_t n = numel(s), sx = s.stride[kX][s.rank - 1];
  const int64_t chunks = walk_chunks(n);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    walk(s, c * kWalkChunk, std::min(n, (c + 1) * kWalkChunk),
         [&](const int64_t *off, int64_t len) {
           float *dxr = dx + off[kX];
           const float *g = dy + off[kY];
           for (int64_t t = 0; t < len; ++t)
             dxr[t * sx] += g[t];
         });
}

void slice_forward(float *y, const float *x, int64_t outer, int64_t dim,
                   int64_t inner, int64_t start, int64_t n) {
  // Each outer index holds one contiguous block of n·inner in both.
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    const float *src = x + (o * dim + start) * inner;
    std::copy(src, src + n * inner, y + o * n * inner);
  }
}

void slice_backward(float *dx, const float *dy, int64_t outer, int64_t dim,
                    int64_t inner, int64_t start, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    float *dst = dx + (o * dim + start) * inner;
    const float *g = dy + o * n * inner;
    for (int64_t i = 0; i < n * inner; ++i)
      dst[i] += g[i];
  }
}

} // namespace mtrt::cpu
