//===- Embedding.cpp - token and learned position embeddings --------------===//

#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <limits>

namespace mtrt::cpu {

void embed_forward(float *y, const int32_t *ids, const float *table, int64_t N,
                   int64_t /*V*/, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    std::copy(table + ids[n] * D, table + (ids[n] + 1) * D, y + n * D);
}

void embed_backward(float *dtable, const float *dy, const int32_t *ids,
                    int64_t N, int64_t V, int64_t D) {
  embed_backward_piece(dtable, dy, ids, N, V, D, 0, 1.f);
}

void embed_forward_piece(float *y, const int32_t *ids, const float *table,
                         int64_t N, int64_t Vp, int64_t D, int64_t v0,
                         int64_t V, bool first, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids[n], r = id - v0;
    if (r >= 0 && r < Vp)
      for (int64_t j = 0; j < D; ++j)
        y[n * D + j] = scale * table[r * D + j];
    else if (first && (id < 0 || id >= V))
      std::fill(y + n * D, y + (n + 1) * D,
                std::numeric_limits<float>::quiet_NaN());
  }
}

void embed_backward_piece(float *dtable, const float *dy, const int32_t *ids,
                          int64_t N, int64_t Vp, int64_t D, int64_t v0,
                          float scale) {
  // A repeated id sums several rows of dy into one table row. Tasks own
  // column blocks and walk the tokens in order, so each table entry is summed
  // in token order whatever the thread count or the piece.
  constexpr int64_t kBlock = 64;
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < D; j0 += kBlock) {
    const int64_t cols = std::min(kBlock, D - j0);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = int64_t(ids[n]) - v0;
      if (r < 0 || r >= Vp)
        continue;
      float *row = dtable + r * D + j0;
      const float *g = dy + n * D + j0;
      for (int64_t j = 0; j < cols; ++j)
        row[j] += scale * g[j];
    }
  }
}

void position_embed_forward(float *y, const float *table, int64_t S, int64_t D,
                            int64_t offset) {
  std::copy(table + offset * D, table + (offset + S) * D, y);
}

void position_embed_backward(float *dtable, const float *dy, int64_t S,
                             int64_t D, int64_t offset) {
  float *rows = dtable + offset * D;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < S * D; ++i)
    rows[i] += dy[i];
}

} // namespace mtrt::cpu
