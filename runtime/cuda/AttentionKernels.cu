//===- AttentionKernels.cu - causal flash attention with grouped KV heads -===//
//
// The attention entry points (at the bottom: they run the tensor-core
// kernels of AttentionTensorCore.cu unless CudaKernels was set to
// AttentionKernels::CudaCores, or to Cudnn for the forms CudnnAttention.h
// takes) and the kernels on CUDA cores, in the scheme
// below; both families take head dims up to 512, and both backwards read δ
// from attention_delta and each row's log-sum-exp from the forward.
//
// Layout: a query (or key) row is owned by TPR consecutive lanes, lane t
// holding dims t, t + TPR, t + 2·TPR, ... (DPT of them, in registers), so a
// dot product is DPT multiply-adds and log2(TPR) shuffles, and the lanes of
// a row read consecutive bf16 of a shared-memory row (no bank conflicts).
// K/V (or Q/dY) tiles are staged in shared memory; all math is f32. Rows
// are read and written through the layout's stride (HeadLayout.h), the row
// statistics (log-sum-exp, δ) in (B, H, S) order in either.
//
//  - Forward: per block BR query rows; key tiles of BC with the online
//    softmax of docs/primitives.md (running max m, sum l, unnormalized o);
//    where asked, each row's log-sum-exp m + log l.
//  - Backward, two kernels, both deterministic (no atomics):
//     1. dK/dV: a block owns BC key rows of one KV head and walks every
//        query head of its group and every later query tile in a fixed
//        order, so it alone writes those dK/dV rows;
//     2. dQ: a block owns BR query rows and walks the key tiles.
//    p and ds are recomputed from q, k and the log-sum-exp in both.
//
// A score is cap · tanh(s / cap) of the scaled dot product s when
// soft-capped (Gemma 2), plus ALiBi's m_h · (j − i); the cap and the slopes
// (up to 256 heads) travel by value in the launch parameters, and all four
// kernels form scores alike. A
// sliding window (query i sees keys i − W < j ≤ i) or chunks (Llama 4: keys
// of i's chunk) skip the key tiles before a block's first visible key and
// the query tiles past its last reader, so a window's work is O(S · W).
//
// Head dims up to 512, in four register layouts (64, 128, 256, 512: Gemma
// 4's full-attention layers).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/AttentionCommon.cuh"
#include "runtime/exec/Error.h"

#include <cstdlib>
#include <cstring>

