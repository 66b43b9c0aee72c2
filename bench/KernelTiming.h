//===- KernelTiming.h - timing CUDA kernel calls for the benchmarks -*- C++
//-*-===//
//
// What the kernel benchmarks (attention_bench, moe_bench) share: CUDA
// errors as a clean exit, the median time of repeated calls on a stream,
// and a finiteness check of a bf16 result.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_BENCH_KERNELTIMING_H
#define MEGATRAIN_BENCH_KERNELTIMING_H

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace bench {

inline void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// Milliseconds per call of f, the median of `iters` timed calls after one
/// untimed (the upper median for an even count).
template <class F> double time_ms(cudaStream_t stream, int iters, F f) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  f();
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(a, stream), "record");
    f();
    check(cudaEventRecord(b, stream), "record");
    check(cudaEventSynchronize(b), "kernel");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// Whether n bf16 values on the device are all finite.
inline bool all_finite(const void *d, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  check(cudaMemcpy(h.data(), d, size_t(n) * 2, cudaMemcpyDeviceToHost),
        "download");
  for (uint16_t x : h)
    if ((x & 0x7f80u) == 0x7f80u)
      return false;
  return true;
}

} // namespace bench

#endif // MEGATRAIN_BENCH_KERNELTIMING_H
