//===- CudaCompat.h - what the kernel files use of CUDA -----------*- C++
//-*-===//
//
// The kernel sources (*.cu) and the backend are compiled two ways: by nvcc
// (and the host compiler) for the GPU, and, with MEGATRAIN_CUDA_EMULATION,
// by the host compiler against a small emulator (CudaEmulator.h: each
// block's threads as coroutines) and a CPU model of the runtime calls used
// (MockCuda.h: streams as threads, events, copies). The emulated build is
// what checks the kernels' indexing and math and the backend's ordering on
// machines without a GPU; kernels may use only __syncthreads, __syncwarp,
// __shfl_xor_sync over full warps, the warp MMA of Mma.cuh, the asynchronous
// copies of AsyncCopy.cuh, static __shared__ arrays and MT_DYNAMIC_SHARED.
//
// Everything lives in namespace mtrt::MT_KNS: `cuda` for the real build,
// `cudaemu` for the emulated one, so both can link into one test.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_CUDACOMPAT_H
#define MEGATRAIN_RUNTIME_CUDA_CUDACOMPAT_H

#include <cstdint>
#include <cstring>

#ifdef MEGATRAIN_CUDA_EMULATION

#include "runtime/cuda/CudaEmulator.h"
#include "runtime/cuda/MockCuda.h"

#include <cmath>
#include <cstdlib>

#define MT_KNS cudaemu
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

namespace mtrt::cudaemu {

using emu::blockDim;
using emu::blockIdx;
using emu::dim3;
using emu::gridDim;
using emu::threadIdx;

/// bf16 as its 16 bits; conversions round to nearest even like the GPU's.
struct bf16 {
  uint16_t bits;
};
inline float bf2f(bf16 v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline bf16 f2bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return {uint16_t((u | 0x00400000u) >> 16)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}

inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp() { emu::sync_warp(); }
inline float __shfl_xor_sync(unsigned, float v, int mask) {
  return emu::shfl_xor(v, mask);
}
inline double __shfl_xor_sync(unsigned, double v, int mask) {
  return emu::shfl_xor(v, mask);
}
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __int_as_float(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
/// 2^x as the GPU's `ex2.approx.ftz` gives it: results below the
/// smallest normal float flush to zero.
inline float exp2_approx(float x) {
  const float r = std::exp2(x);
  return r < 0x1p-126f ? 0.f : r;
}

/// Runs kernel(args...) over the grid, blocks one after another, in order
/// on the stream (at once on the null stream).
template <class... P, class... A>
void launch_kernel(const char *, void (*kernel)(P...), dim3 grid, dim3 block,
                   cudaStream_t stream, A &&...args) {
  mock_enqueue(stream,
               [=] { emu::run_grid(grid, block, [&] { kernel(args...); }); });
}
/// The same with `shared_bytes` of dynamic shared memory per block.
template <class... P, class... A>
void launch_kernel_shared(const char *, void (*kernel)(P...), dim3 grid,
                          dim3 block, size_t shared_bytes, cudaStream_t stream,
                          A &&...args) {
  mock_enqueue(stream, [=] {
    emu::run_grid(
        grid, block, [&] { kernel(args...); }, shared_bytes);
  });
}

} // namespace mtrt::cudaemu

#else // the real thing, under nvcc

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define MT_KNS cuda

namespace mtrt::cuda {

using bf16 = __nv_bfloat16;
__device__ __forceinline__ float bf2f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 f2bf(float f) { return __float2bfloat16_rn(f); }

/// 2^x in one instruction (`ex2.approx.ftz`: about 2 ulp, results below the
/// smallest normal float flushed to zero, 2^-inf = 0). exp2f instead tests
/// each argument against the subnormal range and rescales around it: five
/// more instructions an exponential, and the predicates spill into
/// registers in a loop of many.
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

/// Throws Error naming the kernel when its launch failed.
void check_launch(const char *kernel);

template <class... P, class... A>
void launch_kernel(const char *name, void (*kernel)(P...), dim3 grid,
                   dim3 block, cudaStream_t stream, A &&...args) {
  kernel<<<grid, block, 0, stream>>>(static_cast<P>(args)...);
  check_launch(name);
}
/// The same with `shared_bytes` of dynamic shared memory per block; over
/// 48 KiB the kernel must opt in first (a failure surfaces as the launch's).
template <class... P, class... A>
void launch_kernel_shared(const char *name, void (*kernel)(P...), dim3 grid,
                          dim3 block, size_t shared_bytes, cudaStream_t stream,
                          A &&...args) {
  if (shared_bytes > 48 * 1024)
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         int(shared_bytes));
  kernel<<<grid, block, shared_bytes, stream>>>(static_cast<P>(args)...);
  check_launch(name);
}

} // namespace mtrt::cuda

#endif

/// The block's dynamic shared memory as `unsigned char name[]`, 16-byte
/// aligned.
#ifdef MEGATRAIN_CUDA_EMULATION
#define MT_DYNAMIC_SHARED(name) unsigned char *name = emu::dynamic_shared()
#else
#define MT_DYNAMIC_SHARED(name)                                                \
  extern __shared__ __align__(16) unsigned char name[]
#endif

/// Launches a kernel by name: LAUNCH(kernel, grid, block, stream, args...).
#define MT_LAUNCH(kernel, grid, block, stream, ...)                            \
  launch_kernel(#kernel, kernel, grid, block, stream, __VA_ARGS__)

#endif // MEGATRAIN_RUNTIME_CUDA_CUDACOMPAT_H
