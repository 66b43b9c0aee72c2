//===- attention_tiles_bench.cpp - the attention kernels on other tiles ---===//
//
// Times the tensor-core attention's three kernels (forward, dQ, dK/dV) on
// every choice of tiles AttentionTileVariants.h lists, the runtime's first,
// on attention_bench's shapes up to head dim 128, and compares each choice's
// outputs with the runtime's tiles' (the largest difference of y, dQ, dK
// and dV, relative to the largest output). Each kernel picks its tiles
// apart, so the last table names the fastest choice per kernel and shape.
// TFLOPS count as attention_bench's do.
//
//   attention_tiles_bench [--json FILE] [--iters N] [--shape TEXT]
//
//===----------------------------------------------------------------------===//

#include "bench/AttentionShapes.h"
#include "bench/KernelTiming.h"
#include "runtime/cuda/AttentionTileVariants.h"
#include "runtime/cuda/CudaKernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using bench::check;
using bench::download;
using bench::kShapes;
using bench::RandomPool;
using bench::relative_difference;
using bench::Shape;
using bench::time_ms;
using mtrt::cuda::AttentionCall;
using mtrt::cuda::AttentionTiles;

// Outputs of sums taken in another order agree to a few bf16 ulps of the
// largest; a choice further off than this computes something else.
constexpr double kAgrees = 2e-2;

struct Result {
  double fwd_ms, dq_ms, dkdv_ms, difference;
};

