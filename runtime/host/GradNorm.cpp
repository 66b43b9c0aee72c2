//===- GradNorm.cpp - Deterministic global gradient norm ------------------===//

#include "runtime/host/GradNorm.h"

#include "runtime/host/OptimizerKernels.h"
#include "runtime/host/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace mtrt::host {

namespace {
// Fixed, independent of the thread count: it decides the summation order.
// A multiple of the lane count so every chunk starts on lane 0.
constexpr int64_t kChunk = 1 << 16;
static_assert(kChunk % detail::kSumSquaresLanes == 0);

template <class T>
using SumSquaresKernel = void (*)(const T *, int64_t, double *);

SumSquaresKernel<float> kernel_for(SimdPath path, const float *) {
  switch (path) {
  case SimdPath::Avx512:
    return detail::sum_squares_avx512;
  case SimdPath::Avx2:
    return detail::sum_squares_avx2;
  case SimdPath::Scalar:
    break;
  }
  return detail::sum_squares_scalar;
}

SumSquaresKernel<uint16_t> kernel_for(SimdPath path, const uint16_t *) {
  switch (path) {
  case SimdPath::Avx512:
    return detail::sum_squares_bf16_avx512;
  case SimdPath::Avx2:
    return detail::sum_squares_bf16_avx2;
  case SimdPath::Scalar:
    break;
  }
  return detail::sum_squares_bf16_scalar;
}

// Lanes folded pairwise in a fixed tree.
double fold_lanes(double *lanes) {
  for (int width = detail::kSumSquaresLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j)
      lanes[j] += lanes[j + width];
  return lanes[0];
}

// Spans of float (GradSpan) or bf16 bits (GradSpanBf16).
template <class Span>
double sum_squares(const Span *spans, size_t count, ThreadPool *pool,
                   SimdPath path) {
  if (!simd_path_supported(path))
    throw std::invalid_argument(std::string("error: this CPU cannot run the ") +
                                simd_path_name(path) + " grad-norm path");
  using T = std::remove_const_t<std::remove_pointer_t<decltype(Span::data)>>;
  struct Chunk {
    const T *data;
    int64_t n;
  };
  std::vector<Chunk> chunks;
  for (size_t s = 0; s < count; ++s) {
    if (spans[s].n < 0)
      throw std::invalid_argument("error: gradient span " + std::to_string(s) +
                                  " has a negative length");
    for (int64_t lo = 0; lo < spans[s].n; lo += kChunk)
      chunks.push_back({spans[s].data + lo, std::min(kChunk, spans[s].n - lo)});
  }

  std::vector<double> partial(chunks.size());
  const SumSquaresKernel<T> kernel = kernel_for(path, static_cast<const T *>(nullptr));
  auto part = [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double lanes[detail::kSumSquaresLanes] = {};
      kernel(chunks[c].data, chunks[c].n, lanes);
      partial[c] = fold_lanes(lanes);
    }
  };
  int64_t num_chunks = static_cast<int64_t>(chunks.size());
  if (pool)
    pool->parallel_for(num_chunks, 1, part);
  else
    part(0, num_chunks);

  double sum = 0.0;
  for (double p : partial)
    sum += p;
  return sum;
}
} // namespace

double grad_sum_squares(const GradSpan *spans, size_t count, ThreadPool *pool) {
  return sum_squares(spans, count, pool, active_simd_path());
}

double grad_sum_squares(const GradSpan *spans, size_t count, ThreadPool *pool,
                        SimdPath path) {
  return sum_squares(spans, count, pool, path);
}

double grad_sum_squares(const GradSpanBf16 *spans, size_t count,
                        ThreadPool *pool) {
  return sum_squares(spans, count, pool, active_simd_path());
}

double grad_sum_squares(const GradSpanBf16 *spans, size_t count,
                        ThreadPool *pool, SimdPath path) {
  return sum_squares(spans, count, pool, path);
}

double global_grad_norm(const GradSpan *spans, size_t count, ThreadPool *pool) {
  return std::sqrt(grad_sum_squares(spans, count, pool));
}

} // namespace mtrt::host