namespace mtrt::MT_KNS {

namespace {

using attn::first_key_tile;
using attn::kMaxAlibiHeads;
using attn::ScoreForm;

template <int TPR> __device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int o = TPR / 2; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Loads rows [r0, r0 + ROWS) of a matrix of S rows of D, `ld` elements
/// apart, into a (ROWS, DM) tile, zero past S and past D.
template <int ROWS, int DM>
__device__ __forceinline__ void load_tile(bf16 (*tile)[DM], const bf16 *m,
                                          int64_t r0, int64_t S, int64_t D,
                                          int64_t ld) {
  for (int idx = threadIdx.x; idx < ROWS * DM; idx += blockDim.x) {
    const int rr = idx / DM, d = idx % DM;
    const int64_t row = r0 + rr;
    tile[rr][d] = row < S && d < D ? m[row * ld + d] : f2bf(0.f);
  }
}

template <int TPR, int DPT>
__device__ __forceinline__ void load_row(float (&r)[DPT], const bf16 *row,
                                         int t, int64_t D) {
#pragma unroll
  for (int u = 0; u < DPT; ++u) {
    const int d = t + TPR * u;
    r[u] = d < D ? bf2f(row[d]) : 0.f;
  }
}

/// The forward: y, and each row's log-sum-exp where lse is set. Grid
/// (ceil(S/BR), H, B), BR·TPR threads.
template <int TPR, int DPT, int BR, int BC>
__global__ void __launch_bounds__(BR *TPR)
    attention_forward_kernel(bf16 *y, float *lse, const bf16 *q, const bf16 *k,
                             const bf16 *v, int64_t H, int64_t Hkv, int64_t S,
                             int64_t D, float scale, KeyRange range,
                             ScoreForm form, HeadLayout layout) {
  constexpr int DM = TPR * DPT;
  __shared__ bf16 ks[BC][DM];
  __shared__ bf16 vs[BC][DM];
  const int r = threadIdx.x / TPR, t = threadIdx.x % TPR;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (H / Hkv);
  const int64_t q0 = int64_t(blockIdx.x) * BR;
  // Rows past S compute a copy of row S-1 and write nothing: every lane
  // must take part in the shuffles and barriers.
  const int64_t i = min64(q0 + r, S - 1);
  // The row's index in lse, and its offset in q and y.
  const int64_t row = (b * H + h) * S + i;
  const int64_t at = layout.row_offset(b, h, i, H, S, D);
  const int64_t kvh = layout.head_offset(b, g, Hkv, S, D),
                ldk = layout.row_stride(Hkv, D);
  const bf16 *kh = k + kvh, *vh = v + kvh;
  const float slope = form.slope_of(h);

  float qr[DPT], o[DPT];
  load_row<TPR, DPT>(qr, q + at, t, D);
#pragma unroll
  for (int u = 0; u < DPT; ++u)
    o[u] = 0.f;
  // Every lane of a row holds the row's whole sum.
  float m = form.first_max(h), l = form.first_sum(true);

  const int64_t keys = min64(q0 + BR, S); // what the block's last row needs
  for (int64_t j0 = first_key_tile(q0, range, BC); j0 < keys; j0 += BC) {
    __syncthreads();
    load_tile<BC, DM>(ks, kh, j0, S, D, ldk);
    load_tile<BC, DM>(vs, vh, j0, S, D, ldk);
    __syncthreads();
    float s[BC];
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      float p = 0.f;
#pragma unroll
      for (int u = 0; u < DPT; ++u)
        p += qr[u] * bf2f(ks[jj][t + TPR * u]);
      p = row_sum<TPR>(p);
      s[jj] = range.visible(i, j0 + jj)
                  ? form.capped(scale * p) + slope * float(j0 + jj - i)
                  : -INFINITY;
      tile_max = fmaxf(tile_max, s[jj]);
    }
    // -inf only before the row's first visible key (under a window or chunks,
    // the block's later rows start later): nothing to add yet.
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY)
      continue;
    const float correction = expf(m - m_new);
    l *= correction;
#pragma unroll
    for (int u = 0; u < DPT; ++u)
      o[u] *= correction;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      const float p = expf(s[jj] - m_new);
      l += p;
#pragma unroll
      for (int u = 0; u < DPT; ++u)
        o[u] += p * bf2f(vs[jj][t + TPR * u]);
    }
    m = m_new;
  }

  if (q0 + r >= S)
    return;
#pragma unroll
  for (int u = 0; u < DPT; ++u) {
    const int dd = t + TPR * u;
    if (dd < D)
      y[at + dd] = f2bf(o[u] / l);
  }
  if (lse && t == 0)
    lse[row] = m + logf(l);
}

