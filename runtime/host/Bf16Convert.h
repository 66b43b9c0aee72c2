//===- Bf16Convert.h - fp32 to bf16: packs, bf16 accumulators ---*- C++ -*-===//
//
// The host packs each unit's fp32 master weights as bf16 into pinned staging
// before every transfer to the device: twice a step over the whole model.
// With bf16 masters it adds each landed fp32 gradient into a bf16
// accumulator. A per-element loop converts at a few GB/s a core, below the
// memory's rate; the vector paths here keep both memory-bound. Every path
// gives bf16_nearest's bits (round to nearest even, NaN kept quiet).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_HOST_BF16CONVERT_H
#define MEGATRAIN_RUNTIME_HOST_BF16CONVERT_H

#include "runtime/host/CpuFeatures.h"

#include <cstdint>

namespace mtrt::host {

/// dst[k] = bf16_nearest(src[k]) for k in [0, n), on the widest path.
void to_bf16_nearest(uint16_t *dst, const float *src, int64_t n);
/// The same on a chosen path; throws std::invalid_argument if this CPU
/// lacks it.
void to_bf16_nearest(uint16_t *dst, const float *src, int64_t n, SimdPath path);

/// acc[k] = bf16_nearest(widened acc[k] + g[k]) for k in [0, n): one IEEE
/// float add, then the rounding; on the widest path.
void add_to_bf16(uint16_t *acc, const float *g, int64_t n);
/// The same on a chosen path; throws std::invalid_argument if this CPU
/// lacks it.
void add_to_bf16(uint16_t *acc, const float *g, int64_t n, SimdPath path);

} // namespace mtrt::host

#endif // MEGATRAIN_RUNTIME_HOST_BF16CONVERT_H
