//===- MockCuda.h - the CUDA runtime calls we use, on CPU threads -*- C++
//-*-===//
//
// For the emulated build only (MEGATRAIN_CUDA_EMULATION): the subset of the
// CUDA runtime API that CudaKernels and CudaBackend call, with CUDA's
// semantics on the CPU, so that the backend's stream, event and copy logic
// runs in tests on machines without a GPU:
//
//  - a stream is a worker thread running its operations in order; the null
//    stream runs them at once, on the caller;
//  - an event record captures (stream, operations enqueued so far); a wait
//    or a synchronize on it waits for that many to complete, whatever is
//    recorded later (CUDA's "most recent record at the time of the call");
//  - device memory is host memory; async copies, memsets, frees, host
//    functions and kernels (CudaCompat.h's launch_kernel) are operations.
//
// Every call succeeds. Not a model of the hardware's timing. With
// MEGATRAIN_MOCK_CUDA_SYNC set, streams run operations at once on the
// caller: a result that changes with it points at missing ordering.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_MOCKCUDA_H
#define MEGATRAIN_RUNTIME_CUDA_MOCKCUDA_H

#include <cstddef>
#include <cstdint>
#include <functional>

namespace mtrt::cudaemu {

struct MockStream;
struct MockEvent;
using cudaStream_t = MockStream *;
using cudaEvent_t = MockEvent *;
using cudaHostFn_t = void (*)(void *);
#define CUDART_CB

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1,
                   cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocPortable = 1;

struct cudaDeviceProp {
  char name[256];
  int major, minor;
  size_t totalGlobalMem;
  int multiProcessorCount;
};

const char *cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                            cudaStream_t st);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);

/// Runs op in order on the stream (at once on the null stream).
void mock_enqueue(cudaStream_t s, std::function<void()> op);

} // namespace mtrt::cudaemu

#endif // MEGATRAIN_RUNTIME_CUDA_MOCKCUDA_H
