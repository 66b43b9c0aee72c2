//===- GatedScanKernels.cu - gated linear attention, with or without delta ===//
//
// cpu::gated_scan_forward/backward on CUDA cores: bf16 in and out, the
// state in f32. Without the delta rule (Mamba-2) u below is 0 and the
// correction terms drop out; the steps and barriers are the same. With a
// decay per key channel (Kimi Delta Attention) each row of the state has
// its own. Column j of the state reads only v[..., j] (and k, q, g, beta),
// so a block of 8 warps owns a (batch, tile of 32 lanes): lane = column,
// warp w = rows w, w + 8, ..., each thread's part of the state in
// registers (kR rows, Dk ≤ 8·kR ≤ 256). A value head of 32 columns or
// more spans ⌈Dv/32⌉ tiles; narrower heads share one, each lane a column
// of one of its heads (Mamba-1's heads of one column: 32 heads a block).
// The heads of a block read one key head. Sums over rows (u, o, ddelta)
// and over columns (dq, dk, dg) go through shared memory and are added in
// a fixed order; nothing is atomic.
//
// Forward: T steps of two barriers each, one block per batch and tile.
// Backward: a forward pass stores each block's state every kChunk positions;
// then, chunk by chunk in reverse, the block recomputes the chunk's states
// into scratch and walks them back with dS in registers (two barriers a
// step). dv has one writer; dq and dk (sums over the block's columns),
// dg per key channel (the same over a head's) or per head, and dbeta (per
// column) go to scratch as per-block and per-head partials, which second
// kernels add in (block, head, column) order. Time runs in segments of 256
// positions so that the partials stay small; dS carries over in scratch.
// Scratch, in floats: blocks·(⌈T/64⌉ + 65)·256·kR (Dk ≤ 8·kR) for
// checkpoints, chunk states and the carry, plus 256·B·(blocks·2·Dk +
// Hv·⌈Dv/32⌉·(2·lanes + Dk)) partials (lanes a head's columns take in its
// tile; the Dk only with a decay per key channel): about 0.3 GB for
// Qwen3.5's 32 heads of 128 × 128 over 4096 positions, 0.2 GB for Falcon
// Mamba's 8192 one-column heads with a 16-channel state. The backward's
// shared memory is 2 (3 with a decay per key channel) · 8·kR · 33 floats:
// past Dk = 128 with a decay per key channel it needs a GPU with more than
// 99 KiB a block (sm_80, sm_90). The backward costs about four forward
// passes of arithmetic, plus a write and a read of every state.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/exec/Error.h"

#include <type_traits>

