//===- attention_bench.cpp - the CUDA attention kernels' throughput -------===//
//
// Times CudaKernels::attention_forward and attention_backward on shapes of
// the decoders we train (causal, grouped KV heads, one with a sliding
// window, one in Llama 4's chunks), on tensor cores and on CUDA cores
// (AttentionKernels), and reports TFLOPS the way FlashAttention's benchmarks
// count them: 4·B·H·pairs·D for the forward, 2.5 times that for the backward,
// where pairs is the number of visible (query, key) pairs. (Our backward
// does more, 3.5 times: its dQ pass computes the scores and dY·Vᵀ again.)
// The backward's dQ pass (δ and dQ, with dK and dV not asked for) is timed
// alone too; the dK/dV pass takes the rest.
//
//   attention_bench [--json FILE] [--iters N] [--shape TEXT]
//                   [--tensor-cores-only]
//
// --shape runs only the shapes whose name holds TEXT, and
// --tensor-cores-only leaves out the CUDA-core kernels: together, a short
// run to profile (bench/device_check.sh's profile stage runs it under ncu).
//
// Where cuDNN loads and takes the shape's form (CudnnAttention.h), its
// fused kernels are timed too (its backward runs its forward again first),
// and its forward's output compared with the tensor cores': the largest
// difference, relative to the largest output.
//
// bench/attention_torch.py times PyTorch's scaled_dot_product_attention on
// the shapes this writes to FILE.
//
//===----------------------------------------------------------------------===//

#include "bench/KernelTiming.h"
#include "runtime/cuda/CudaKernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using bench::all_finite;
using bench::check;
using bench::time_ms;

struct Shape {
  const char *name;
  int64_t B, H, Hkv, S, D, window, chunk;
};