/// dK and dV of BC key rows of one KV head. Grid (ceil(S/BC), Hkv, B),
/// BC·TPR threads.
template <int TPR, int DPT, int BC, int BR>
__global__ void __launch_bounds__(BC *TPR)
    attention_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *dy, const bf16 *q,
                          const bf16 *k, const bf16 *v, const float *lse,
                          const float *delta, int64_t H, int64_t Hkv, int64_t S,
                          int64_t D, float scale, KeyRange range,
                          ScoreForm form, bool accumulate, HeadLayout layout) {
  constexpr int DM = TPR * DPT;
  __shared__ bf16 qs[BR][DM];
  __shared__ bf16 dys[BR][DM];
  __shared__ float ls[BR], ds[BR];
  const int r = threadIdx.x / TPR, t = threadIdx.x % TPR;
  const int64_t b = blockIdx.z, g = blockIdx.y, group = H / Hkv;
  const int64_t j0 = int64_t(blockIdx.x) * BC;
  const int64_t j = min64(j0 + r, S - 1);
  const int64_t at = layout.row_offset(b, g, j, Hkv, S, D); // in k, v, dk, dv
  const int64_t ldq = layout.row_stride(H, D);

  float kr[DPT], vr[DPT], dkr[DPT], dvr[DPT];
  load_row<TPR, DPT>(kr, k + at, t, D);
  load_row<TPR, DPT>(vr, v + at, t, D);
#pragma unroll
  for (int u = 0; u < DPT; ++u)
    dkr[u] = dvr[u] = 0.f;

  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const int64_t base = (b * H + h) * S; // row index of (b, h, 0) in lse
    const int64_t qh = layout.head_offset(b, h, H, S, D); // in q and dy
    const float slope = form.slope_of(h);
    // The block's keys are read by the queries up to its last key's last.
    const int64_t readers = range.last_query(j0 + BC - 1, S) + 1;
    for (int64_t i0 = j0 / BR * BR; i0 < readers; i0 += BR) {
      __syncthreads();
      load_tile<BR, DM>(qs, q + qh, i0, S, D, ldq);
      load_tile<BR, DM>(dys, dy + qh, i0, S, D, ldq);
      attn::stage_row_stats(ls, ds, lse, delta, base, i0, S, BR);
      __syncthreads();
      for (int ii = 0; ii < BR; ++ii) {
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int u = 0; u < DPT; ++u) {
          s += kr[u] * bf2f(qs[ii][t + TPR * u]);
          dp += vr[u] * bf2f(dys[ii][t + TPR * u]);
        }
        s = row_sum<TPR>(s);
        dp = row_sum<TPR>(dp);
        const int64_t i = i0 + ii;
        const float c = form.capped(scale * s);
        const float p = i < S && range.visible(i, j)
                            ? expf(c + slope * float(j - i) - ls[ii])
                            : 0.f;
        const float dsc = p * (dp - ds[ii]) * form.cap_slope(c);
#pragma unroll
        for (int u = 0; u < DPT; ++u) {
          dvr[u] += p * bf2f(dys[ii][t + TPR * u]);
          dkr[u] += dsc * bf2f(qs[ii][t + TPR * u]);
        }
      }
    }
  }
  if (j0 + r >= S)
    return;
#pragma unroll
  for (int u = 0; u < DPT; ++u) {
    const int d = t + TPR * u;
    if (d >= D)
      continue;
    if (dk)
      write_or_add(dk, at + d, scale * dkr[u], accumulate);
    if (dv)
      write_or_add(dv, at + d, dvr[u], accumulate);
  }
}

/// dQ of BR query rows. Grid (ceil(S/BR), H, B), BR·TPR threads.
template <int TPR, int DPT, int BR, int BC>
__global__ void __launch_bounds__(BR *TPR)
    attention_dq_kernel(bf16 *dq, const bf16 *dy, const bf16 *q, const bf16 *k,
                        const bf16 *v, const float *lse, const float *delta,
                        int64_t H, int64_t Hkv, int64_t S, int64_t D,
                        float scale, KeyRange range, ScoreForm form,
                        bool accumulate, HeadLayout layout) {
  constexpr int DM = TPR * DPT;
  __shared__ bf16 ks[BC][DM];
  __shared__ bf16 vs[BC][DM];
  const int r = threadIdx.x / TPR, t = threadIdx.x % TPR;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (H / Hkv);
  const int64_t q0 = int64_t(blockIdx.x) * BR;
  const int64_t i = min64(q0 + r, S - 1);
  // The row's index in lse and delta, and its offset in q, dy and dq.
  const int64_t row = (b * H + h) * S + i;
  const int64_t at = layout.row_offset(b, h, i, H, S, D);
  const int64_t kvh = layout.head_offset(b, g, Hkv, S, D),
                ldk = layout.row_stride(Hkv, D);
  const bf16 *kh = k + kvh, *vh = v + kvh;
  const float slope = form.slope_of(h);

  float qr[DPT], dyr[DPT], acc[DPT];
  load_row<TPR, DPT>(qr, q + at, t, D);
  load_row<TPR, DPT>(dyr, dy + at, t, D);
#pragma unroll
  for (int u = 0; u < DPT; ++u)
    acc[u] = 0.f;
  const float L = lse[row], delta_i = delta[row];

  const int64_t keys = min64(q0 + BR, S);
  for (int64_t j0 = first_key_tile(q0, range, BC); j0 < keys; j0 += BC) {
    __syncthreads();
    load_tile<BC, DM>(ks, kh, j0, S, D, ldk);
    load_tile<BC, DM>(vs, vh, j0, S, D, ldk);
    __syncthreads();
    for (int jj = 0; jj < BC; ++jj) {
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int u = 0; u < DPT; ++u) {
        s += qr[u] * bf2f(ks[jj][t + TPR * u]);
        dp += dyr[u] * bf2f(vs[jj][t + TPR * u]);
      }
      s = row_sum<TPR>(s);
      dp = row_sum<TPR>(dp);
      const float c = form.capped(scale * s);
      const float p = range.visible(i, j0 + jj)
                          ? expf(c + slope * float(j0 + jj - i) - L)
                          : 0.f;
      const float dsc = p * (dp - delta_i) * form.cap_slope(c);
#pragma unroll
      for (int u = 0; u < DPT; ++u)
        acc[u] += dsc * bf2f(ks[jj][t + TPR * u]);
    }
  }
  if (q0 + r >= S)
    return;