/// y, dQ, dK and dV of one clean call (the gradients from zero).
std::vector<std::vector<float>> outputs(const AttentionTiles &t,
                                        const AttentionCall &c, int64_t nq,
                                        int64_t nk, cudaStream_t stream) {
  check(cudaMemsetAsync(c.dq, 0, size_t(nq) * 2, stream), "memset");
  check(cudaMemsetAsync(c.dk, 0, size_t(nk) * 2, stream), "memset");
  check(cudaMemsetAsync(c.dv, 0, size_t(nk) * 2, stream), "memset");
  t.forward(c);
  t.dq(c);
  t.dkdv(c);
  check(cudaStreamSynchronize(stream), "kernels");
  return {download(c.y, nq), download(c.dq, nq), download(c.dk, nk),
          download(c.dv, nk)};
}

} // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bench::Options o;
  if (!bench::parse_options(
          argc, argv,
          "attention_tiles_bench [--json FILE] [--iters N] [--shape TEXT]", o))
    return 2;
  const std::string &json = o.json, &only = o.shape;
  const int iters = o.iters;
  auto selected = [&](const Shape &s) {
    return s.D <= 128 &&
           (only.empty() || std::strstr(s.name, only.c_str()) != nullptr);
  };
  if (std::none_of(std::begin(kShapes), std::end(kShapes), selected)) {
    std::fprintf(stderr,
                 "error: no shape up to head dim 128 whose name holds "
                 "'%s'\n",
                 only.c_str());
    return 2;
  }
  const cudaStream_t stream = bench::device_stream();
  mtrt::cuda::CudaKernels kernels;
  kernels.set_stream(stream);

  std::printf("| shape | tiles | fwd ms (TFLOPS) | dQ ms | dK/dV ms | bwd "
              "TFLOPS | difference from the runtime's |\n"
              "|---|---|---|---|---|---|---|\n");
  std::string rows, best;
  int64_t most = 0;
  for (const Shape &s : kShapes)
    if (selected(s))
      most = std::max(most, s.B * s.H * s.S * s.D);
  const RandomPool pool(most);
  bool ok = true;
  for (const Shape &s : kShapes) {
    if (!selected(s))
      continue;
    const int64_t nq = s.B * s.H * s.S * s.D, nk = s.B * s.Hkv * s.S * s.D;
    const int64_t nrows = nq / s.D;
    void *q = pool.device(nq, 1), *k = pool.device(nk, 2),
         *v = pool.device(nk, 3), *dy = pool.device(nq, 4);
    void *y = pool.device(nq, 5), *dq = pool.device(nq, 6),
         *dk = pool.device(nk, 7), *dv = pool.device(nk, 8);
    void *stats[2] = {}; // δ and the log-sum-exp, f32 a query row
    for (void *&p : stats)
      check(cudaMalloc(&p, size_t(nrows) * sizeof(float)), "cudaMalloc");
    auto *delta = static_cast<float *>(stats[0]);
    auto *lse = static_cast<float *>(stats[1]);
    const mtrt::KeyRange range{s.window, s.chunk};
    const AttentionCall call{y,     dq,  dk,      dv,
                             q,     k,   v,       dy,
                             delta, lse, s.B,     s.H,
                             s.Hkv, s.S, s.D,     1.f / std::sqrt(float(s.D)),
                             range, 0.f, nullptr, nullptr,
                             stream};
    const double flops = 4.0 * double(s.B * s.H) *
                         bench::visible_pairs(s.S, range) * double(s.D);
    const std::vector<AttentionTiles> choices =
        mtrt::cuda::attention_tile_variants(s.D);
    // δ from the runtime's forward, as a step has it; every choice's
    // backward reads the same.
    choices.front().forward(call);
    kernels.attention_delta(delta, dy, y, s.B, s.H, s.S, s.D, {});
    std::vector<std::vector<float>> reference;
    std::vector<Result> results;
    for (const AttentionTiles &t : choices) {
      Result r{};
      r.fwd_ms = time_ms(stream, iters, [&] { t.forward(call); });
      r.dq_ms = time_ms(stream, iters, [&] { t.dq(call); });
      r.dkdv_ms = time_ms(stream, iters, [&] { t.dkdv(call); });
      const auto out = outputs(t, call, nq, nk, stream);
      if (reference.empty())
        reference = out;
      r.difference = 0;
      for (size_t i = 0; i < out.size(); ++i)
        r.difference =
            std::max(r.difference, relative_difference(out[i], reference[i]));
      const bool agrees = r.difference < kAgrees;
      ok &= agrees;
      results.push_back(r);
      std::printf("| %s | %s%s | %.3f (%.1f) | %.3f | %.3f | %.1f | %.1e%s |\n",
                  s.name, t.name.c_str(), t.runtime ? " (runtime)" : "",
                  r.fwd_ms, flops / (r.fwd_ms * 1e-3) / 1e12, r.dq_ms,
                  r.dkdv_ms,
                  2.5 * flops / ((r.dq_ms + r.dkdv_ms) * 1e-3) / 1e12,
                  r.difference, agrees ? "" : " DISAGREES");
      char row[512];
      std::snprintf(row, sizeof row,
                    "%s{\"shape\": \"%s\", \"tiles\": \"%s\", \"runtime\": "
                    "%s, \"fwd_ms\": %.4f, \"dq_ms\": %.4f, \"dkdv_ms\": "
                    "%.4f, \"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f, "
                    "\"difference\": %.3e}",
                    rows.empty() ? "" : ",\n ", s.name, t.name.c_str(),
                    t.runtime ? "true" : "false", r.fwd_ms, r.dq_ms, r.dkdv_ms,
                    flops / (r.fwd_ms * 1e-3) / 1e12,
                    2.5 * flops / ((r.dq_ms + r.dkdv_ms) * 1e-3) / 1e12,
                    r.difference);
      rows += row;
    }
    // The fastest choice of each kernel among those that agree, against the
    // runtime's.
    auto fastest = [&](double Result::*ms) {
      size_t at = 0;
      for (size_t i = 1; i < results.size(); ++i)
        if (results[i].difference < kAgrees && results[i].*ms < results[at].*ms)
          at = i;
      char cell[256];
      std::snprintf(cell, sizeof cell, "%s (%.2fx)", choices[at].name.c_str(),
                    results[0].*ms / results[at].*ms);
      return std::string(cell);
    };
    best += "| " + std::string(s.name) + " | " + fastest(&Result::fwd_ms) +
            " | " + fastest(&Result::dq_ms) + " | " +
            fastest(&Result::dkdv_ms) + " |\n";
    for (void *p : {q, k, v, dy, y, dq, dk, dv, stats[0], stats[1]})
      cudaFree(p);
  }
  std::printf("\nFastest tiles per kernel (speed-up over the runtime's):\n\n"
              "| shape | forward | dQ | dK/dV |\n|---|---|---|---|\n%s",
              best.c_str());
  if (!json.empty() && !bench::write_rows(json, rows))
    return 1;
  return ok ? 0 : 1;
}
