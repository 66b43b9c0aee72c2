//===- AttentionCommon.cuh - what both attention kernel families share -*-
// C++ -*-===//
//
// The attention kernels come in two families over the same layouts
// (HeadLayout.h: (B, H, S, D) heads-major or (B, S, H, D) sequence-major,
// each kernel reading and writing a head's rows through their stride),
// grouped KV heads, causal mask with an optional sliding window or chunks
// (KeyRange.h), soft cap, ALiBi and sinks:
//  - AttentionTensorCore.cu: products on tensor cores (Mma.cuh), bf16
//    operands with f32 accumulation, the default;
//  - AttentionKernels.cu: on CUDA cores, all math f32, under
//    AttentionKernels::CudaCores; it also holds the entry points that
//    choose between the two.
// Both take head dims up to 512.
// Both keep O(S) state: no S×S matrix is ever stored.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_ATTENTIONCOMMON_CUH
#define MEGATRAIN_RUNTIME_CUDA_ATTENTIONCOMMON_CUH

#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/kernels/HeadLayout.h"
#include "runtime/kernels/KeyRange.h"

namespace mtrt::MT_KNS::attn {

constexpr int kMaxAlibiHeads = 256;

/// What turns a scaled dot product into a score: the soft cap (none when
/// 0) and per-head ALiBi slopes; heads past `heads` (all of them without
/// ALiBi) have slope 0. `sinks` (a param on the device, or null) gives each
/// head one more logit in every row's softmax, weighing no value: a row's
/// running max starts at it and its running sum at 1 (exp(sink − sink)).
/// Travels by value in the launch parameters.
struct ScoreForm {
  float softcap = 0.f;
  int heads = 0;
  float slope[kMaxAlibiHeads] = {};
  const bf16 *sinks = nullptr;

  __device__ __forceinline__ float slope_of(int64_t h) const {
    return h < heads ? slope[h] : 0.f;
  }
  /// A row's running max before any key: the sink, else -inf.
  __device__ __forceinline__ float first_max(int64_t h) const {
    return sinks ? bf2f(sinks[h]) : -INFINITY;
  }
  /// A row's running sum before any key (for one of the lanes that sum it).
  __device__ __forceinline__ float first_sum(bool counts) const {
    return sinks && counts ? 1.f : 0.f;
  }
  __device__ __forceinline__ float capped(float s) const {
    return softcap > 0.f ? softcap * tanhf(s / softcap) : s;
  }
  /// d capped(s) / ds at c = capped(s): 1 − tanh².
  __device__ __forceinline__ float cap_slope(float c) const {
    if (softcap <= 0.f)
      return 1.f;
    const float t = c / softcap;
    return 1.f - t * t;
  }
};

/// The first key tile (a multiple of `tile`) holding a key that query q0
/// sees: the queries after q0 see no earlier key.
__device__ __forceinline__ int64_t first_key_tile(int64_t q0, KeyRange range,
                                                  int tile) {
  return range.first_key(q0) / tile * tile;
}

/// Rows [i0, i0 + n) of one head's log-sum-exp and delta (row index `base`
/// of the head's first row) into shared arrays, 0 past S; the block's
/// threads share the work.
__device__ __forceinline__ void
stage_row_stats(float *ls, float *ds, const float *lse, const float *delta,
                int64_t base, int64_t i0, int64_t S, int n) {
  for (int ii = threadIdx.x; ii < n; ii += blockDim.x) {
    const bool in = i0 + ii < S;
    ls[ii] = in ? lse[base + i0 + ii] : 0.f;
    ds[ii] = in ? delta[base + i0 + ii] : 0.f;
  }
}

/// dsinks[h] += −Σ_{b,i} exp(sink_h − lse) · δ over head h's rows: the
/// gradient of each head's sink, from the log-sum-exp (sink included) and δ
/// of every row, B·H·S floats each.
void sink_backward(float *dsinks, const bf16 *sinks, const float *lse,
                   const float *delta, int64_t Bn, int64_t H, int64_t S,
                   cudaStream_t stream);

/// The attention kernels on tensor cores (AttentionTensorCore.cu), for head
/// dims up to 512, in either layout. The forward keeps each row's
/// log-sum-exp in lse (B·H·S floats, (B, H, S) in both layouts) unless it is
/// null; the backward reads it back, and attention_delta's δ.

void tensor_core_forward(bf16 *y, float *lse, const bf16 *q, const bf16 *k,
                         const bf16 *v, int64_t Bn, int64_t H, int64_t Hkv,
                         int64_t S, int64_t D, float scale, KeyRange range,
                         const ScoreForm &form, HeadLayout layout,
                         cudaStream_t stream);

/// Given ds_t (B·H·S² bf16, zeroed), the dK/dV pass also writes dSᵀ there
/// (dkdv_kernel's layout) for the caller's dQ GEMM, and no dQ pass runs.
void tensor_core_backward(bf16 *dq, bf16 *dk, bf16 *dv, bf16 *ds_t,
                          const bf16 *dy, const bf16 *q, const bf16 *k,
                          const bf16 *v, const float *delta, const float *lse,
                          int64_t Bn, int64_t H, int64_t Hkv, int64_t S,
                          int64_t D, float scale, KeyRange range,
                          const ScoreForm &form, bool accumulate,
                          HeadLayout layout, cudaStream_t stream);

} // namespace mtrt::MT_KNS::attn

#endif // MEGATRAIN_RUNTIME_CUDA_ATTENTIONCOMMON_CUH
