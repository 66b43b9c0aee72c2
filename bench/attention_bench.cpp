//===- attention_bench.cpp - the CUDA attention kernels' throughput -------===//
//
// Times CudaKernels::attention_forward and attention_backward on shapes of
// the decoders we train (causal, grouped KV heads, one with a sliding
// window, one in Llama 4's chunks), on tensor cores and on CUDA cores
// (AttentionKernels), and reports TFLOPS the way FlashAttention's benchmarks
// count them: 4·B·H·pairs·D for the forward, 2.5 times that for the backward,
// where pairs is the number of visible (query, key) pairs. Our backward
// runs two ways, both timed: where dSᵀ (B·H·S² bf16) fits in 2 GiB, the
// dK/dV pass writes it and dQ is one batched GEMM over it (the runtime's
// choice); else, and here with no scratch room to force it, in two passes
// (3.5 times the forward's products: the dQ pass computes the scores and
// dY·Vᵀ again). The dQ pass (δ and dQ, dK and dV not asked for) is timed
// alone too; the dK/dV pass takes the rest of the two. The tensor cores'
// forward and backward are timed again on sequence-major tensors (B, S, H,
// D; HeadLayout.h), as attention that spares a projection's transposes
// reads them: its rows are strided, not contiguous.
//
//   attention_bench [--json FILE] [--iters N] [--shape TEXT]
//                   [--tensor-cores-only] [--cudnn-device FILE]
//
// --cudnn-device writes cuDNN's description of this GPU (JSON) to FILE,
// what CudnnAttention::plan_ahead takes to plan for it on a machine
// without one (tests/unit/runtime/cuda/CudnnPlanAheadTest.cpp).
//
// --shape runs only the shapes whose name holds TEXT, and
// --tensor-cores-only leaves out the CUDA-core kernels: together, a short
// run to profile (bench/device_check.sh's profile stage runs it under ncu).
//
// Where cuDNN loads and takes the shape's form (CudnnAttention.h), its
// fused kernels are timed too, both backwards (the deterministic one only
// where its dS fits its bound; the tensor cores' runs otherwise; a part
// cuDNN has no engine for is left blank), and its forward's output
// compared with the tensor cores': the largest difference, relative to the
// largest output.
//
// bench/attention_torch.py times PyTorch's scaled_dot_product_attention on
// the shapes this writes to FILE.
//
//===----------------------------------------------------------------------===//

#include "bench/AttentionShapes.h"
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
using bench::download;
using bench::kShapes;
using bench::RandomPool;
using bench::relative_difference;
using bench::Shape;
using bench::time_ms;
using bench::visible_pairs;

} // namespace