namespace mtrt::MT_KNS {
namespace {

constexpr int kTile = 32, kWarps = 8, kBlock = kTile * kWarps;
constexpr int64_t kChunk = 64, kSegmentChunks = 4;
constexpr int64_t kMaxDk = 32 * kWarps; // rows per thread ≤ 32

struct Dims {
  int64_t Bn, T, Hk, Hv, Dk, Dv;
  bool delta;     // the delta rule's correction v − Sᵀk
  bool key_decay; // g [B, T, Hv, Dk], a decay per key channel (row of S)
  int lanes;      // the lanes one value head takes in a tile: Dv's power of 2
  int pack;       // value heads per block, all of one key head
  __host__ __device__ int64_t tiles() const { return (Dv + kTile - 1) / kTile; }
  /// Blocks along the value heads.
  __host__ __device__ int64_t groups() const { return (Hv + pack - 1) / pack; }
  __host__ __device__ int64_t chunks() const {
    return (T + kChunk - 1) / kChunk;
  }
  /// Partial sums per (position, batch, block): dq and dk.
  __host__ __device__ int64_t block_width() const { return 2 * Dk; }
  /// Partial sums per (position, batch, head, tile): dg and dbeta per
  /// column, then dg per key channel where the decay is per channel.
  __host__ __device__ int64_t head_width() const {
    return 2 * lanes + (key_decay ? Dk : 0);
  }
  __device__ int64_t qk(int64_t b, int64_t t, int64_t h) const {
    return ((b * T + t) * Hk + h / (Hv / Hk)) * Dk;
  }
  __device__ int64_t vo(int64_t b, int64_t t, int64_t h) const {
    return ((b * T + t) * Hv + h) * Dv;
  }
  __device__ int64_t gb(int64_t b, int64_t t, int64_t h) const {
    return (b * T + t) * Hv + h;
  }
};

/// The thread's column: value head h (clamped into range, so that the
/// lanes of no head load in bounds), column j of it. A lane of no column
/// keeps a zero state: its v and dout read as 0.
struct Column {
  int64_t h, j;
  int c;      // lane within the head's lanes
  bool owner; // the lane belongs to a head (j may still be past Dv)
  bool valid; // ... and to one of its columns
};

__device__ __forceinline__ Column column_of(const Dims &d) {
  const int lane = threadIdx.x % kTile, p = lane / d.lanes;
  Column col;
  col.c = lane % d.lanes;
  col.h = int64_t(blockIdx.y) * d.pack + p;
  col.j = int64_t(blockIdx.x) * kTile + col.c;
  col.owner = p < d.pack && col.h < d.Hv;
  col.valid = col.owner && col.j < d.Dv;
  col.h = min64(col.h, d.Hv - 1);
  return col;
}

/// The thread's rows' decays at (b, t, h): e^g, one per row where the decay
/// is per key channel.
template <int kR>
__device__ __forceinline__ void load_decays(float (&dr)[kR], const bf16 *g,
                                            const Dims &d, int64_t gb) {
  if (d.key_decay) {
    const int w = threadIdx.x / kTile;
#pragma unroll
    for (int r = 0; r < kR; ++r)
      dr[r] = w + kWarps * r < d.Dk ? expf(bf2f(g[gb * d.Dk + w + kWarps * r]))
                                    : 0.f;
    return;
  }
  const float e = expf(bf2f(g[gb]));
#pragma unroll
  for (int r = 0; r < kR; ++r)
    dr[r] = e;
}

/// The block's index among all (batch, head group, tile) blocks.
__device__ __forceinline__ int64_t block_slot(const Dims &d) {
  return (int64_t(blockIdx.z) * d.groups() + blockIdx.y) * d.tiles() +
         blockIdx.x;
}

/// The thread's rows of a Dk vector (0 past Dk).
template <int kR>
__device__ __forceinline__ void load_rows(float (&x)[kR], const bf16 *row,
                                          int64_t Dk) {
  const int w = threadIdx.x / kTile;
#pragma unroll
  for (int r = 0; r < kR; ++r)
    x[r] = w + kWarps * r < Dk ? bf2f(row[w + kWarps * r]) : 0.f;
}

/// A block's state in scratch, kR·kBlock floats, each thread's own part.
template <int kR>
__device__ __forceinline__ void put(float *at, const float (&x)[kR]) {
#pragma unroll
  for (int r = 0; r < kR; ++r)
    at[r * kBlock + threadIdx.x] = x[r];
}
template <int kR>
__device__ __forceinline__ void get(float (&x)[kR], const float *at) {
#pragma unroll
  for (int r = 0; r < kR; ++r)
    x[r] = at[r * kBlock + threadIdx.x];
}

/// Σ over warps of part[w][lane], in warp order.
__device__ __forceinline__ float column_sum(const float (*part)[kTile]) {
  float s = 0.f;
  for (int w = 0; w < kWarps; ++w)
    s += part[w][threadIdx.x % kTile];
  return s;
}

/// One step on the thread's part of S: S ← e^g·S; u = Sᵀk (0 without the
/// delta rule); S += k·deltaᵀ with delta = beta·(v − u). Returns u. One
/// barrier, either way: callers alternate `part` between steps.
template <int kR>
__device__ __forceinline__ float
advance(float (&S)[kR], const float (&kr)[kR], const float (&decay)[kR],
        float beta, float vj, bool with_delta, float (*part)[kTile]) {
  float pu = 0.f;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    S[r] *= decay[r];
    pu += S[r] * kr[r];
  }
  part[threadIdx.x / kTile][threadIdx.x % kTile] = pu;
  __syncthreads();
  const float u = with_delta ? column_sum(part) : 0.f;
  const float delta = beta * (vj - u);
#pragma unroll
  for (int r = 0; r < kR; ++r)
    S[r] += kr[r] * delta;
  return u;
}

// o = Sᵀq per position; with ckpt, the state before every kChunk-th
// position instead (o null).
template <int kR>
__global__ void __launch_bounds__(kBlock)
    gated_scan_forward_kernel(bf16 *o, float *ckpt, const bf16 *q,
                               const bf16 *k, const bf16 *v, const bf16 *g,
                               const bf16 *beta, Dims d) {
  __shared__ float part[2][kWarps][kTile], opart[kWarps][kTile];
  const int lane = threadIdx.x % kTile, w = threadIdx.x / kTile;
  const Column col = column_of(d);
  const int64_t b = blockIdx.z, h = col.h, j = col.j;
  const int64_t per = kR * kBlock, slot = block_slot(d);
  float S[kR] = {}, kr[kR];
  for (int64_t t = 0; t < d.T; ++t) {
    if (ckpt && t % kChunk == 0)
      put(ckpt + (slot * d.chunks() + t / kChunk) * per, S);
    load_rows(kr, k + d.qk(b, t, h), d.Dk);
    const float vj = col.valid ? bf2f(v[d.vo(b, t, h) + j]) : 0.f;
    float dr[kR];
    load_decays(dr, g, d, d.gb(b, t, h));
    advance(S, kr, dr, bf2f(beta[d.gb(b, t, h)]), vj, d.delta, part[t & 1]);
    if (!o)
      continue;
    float qr[kR], po = 0.f;
    load_rows(qr, q + d.qk(b, t, h), d.Dk);
#pragma unroll
    for (int r = 0; r < kR; ++r)
      po += S[r] * qr[r];
    opart[w][lane] = po;
    __syncthreads();
    if (w == 0 && col.valid)
      o[d.vo(b, t, h) + j] = f2bf(column_sum(opart));
  }
}

// Chunks [c_begin, c_end) of the backward, in reverse. Shared memory: pq,
// pk (and pg where the decay is per key channel) [8·kR][kTile + 1], the
// terms of dq, dk (and dg) before their sums over columns.
template <int kR>
__global__ void __launch_bounds__(kBlock)
    gated_scan_backward_kernel(bf16 *dv, float *block_partials,
                               float *head_partials, float *states,
                               float *carry, const float *ckpt,
                               const bf16 *dout, const bf16 *q, const bf16 *k,
                               const bf16 *v, const bf16 *g, const bf16 *beta,
                               Dims d, int64_t c_begin, int64_t c_end) {
  constexpr int kRows = kWarps * kR, kPad = kTile + 1;
  MT_DYNAMIC_SHARED(smem);
  float *pq = reinterpret_cast<float *>(smem), *pk = pq + kRows * kPad,
        *pgk = pk + kRows * kPad;
  __shared__ float part[2][kWarps][kTile], ddp[kWarps][kTile],
      dgp[kWarps][kTile], us[kChunk][kTile];
  const int lane = threadIdx.x % kTile, w = threadIdx.x / kTile;
  const Column col = column_of(d);
  const int64_t b = blockIdx.z, h = col.h, j = col.j;
  const int64_t per = kR * kBlock, slot = block_slot(d);
  float *chunk_states = states + slot * kChunk * per;
  float dS[kR] = {}, kr[kR];
  if (c_end < d.chunks())
    get(dS, carry + slot * per);
  for (int64_t c = c_end - 1; c >= c_begin; --c) {
    const int64_t t0 = c * kChunk, len = min64(kChunk, d.T - t0);
    float S[kR];
    get(S, ckpt + (slot * d.chunks() + c) * per);
    for (int64_t tau = 0; tau < len; ++tau) {
      const int64_t t = t0 + tau;
      put(chunk_states + tau * per, S);
      load_rows(kr, k + d.qk(b, t, h), d.Dk);
      const float vj = col.valid ? bf2f(v[d.vo(b, t, h) + j]) : 0.f;
      float dr[kR];
      load_decays(dr, g, d, d.gb(b, t, h));
      const float u = advance(S, kr, dr, bf2f(beta[d.gb(b, t, h)]), vj, d.delta,
                              part[tau & 1]);
      if (w == 0)
        us[tau][lane] = u; // read after the next barrier
    }
    for (int64_t tau = len - 1; tau >= 0; --tau) {
      const int64_t t = t0 + tau;
      float decay[kR];
      load_decays(decay, g, d, d.gb(b, t, h));
      const float bt = bf2f(beta[d.gb(b, t, h)]);
      const float corr = d.delta ? bt : 0.f; // the correction's beta
      const float vj = col.valid ? bf2f(v[d.vo(b, t, h) + j]) : 0.f;
      const float doj = col.valid ? bf2f(dout[d.vo(b, t, h) + j]) : 0.f;
      float qr[kR];
      load_rows(qr, q + d.qk(b, t, h), d.Dk);
      load_rows(kr, k + d.qk(b, t, h), d.Dk);
      // dS += q·doᵀ; ddelta = dSᵀk.
      float pd = 0.f;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        dS[r] += qr[r] * doj;
        pd += dS[r] * kr[r];
      }
      ddp[w][lane] = pd;
      __syncthreads();
      const float ddelta = column_sum(ddp), u = us[tau][lane];
      const float delta = bt * (vj - u);
      // With Sp = e^g·S_{t−1} and S_t = Sp + k·deltaᵀ: dq = S_t·do, dk =
      // dS·delta − beta·Sp·ddelta, dSp = dS − k·(beta·ddelta)ᵀ (without the
      // delta rule, dk = dS·delta and dSp = dS), dg = ⟨Sp, dSp⟩ (over each
      // row where the decay is per key channel), and dS_{t−1} = e^g·dSp.
      float pg = 0.f;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int i = w + kWarps * r;
        const float sp =
            decay[r] * chunk_states[tau * per + r * kBlock + threadIdx.x];
        pq[i * kPad + lane] = (sp + kr[r] * delta) * doj;
        pk[i * kPad + lane] = dS[r] * delta - corr * sp * ddelta;
        dS[r] -= kr[r] * corr * ddelta;
        if (d.key_decay)
          pgk[i * kPad + lane] = sp * dS[r];
        pg += sp * dS[r];
        dS[r] *= decay[r];
      }
      dgp[w][lane] = pg;
      // The records of this position: the block's (dq, dk), and one per
      // head of the block (dg, dbeta; this lane's head is h).
      const int64_t at = (t - c_begin * kChunk) * d.Bn + b;
      float *out = block_partials +
                   ((at * d.groups() + blockIdx.y) * d.tiles() + blockIdx.x) *
                       d.block_width();
      const int64_t first = int64_t(blockIdx.y) * d.pack;
      auto head_record = [&](int64_t head) {
        return head_partials +
               ((at * d.Hv + head) * d.tiles() + blockIdx.x) * d.head_width();
      };
      if (w == 0 && col.owner) {
        head_record(h)[d.lanes + col.c] = ddelta * (vj - u);
        if (dv && col.valid)
          add_store(dv, d.vo(b, t, h) + j, bt * ddelta);
      }
      __syncthreads();
      // Lanes of no column hold zeros, so dq and dk sum every lane.
      for (int64_t i = threadIdx.x; i < d.Dk; i += kBlock) {
        float sq = 0.f, sk = 0.f;
        for (int l = 0; l < kTile; ++l) {
          sq += pq[i * kPad + l];
          sk += pk[i * kPad + l];
        }
        out[i] = sq;
        out[d.Dk + i] = sk;
      }
      if (d.key_decay)
        for (int64_t e = threadIdx.x; e < d.Dk * d.pack; e += kBlock) {
          const int64_t i = e % d.Dk, p = e / d.Dk;
          if (first + p >= d.Hv)
            continue;
          float sg = 0.f;
          for (int l = int(p) * d.lanes; l < (int(p) + 1) * d.lanes; ++l)
            sg += pgk[i * kPad + l];
          head_record(first + p)[2 * d.lanes + i] = sg;
        }
      if (threadIdx.x < kTile && col.owner)
        head_record(h)[col.c] = column_sum(dgp);
    }
  }
  if (c_begin > 0)
    put(carry + slot * per, dS);
}

