//===- moe_bench.cpp - the CUDA mixture-of-experts kernels' throughput ----===//
//
// Times CudaKernels::moe_forward and moe_backward on the layer shapes of
// open mixtures of experts, on grouped tensor-core GEMMs and on the CUDA-core
// reference kernels (MoeKernels), and a dense cuBLASLt GEMM of the same
// FLOPs as the experts' products (T·k rows against 3·I × H) for the ceiling.
// TFLOPS count the useful work: 2·T·(E·H + 3·k·H·I) for the forward, twice
// that for the backward (which also recomputes the forward, not counted).
// Weights are uniform in [-1, 1) scaled by 1/√fan-in, so routing spreads
// tokens over the experts as a trained router roughly does.
//
//   moe_bench [--json FILE] [--iters N]
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
  int64_t T, H, E, I, k;
  bool normalize;
  bool oss = false;    // gpt-oss's experts: x · W layout, biases, clamps
  bool llama4 = false; // Llama 4's: x · W, sigmoid weights on the inputs
  bool gemma4 = false; // Gemma 4's: GeGLU, own router input, expert scales
};

// Mixtral 8x7B (few large experts), Qwen3-30B-A3B and OLMoE (many small
// ones), gpt-oss-20b (its layout, biases and clamped activation), Llama 4
// Scout (one expert a token, weighed on its input), Gemma 4 26B-A4B (GeGLU
// experts, routed on a copy of the token normed apart, trained per-expert
// scales), each on 4096 tokens of a micro-batch.
const Shape kShapes[] = {
    {"mixtral-8x7b T4096", 4096, 4096, 8, 14336, 2, true},
    {"qwen3-30b-a3b T4096", 4096, 2048, 128, 768, 8, true},
    {"olmoe-1b-7b T4096", 4096, 2048, 64, 1024, 8, false},
    {"gpt-oss-20b T4096", 4096, 2880, 32, 2880, 4, true, true},
    {"llama4-scout T4096", 4096, 5120, 16, 8192, 1, false, false, true},
    {"gemma4-26b-a4b T4096", 4096, 2816, 128, 704, 8, true, false, false, true},
};

/// n bf16 uniform in [-scale, scale) on the device.
void *random_bf16(int64_t n, float scale, uint32_t seed) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (auto &x : h) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = uint16_t(bits >> 16);
  }
  void *d = nullptr;
  check(cudaMalloc(&d, size_t(n) * 2), "cudaMalloc");
  check(cudaMemcpy(d, h.data(), size_t(n) * 2, cudaMemcpyHostToDevice),
        "upload");
  return d;
}

float *zeros_f32(int64_t n) {
  void *d = nullptr;
  check(cudaMalloc(&d, size_t(n) * 4), "cudaMalloc");
  check(cudaMemset(d, 0, size_t(n) * 4), "memset");
  return static_cast<float *>(d);
}

} // namespace

