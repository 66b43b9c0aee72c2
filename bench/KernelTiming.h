//===- KernelTiming.h - timing CUDA kernel calls for the benchmarks -*- C++
//-*-===//
//
// What the kernel benchmarks (attention_bench, attention_tiles_bench,
// moe_bench) share: their command line, CUDA errors as a clean exit, a
// stream on the device, the median time of repeated calls on it, a
// finiteness check of a bf16 result and the JSON file of their rows.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_BENCH_KERNELTIMING_H
#define MEGATRAIN_BENCH_KERNELTIMING_H

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

/// A kernel benchmark's command line: --json FILE and --iters N for every
/// one; --shape TEXT, --tensor-cores-only and --cudnn-device FILE where its
/// usage names them.
struct Options {
  std::string json, shape, cudnn_device;
  int iters = 5;
  bool tensor_cores_only = false;
};

/// Reads argv into `o` by `usage` (the benchmark's usage line, which says
/// what it takes); false, after the usage line and the reason on stderr,
/// for anything else or an --iters below 1.
inline bool parse_options(int argc, char **argv, const char *usage,
                          Options &o) {
  auto named = [&](const char *flag) {
    return std::strstr(usage, flag) != nullptr;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--json" && value) {
      o.json = argv[++i];
    } else if (a == "--iters" && value) {
      o.iters = std::atoi(argv[++i]);
    } else if (a == "--shape" && value && named("--shape")) {
      o.shape = argv[++i];
    } else if (a == "--cudnn-device" && value && named("--cudnn-device")) {
      o.cudnn_device = argv[++i];
    } else if (a == "--tensor-cores-only" && named("--tensor-cores-only")) {
      o.tensor_cores_only = true;
    } else {
      std::fprintf(stderr, "usage: %s\nerror: unknown argument '%s'\n", usage,
                   argv[i]);
      return false;
    }
  }
  if (o.iters < 1) {
    std::fprintf(stderr, "usage: %s\nerror: --iters must be at least 1\n",
                 usage);
    return false;
  }
  return true;
}

inline void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

/// A non-blocking stream on the CUDA device; a clean exit where there is
/// none.
inline cudaStream_t device_stream() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "error: no CUDA device\n");
    std::exit(1);
  }
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  return stream;
}

/// Writes `rows` (JSON objects, comma-separated) to path as one array;
/// false, said on stderr, where the file cannot be written.
inline bool write_rows(const std::string &path, const std::string &rows) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    return false;
  }
  std::fprintf(f, "[%s]\n", rows.c_str());
  return std::fclose(f) == 0;
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