// dq, dk [b, t0 + tl, hk, i] += the partials of the key head's blocks.
__global__ void gated_scan_reduce_qk(bf16 *dq, bf16 *dk, const float *partials,
                                      Dims d, int64_t t0, int64_t len) {
  const int64_t n = d.Bn * len * d.Hk * d.Dk, tiles = d.tiles();
  const int64_t W = d.block_width(), G = d.Hv / d.Hk;
  const int64_t per_key = (G + d.pack - 1) / d.pack; // blocks of a key head
  for (int64_t e = global_index(); e < n; e += global_stride()) {
    const int64_t i = e % d.Dk, hk = e / d.Dk % d.Hk;
    const int64_t tl = e / (d.Dk * d.Hk) % len, b = e / (d.Dk * d.Hk * len);
    float sq = 0.f, sk = 0.f;
    for (int64_t y = hk * per_key; y < min64((hk + 1) * per_key, d.groups());
         ++y) {
      const float *p =
          partials + ((tl * d.Bn + b) * d.groups() + y) * tiles * W;
      for (int64_t tile = 0; tile < tiles; ++tile) {
        sq += p[tile * W + i];
        sk += p[tile * W + d.Dk + i];
      }
    }
    const int64_t at = ((b * d.T + t0 + tl) * d.Hk + hk) * d.Dk + i;
    if (dq)
      add_store(dq, at, sq);
    if (dk)
      add_store(dk, at, sk);
  }
}

