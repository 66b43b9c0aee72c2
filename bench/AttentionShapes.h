//===- AttentionShapes.h - what the attention benchmarks share ----*- C++
//-*-===//
//
// The shapes attention_bench and attention_tiles_bench time, the pairs a
// shape's mask leaves visible (what TFLOPS count), random bf16 operands and
// the largest difference between two outputs.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_BENCH_ATTENTIONSHAPES_H
#define MEGATRAIN_BENCH_ATTENTIONSHAPES_H

#include "bench/KernelTiming.h"
#include "runtime/kernels/KeyRange.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace bench {

struct Shape {
  const char *name;
  int64_t B, H, Hkv, S, D, window, chunk;
};

// Llama 2 7B, Llama 3 8B (GQA), a 1B-class head dim of 64, a long
// sequence, Mistral's window, Llama 4 Scout's chunks, Gemma's head dim of
// 256 and Gemma 4's full-attention layers (head dim 512, few KV heads).
inline const Shape kShapes[] = {
    {"llama2-7b S4096", 1, 32, 32, 4096, 128, 0, 0},
    {"llama3-8b S4096", 1, 32, 8, 4096, 128, 0, 0},
    {"d64 S4096", 2, 32, 8, 4096, 64, 0, 0},
    {"llama3-8b S16384", 1, 32, 8, 16384, 128, 0, 0},
    {"mistral-7b S16384 W4096", 1, 32, 8, 16384, 128, 4096, 0},
    {"llama4-scout S16384 C8192", 1, 40, 8, 16384, 128, 0, 8192},
    {"gemma-7b S4096", 1, 16, 16, 4096, 256, 0, 0},
    {"gemma4 full-attention S4096", 1, 32, 4, 4096, 512, 0, 0},
};

/// Uniform bf16 in [-1, 1): one host pool, drawn once; each array is a
/// copy of it from another offset.
class RandomPool {
public:
  explicit RandomPool(int64_t n) : h_(size_t(n) + 64) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto &x : h_) {
      const float f = u(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      x = uint16_t(bits >> 16);
    }
  }
  void *device(int64_t n, int offset) const {
    void *d = nullptr;
    check(cudaMalloc(&d, size_t(n) * 2), "cudaMalloc");
    check(cudaMemcpy(d, h_.data() + offset, size_t(n) * 2,
                     cudaMemcpyHostToDevice),
          "upload");
    return d;
  }

private:
  std::vector<uint16_t> h_;
};

/// n bf16 values from the device, as floats.
inline std::vector<float> download(const void *d, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  check(cudaMemcpy(h.data(), d, size_t(n) * 2, cudaMemcpyDeviceToHost),
        "download");
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    const uint32_t bits = uint32_t(h[i]) << 16;
    std::memcpy(&out[i], &bits, 4);
  }
  return out;
}

/// max |a − b| over max |b|; infinite where a has a NaN.
inline double relative_difference(const std::vector<float> &a,
                                  const std::vector<float> &b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline double visible_pairs(int64_t S, const mtrt::KeyRange &range) {
  double pairs = 0;
  for (int64_t i = 0; i < S; ++i)
    pairs += double(i - range.first_key(i) + 1);
  return pairs;
}

} // namespace bench

#endif // MEGATRAIN_BENCH_ATTENTIONSHAPES_H