int main(int argc, char **argv) {
  // Rows as they are measured, also into a pipe: a run stopped by a
  // timeout keeps the shapes it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bench::Options o;
  if (!bench::parse_options(argc, argv,
                            "attention_bench [--json FILE] [--iters N] "
                            "[--shape TEXT] [--tensor-cores-only] "
                            "[--cudnn-device FILE]",
                            o))
    return 2;
  const std::string &json = o.json, &only = o.shape;
  const int iters = o.iters;
  const bool cuda_cores = !o.tensor_cores_only;
  auto selected = [&](const Shape &s) {
    return only.empty() || std::strstr(s.name, only.c_str()) != nullptr;
  };
  if (std::none_of(std::begin(kShapes), std::end(kShapes), selected)) {
    std::fprintf(stderr, "error: no shape's name holds '%s'\n", only.c_str());
    return 2;
  }
  const cudaStream_t stream = bench::device_stream();
  mtrt::cuda::CudaKernels k;
  k.set_stream(stream);

  std::string cudnn_why;
  const bool cudnn = mtrt::cuda::cudnn_loadable(&cudnn_why);
  if (!cudnn)
    std::fprintf(stderr, "cuDNN's forward not timed: %s\n", cudnn_why.c_str());
  if (cudnn && !o.cudnn_device.empty()) {
    try {
      const std::string props =
          mtrt::cuda::CudnnAttention::device_properties(0);
      FILE *f = std::fopen(o.cudnn_device.c_str(), "w");
      const bool written = f && std::fputs(props.c_str(), f) >= 0;
      if ((f && std::fclose(f) != 0) || !written)
        std::fprintf(stderr, "warning: cannot write %s\n",
                     o.cudnn_device.c_str());
    } catch (const std::exception &e) {
      std::fprintf(stderr, "warning: no device description: %s\n", e.what());
    }
  }

  std::printf("| shape | B H Hkv S D W C | fwd ms | fwd TFLOPS | bwd ms "
              "(two passes; dQ pass) | bwd TFLOPS | sequence-major: fwd / bwd "
              "TFLOPS | CUDA cores: fwd / bwd TFLOPS | "
              "cuDNN fwd / bwd / bwd nondeterministic TFLOPS (fwd diff) |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
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
    void *stats[2] = {}; // δ and the log-sum-exp, f32 a query row
    for (void *&p : stats)
      check(cudaMalloc(&p, size_t(nq / s.D) * sizeof(float)), "cudaMalloc");
    auto *delta = static_cast<float *>(stats[0]);
    auto *lse = static_cast<float *>(stats[1]);
    const float scale = 1.f / std::sqrt(float(s.D));
    const mtrt::KeyRange range{s.window, s.chunk};
    const double flops =
        4.0 * double(s.B * s.H) * visible_pairs(s.S, range) * double(s.D);
    struct Timing {
      double fwd_ms = 0, bwd_ms = 0, two_pass_ms = 0, dq_ms = 0, fwd_tflops = 0,
             bwd_tflops = 0;
      bool finite = true;
    };
    mtrt::cuda::AttentionDims dims{s.B, s.H, s.Hkv, s.S, s.D};
    dims.window = mtrt::cuda::CudnnAttention::window_of(range, s.S);
    dims.chunk = mtrt::cuda::CudnnAttention::chunk_of(range, s.S);
    auto measure = [&](mtrt::cuda::AttentionKernels family, int n,
                       bool dq_pass = true, mtrt::HeadLayout layout = {}) {
      k.set_attention_kernels(family);
      Timing t;
      // The forward as the backward's recompute runs it, keeping each
      // row's log-sum-exp.
      t.fwd_ms = time_ms(stream, n, [&] {
        k.attention_forward(y, lse, q, kk, v, s.B, s.H, s.Hkv, s.S, s.D, scale,
                            range, 0.f, nullptr, nullptr, layout);
      });
      t.finite = all_finite(y, nq);
      // The backward as a step runs it: δ, then the gradients (written).
      t.bwd_ms = time_ms(stream, n, [&] {
        k.attention_delta(delta, dy, y, s.B, s.H, s.S, s.D, layout);
        k.attention_backward(dq, dk, dv, dy, q, kk, v, y, delta, lse, s.B, s.H,
                             s.Hkv, s.S, s.D, scale, range, 0.f, nullptr,
                             nullptr, nullptr, false, layout);
      });
      t.fwd_tflops = flops / (t.fwd_ms * 1e-3) / 1e12;
      t.bwd_tflops = 2.5 * flops / (t.bwd_ms * 1e-3) / 1e12;
      if (layout.seq_major)
        return t;
      // The tensor cores' two passes, no room for dSᵀ; then the dQ pass
      // alone: no dK or dV asked for (cuDNN takes only whole backwards).
      if (family == mtrt::cuda::AttentionKernels::TensorCores) {
        const int64_t room = k.scratch_room();
        k.set_scratch_room(0);
        t.two_pass_ms = time_ms(stream, n, [&] {
          k.attention_delta(delta, dy, y, s.B, s.H, s.S, s.D, layout);
          k.attention_backward(dq, dk, dv, dy, q, kk, v, y, delta, lse, s.B,
                               s.H, s.Hkv, s.S, s.D, scale, range, 0.f, nullptr,
                               nullptr, nullptr, false, layout);
        });
        k.set_scratch_room(room);
      }
      if (dq_pass)
        t.dq_ms = time_ms(stream, n, [&] {
          k.attention_delta(delta, dy, y, s.B, s.H, s.S, s.D, layout);
          k.attention_backward(dq, nullptr, nullptr, dy, q, kk, v, y, delta,
                               lse, s.B, s.H, s.Hkv, s.S, s.D, scale, range,
                               0.f, nullptr, nullptr, nullptr, false, layout);
        });
      return t;
    };
    // Sequence-major first: y then holds the heads-major forward's, which
    // cuDNN's is compared with below.
    const Timing seq = measure(mtrt::cuda::AttentionKernels::TensorCores, iters,
                               false, mtrt::HeadLayout{true});
    const Timing tc = measure(mtrt::cuda::AttentionKernels::TensorCores, iters);
    // The CUDA-core kernels are slower by far: fewer timed calls.
    const Timing cc = cuda_cores
                          ? measure(mtrt::cuda::AttentionKernels::CudaCores,
                                    std::max(1, iters / 2))
                          : Timing{};
    // cuDNN's beside the tensor cores' (y holds their forward's now).
    char cudnn_cell[128] = "–", cudnn_fwd[32] = "null", cudnn_bwd[32] = "null",
         cudnn_any_bwd[32] = "null", cudnn_diff[32] = "null";
    if (cudnn && mtrt::cuda::CudnnAttention::takes(s.D)) {
      const std::vector<float> ref = download(y, nq);
      try {
        // A part cuDNN has no engine for runs on the tensor cores (said on
        // stderr): its cells stay empty rather than time ours as cuDNN's.
        const bool fwd = k.cudnn_has_forward(dims);
        const bool det =
            mtrt::cuda::CudnnAttention::deterministic_backward_fits(
                dims, k.scratch_room()) &&
            k.cudnn_has_backward(dims,
                                 mtrt::cuda::CudnnBackward::Deterministic);
        const bool any = k.cudnn_has_backward(
            dims, mtrt::cuda::CudnnBackward::Nondeterministic);
        const Timing cd =
            measure(mtrt::cuda::AttentionKernels::Cudnn, iters, false);
        const double diff = relative_difference(download(y, nq), ref);
        const Timing nd = measure(
            mtrt::cuda::AttentionKernels::CudnnNondeterministic, iters, false);
        char cells[3][32] = {"–", "–", "–"};
        if (fwd) {
          std::snprintf(cells[0], sizeof cells[0], "%.1f", cd.fwd_tflops);
          std::snprintf(cudnn_fwd, sizeof cudnn_fwd, "%.2f", cd.fwd_tflops);
          std::snprintf(cudnn_diff, sizeof cudnn_diff, "%.3e", diff);
        }
        if (det) {
          std::snprintf(cells[1], sizeof cells[1], "%.1f", cd.bwd_tflops);
          std::snprintf(cudnn_bwd, sizeof cudnn_bwd, "%.2f", cd.bwd_tflops);
        }
        if (any) {
          std::snprintf(cells[2], sizeof cells[2], "%.1f", nd.bwd_tflops);
          std::snprintf(cudnn_any_bwd, sizeof cudnn_any_bwd, "%.2f",
                        nd.bwd_tflops);
        }
        std::snprintf(cudnn_cell, sizeof cudnn_cell, "%s / %s / %s (%s)",
                      cells[0], cells[1], cells[2], fwd ? cudnn_diff : "–");
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
    const bool finite = tc.finite && seq.finite && cc.finite;
    std::printf(
        "| %s | %lld %lld %lld %lld %lld %lld %lld | %.3f | %.1f | %.3f "
        "(%.3f; %.3f) | %.1f | %.1f / %.1f | %s | %s |%s\n",
        s.name, (long long)s.B, (long long)s.H, (long long)s.Hkv,
        (long long)s.S, (long long)s.D, (long long)s.window, (long long)s.chunk,
        tc.fwd_ms, tc.fwd_tflops, tc.bwd_ms, tc.two_pass_ms, tc.dq_ms,
        tc.bwd_tflops, seq.fwd_tflops, seq.bwd_tflops, cc_cell, cudnn_cell,
        finite ? "" : " NON-FINITE OUTPUT");
    ok &= finite;
    char row[1024];
    std::snprintf(
        row, sizeof row,
        "%s{\"name\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hkv\": "
        "%lld, \"S\": %lld, \"D\": %lld, \"window\": %lld, "
        "\"chunk\": %lld, "
        "\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
        "\"two_pass_ms\": %.4f, \"dq_ms\": %.4f, "
        "\"fwd_tflops\": %.2f, "
        "\"bwd_tflops\": %.2f, \"seq_major_fwd_tflops\": %.2f, "
        "\"seq_major_bwd_tflops\": %.2f, \"cuda_cores_fwd_tflops\": %s, "
        "\"cuda_cores_bwd_tflops\": %s, \"cudnn_fwd_tflops\": %s, "
        "\"cudnn_bwd_tflops\": %s, "
        "\"cudnn_nondeterministic_bwd_tflops\": %s, "
        "\"cudnn_fwd_difference\": %s, "
        "\"finite\": %s}",
        rows.empty() ? "" : ",\n ", s.name, (long long)s.B, (long long)s.H,
        (long long)s.Hkv, (long long)s.S, (long long)s.D, (long long)s.window,
        (long long)s.chunk, tc.fwd_ms, tc.bwd_ms, tc.two_pass_ms, tc.dq_ms,
        tc.fwd_tflops, tc.bwd_tflops, seq.fwd_tflops, seq.bwd_tflops, cc_fwd,
        cc_bwd, cudnn_fwd, cudnn_bwd, cudnn_any_bwd, cudnn_diff,
        finite ? "true" : "false");
    rows += row;
    for (void *p : {q, kk, v, dy, y, dq, dk, dv, stats[0], stats[1]})
      cudaFree(p);
  }
  if (!json.empty() && !bench::write_rows(json, rows))
    return 1;
  return ok ? 0 : 1;
}