// dg [b, t0 + tl, h, i] += the partials of row i, a decay per key channel.
__global__ void gated_scan_reduce_gk(bf16 *dg, const float *partials, Dims d,
                                     int64_t t0, int64_t len) {
  const int64_t n = d.Bn * len * d.Hv * d.Dk, tiles = d.tiles();
  const int64_t W = d.head_width();
  for (int64_t e = global_index(); e < n; e += global_stride()) {
    const int64_t i = e % d.Dk, h = e / d.Dk % d.Hv;
    const int64_t tl = e / (d.Dk * d.Hv) % len, b = e / (d.Dk * d.Hv * len);
    const float *p = partials + ((tl * d.Bn + b) * d.Hv + h) * tiles * W;
    float sg = 0.f;
    for (int64_t tile = 0; tile < tiles; ++tile)
      sg += p[tile * W + 2 * d.lanes + i];
    add_store(dg, ((b * d.T + t0 + tl) * d.Hv + h) * d.Dk + i, sg);
  }
}

// dg (a decay per head), dbeta [b, t0 + tl, h] += the partials of every
// column.
__global__ void gated_scan_reduce_gb(bf16 *dg, bf16 *dbeta,
                                      const float *partials, Dims d, int64_t t0,
                                      int64_t len) {
  const int64_t n = d.Bn * len * d.Hv, tiles = d.tiles(), W = d.head_width();
  for (int64_t e = global_index(); e < n; e += global_stride()) {
    const int64_t h = e % d.Hv, tl = e / d.Hv % len, b = e / (d.Hv * len);
    const float *p = partials + ((tl * d.Bn + b) * d.Hv + h) * tiles * W;
    float sg = 0.f, sb = 0.f;
    for (int64_t tile = 0; tile < tiles; ++tile)
      for (int l = 0; l < d.lanes; ++l) {
        sg += p[tile * W + l];
        sb += p[tile * W + d.lanes + l];
      }
    const int64_t at = (b * d.T + t0 + tl) * d.Hv + h;
    if (dg)
      add_store(dg, at, sg);
    if (dbeta)
      add_store(dbeta, at, sb);
  }
}