#pragma unroll
  for (int u = 0; u < DPT; ++u) {
    const int d = t + TPR * u;
    if (d < D)
      write_or_add(dq, at + d, scale * acc[u], accumulate);
  }
}

/// One register layout: TPR lanes × DPT dims per row (head dims up to
/// TPR·DPT) and the tile sizes of each kernel, sized for 256 threads and at
/// most 32 KiB of static shared memory (the forward's key tiles: 32 rows,
/// or Rows where fewer fit).
template <int TPR, int DPT, int Rows> struct Attention {
  static constexpr int BR = Rows, BC_FWD = Rows < 32 ? Rows : 32, BC = Rows;

  static void forward(bf16 *y, float *lse, const bf16 *q, const bf16 *k,
                      const bf16 *v, int64_t Bn, int64_t H, int64_t Hkv,
                      int64_t S, int64_t D, float scale, KeyRange range,
                      const ScoreForm &form, HeadLayout layout,
                      cudaStream_t stream) {
    auto *kernel = attention_forward_kernel<TPR, DPT, BR, BC_FWD>;
    launch_kernel("attention_forward_kernel", kernel,
                  dim3(unsigned((S + BR - 1) / BR), unsigned(H), unsigned(Bn)),
                  dim3(BR * TPR), stream, y, lse, q, k, v, H, Hkv, S, D, scale,
                  range, form, layout);
  }

  static void backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dy,
                       const bf16 *q, const bf16 *k, const bf16 *v,
                       const float *lse, const float *delta, int64_t Bn,
                       int64_t H, int64_t Hkv, int64_t S, int64_t D,
                       float scale, KeyRange range, const ScoreForm &form,
                       bool accumulate, HeadLayout layout,
                       cudaStream_t stream) {
    const dim3 rows(unsigned((S + BR - 1) / BR), unsigned(H), unsigned(Bn));
    if (dk || dv) {
      auto *kernel = attention_dkdv_kernel<TPR, DPT, BC, BR>;
      launch_kernel(
          "attention_dkdv_kernel", kernel,
          dim3(unsigned((S + BC - 1) / BC), unsigned(Hkv), unsigned(Bn)),
          dim3(BC * TPR), stream, dk, dv, dy, q, k, v, lse, delta, H, Hkv, S, D,
          scale, range, form, accumulate, layout);
    }
    if (dq) {
      auto *kernel = attention_dq_kernel<TPR, DPT, BR, BC>;
      launch_kernel("attention_dq_kernel", kernel, rows, dim3(BR * TPR), stream,
                    dq, dy, q, k, v, lse, delta, H, Hkv, S, D, scale, range,
                    form, accumulate, layout);
    }
  }
};

/// δ of one row per warp: the lanes stride over D, then a shuffle tree.
/// Row r = (b·H + h)·S + i of δ is the row (b, h, i) of dy and y.
__global__ void attention_delta_kernel(float *delta, const bf16 *dy,
                                       const bf16 *y, int64_t H, int64_t S,
                                       int64_t D, int64_t rows,
                                       HeadLayout layout) {
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) // the whole warp
    return;
  const int64_t at = layout.row_offset(r / S / H, r / S % H, r % S, H, S, D);
  float s = 0.f;
  for (int64_t d = threadIdx.x % 32; d < D; d += 32)
    s += bf2f(dy[at + d]) * bf2f(y[at + d]);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0)
    delta[r] = s;
}

