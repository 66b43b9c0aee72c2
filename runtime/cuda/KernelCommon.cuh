//===- KernelCommon.cuh - helpers shared by the kernel files ------*- C++
//-*-===//
//
// Warp and block reductions (fixed shuffle trees: deterministic), launch
// sizes and the bf16 accumulate-store every backward kernel does.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_KERNELCOMMON_CUH
#define MEGATRAIN_RUNTIME_CUDA_KERNELCOMMON_CUH

#include "runtime/cuda/CudaCompat.h"
#include "runtime/cuda/CudaKernels.h"

#include <algorithm>
#include <cstdint>

namespace mtrt::MT_KNS {

constexpr int kThreads = 256; // threads per block of the 1-d kernels

/// Blocks for a grid-stride loop over n elements.
inline unsigned blocks_for(int64_t n, int64_t per_block = kThreads) {
  int64_t b = (n + per_block - 1) / per_block;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(b, 1 << 16)));
}

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__host__ __device__ __forceinline__ int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

__device__ __forceinline__ int64_t global_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() {
  return int64_t(gridDim.x) * blockDim.x;
}

__host__ __device__ __forceinline__ const bf16 *B(const void *p) {
  return static_cast<const bf16 *>(p);
}
__host__ __device__ __forceinline__ bf16 *B(void *p) {
  return static_cast<bf16 *>(p);
}

/// x[i] += v in storage: f32 add, one rounding.
__device__ __forceinline__ void add_store(bf16 *x, int64_t i, float v) {
  x[i] = f2bf(bf2f(x[i]) + v);
}

/// x[i] = v, or x[i] += v where accumulate (a kernel's write flag).
__device__ __forceinline__ void write_or_add(bf16 *x, int64_t i, float v,
                                             bool accumulate) {
  x[i] = f2bf(accumulate ? bf2f(x[i]) + v : v);
}

__device__ __forceinline__ float quiet_nan() {
  return __int_as_float(0x7fc00000);
}

/// Sum over the 32 lanes of a warp; every lane gets the result. All lanes
/// must call it.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
/// thread gets the result. All threads must call it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < warps ? part[lane] : 0.f;
    t = warp_sum(t);
    if (lane == 0)
      part[0] = t;
  }
  __syncthreads();
  const float r = part[0];
  __syncthreads(); // part may be reused by the next call
  return r;
}
__device__ __forceinline__ float block_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < warps ? part[lane] : -INFINITY;
    t = warp_max(t);
    if (lane == 0)
      part[0] = t;
  }
  __syncthreads();
  const float r = part[0];
  __syncthreads();
  return r;
}

/// Column sums in two passes with no atomics: pass 1 sums each chunk of
/// rows of each column in row order (kernel column_partials), pass 2 adds
/// the chunks in order into the f32 output (column_finish). Values come
/// from a functor f(m, j) evaluated in f32.
constexpr int kColTile = 32, kColRows = 8;

template <class F>
__global__ void __launch_bounds__(kColTile *kColRows)
    column_partials(float *partials, int64_t M, int64_t D,
                    int64_t rows_per_chunk, F f) {
  __shared__ float tile[kColRows][kColTile + 1];
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  const int64_t j = int64_t(blockIdx.x) * kColTile + tx;
  const int64_t m0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t m1 = min64(M, m0 + rows_per_chunk);
  float acc = 0.f;
  if (j < D)
    for (int64_t m = m0 + ty; m < m1; m += kColRows)
      acc += f(m, j);
  tile[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && j < D) {
    float s = 0.f;
    for (int r = 0; r < kColRows; ++r)
      s += tile[r][tx];
    partials[int64_t(blockIdx.y) * D + j] = s;
  }
}

template <int kUnused = 0>
__global__ void column_finish(float *out, const float *partials, int64_t chunks,
                              int64_t D) {
  for (int64_t j = global_index(); j < D; j += global_stride()) {
    float s = 0.f;
    for (int64_t c = 0; c < chunks; ++c)
      s += partials[c * D + j];
    out[j] += s;
  }
}

/// Chunks of rows for column sums over M rows, and the partials they need.
inline int64_t column_chunks(int64_t M) {
  return std::max<int64_t>(1, std::min<int64_t>((M + 63) / 64, 256));
}

/// out[j] += Σ_m f(m, j) for j < D; `partials` holds column_chunks(M)·D
/// floats.
template <class F>
void column_sums(float *out, float *partials, int64_t M, int64_t D, F f,
                 cudaStream_t stream) {
  if (M <= 0 || D <= 0)
    return;
  const int64_t chunks = column_chunks(M);
  const int64_t rows = (M + chunks - 1) / chunks;
  dim3 grid(unsigned((D + kColTile - 1) / kColTile), unsigned(chunks));
  MT_LAUNCH(column_partials<F>, grid, dim3(kColTile * kColRows), stream,
            partials, M, D, rows, f);
  MT_LAUNCH(column_finish<0>, dim3(blocks_for(D)), dim3(kThreads), stream, out,
            static_cast<const float *>(partials), chunks, D);
}

/// linear's bias gradient, db[j] += Σ_m dy[m, j] (NormKernels.cu).
void linear_bias_grad(float *db, float *partials, const void *dy, int64_t M,
                      int64_t N, void *stream);

} // namespace mtrt::MT_KNS

#endif // MEGATRAIN_RUNTIME_CUDA_KERNELCOMMON_CUH