int main(int argc, char **argv) {
  // Rows as they are measured, also into a pipe: a run stopped by a
  // timeout keeps the shapes it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bench::Options o;
  if (!bench::parse_options(argc, argv, "moe_bench [--json FILE] [--iters N]",
                            o))
    return 2;
  const std::string &json = o.json;
  const int iters = o.iters;
  const cudaStream_t stream = bench::device_stream();
  mtrt::cuda::CudaKernels k;
  k.set_stream(stream);

  std::printf("| shape | T H E I k | fwd ms | fwd TFLOPS | bwd ms | bwd TFLOPS "
              "| CUDA cores: fwd / bwd TFLOPS | dense GEMM TFLOPS |\n"
              "|---|---|---|---|---|---|---|---|\n");
  std::string rows;
  bool ok = true;
  for (const Shape &s : kShapes) {
    const int64_t T = s.T, H = s.H, E = s.E, I = s.I;
    const float in_h = 1.f / std::sqrt(float(H)),
                in_i = 1.f / std::sqrt(float(I));
    void *x = random_bf16(T * H, 1.f, 1), *dy = random_bf16(T * H, 1.f, 2);
    void *router = random_bf16(E * H, in_h, 3);
    void *gate_up = random_bf16(E * 2 * I * H, in_h, 4);
    void *down = random_bf16(E * H * I, in_i, 5);
    void *y = random_bf16(T * H, 1.f, 6), *dx = random_bf16(T * H, 1.f, 7);
    float *drouter = zeros_f32(E * H), *dgate_up = zeros_f32(E * 2 * I * H),
          *ddown = zeros_f32(E * H * I);
    const double flops = 2.0 * double(T) * double(E * H + 3 * s.k * H * I);
    mtrt::MoeRouting routing;
    routing.normalize = s.normalize;
    routing.sigmoid = routing.weigh_inputs = s.llama4;
    mtrt::MoeExperts experts; // SwiGLU, or gpt-oss's, or GeGLU
    experts.in_out = s.llama4;
    experts.gelu = s.gemma4;
    // Gemma 4's router input, its gradient, the expert scales and theirs.
    void *router_x = nullptr, *drouter_x = nullptr, *scale = nullptr;
    float *dscale = nullptr;
    if (s.gemma4) {
      router_x = random_bf16(T * H, 1.f, 14),
      drouter_x = random_bf16(T * H, 1.f, 15);
      scale = random_bf16(E, 1.f, 16), dscale = zeros_f32(E);
    }
    void *rb = nullptr, *gub = nullptr, *db = nullptr;
    float *drb = nullptr, *dgub = nullptr, *ddb = nullptr;
    if (s.oss) {
      experts = {true, true, 1.702f, 7.f, 1.f};
      rb = random_bf16(E, 0.1f, 11), gub = random_bf16(E * 2 * I, 0.1f, 12);
      db = random_bf16(E * H, 0.1f, 13);
      drb = zeros_f32(E), dgub = zeros_f32(E * 2 * I), ddb = zeros_f32(E * H);
    }
    const mtrt::MoeParams weights{router, gate_up, down, nullptr,
                                  rb,     gub,     db,   scale};
    const mtrt::MoeWeightGrads grads{drouter, dgate_up, ddown, drb,
                                     dgub,    ddb,      dscale};
    struct Timing {
      double fwd_ms, bwd_ms, fwd_tflops, bwd_tflops;
      bool finite;
    };
    auto measure = [&](mtrt::cuda::MoeKernels family, int n) {
      k.set_moe_kernels(family);
      Timing t;
      t.fwd_ms = time_ms(stream, n, [&] {
        k.moe_forward(y, x, router_x, weights, T, H, E, I, s.k, routing,
                      experts);
      });
      t.finite = all_finite(y, T * H);
      t.bwd_ms = time_ms(stream, n, [&] {
        k.moe_backward(dx, drouter_x, grads, dy, x, router_x, weights, T, H, E,
                       I, s.k, routing, experts);
      });
      t.fwd_tflops = flops / (t.fwd_ms * 1e-3) / 1e12;
      t.bwd_tflops = 2 * flops / (t.bwd_ms * 1e-3) / 1e12;
      return t;
    };
    std::fprintf(stderr, "moe_bench: %s: grouped kernels\n", s.name);
    const Timing tc = measure(mtrt::cuda::MoeKernels::TensorCores, iters);
    // The reference kernels are slower by far: one timed call.
    std::fprintf(stderr, "moe_bench: %s: reference kernels\n", s.name);
    const Timing cc = measure(mtrt::cuda::MoeKernels::CudaCores, 1);
    // The experts' products as one dense GEMM: T·k rows, 3·I outputs.
    void *dense_x = random_bf16(T * s.k * H, 1.f, 8);
    void *dense_w = random_bf16(3 * I * H, in_h, 9);
    void *dense_y = random_bf16(T * s.k * 3 * I, 1.f, 10);
    const double dense_ms = time_ms(stream, iters, [&] {
      k.linear_forward(dense_y, dense_x, dense_w, nullptr, T * s.k, H, 3 * I,
                       false, false);
    });
    const double dense_tflops =
        2.0 * double(T * s.k) * double(3 * I * H) / (dense_ms * 1e-3) / 1e12;
    const bool finite = tc.finite && cc.finite && all_finite(dx, T * H);
    std::printf("| %s | %lld %lld %lld %lld %lld | %.3f | %.1f | %.3f | %.1f "
                "| %.2f / %.2f | %.1f |%s\n",
                s.name, (long long)T, (long long)H, (long long)E, (long long)I,
                (long long)s.k, tc.fwd_ms, tc.fwd_tflops, tc.bwd_ms,
                tc.bwd_tflops, cc.fwd_tflops, cc.bwd_tflops, dense_tflops,
                finite ? "" : " NON-FINITE OUTPUT");
    ok &= finite;
    char row[640];
    std::snprintf(
        row, sizeof row,
        "%s{\"name\": \"%s\", \"T\": %lld, \"H\": %lld, \"E\": %lld, \"I\": "
        "%lld, \"k\": %lld, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
        "\"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f, "
        "\"cuda_cores_fwd_tflops\": %.3f, \"cuda_cores_bwd_tflops\": %.3f, "
        "\"dense_gemm_tflops\": %.2f, \"finite\": %s}",
        rows.empty() ? "" : ",\n ", s.name, (long long)T, (long long)H,
        (long long)E, (long long)I, (long long)s.k, tc.fwd_ms, tc.bwd_ms,
        tc.fwd_tflops, tc.bwd_tflops, cc.fwd_tflops, cc.bwd_tflops,
        dense_tflops, finite ? "true" : "false");
    rows += row;
    for (void *p : {x, dy, router, gate_up, down, y, dx, dense_x, dense_w,
                    dense_y, rb, gub, db, router_x, drouter_x, scale})
      cudaFree(p); // null for the absent inputs: a no-op
    for (float *p : {drouter, dgate_up, ddown, drb, dgub, ddb, dscale})
      cudaFree(p);
  }
  if (!json.empty() && !bench::write_rows(json, rows))
    return 1;
  return ok ? 0 : 1;
}