/// dsinks[h] += −Σ exp(sink_h − lse_r) · δ_r over head h's rows r. Grid
/// (H), kSinkThreads threads; each thread sums its rows in order, then one
/// block sum: deterministic.
constexpr int kSinkThreads = 256;
__global__ void __launch_bounds__(kSinkThreads)
    sink_backward_kernel(float *dsinks, const bf16 *sinks, const float *lse,
                         const float *delta, int64_t H, int64_t S,
                         int64_t rows_per_head) {
  const int64_t h = blockIdx.x;
  const float sink = bf2f(sinks[h]);
  float part = 0.f;
  for (int64_t n = threadIdx.x; n < rows_per_head; n += kSinkThreads) {
    const int64_t r = (n / S * H + h) * S + n % S; // (b, h, i), n = b·S + i
    part += expf(sink - lse[r]) * delta[r];
  }
  const float total = block_sum(part);
  if (threadIdx.x == 0)
    dsinks[h] -= total;
}

using Attention64 = Attention<4, 16, 64>;
using Attention128 = Attention<4, 32, 64>;
using Attention256 = Attention<8, 32, 32>;
using Attention512 = Attention<16, 32, 16>;

/// The widest head either family of kernels takes.
constexpr int64_t kMaxHeadDim = 512;

/// Whether dSᵀ (B·H·S² bf16) is held whole for the dQ GEMM: within the
/// bound cuDNN's deterministic backward has on its own dS, and the room the
/// plan's budget leaves (CudaKernels::set_scratch_room).
bool scores_fit(int64_t bytes, int64_t room) {
  return bytes <= std::min(cuda::CudnnAttention::kDeterministicBound, room);
}

void check_shape(const char *op, int64_t H, int64_t Hkv, int64_t D) {
  if (Hkv <= 0 || H % Hkv != 0)
    fail("cuda ", op, ": ", H, " query heads do not group over ", Hkv,
         " KV heads");
  if (D > kMaxHeadDim)
    fail("cuda ", op, ": head dim ", D, " is over the ", kMaxHeadDim,
         " the attention kernels support");
}

ScoreForm score_form(const char *op, float softcap, const float *slopes,
                     int64_t H) {
  ScoreForm a;
  a.softcap = softcap;
  if (!slopes)
    return a;
  if (H > kMaxAlibiHeads)
    fail("cuda ", op, ": ALiBi over ", H,
         " heads; the attention kernels take "
         "at most ",
         kMaxAlibiHeads);
  a.heads = int(H);
  for (int64_t h = 0; h < H; ++h)
    a.slope[h] = slopes[h];
  return a;
}

} // namespace

void attn::sink_backward(float *dsinks, const bf16 *sinks, const float *lse,
                         const float *delta, int64_t Bn, int64_t H, int64_t S,
                         cudaStream_t stream) {
  launch_kernel("attention_sink_backward_kernel", sink_backward_kernel,
                dim3(unsigned(H)), dim3(kSinkThreads), stream, dsinks, sinks,
                lse, delta, H, S, Bn * S);
}

void check_attention_limits(int64_t head_dim, int64_t alibi_heads) {
  if (head_dim > kMaxHeadDim)
    fail("the cuda backend's attention kernels take head dims up to ",
         kMaxHeadDim, "; this plan's attention has head dim ", head_dim,
         " (train it with --backend cpu)");
  if (alibi_heads > kMaxAlibiHeads)
    fail("the cuda backend's attention kernels take ALiBi over at most ",
         kMaxAlibiHeads, " heads; this plan's attention has ", alibi_heads,
         " (train it with --backend cpu)");
}

AttentionKernels attention_kernels_from_env() {
  const char *s = std::getenv("MEGATRAIN_CUDA_ATTENTION");
  if (!s || !*s || std::strcmp(s, "tensor-cores") == 0)
    return AttentionKernels::TensorCores;
  if (std::strcmp(s, "cuda-cores") == 0)
    return AttentionKernels::CudaCores;
  if (std::strcmp(s, "cudnn") == 0)
    return AttentionKernels::Cudnn;
  if (std::strcmp(s, "cudnn-nondeterministic") == 0)
    return AttentionKernels::CudnnNondeterministic;
  fail("MEGATRAIN_CUDA_ATTENTION=", s,
       ": expected tensor-cores (the default), cuda-cores, cudnn or "
       "cudnn-nondeterministic");
}