// Llama 2 7B, Llama 3 8B (GQA), a 1B-class head dim of 64, a long
// sequence, Mistral's window, Llama 4 Scout's chunks, Gemma's head dim of
// 256 and Gemma 4's full-attention layers (head dim 512, few KV heads).
const Shape kShapes[] = {
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
std::vector<float> download(const void *d, int64_t n) {
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
double relative_difference(const std::vector<float> &a,
                           const std::vector<float> &b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

double visible_pairs(int64_t S, const mtrt::KeyRange &range) {
  double pairs = 0;
  for (int64_t i = 0; i < S; ++i)
    pairs += double(i - range.first_key(i) + 1);
  return pairs;
}

} // namespace

int main(int argc, char **argv) {
  // Rows as they are measured, also into a pipe: a run stopped by a
  // timeout keeps the shapes it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string json, only;
  int iters = 5;
  bool cuda_cores = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (a == "--shape" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--tensor-cores-only") {
      cuda_cores = false;
    } else {
      std::fprintf(stderr,
                   "usage: attention_bench [--json FILE] [--iters N] "
                   "[--shape TEXT] [--tensor-cores-only]\n"
                   "error: unknown argument '%s'\n",
                   argv[i]);
      return 2;
    }
  }
  auto selected = [&](const Shape &s) {
    return only.empty() || std::strstr(s.name, only.c_str()) != nullptr;
  };
  if (std::none_of(std::begin(kShapes), std::end(kShapes), selected)) {
    std::fprintf(stderr, "error: no shape's name holds '%s'\n", only.c_str());
    return 2;
  }
  if (iters < 1) {
    std::fprintf(stderr, "error: --iters must be at least 1\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "error: no CUDA device\n");
    return 1;
  }
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  mtrt::cuda::CudaKernels k;
  k.set_stream(stream);

  std::string cudnn_why;
  const bool cudnn = mtrt::cuda::cudnn_loadable(&cudnn_why);
  if (!cudnn)
    std::fprintf(stderr, "cuDNN's forward not timed: %s\n", cudnn_why.c_str());

  std::printf("| shape | B H Hkv S D W C | fwd ms | fwd TFLOPS | bwd ms "
              "(dQ pass) | bwd TFLOPS | CUDA cores: fwd / bwd TFLOPS | "
              "cuDNN fwd / bwd TFLOPS (fwd diff) |\n"
              "|---|---|---|---|---|---|---|---|\n");
  std::string rows;
  bool ok = true;
  int64_t most = 0;
  for (const Shape &s : kShapes)
    if (selected(s))
      most = std::max(most, s.B * s.H * s.S * s.D);
  const RandomPool pool(most);
  for (const Shape &s : kShapes) {
    if (!selected(s))
      continue;
    const int64_t nq = s.B * s.H * s.S * s.D, nk = s.B * s.Hkv * s.S * s.D;
    void *q = pool.device(nq, 1), *kk = pool.device(nk, 2),
         *v = pool.device(nk, 3), *dy = pool.device(nq, 4);
    void *y = pool.device(nq, 5), *dq = pool.device(nq, 6),
         *dk = pool.device(nk, 7), *dv = pool.device(nk, 8);
    void *delta = nullptr; // f32, one per query row
    check(cudaMalloc(&delta, size_t(nq / s.D) * sizeof(float)), "cudaMalloc");
    const float scale = 1.f / std::sqrt(float(s.D));
    const mtrt::KeyRange range{s.window, s.chunk};
    const double flops =
        4.0 * double(s.B * s.H) * visible_pairs(s.S, range) * double(s.D);
    struct Timing {
      double fwd_ms = 0, bwd_ms = 0, dq_ms = 0, fwd_tflops = 0, bwd_tflops = 0;
      bool finite = true;
    };
    auto measure = [&](mtrt::cuda::AttentionKernels family, int n) {
      k.set_attention_kernels(family);
      Timing t;
      t.fwd_ms = time_ms(stream, n, [&] {
        k.attention_forward(y, q, kk, v, s.B, s.H, s.Hkv, s.S, s.D, scale,
                            range, 0.f, nullptr, nullptr);
      });
      t.finite = all_finite(y, nq);
      // The backward as a step runs it: δ, then the gradients.
      t.bwd_ms = time_ms(stream, n, [&] {
        k.attention_delta(static_cast<float *>(delta), dy, y, nq / s.D, s.D);
        k.attention_backward(
            dq, dk, dv, dy, q, kk, v, static_cast<const float *>(delta), s.B,
            s.H, s.Hkv, s.S, s.D, scale, range, 0.f, nullptr, nullptr, nullptr);
      });
      // The dQ pass alone: no dK or dV asked for.
      t.dq_ms = time_ms(stream, n, [&] {
        k.attention_delta(static_cast<float *>(delta), dy, y, nq / s.D, s.D);
        k.attention_backward(dq, nullptr, nullptr, dy, q, kk, v,
                             static_cast<const float *>(delta), s.B, s.H, s.Hkv,
                             s.S, s.D, scale, range, 0.f, nullptr, nullptr,
                             nullptr);
      });
      t.fwd_tflops = flops / (t.fwd_ms * 1e-3) / 1e12;
      t.bwd_tflops = 2.5 * flops / (t.bwd_ms * 1e-3) / 1e12;
      return t;
    };
    const Timing tc = measure(mtrt::cuda::AttentionKernels::TensorCores, iters);
    // The CUDA-core kernels are slower by far: fewer timed calls.
    const Timing cc = cuda_cores
                          ? measure(mtrt::cuda::AttentionKernels::CudaCores,
                                    std::max(1, iters / 2))
                          : Timing{};
    // cuDNN's beside the tensor cores' (y holds their forward's now).
    char cudnn_cell[96] = "–", cudnn_fwd[32] = "null", cudnn_bwd[32] = "null",
         cudnn_diff[32] = "null";
    if (cudnn && mtrt::cuda::CudnnAttention::takes(s.D, s.window, s.chunk, 0.f,
                                                   false, false)) {
      const std::vector<float> ref = download(y, nq);
      try {
        const Timing cd = measure(mtrt::cuda::AttentionKernels::Cudnn, iters);
        const double diff = relative_difference(download(y, nq), ref);
        std::snprintf(cudnn_cell, sizeof cudnn_cell, "%.1f / %.1f (%.1e)",
                      cd.fwd_tflops, cd.bwd_tflops, diff);
        std::snprintf(cudnn_fwd, sizeof cudnn_fwd, "%.2f", cd.fwd_tflops);
        std::snprintf(cudnn_bwd, sizeof cudnn_bwd, "%.2f", cd.bwd_tflops);
        std::snprintf(cudnn_diff, sizeof cudnn_diff, "%.3e", diff);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "%s: %s\n", s.name, e.what());
        std::snprintf(cudnn_cell, sizeof cudnn_cell, "failed");
        ok = false;
      }
    }
    // Not measured: "–" in the table, null in the JSON.
    char cc_cell[64] = "–", cc_fwd[32] = "null", cc_bwd[32] = "null";
    if (cuda_cores) {
      std::snprintf(cc_cell, sizeof cc_cell, "%.1f / %.1f", cc.fwd_tflops,
                    cc.bwd_tflops);
      std::snprintf(cc_fwd, sizeof cc_fwd, "%.2f", cc.fwd_tflops);
      std::snprintf(cc_bwd, sizeof cc_bwd, "%.2f", cc.bwd_tflops);
    }
    std::printf(
        "| %s | %lld %lld %lld %lld %lld %lld %lld | %.3f | %.1f | %.3f "
        "(%.3f) | %.1f | %s | %s |%s\n",
        s.name, (long long)s.B, (long long)s.H, (long long)s.Hkv,
        (long long)s.S, (long long)s.D, (long long)s.window, (long long)s.chunk,
        tc.fwd_ms, tc.fwd_tflops, tc.bwd_ms, tc.dq_ms, tc.bwd_tflops, cc_cell,
        cudnn_cell, tc.finite && cc.finite ? "" : " NON-FINITE OUTPUT");
    ok &= tc.finite && cc.finite;
    char row[768];
    std::snprintf(row, sizeof row,
                  "%s{\"name\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hkv\": "
                  "%lld, \"S\": %lld, \"D\": %lld, \"window\": %lld, "
                  "\"chunk\": %lld, "
                  "\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"dq_ms\": %.4f, "
                  "\"fwd_tflops\": %.2f, "
                  "\"bwd_tflops\": %.2f, \"cuda_cores_fwd_tflops\": %s, "
                  "\"cuda_cores_bwd_tflops\": %s, \"cudnn_fwd_tflops\": %s, "
                  "\"cudnn_bwd_tflops\": %s, \"cudnn_fwd_difference\": %s, "
                  "\"finite\": %s}",
                  rows.empty() ? "" : ",\n ", s.name, (long long)s.B,
                  (long long)s.H, (long long)s.Hkv, (long long)s.S,
                  (long long)s.D, (long long)s.window, (long long)s.chunk,
                  tc.fwd_ms, tc.bwd_ms, tc.dq_ms, tc.fwd_tflops, tc.bwd_tflops,
                  cc_fwd, cc_bwd, cudnn_fwd, cudnn_bwd, cudnn_diff,
                  tc.finite && cc.finite ? "true" : "false");
    rows += row;
    for (void *p : {q, kk, v, dy, y, dq, dk, dv, delta})
      cudaFree(p);
  }
  if (!json.empty()) {
    FILE *f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "error: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "[%s]\n", rows.c_str());
    std::fclose(f);
  }
  return ok ? 0 : 1;
}
