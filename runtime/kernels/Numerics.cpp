//===- Numerics.cpp - bf16 rounding and sums of squares -------------------===//

#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mtrt::cpu {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

float to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: quiet it so truncation keeps
    return float_of((u | 0x00400000u) & 0xffff0000u); // a mantissa bit
  // Adding 0x7fff plus the kept lsb rounds half to even; the carry may roll
  // into the exponent, which is the right answer (up to infinity).
  u += 0x7fffu + ((u >> 16) & 1u);
  return float_of(u & 0xffff0000u);
}

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