const char *describe(AttentionKernels k) {
  switch (k) {
  case AttentionKernels::TensorCores:
    return "tensor cores";
  case AttentionKernels::CudaCores:
    return "CUDA cores";
  case AttentionKernels::Cudnn:
    return "cuDNN where it takes the form (deterministic backward), else "
           "tensor cores";
  case AttentionKernels::CudnnNondeterministic:
    return "cuDNN where it takes the form (nondeterministic backward), else "
           "tensor cores";
  }
  return "?";
}

#ifdef MEGATRAIN_CUDA_EMULATION
// The emulator has no cuDNN: the backend refuses the family before a step.
bool CudaKernels::cudnn_has_forward(const cuda::AttentionDims &) {
  fail("cuda: cuDNN's attention runs on a GPU only, not on the emulator");
}
bool CudaKernels::cudnn_has_backward(const cuda::AttentionDims &,
                                     cuda::CudnnBackward) {
  fail("cuda: cuDNN's attention runs on a GPU only, not on the emulator");
}
void CudaKernels::cudnn_attention_forward(void *, float *, const void *,
                                          const void *, const void *,
                                          const attn::ScoreForm &,
                                          const cuda::AttentionDims &, float) {
  fail("cuda: cuDNN's attention runs on a GPU only, not on the emulator");
}
void CudaKernels::cudnn_attention_backward(
    void *, void *, void *, const void *, const void *, const void *,
    const void *, const void *, const float *, const attn::ScoreForm &,
    const cuda::AttentionDims &, float, cuda::CudnnBackward, bool) {
  fail("cuda: cuDNN's attention runs on a GPU only, not on the emulator");
}
#else
cuda::CudnnAttention &CudaKernels::cudnn() {
  if (!cudnn_)
    cudnn_ = std::make_unique<cuda::CudnnAttention>();
  return *cudnn_;
}

bool CudaKernels::cudnn_has_forward(const cuda::AttentionDims &d) {
  return cudnn().has_forward(d);
}

bool CudaKernels::cudnn_has_backward(const cuda::AttentionDims &d,
                                     cuda::CudnnBackward how) {
  return cudnn().has_backward(d, how);
}

namespace {
/// Bytes of the per-head f32 arrays cuDNN binds for the form of `d`.
int64_t head_terms_bytes(const cuda::AttentionDims &d) {
  const int64_t each = (4 * d.H + 255) / 256 * 256;
  return (int64_t(d.sinks) + int64_t(d.alibi)) * each;
}

/// The sinks widened to f32 and ALiBi's slopes (by value in the form), for
/// the heads where either is asked for.
__global__ void head_terms_kernel(float *sinks, float *slopes,
                                  attn::ScoreForm form, int64_t H) {
  const int64_t h = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (h >= H)
    return;
  if (sinks)
    sinks[h] = bf2f(form.sinks[h]);
  if (slopes)
    slopes[h] = form.slope_of(h);
}
} // namespace

cuda::HeadTerms CudaKernels::cudnn_head_terms(void *at,
                                              const cuda::AttentionDims &d,
                                              const attn::ScoreForm &form) {
  char *next = static_cast<char *>(at);
  const int64_t each = (4 * d.H + 255) / 256 * 256;
  float *sinks = d.sinks ? reinterpret_cast<float *>(next) : nullptr;
  float *slopes =
      d.alibi ? reinterpret_cast<float *>(next + (sinks ? each : 0)) : nullptr;
  if (sinks || slopes) {
    constexpr int kThreads = 256;
    launch_kernel("attention_head_terms_kernel", head_terms_kernel,
                  dim3(unsigned((d.H + kThreads - 1) / kThreads)),
                  dim3(kThreads), cudaStream_t(stream_), sinks, slopes, form,
                  d.H);
  }
  return {sinks, slopes};
}

void CudaKernels::cudnn_attention_forward(void *y, float *lse, const void *q,
                                          const void *k, const void *v,
                                          const attn::ScoreForm &form,
                                          const cuda::AttentionDims &d,
                                          float scale) {
  cuda::CudnnAttention &c = cudnn();
  const int64_t heads = head_terms_bytes(d);
  char *base = static_cast<char *>(scratch(heads + c.forward_scratch_bytes(d)));
  c.forward(y, lse, q, k, v, cudnn_head_terms(base, d, form), d, scale,
            base + heads, stream_);
}

