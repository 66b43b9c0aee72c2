//===- AsyncCopy.cuh - copies to shared memory that do not wait --*- C++
//-*-===//
//
// PTX `cp.async` (sm_80 and later): a thread starts 16-byte copies from
// global to shared memory and goes on; `commit` closes the copies started
// since the last one into a group, `wait<N>` returns once at most the newest
// N groups are still in flight. A kernel stages the next tile this way while
// it computes on the current one. The emulated build lands a copy only at
// the wait that covers it (CudaEmulator.h), so a read before its wait sees
// stale bytes there too, and a missing wait fails the kernel tests.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_ASYNCCOPY_CUH
#define MEGATRAIN_RUNTIME_CUDA_ASYNCCOPY_CUH

#include "runtime/cuda/CudaCompat.h"

#include <cstdint>

namespace mtrt::MT_KNS::async {

/// Starts copying 16 bytes; both addresses 16-byte aligned.
__device__ __forceinline__ void copy16(void *shared_dst, const void *src) {
#ifdef MEGATRAIN_CUDA_EMULATION
  emu::copy_async(shared_dst, src, 16);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr),
               "l"(src)
               : "memory");
#endif
}

/// Starts copying 4 bytes (one float); both addresses 4-byte aligned.
/// Through L1 (`.ca`): the only way for copies under 16 bytes.
__device__ __forceinline__ void copy4(void *shared_dst, const void *src) {
#ifdef MEGATRAIN_CUDA_EMULATION
  emu::copy_async(shared_dst, src, 4);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(addr),
               "l"(src)
               : "memory");
#endif
}

/// Closes the copies started since the last commit into a group.
__device__ __forceinline__ void commit() {
#ifdef MEGATRAIN_CUDA_EMULATION
  emu::async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Returns once at most the newest N committed groups are in flight: the
/// calling thread's older copies have landed (a barrier then shows them to
/// the block).
template <int N> __device__ __forceinline__ void wait() {
#ifdef MEGATRAIN_CUDA_EMULATION
  emu::async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

} // namespace mtrt::MT_KNS::async

#endif // MEGATRAIN_RUNTIME_CUDA_ASYNCCOPY_CUH
