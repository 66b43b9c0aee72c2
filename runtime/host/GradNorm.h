//===- GradNorm.h - Deterministic global gradient norm -------*- C++ -*-===//
//
// The global L2 norm over all gradient buffers, for clipping. The result is
// the same bit for bit on every run, thread count and SIMD path: each buffer
// is cut into fixed chunks, each chunk is summed in double over a fixed lane
// layout (a float's square is exact in double), and the chunk sums are added
// in buffer order, then chunk order, on one thread.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_HOST_GRADNORM_H
#define MEGATRAIN_RUNTIME_HOST_GRADNORM_H

#include "runtime/host/CpuFeatures.h"

#include <cstddef>
#include <cstdint>

namespace mtrt::host {

class ThreadPool;

struct GradSpan {
  const float *data;
  int64_t n;
};
// A bf16 gradient accumulator's span (bf16 bits).
struct GradSpanBf16 {
  const uint16_t *data;
  int64_t n;
};

// Sum of squares of all elements of spans[0..count), in double. A sum (not
// the norm) so that shards' contributions can be added before the sqrt.
// Null pool: all on the calling thread. NaN or Inf anywhere propagates.
double grad_sum_squares(const GradSpan *spans, size_t count, ThreadPool *pool);
// The same on a chosen SIMD path; throws std::invalid_argument if this CPU
// lacks it. Gives the same bits as the default path.
double grad_sum_squares(const GradSpan *spans, size_t count, ThreadPool *pool,
                        SimdPath path);

// The same over bf16 spans.
double grad_sum_squares(const GradSpanBf16 *spans, size_t count,
                        ThreadPool *pool);
double grad_sum_squares(const GradSpanBf16 *spans, size_t count,
                        ThreadPool *pool, SimdPath path);

// sqrt(grad_sum_squares(...)).
double global_grad_norm(const GradSpan *spans, size_t count, ThreadPool *pool);

} // namespace mtrt::host

#endif // MEGATRAIN_RUNTIME_HOST_GRADNORM_H
