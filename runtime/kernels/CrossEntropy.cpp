//===- CrossEntropy.cpp - softmax cross-entropy against integer targets ---===//

#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mtrt::cpu {
namespace {

struct RowSoftmax {
  float max;
  double sum; // Σ exp(logit - max)
};

// Subtracting the row max keeps every exp in (0, 1].
RowSoftmax row_softmax(const float *logits, int64_t V) {
  const float max = *std::max_element(logits, logits + V);
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j)
    sum += std::exp(logits[j] - max);
  return {max, sum};
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
                            float dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *row = logits + n * V;
    float *drow = dlogits + n * V;
    const RowSoftmax sm = row_softmax(row, V);
    const float coef = float(dloss / sm.sum);
    for (int64_t j = 0; j < V; ++j)
      drow[j] += coef * std::exp(row[j] - sm.max);
    drow[targets[n]] -= dloss;
  }
}

} // namespace mtrt::cpu