void CudaKernels::cudnn_attention_backward(
    void *dq, void *dk, void *dv, const void *dy, const void *q, const void *k,
    const void *v, const void *y, const float *lse, const attn::ScoreForm &form,
    const cuda::AttentionDims &d, float scale, cuda::CudnnBackward how,
    bool accumulate) {
  cuda::CudnnAttention &c = cudnn();
  const int64_t heads = head_terms_bytes(d);
  char *base = static_cast<char *>(
      scratch(heads + c.backward_scratch_bytes(d, how, accumulate)));
  cuda::CudnnAttention::AddInto add;
  if (accumulate) // else cuDNN writes the gradients where they go
    add = [this](void *dst, const void *src, int64_t n) {
      // Flat: no scratch of its own (ours holds cuDNN's results).
      Broadcast flat{};
      flat.rank = 1;
      flat.shape[0] = n;
      flat.lhs_stride[0] = flat.rhs_stride[0] = 1;
      add_forward(dst, dst, src, flat);
    };
  c.backward(dq, dk, dv, dy, q, k, v, y, lse, cudnn_head_terms(base, d, form),
             d, scale, how, base + heads, stream_, add);
}
#endif

void CudaKernels::attention_forward(void *y, float *lse, const void *q,
                                    const void *k, const void *v, int64_t Bn,
                                    int64_t H, int64_t Hkv, int64_t S,
                                    int64_t D, float scale,
                                    const KeyRange &range, float softcap,
                                    const float *alibi_slopes,
                                    const void *sinks, HeadLayout layout) {
  if (Bn * H * S * D <= 0)
    return;
  check_shape("attention_forward", H, Hkv, D);
  ScoreForm a = score_form("attention_forward", softcap, alibi_slopes, H);
  a.sinks = B(sinks);
  cuda::AttentionDims d{Bn, H, Hkv, S, D};
  d.layout = layout;
  d.window = cuda::CudnnAttention::window_of(range, S);
  d.chunk = cuda::CudnnAttention::chunk_of(range, S);
  d.softcap = softcap;
  d.sinks = sinks != nullptr;
  d.alibi = alibi_slopes != nullptr;
  if (on_cudnn(attention_) && cuda::CudnnAttention::takes(D) &&
      cudnn_has_forward(d))
    return cudnn_attention_forward(y, lse, q, k, v, a, d, scale);
  const cudaStream_t s = cudaStream_t(stream_);
  if (attention_ != AttentionKernels::CudaCores)
    attn::tensor_core_forward(B(y), lse, B(q), B(k), B(v), Bn, H, Hkv, S, D,
                              scale, range, a, layout, s);
  else if (D <= 64)
    Attention64::forward(B(y), lse, B(q), B(k), B(v), Bn, H, Hkv, S, D, scale,
                         range, a, layout, s);
  else if (D <= 128)
    Attention128::forward(B(y), lse, B(q), B(k), B(v), Bn, H, Hkv, S, D, scale,
                          range, a, layout, s);
  else if (D <= 256)
    Attention256::forward(B(y), lse, B(q), B(k), B(v), Bn, H, Hkv, S, D, scale,
                          range, a, layout, s);
  else
    Attention512::forward(B(y), lse, B(q), B(k), B(v), Bn, H, Hkv, S, D, scale,
                          range, a, layout, s);
}

void CudaKernels::attention_delta(float *delta, const void *dy, const void *y,
                                  int64_t Bn, int64_t H, int64_t S, int64_t D,
                                  HeadLayout layout) {
  const int64_t rows = Bn * H * S;
  if (rows <= 0)
    return;
  constexpr int kThreads = 256;
  launch_kernel("attention_delta_kernel", attention_delta_kernel,
                dim3(unsigned((rows + kThreads / 32 - 1) / (kThreads / 32))),
                dim3(kThreads), cudaStream_t(stream_), delta, B(dy), B(y), H, S,
                D, rows, layout);
}

