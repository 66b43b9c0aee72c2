//===- AdamW.h - Host AdamW update -----------------------------*- C++ -*-===//
//
// torch.optim.AdamW (decoupled weight decay, bias correction), applied to one
// contiguous range of fp32 master weights and moments, typically a streaming
// unit's, as soon as its gradient has landed. Per element, at step t >= 1:
//
//   g = grad * grad_scale
//   p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// Numerics: the per-call constants are computed in double and rounded to
// float once; every element then takes the same float operations, in torch's
// order, without FMA contraction. Hence the scalar, AVX2 and AVX-512 paths and
// every thread count give bitwise-equal results, and a step is within a few
// ulps of the same step done in exact arithmetic. On x86 the update runs with
// denormals flushed to zero (values below FLT_MIN, which cannot move a weight
// but cost 10-25x per element); torch keeps them, so results differ from
// torch's where a moment or a weight falls below 1.2e-38.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_HOST_ADAMW_H
#define MEGATRAIN_RUNTIME_HOST_ADAMW_H

#include "runtime/host/CpuFeatures.h"

#include <cstdint>

namespace mtrt::host {

class ThreadPool;

// Defaults are torch.optim.AdamW's. Double, as Python passes them to torch.
struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  int64_t step = 1; // the step being taken, counted from 1
};

// Updates param, m and v in place from grad over n elements. grad_scale folds
// in gradient clipping and 1/accumulation count (1 when unused). Null pool:
// all on the calling thread. Buffers need no particular alignment and must
// not overlap. Throws std::invalid_argument on a step < 1 or n < 0.
void adamw_update(float *param, float *m, float *v, const float *grad,
                  int64_t n, const AdamWHyper &hyper, float grad_scale,
                  ThreadPool *pool);

// The same, on a chosen SIMD path; throws std::invalid_argument if this CPU
// lacks it. For tests and benchmarks.
void adamw_update(float *param, float *m, float *v, const float *grad,
                  int64_t n, const AdamWHyper &hyper, float grad_scale,
                  ThreadPool *pool, SimdPath path);

// bf16 master weights (12 B/param of state): param and grad hold bf16 bits,
// m and v stay fp32. The update is the fp32 one above on param and grad
// widened to float; the new weight is rounded back to bf16 stochastically
// (up with probability equal to the fraction dropped), so updates smaller
// than half a bf16 ulp still move the weight in expectation instead of
// being lost. The rounding noise is a hash of (noise_key, index0 + k) for
// element k: the same bits on every path, thread count and split, and a
// new draw per step when the caller changes the key each step.
void adamw_update_bf16(uint16_t *param, float *m, float *v,
                       const uint16_t *grad, int64_t n,
                       const AdamWHyper &hyper, float grad_scale,
                       uint32_t noise_key, uint32_t index0, ThreadPool *pool);
void adamw_update_bf16(uint16_t *param, float *m, float *v,
                       const uint16_t *grad, int64_t n,
                       const AdamWHyper &hyper, float grad_scale,
                       uint32_t noise_key, uint32_t index0, ThreadPool *pool,
                       SimdPath path);

} // namespace mtrt::host

#endif // MEGATRAIN_RUNTIME_HOST_ADAMW_H
