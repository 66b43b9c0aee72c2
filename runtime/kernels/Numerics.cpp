//===- Numerics.cpp - bf16 rounding and sums of squares -------------------===//

#include "runtime/kernels/Kernels.h"

#include "runtime/host/Bf16.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mtrt::cpu {
namespace {

float to_bf16(float f) { return bf16_widen(bf16_nearest(f)); }

// Elements per partial sum: fixed, so the summation order does not depend on
// the thread count.
constexpr int64_t kSumChunk = 1 << 16;

} // namespace

void round_to_bf16(float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kSumChunk)
  for (int64_t i = 0; i < n; ++i)
    x[i] = to_bf16(x[i]);
}

double sum_squares(const float *x, int64_t n) {
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(chunks); // (chunks)
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const float *xc = x + c * kSumChunk;
    const int64_t len = std::min(kSumChunk, n - c * kSumChunk);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < len; ++i)
      sum += double(xc[i]) * xc[i];
    partial[c] = sum;
  }
  double total = 0.0;
  for (double p : partial)
    total += p;
  return total;
}

} // namespace mtrt::cpu