void CudaKernels::attention_backward(
    void *dq, void *dk, void *dv, const void *dy, const void *q, const void *k,
    const void *v, const void *y, const float *delta, const float *lse,
    int64_t Bn, int64_t H, int64_t Hkv, int64_t S, int64_t D, float scale,
    const KeyRange &range, float softcap, const float *alibi_slopes,
    const void *sinks, float *dsinks, bool accumulate, HeadLayout layout) {
  if (Bn * H * S * D <= 0 || (!dq && !dk && !dv && !dsinks))
    return;
  check_shape("attention_backward", H, Hkv, D);
  ScoreForm a = score_form("attention_backward", softcap, alibi_slopes, H);
  a.sinks = B(sinks);
  if (dsinks && !sinks)
    fail("cuda attention_backward: dsinks without sinks");
  // The backward's graph is the same with sinks or without (they are in
  // the forward's lse); dsinks is ours, after it, as after our kernels.
  cuda::AttentionDims d{Bn, H, Hkv, S, D};
  d.window = cuda::CudnnAttention::window_of(range, S);
  d.chunk = cuda::CudnnAttention::chunk_of(range, S);
  d.softcap = softcap;
  d.alibi = alibi_slopes != nullptr;
  d.layout = layout;
  const cudaStream_t s = cudaStream_t(stream_);
  if (on_cudnn(attention_) && dq && dk && dv &&
      cuda::CudnnAttention::takes(D)) {
    // Past its bound on dS (or the room the plan's budget leaves), or
    // where cuDNN has no engine, the tensor-core backward below runs: it
    // reads either forward's y and lse alike, as cuDNN's backward does.
    const cuda::CudnnBackward how =
        attention_ == AttentionKernels::CudnnNondeterministic
            ? cuda::CudnnBackward::Nondeterministic
            : cuda::CudnnBackward::Deterministic;
    if ((how == cuda::CudnnBackward::Nondeterministic ||
         cuda::CudnnAttention::deterministic_backward_fits(d, scratch_room_)) &&
        cudnn_has_backward(d, how)) {
      cudnn_attention_backward(dq, dk, dv, dy, q, k, v, y, lse, a, d, scale,
                               how, accumulate);
      if (dsinks)
        attn::sink_backward(dsinks, a.sinks, lse, delta, Bn, H, S, s);
      return;
    }
  }
  if (attention_ != AttentionKernels::CudaCores) { // cuDNN's family too
    // With dK or dV to find too, and room for dSᵀ, the dK/dV pass writes
    // it and dQ is batched GEMMs over it (one heads-major, a few
    // sequence-major: attention_dq_gemms) instead of a pass of its own.
    bf16 *ds_t = nullptr;
    const int64_t ds_bytes = Bn * H * S * S * int64_t(sizeof(bf16));
    if (dq && (dk || dv) && scores_fit(ds_bytes, scratch_room_)) {
      ds_t = B(scratch(ds_bytes));
      if (cudaMemsetAsync(ds_t, 0, size_t(ds_bytes), s) != cudaSuccess)
        fail("cuda attention_backward: clearing dS failed");
    }
    attn::tensor_core_backward(B(dq), B(dk), B(dv), ds_t, B(dy), B(q), B(k),
                               B(v), delta, lse, Bn, H, Hkv, S, D, scale, range,
                               a, accumulate, layout, s);
    if (ds_t)
      for (const GemmSpec &g : attention_dq_gemms(dq, ds_t, k, Bn, H, Hkv, S, D,
                                                  scale, accumulate, layout))
        gemm(g);
  } else if (D <= 64)
    Attention64::backward(B(dq), B(dk), B(dv), B(dy), B(q), B(k), B(v), lse,
                          delta, Bn, H, Hkv, S, D, scale, range, a, accumulate,
                          layout, s);
  else if (D <= 128)
    Attention128::backward(B(dq), B(dk), B(dv), B(dy), B(q), B(k), B(v), lse,
                           delta, Bn, H, Hkv, S, D, scale, range, a, accumulate,
                           layout, s);
  else if (D <= 256)
    Attention256::backward(B(dq), B(dk), B(dv), B(dy), B(q), B(k), B(v), lse,
                           delta, Bn, H, Hkv, S, D, scale, range, a, accumulate,
                           layout, s);
  else
    Attention512::backward(B(dq), B(dk), B(dv), B(dy), B(q), B(k), B(v), lse,
                           delta, Bn, H, Hkv, S, D, scale, range, a, accumulate,
                           layout, s);
  if (dsinks)
    attn::sink_backward(dsinks, a.sinks, lse, delta, Bn, H, S, s);
}

} // namespace mtrt::MT_KNS