Dims checked_dims(const char *op, int64_t Bn, int64_t T, int64_t Hk, int64_t Hv,
                  int64_t Dk, int64_t Dv, bool delta, bool key_decay) {
  if (Hk <= 0 || Hv % Hk != 0)
    fail("cuda ", op, ": ", Hv, " value heads do not group over ", Hk,
         " key heads");
  if (Dk > kMaxDk)
    fail("cuda ", op, ": key head dim ", Dk, " is over the ", kMaxDk,
         " the gated scan kernels support");
  // A head narrower than a tile takes the power of 2 lanes that hold its
  // columns; as many heads share a block as fill it, and divide a key
  // head's group, so that a block reads one key head.
  int lanes = 1;
  while (lanes < min64(Dv, kTile))
    lanes *= 2;
  int pack = kTile / lanes;
  while (Hk > 1 && (Hv / Hk) % pack != 0)
    pack /= 2;
  return {Bn, T, Hk, Hv, Dk, Dv, delta, key_decay, lanes, pack};
}

/// Calls f(std::integral_constant<int, kR>) with the rows per thread for Dk.
template <class F> void with_rows(int64_t Dk, F &&f) {
  if (Dk <= kWarps)
    f(std::integral_constant<int, 1>());
  else if (Dk <= 2 * kWarps)
    f(std::integral_constant<int, 2>());
  else if (Dk <= 4 * kWarps)
    f(std::integral_constant<int, 4>());
  else if (Dk <= 8 * kWarps)
    f(std::integral_constant<int, 8>());
  else if (Dk <= 16 * kWarps)
    f(std::integral_constant<int, 16>());
  else
    f(std::integral_constant<int, 32>());
}

dim3 grid_of(const Dims &d) {
  return dim3(unsigned(d.tiles()), unsigned(d.groups()), unsigned(d.Bn));
}

} // namespace

