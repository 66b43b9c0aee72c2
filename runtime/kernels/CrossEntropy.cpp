//===- CrossEntropy.cpp - softmax cross-entropy against integer targets ---===//

#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mtrt::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct RowSoftmax {
  float max;
  double sum; // Σ exp(logit - max)
};

// Subtracting the row max keeps every exp in (0, 1]. An empty row (a piece
// of no entries) gives (-inf, 0), which merges as nothing.
RowSoftmax row_softmax(const float *logits, int64_t V) {
  float max = -INFINITY;
  for (int64_t j = 0; j < V; ++j)
    max = std::max(max, logits[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j)
    sum += std::exp(logits[j] - max);
  return {max, sum};
}

// exp(from - to), the factor that moves a sum of exp(z - from) to the max
// `to` >= from. Equal maxima give 1, so merging while both are still -inf
// (nothing seen yet) gives no exp(-inf + inf) = NaN.
double rescale(float from, float to) {
  return from == to ? 1.0 : std::exp(double(from) - double(to));
}

bool has_nan(const float *stats) {
  return std::isnan(stats[0]) || std::isnan(stats[1]) || std::isnan(stats[2]);
}

} // namespace

double cross_entropy_forward(const float *logits, const int32_t *targets,
                             int64_t N, int64_t V) {
  std::vector<double> loss(N); // (N) per row, summed in row order below
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * V;
    const RowSoftmax sm = row_softmax(row, V);
    // -log softmax[t] = log Σ exp(l - max) + max - l[t]
    loss[n] = std::log(sm.sum) + sm.max - row[targets[n]];
  }
  double total = 0.0;
  for (double l : loss)
    total += l;
  return total;
}

void cross_entropy_backward(float *dlogits, const float *logits,
                            const int32_t *targets, int64_t N, int64_t V,
                            float dloss, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * V;
    float *drow = dlogits + n * V;
    const RowSoftmax sm = row_softmax(row, V);
    const float coef = float(dloss / sm.sum);
    for (int64_t j = 0; j < V; ++j) {
      const float p = coef * std::exp(row[j] - sm.max);
      drow[j] = accumulate ? drow[j] + p : p;
    }
    drow[targets[n]] -= dloss;
  }
}

void cross_entropy_stats(float *stats, const float *logits,
                         const int32_t *targets, int64_t N, int64_t Vp,
                         int64_t v0, int64_t V, bool first) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * Vp;
    float *st = stats + 3 * n; // m, s, t
    const int64_t t = targets[n];
    if (first) {
      st[0] = -INFINITY;
      st[1] = 0.f;
      st[2] = t >= 0 && t < V ? 0.f : kNaN;
    }
    const RowSoftmax piece = row_softmax(row, Vp);
    const float m = std::max(st[0], piece.max);
    st[1] =
        float(st[1] * rescale(st[0], m) + piece.sum * rescale(piece.max, m));
    st[0] = m;
    if (t >= v0 && t < v0 + Vp)
      st[2] = row[t - v0];
  }
}

double cross_entropy_stats_loss(const float *stats, int64_t N) {
  double total = 0.0; // in row order, as cross_entropy_forward sums
  for (int64_t n = 0; n < N; ++n) {
    const float *st = stats + 3 * n;
    total += double(st[0]) - double(st[2]) + std::log(double(st[1]));
  }
  return total;
}

void cross_entropy_backward_piece(float *dlogits, const float *logits,
                                  const int32_t *targets, const float *stats,
                                  int64_t N, int64_t Vp, int64_t v0,
                                  float dloss, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * Vp;
    float *drow = dlogits + n * Vp;
    const float *st = stats + 3 * n;
    if (has_nan(st)) {
      std::fill(drow, drow + Vp, kNaN);
      continue;
    }
    const float coef = float(dloss / double(st[1]));
    for (int64_t j = 0; j < Vp; ++j) {
      const float p = coef * std::exp(row[j] - st[0]);
      drow[j] = accumulate ? drow[j] + p : p;
    }
    const int64_t t = int64_t(targets[n]) - v0;
    if (t >= 0 && t < Vp)
      drow[t] -= dloss;
  }
}

} // namespace mtrt::cpu
