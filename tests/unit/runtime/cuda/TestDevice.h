//===- TestDevice.h - device memory for the CUDA kernel tests -----*- C++
//-*-===//
//
// The kernel tests are written once and built twice: against the real
// CudaKernels (device memory, a stream; skipped without a GPU) and, with
// MEGATRAIN_CUDA_EMULATION, against the emulated build of the same kernel
// sources (host memory; runs everywhere). This header is the difference.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_TESTS_UNIT_RUNTIME_CUDA_TESTDEVICE_H
#define MEGATRAIN_TESTS_UNIT_RUNTIME_CUDA_TESTDEVICE_H

#include "runtime/cuda/CudaKernels.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#ifndef MEGATRAIN_CUDA_EMULATION
#include <cuda_runtime_api.h>
#endif

namespace mtrt::testdev {

using Kernels = mtrt::MT_KNS::CudaKernels;

#ifdef MEGATRAIN_CUDA_EMULATION

constexpr const char *kName = "emulated";
inline bool ready(std::string *) { return true; }
inline void *alloc(size_t n) { return std::calloc(n ? n : 1, 1); }
inline void release(void *p) { std::free(p); }
inline void upload(void *d, const void *h, size_t n) { std::memcpy(d, h, n); }
inline void download(void *h, const void *d, size_t n) { std::memcpy(h, d, n); }
inline void *make_stream() { return nullptr; }
inline void sync(void *) {}

#else

constexpr const char *kName = "cuda";
inline bool ready(std::string *why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}
inline void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void *alloc(size_t n) {
  void *p = nullptr;
  check(cudaMalloc(&p, n ? n : 1), "cudaMalloc");
  return p;
}
inline void release(void *p) { cudaFree(p); }
inline void upload(void *d, const void *h, size_t n) {
  check(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), "upload");
}
inline void download(void *h, const void *d, size_t n) {
  check(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), "download");
}
inline void *make_stream() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  return s;
}
inline void sync(void *s) {
  check(cudaStreamSynchronize(cudaStream_t(s)), "kernel");
}

#endif

} // namespace mtrt::testdev

#endif // MEGATRAIN_TESTS_UNIT_RUNTIME_CUDA_TESTDEVICE_H