void CudaKernels::gated_scan_forward(void *o, const void *q, const void *k,
                                     const void *v, const void *g,
                                     const void *beta, int64_t Bn, int64_t T,
                                     int64_t Hk, int64_t Hv, int64_t Dk,
                                     int64_t Dv, bool delta, bool key_decay) {
  if (Bn * T * Hv * Dv <= 0)
    return;
  const Dims d = checked_dims("gated_scan_forward", Bn, T, Hk, Hv, Dk, Dv,
                              delta, key_decay);
  with_rows(Dk, [&](auto rows) {
    constexpr int kR = decltype(rows)::value;
    MT_LAUNCH(gated_scan_forward_kernel<kR>, grid_of(d), dim3(kBlock),
              cudaStream_t(stream_), B(o), static_cast<float *>(nullptr), B(q),
              B(k), B(v), B(g), B(beta), d);
  });
}

void CudaKernels::gated_scan_backward(void *dq, void *dk, void *dv, void *dg,
                                      void *dbeta, const void *dout,
                                      const void *q, const void *k,
                                      const void *v, const void *g,
                                      const void *beta, int64_t Bn, int64_t T,
                                      int64_t Hk, int64_t Hv, int64_t Dk,
                                      int64_t Dv, bool delta, bool key_decay) {
  if (Bn * T * Hv * Dv <= 0 || (!dq && !dk && !dv && !dg && !dbeta))
    return;
  const Dims d = checked_dims("gated_scan_backward", Bn, T, Hk, Hv, Dk, Dv,
                              delta, key_decay);
  const cudaStream_t s = cudaStream_t(stream_);
  with_rows(Dk, [&](auto rows) {
    constexpr int kR = decltype(rows)::value;
    const int64_t per = kR * kBlock, blocks = Bn * d.groups() * d.tiles();
    const int64_t segment = min64(T, kSegmentChunks * kChunk);
    const int64_t ckpt_n = blocks * d.chunks() * per,
                  states_n = blocks * kChunk * per, carry_n = blocks * per;
    const int64_t block_partials_n = segment * blocks * d.block_width(),
                  head_partials_n =
                      segment * Bn * Hv * d.tiles() * d.head_width();
    float *ckpt = static_cast<float *>(scratch(
        (ckpt_n + states_n + carry_n + block_partials_n + head_partials_n) *
        int64_t(sizeof(float))));
    float *states = ckpt + ckpt_n, *carry = states + states_n,
          *block_partials = carry + carry_n,
          *head_partials = block_partials + block_partials_n;
    MT_LAUNCH(gated_scan_forward_kernel<kR>, grid_of(d), dim3(kBlock), s,
              static_cast<bf16 *>(nullptr), ckpt, B(q), B(k), B(v), B(g),
              B(beta), d);
    const size_t shared =
        size_t((key_decay ? 3 : 2) * kWarps * kR * (kTile + 1)) * sizeof(float);
    for (int64_t c_end = d.chunks(); c_end > 0;) {
      const int64_t c_begin = max64(0, c_end - kSegmentChunks);
      const int64_t t0 = c_begin * kChunk, len = min64(T, c_end * kChunk) - t0;
      launch_kernel_shared(
          "gated_scan_backward_kernel", gated_scan_backward_kernel<kR>,
          grid_of(d), dim3(kBlock), shared, s, B(dv), block_partials,
          head_partials, states, carry, static_cast<const float *>(ckpt),
          B(dout), B(q), B(k), B(v), B(g), B(beta), d, c_begin, c_end);
      if (dq || dk)
        MT_LAUNCH(gated_scan_reduce_qk, blocks_for(Bn * len * Hk * Dk),
                  kThreads, s, B(dq), B(dk),
                  static_cast<const float *>(block_partials), d, t0, len);
      if (dg && key_decay)
        MT_LAUNCH(gated_scan_reduce_gk, blocks_for(Bn * len * Hv * Dk),
                  kThreads, s, B(dg), static_cast<const float *>(head_partials),
                  d, t0, len);
      if ((dg && !key_decay) || dbeta)
        MT_LAUNCH(gated_scan_reduce_gb, blocks_for(Bn * len * Hv), kThreads, s,
                  B(key_decay ? nullptr : dg), B(dbeta),
                  static_cast<const float *>(head_partials), d, t0, len);
      c_end = c_begin;
    }
  });
}

} // namespace mtrt::MT_KNS
