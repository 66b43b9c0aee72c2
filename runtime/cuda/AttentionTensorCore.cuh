//===- AttentionTensorCore.cuh - flash attention on tensor cores --------===//
//
// Head dims up to 512 (zero-padded to DM = 64, 128, 256 or 512), every
// product on tensor cores (Mma.cuh: bf16 operands, f32 accumulation); the
// backward is two passes, dQ and dK/dV, both deterministic. With the
// runtime's tiles (Tiles below, whose other choices the tile benchmark
// times) a block is four warps; each warp owns 16 rows of the block's 64
// (wide heads: fewer, below) and keeps its results in registers in the MMA
// layout:
//
//  - Forward: rows are queries. S = Q·Kᵀ for a key tile of 64 (32 when
//    DM > 128), the online softmax on S's fragments (each row's max and sum
//    over the four lanes that hold it), then O += P·V with P rounded to
//    bf16 straight from S's fragments (D's layout is A's). Scores are kept
//    in base-2 units (times log2 e, folded into the scale), so that each
//    exponential is one exp2. Where the backward follows, each row's
//    log-sum-exp is kept too.
//  - dQ: rows are queries, key tiles of 32 (16 past DM = 128): S = Q·Kᵀ
//    and dP = dY·Vᵀ, then dS = P ∘ (dP − δ) and dQ += dS·K, with δ from
//    attention_delta and P = 2^(S − lse) from the forward's log-sum-exp
//    (no running max or sum). FlashAttention 2 gets dQ from the dK/dV pass
//    with atomic adds instead: one pass fewer, but not deterministic.
//  - dK/dV: rows are keys (64 a block; 32 at DM = 256, whose output dims
//    two warps split; 16 at DM = 512, split over all four), query tiles of
//    16 (32 at DM = 64): Sᵀ = K·Qᵀ and dPᵀ = V·dYᵀ, then dV += Pᵀ·dY and
//    dK += dSᵀ·Q, over every query head of the group. Warps that split a
//    key's output dims split the k-steps of Sᵀ and dPᵀ too, and add their
//    parts up in shared memory. Given room for it, this pass also writes
//    dSᵀ in bf16 (as the products read it), and dQ = dS·K is then one
//    batched dense GEMM over it (CudaKernels::attention_backward) instead
//    of the dQ pass, which computes S and dP again: 4 products of ours and
//    a cuBLAS GEMM instead of 7 of ours.
//
// Q, K, V, dY and the results are rows of D a stride apart (HeadLayout.h:
// D heads-major, heads·D sequence-major), read and written in place; each
// kernel finds its heads' first rows by the layout. Tiles come from global
// memory by asynchronous copies (AsyncCopy.cuh), all of a tile's in flight
// together. Up to DM = 128 the tiles a loop walks through (K and V in the
// forward and dQ, Q, dY and their row statistics in dK/dV) have two
// buffers: the next tile's copies fly while the block computes on the
// current one (KeyTiles, QueryTiles).
//
// Past DM = 128 the tiles shrink and a warp's rows stay in shared memory; at
// DM = 512 two warps share 16 query rows in the forward and dQ too, each
// accumulating half the output dims (Tiles below). Tiles live in dynamic
// shared memory as rows of DM + 8 bf16: the 16-byte pad puts the eight rows
// an ldmatrix phase reads on different banks. Fragments come from the tiles by
// ldmatrix (Mma.cuh); a B operand that runs along the tile's rows (V in P·V, K
// in dS·K, Q and dY in the dK/dV products) is loaded transposed.
//
//===----------------------------------------------------------------------===//

#ifndef MEGATRAIN_RUNTIME_CUDA_ATTENTIONTENSORCORE_CUH
#define MEGATRAIN_RUNTIME_CUDA_ATTENTIONTENSORCORE_CUH

#include "runtime/cuda/AsyncCopy.cuh"
#include "runtime/cuda/AttentionCommon.cuh"
#include "runtime/cuda/Mma.cuh"

namespace mtrt::MT_KNS::attn::tc {

/// Waits for the calling thread's copies; a barrier after it shows every
/// thread's to the block.
__device__ __forceinline__ void stage_wait() {
  async::commit();
  async::wait<0>();
}

/// Starts copying rows [r0, r0 + ROWS) of a matrix of S rows of D, `ld`
/// elements apart (one head's rows: HeadLayout::row_stride), into a tile of
/// DM (+ 8 pad) columns, zero past S and past D. A thread's share is one
/// 16-byte column piece of every kRowStep-th row; where all of its rows lie
/// in the matrix (most tiles) it only issues copies, a constant stride
/// apart, all in flight together. Otherwise row by row, the edges element
/// by element.
template <int ROWS, int DM, int Threads>
__device__ __forceinline__ void stage_async(bf16 (*tile)[DM + 8], const bf16 *m,
                                            int64_t r0, int64_t S, int64_t D,
                                            int64_t ld) {
  constexpr int kPieces = DM / 8, kRowStep = Threads / kPieces;
  static_assert(Threads % kPieces == 0 && ROWS % kRowStep == 0);
  const int rr = threadIdx.x / kPieces, c = threadIdx.x % kPieces * 8;
  // Every row's pieces 16-byte aligned: the head's first and the stride.
  const bool vec = D % 8 == 0 && ld % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(m) % 16 == 0 && c + 8 <= D;
  if (vec && r0 + ROWS <= S) {
    const bf16 *src = m + (r0 + rr) * ld + c;
#pragma unroll
    for (int p = 0; p < ROWS / kRowStep; ++p)
      async::copy16(&tile[rr + p * kRowStep][c], src + p * kRowStep * ld);
    return;
  }
#pragma unroll 1
  for (int r = rr; r < ROWS; r += kRowStep) {
    const int64_t row = r0 + r;
    bf16 *dst = &tile[r][c];
    if (vec && row < S) {
      async::copy16(dst, m + row * ld + c);
    } else {
      for (int e = 0; e < 8; ++e)
        dst[e] = row < S && c + e < D ? m[row * ld + c + e] : f2bf(0.f);
    }
  }
}

/// Starts copying rows [i0, i0 + n) of one head's log-sum-exp and δ (row
/// index `base` of the head's first row) into shared arrays, 0 past S.
template <int Threads>
__device__ __forceinline__ void
stage_row_stats_async(float *ls, float *ds, const float *lse,
                      const float *delta, int64_t base, int64_t i0, int64_t S,
                      int n) {
  for (int ii = threadIdx.x; ii < n; ii += Threads) {
    if (i0 + ii < S) {
      async::copy4(ls + ii, lse + base + i0 + ii);
      async::copy4(ds + ii, delta + base + i0 + ii);
    } else {
      ls[ii] = ds[ii] = 0.f;
    }
  }
}

/// A tile staged whole (stage_async, then stage_wait): the caller's next
/// barrier shows it to the block.
template <int ROWS, int DM, int Threads>
__device__ __forceinline__ void stage(bf16 (*tile)[DM + 8], const bf16 *m,
                                      int64_t r0, int64_t S, int64_t D,
                                      int64_t ld) {
  stage_async<ROWS, DM, Threads>(tile, m, r0, S, D, ld);
  stage_wait();
}

/// Two tiles of the same rows staged at once (K and V, or Q and dY), so
/// that their copies share one wait.
template <int ROWS, int DM, int Threads>
__device__ __forceinline__ void
stage_pair(bf16 (*a)[DM + 8], const bf16 *ma, bf16 (*b)[DM + 8], const bf16 *mb,
           int64_t r0, int64_t S, int64_t D, int64_t ld) {
  stage_async<ROWS, DM, Threads>(a, ma, r0, S, D, ld);
  stage_async<ROWS, DM, Threads>(b, mb, r0, S, D, ld);
  stage_wait();
}

__device__ __forceinline__ bf16 at(const bf16 *m, int64_t row, int64_t col,
                                   int64_t S, int64_t D, int64_t ld) {
  return row < S && col < D ? m[row * ld + col] : f2bf(0.f);
}

/// The turn of a loop's staged tiles: arrive() at the top of each
/// iteration makes the tile in use visible to the block. With one buffer it
/// stages that tile now (`stage_now`); with two it flips buffers, starts the
/// next tile's copies into the other one (`stage_next(into)`, if there is a
/// next) and waits for this tile's, which the previous turn (or the loop's
/// start) set flying. Every thread calls arrive (barriers).
template <int Buffers> struct TileTurn {
  static_assert(Buffers == 1 || Buffers == 2);
  int buf = 1; // the buffer of the tile in use

  template <class StageNow, class StageNext>
  __device__ __forceinline__ void arrive(const StageNow &stage_now,
                                         bool has_next,
                                         const StageNext &stage_next) {
    __syncthreads(); // every warp is done with the buffer staged next
    if constexpr (Buffers == 1) {
      buf = 0;
      stage_now();
    } else {
      buf ^= 1;
      if (has_next)
        stage_next(buf ^ 1);
      async::commit();
      async::wait<1>(); // this tile's copies have landed
    }
    __syncthreads();
  }
};

/// The K and V tiles of a loop over key tiles [j0, j0 + BC), j0 from `first`
/// up to `end`: arrive(j0) at the top of each iteration stages tile j0 and
/// shows it to the block (k() and v()). With two buffers (ks and vs then
/// hold 2·BC rows each) the next tile's copies are in flight while the
/// block computes on the current one. kh and vh: the KV head's row 0, rows
/// `ld` apart. Every thread calls arrive (barriers).
template <int BC, int DM, int Buffers, int Threads> struct KeyTiles {
  bf16 (*ks)[DM + 8], (*vs)[DM + 8];
  const bf16 *kh, *vh;
  int64_t end, S, D, ld;
  TileTurn<Buffers> turn;

  __device__ __forceinline__ KeyTiles(bf16 (*ks_)[DM + 8], bf16 (*vs_)[DM + 8],
                                      const bf16 *kh_, const bf16 *vh_,
                                      int64_t first, int64_t end_, int64_t S_,
                                      int64_t D_, int64_t ld_)
      : ks(ks_), vs(vs_), kh(kh_), vh(vh_), end(end_), S(S_), D(D_), ld(ld_) {
    if constexpr (Buffers == 2) {
      if (first < end)
        fill(0, first);
      async::commit();
    }
  }

  __device__ __forceinline__ void arrive(int64_t j0) {
    turn.arrive(
        [&] { stage_pair<BC, DM, Threads>(ks, kh, vs, vh, j0, S, D, ld); },
        j0 + BC < end, [&](int into) { fill(into, j0 + BC); });
  }
  __device__ __forceinline__ const bf16 (*k() const)[DM + 8] {
    return ks + turn.buf * BC;
  }
  __device__ __forceinline__ const bf16 (*v() const)[DM + 8] {
    return vs + turn.buf * BC;
  }

private:
  __device__ __forceinline__ void fill(int into, int64_t j0) {
    stage_async<BC, DM, Threads>(ks + into * BC, kh, j0, S, D, ld);
    stage_async<BC, DM, Threads>(vs + into * BC, vh, j0, S, D, ld);
  }
};

/// The Q and dY tiles and row statistics (log-sum-exp, δ) of dK/dV's loop
/// over query tiles of sequence b's heads (H of them, laid out as `layout`
/// says): arrive() at the top of each iteration, given the tile in use
/// (query head h, rows from i0) and the one after it (if any), stages the
/// first and shows it to the block. With two buffers the next tile's copies
/// are in flight while the block computes on this one. Every thread calls
/// arrive (barriers).
template <int BQ, int DM, int Buffers, int Threads> struct QueryTiles {
  bf16 (*qs)[DM + 8], (*dys)[DM + 8];
  float *ls, *dls;
  const bf16 *q, *dy;
  const float *lse, *delta;
  int64_t b, H, S, D;
  HeadLayout layout;
  TileTurn<Buffers> turn;

  /// Starts the first tile's copies (h, i0) when there are two buffers.
  __device__ __forceinline__ void start(int64_t h, int64_t i0) {
    if constexpr (Buffers == 2) {
      fill(0, h, i0);
      async::commit();
    }
  }
  __device__ __forceinline__ void arrive(int64_t h, int64_t i0, bool has_next,
                                         int64_t next_h, int64_t next_i0) {
    turn.arrive(
        [&] {
          fill(0, h, i0);
          stage_wait();
        },
        has_next, [&](int into) { fill(into, next_h, next_i0); });
  }
  __device__ __forceinline__ const bf16 (*q_tile() const)[DM + 8] {
    return qs + turn.buf * BQ;
  }
  __device__ __forceinline__ const bf16 (*dy_tile() const)[DM + 8] {
    return dys + turn.buf * BQ;
  }
  __device__ __forceinline__ const float *lse_tile() const {
    return ls + turn.buf * BQ;
  }
  __device__ __forceinline__ const float *delta_tile() const {
    return dls + turn.buf * BQ;
  }

private:
  __device__ __forceinline__ void fill(int into, int64_t h, int64_t i0) {
    const int64_t at = layout.head_offset(b, h, H, S, D),
                  ld = layout.row_stride(H, D);
    stage_async<BQ, DM, Threads>(qs + into * BQ, q + at, i0, S, D, ld);
    stage_async<BQ, DM, Threads>(dys + into * BQ, dy + at, i0, S, D, ld);
    stage_row_stats_async<Threads>(ls + into * BQ, dls + into * BQ, lse, delta,
                                   (b * H + h) * S, i0, S, BQ);
  }
};

/// A-operand fragments of a warp's 16 rows [r0, r0 + 16) of a matrix of S
/// rows of D, `ld` elements apart, in global memory, 16 columns per k-step.
template <int KS>
__device__ __forceinline__ void load_a(uint32_t (&f)[KS][4], const bf16 *m,
                                       int64_t r0, int64_t S, int64_t D,
                                       int64_t ld) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // Most warps: all 16 rows in the matrix, no padded columns: each word is
  // two neighbours, one 4-byte load without bounds tests.
  if (r0 + 16 <= S && D == 16 * KS && ld % 2 == 0 &&
      reinterpret_cast<uintptr_t>(m) % 4 == 0) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        f[kk][r] = load_word(m + (r0 + g + 8 * (r % 2)) * ld + kk * 16 + 2 * t +
                             8 * (r / 2));
    return;
  }
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t row = r0 + g + 8 * (r % 2);
      const int64_t col = kk * 16 + 2 * t + 8 * (r / 2);
      f[kk][r] =
          pack_bf16(at(m, row, col, S, D, ld), at(m, row, col + 1, S, D, ld));
    }
}

/// A-operand fragments of rows [r0, r0 + 16) of a shared tile, k-step kk:
/// matrices (rows, cols) (r0, c), (r0 + 8, c), (r0, c + 8), (r0 + 8, c + 8).
template <int DM>
__device__ __forceinline__ void
tile_a(uint32_t (&a)[4], const bf16 (*tile)[DM + 8], int r0, int kk) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  ldmatrix_x4<false>(a, &tile[r0 + m % 2 * 8 + lane % 8][kk * 16 + m / 2 * 8]);
}

/// B operands of two n-tiles, the tile's rows [n0, n0 + 8) and [n0 + 8,
/// n0 + 16) as columns (B[k][n] = tile[n0 + n][kk·16 + k]): the product
/// with the tile transposed. b[0] for n0, b[1] for n0 + 8.
template <int DM>
__device__ __forceinline__ void
tile_bt2(uint32_t (&b)[2][2], const bf16 (*tile)[DM + 8], int n0, int kk) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  uint32_t r[4];
  ldmatrix_x4<false>(r, &tile[n0 + m / 2 * 8 + lane % 8][kk * 16 + m % 2 * 8]);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

/// B operands of two n-tiles of the tile itself: rows [k0, k0 + 16) by
/// columns [n0, n0 + 8) (b[0]) and [n0 + 8, n0 + 16) (b[1]).
template <int DM>
__device__ __forceinline__ void
tile_b2(uint32_t (&b)[2][2], const bf16 (*tile)[DM + 8], int k0, int n0) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  uint32_t r[4];
  ldmatrix_x4<true>(r, &tile[k0 + m % 2 * 8 + lane % 8][n0 + m / 2 * 8]);
  b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
}

/// The A operand for k-step kk of a product whose left side is an earlier
/// product's result `c` (16 rows × 8·N columns, D layout), rounded to bf16.
template <int N>
__device__ __forceinline__ void result_a(uint32_t (&a)[4],
                                         const float (&c)[N][4], int kk) {
  a[0] = pack_f32(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack_f32(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack_f32(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack_f32(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/// c[mt][nt] += a[mt] · (the tile's rows [8·nt, 8·nt + 8))ᵀ at k-step kk,
/// for the N n-tiles of MT m-tiles of 16 rows against the tile's first 8·N
/// rows: each B fragment loaded once for the MT products.
template <int DM, int MT, int N>
__device__ __forceinline__ void mma_tile_t(float (&c)[MT][N][4],
                                           const uint32_t (&a)[MT][4],
                                           const bf16 (*tile)[DM + 8], int kk) {
#pragma unroll
  for (int nt = 0; nt < N; nt += 2) {
    uint32_t bf[2][2];
    tile_bt2<DM>(bf, tile, nt * 8, kk);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      mma_bf16(c[mt][nt], a[mt], bf[0]);
      mma_bf16(c[mt][nt + 1], a[mt], bf[1]);
    }
  }
}
/// The same for a warp's 16 rows.
template <int DM, int N>
__device__ __forceinline__ void mma_tile_t(float (&c)[N][4],
                                           const uint32_t (&a)[4],
                                           const bf16 (*tile)[DM + 8], int kk) {
  mma_tile_t<DM, 1, N>(reinterpret_cast<float(&)[1][N][4]>(c),
                       reinterpret_cast<const uint32_t(&)[1][4]>(a), tile, kk);
}

/// acc[mt] += r[mt] · tile[0, 8·K)[n0, n0 + 8·N): an earlier product's
/// result r (MT m-tiles of 16 rows × 8·K, rounded to bf16) times the tile's
/// first 8·K rows, each B fragment loaded once for the MT products.
template <int DM, int MT, int K, int N>
__device__ __forceinline__ void
mma_result_tile(float (&acc)[MT][N][4], const float (&r)[MT][K][4],
                const bf16 (*tile)[DM + 8], int n0) {
#pragma unroll
  for (int kk = 0; kk < K / 2; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      result_a<K>(a[mt], r[mt], kk);
#pragma unroll
    for (int nt = 0; nt < N; nt += 2) {
      uint32_t bf[2][2];
      tile_b2<DM>(bf, tile, kk * 16, n0 + nt * 8);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_bf16(acc[mt][nt], a[mt], bf[0]);
        mma_bf16(acc[mt][nt + 1], a[mt], bf[1]);
      }
    }
  }
}
/// The same for a warp's 16 rows.
template <int DM, int K, int N>
__device__ __forceinline__ void
mma_result_tile(float (&acc)[N][4], const float (&r)[K][4],
                const bf16 (*tile)[DM + 8], int n0) {
  mma_result_tile<DM, 1, K, N>(reinterpret_cast<float(&)[1][N][4]>(acc),
                               reinterpret_cast<const float(&)[1][K][4]>(r),
                               tile, n0);
}

/// Sum (or max) over the four lanes holding one row of a D fragment.
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/// The block's query tile, the grid's last first: under a causal mask a
/// later tile sees more keys, so the heaviest blocks start first and the
/// grid's last wave is its lightest (blocks start in blockIdx order).
__device__ __forceinline__ int64_t last_tile_first() {
  return int64_t(gridDim.x) - 1 - blockIdx.x;
}

/// Whether none of a warp's query rows [w0, w0 + rows) sees any key of
/// [j0, j0 + keys).
__device__ __forceinline__ bool warp_sees_none(int64_t w0, int rows, int64_t j0,
                                               int keys, KeyRange range) {
  return j0 > w0 + rows - 1 || j0 + keys - 1 < range.first_key(w0);
}

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

/// A warp's products s = q·k against key tile j0 (rows[r] its lane's two
/// query rows) as scores in base-2 units: capped, ALiBi's bias added, times
/// log2 e; -inf where the query does not see the key. True where the
/// lane's scores are plain: every one visible, neither capped nor biased
/// (a lane's own answer: lanes of a warp hold different rows).
template <int ST>
__device__ __forceinline__ bool
score_tile(float (&s)[ST][4], const int64_t (&rows)[2], int64_t j0,
           KeyRange range, float scale, float slope, const ScoreForm &form) {
  const int t = threadIdx.x % 4;
  // Most tiles: both of the lane's rows see every key of the tile, with
  // neither cap nor bias, and the score is the product scaled: the form
  // below without the index tests per score.
  if (slope == 0.f && form.softcap <= 0.f && j0 + 8 * ST - 1 <= rows[0] &&
      range.first_key(rows[1]) <= j0) {
    const float scale2 = scale * kLog2e;
#pragma unroll
    for (int nt = 0; nt < ST; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[nt][e] *= scale2;
    return true;
  }
#pragma unroll
  for (int nt = 0; nt < ST; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = rows[e / 2], j = j0 + nt * 8 + 2 * t + e % 2;
      s[nt][e] =
          range.visible(i, j)
              ? kLog2e * (form.capped(scale * s[nt][e]) + slope * float(j - i))
              : -INFINITY;
    }
  return false;
}

/// The online softmax's step over a tile of scores s (base 2): raises each
/// row's running max m to the tile's, rescaling the running sum l and the
/// accumulator acc (summed under the old max) to it.
template <int ST, int NT>
__device__ __forceinline__ void raise_max(float (&m)[2], float (&l)[2],
                                          float (&acc)[NT][4],
                                          const float (&s)[ST][4]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < ST; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
  float corr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // -inf only before the row's first visible key: nothing to add yet.
    const float m_new = fmaxf(m[r], quad_max(mx[r]));
    corr[r] = m_new == -INFINITY ? 1.f : exp2_approx(m[r] - m_new);
    m[r] = m_new;
    l[r] *= corr[r];
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[nt][e] *= corr[e / 2];
}

/// The rows' offsets for the exponentials 2^(score − offset): each row's
/// running max, or 0 while that is -inf. A row that has seen no key yet has
/// only -inf scores, and 2^-inf is 0: no test per score.
__device__ __forceinline__ void max_offsets(float (&off)[2],
                                            const float (&m)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
    off[r] = m[r] == -INFINITY ? 0.f : m[r];
}

/// A row's running max (base 2) before any key: the sink's, else -inf.
__device__ __forceinline__ float first_max2(const ScoreForm &form, int64_t h) {
  return kLog2e * form.first_max(h);
}

/// A-operand fragments of 16 rows at k-step kk, from registers (held for
/// the whole kernel) or, when Shared, from a shared tile's rows [r0, r0 +
/// 16).
template <int DM, bool Shared, int KS>
__device__ __forceinline__ void
rows_a(uint32_t (&a)[4], const uint32_t (&held)[KS][4],
       const bf16 (*tile)[DM + 8], int r0, int kk) {
  if constexpr (Shared) {
    tile_a<DM>(a, tile, r0, kk);
  } else {
#pragma unroll
    for (int r = 0; r < 4; ++r)
      a[r] = held[kk][r];
  }
}

/// The kernels' tile sizes for head dims padded to DM: Tiles<DM> is what
/// the runtime launches; the other arguments are there for the tile
/// benchmark (bench/attention_tiles_bench.cpp), which times alternatives.
/// Up to 128 a warp holds its 16 query rows (and dY's) in registers; past
/// that they stay in shared memory and the key tiles shrink. So that the
/// accumulators fit in registers, warps split the output dims of 16 rows:
/// dK/dV over two warps at 256 and four at 512 (adding up the scores each
/// found for its part of the head dims), the forward and dQ over two at 512
/// (each warp of a pair computes the scores whole).
///  - Warps: a block's warps, 16 query rows (or key rows in dK/dV) each
///    unless split.
///  - FwdKeys, DqKeys: the key tiles of the forward and dQ.
///  - QueryTile: dK/dV's query tile. At DM = 64 a tile of 16 holds few
///    products for its two barriers; 32 costs registers that occupancy has
///    to spare (3 blocks an SM either way on sm_90: 127 registers a thread,
///    then 142).
///  - DkdvMinBlocks: dK/dV's blocks an SM that registers must allow
///    (__launch_bounds__): at DM = 64 it would take 188 a thread, 2 blocks;
///    capped at 168 for 3 it spills 12 bytes, read once a head.
///  - FwdMinBlocks, DqMinBlocks: the same for the forward and dQ; 0 sets
///    no floor (no minimum in __launch_bounds__: the compiler's own choice,
///    which a floor of 1 changes).
///  - FwdRowTiles: the forward's query rows a warp, in tiles of 16 (up to
///    DM = 128). Past one, the queries stay in shared memory and each K and
///    V fragment loaded serves every tile of rows: FlashAttention 2's 32
///    rows a warp, at the cost of registers.
///  - FwdKeyBuffers: the forward's K and V tiles in flight (KeyTiles).
///  - DqRowTiles: dQ's query rows a warp, in tiles of 16, as FwdRowTiles
///    (the queries and dY then in shared memory).
template <int DM, int Warps = 4, int FwdKeys = (DM > 128 ? 32 : 64),
          int DqKeys = (DM > 128 ? 16 : 32),
          int QueryTile = (DM == 64 ? 32 : 16),
          int DkdvMinBlocks = (DM == 64 ? 3 : 1), int FwdMinBlocks = 0,
          int DqMinBlocks = 0, int FwdRowTiles = 1,
          int FwdKeyBuffers = (DM > 128 ? 1 : 2), int DqRowTiles = 1>
struct Tiles {
  static constexpr int kDM = DM, kWarps = Warps, kThreads = 32 * Warps;
  static constexpr bool kWide = DM > 128;
  static constexpr int kRow = DM + 8;                  // a tile row, padded
  static constexpr int kQuerySplit = DM > 256 ? 2 : 1; // warps per 16 queries
  static constexpr int kQueryRows = 16 * kWarps / kQuerySplit; // a block's
  static constexpr int kFwdKeys = FwdKeys, kDqKeys = DqKeys;
  static constexpr int kFwdRowTiles = FwdRowTiles;
  static constexpr int kFwdQueryRows = kFwdRowTiles * kQueryRows; // a block's
  // The forward's queries in shared memory, not in registers.
  static constexpr bool kFwdSharedQueries = kWide || kFwdRowTiles > 1;
  static_assert(kFwdRowTiles == 1 || !kWide, "one row tile a warp past 128");
  static constexpr int kFwdKeyBuffers = FwdKeyBuffers;
  static constexpr int kDqRowTiles = DqRowTiles;
  static constexpr int kDqQueryRows = kDqRowTiles * kQueryRows; // a block's
  // dQ's queries and dY in shared memory, not in registers.
  static constexpr bool kDqSharedQueries = kWide || kDqRowTiles > 1;
  static_assert(kDqRowTiles == 1 || !kWide, "one row tile a warp past 128");
  // dQ's K and V tiles in flight (KeyTiles): the next one's copies fly
  // while the block computes on the current one, where shared memory
  // allows it.
  static constexpr int kKeyBuffers = kWide ? 1 : 2;
  static constexpr int kQueryBuffers = kWide ? 1 : 2; // dK/dV's, the same
  static constexpr int kKeySplit = DM > 256 ? 4 : kWide ? 2 : 1; // per 16 keys
  static constexpr int kDkdvKeys = 16 * kWarps / kKeySplit;
  static constexpr int kQueryTile = QueryTile, kMinBlocks = DkdvMinBlocks,
                       kFwdMinBlocks = FwdMinBlocks, kDqMinBlocks = DqMinBlocks;
  static_assert(FwdKeys % 16 == 0 && DqKeys % 16 == 0 && QueryTile % 16 == 0,
                "tiles are whole k-steps of 16");

  static constexpr size_t tiles(int rows) {
    return size_t(rows) * kRow * sizeof(bf16);
  }
  static constexpr size_t forward_shared() {
    return tiles(2 * kFwdKeyBuffers * kFwdKeys +
                 (kFwdSharedQueries ? kFwdQueryRows : 0));
  }
  static constexpr size_t dq_shared() {
    return tiles(2 * kKeyBuffers * kDqKeys +
                 (kDqSharedQueries ? 2 * kDqQueryRows : 0));
  }
  /// Floats a lane adds up with the other warps of its keys in dK/dV: the
  /// fragments of Sᵀ and dPᵀ (kQueryTile / 8 n-tiles each).
  static constexpr int kPartialWords = 2 * (kQueryTile / 8) * 4;
  static constexpr size_t dkdv_shared() {
    return tiles(2 * kDkdvKeys + 2 * kQueryBuffers * kQueryTile) +
           2 * kQueryBuffers * kQueryTile * sizeof(float) +
           (kKeySplit > 1 ? kThreads * kPartialWords * sizeof(float) : 0);
  }
  // 99 KiB: what sm_86 and sm_89 allow a block.
  static_assert(forward_shared() <= 99 * 1024 && dq_shared() <= 99 * 1024 &&
                dkdv_shared() <= 99 * 1024);
};

/// A warp's place when Split warps share each Rows rows of a block: its first
/// row in the block, which of the Split it is, and so the first of the
/// DM / Split output dims it owns.
template <int Warps, int DM, int Split, int Rows = 16> struct WarpPlace {
  static constexpr int kCols = DM / Split;
  int row, part, col0;
  __device__ __forceinline__ WarpPlace() {
    const int warp = threadIdx.x / 32;
    row = Rows * (warp % (Warps / Split));
    part = warp / (Warps / Split);
    col0 = kCols * part;
  }
};

/// Adds up the products a and b of the Split warps that share 16 rows, each
/// of which multiplied 1/Split of the k-steps: through shared memory
/// (`partials`: Words floats a lane), every warp in the same order, so that
/// all of them hold the same whole products. A barrier: every warp of the
/// block calls it.
template <int Warps, int Split, int N>
__device__ __forceinline__ void sum_partials(float (&a)[N][4], float (&b)[N][4],
                                             float *partials) {
  constexpr int Words = 2 * N * 4, Groups = Warps / Split;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Word w of a lane at [warp][w][lane]: a warp's accesses are 32 words in a
  // row, no bank conflicts.
  float *mine = partials + warp * Words * 32 + lane;
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      mine[(n * 4 + e) * 32] = a[n][e];
      mine[((N + n) * 4 + e) * 32] = b[n][e];
      a[n][e] = b[n][e] = 0.f;
    }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < Split; ++p) {
    const float *theirs =
        partials + (warp % Groups + p * Groups) * Words * 32 + lane;
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        a[n][e] += theirs[(n * 4 + e) * 32];
        b[n][e] += theirs[((N + n) * 4 + e) * 32];
      }
  }
}

/// The forward, tiled as C (a Tiles), and each row's log-sum-exp where lse
/// is set. Grid (ceil(S/kFwdQueryRows), H, B), C::kThreads threads,
/// C::forward_shared() bytes.
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kFwdMinBlocks)
    forward_kernel(bf16 *y, float *lse, const bf16 *q, const bf16 *k,
                   const bf16 *v, int64_t H, int64_t Hkv, int64_t S, int64_t D,
                   float scale, KeyRange range, ScoreForm form,
                   HeadLayout layout) {
  constexpr int DM = C::kDM, MT = C::kFwdRowTiles;
  constexpr bool kShared = C::kFwdSharedQueries;
  using Place = WarpPlace<C::kWarps, DM, C::kQuerySplit, 16 * MT>;
  constexpr int BC = C::kFwdKeys, KS = DM / 16, NT = Place::kCols / 8,
                ST = BC / 8;
  MT_DYNAMIC_SHARED(smem);
  auto *ks = reinterpret_cast<bf16(*)[DM + 8]>(smem);
  auto *vs = ks + C::kFwdKeyBuffers * BC;
  auto *qs = vs + C::kFwdKeyBuffers * BC; // the block's queries, if shared
  const Place place;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t b = blockIdx.z, h = blockIdx.y, grp = h / (H / Hkv);
  const int64_t q0 = last_tile_first() * C::kFwdQueryRows, w0 = q0 + place.row;
  int64_t rows[MT][2]; // the lane's two rows of each tile of 16
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    rows[mt][0] = w0 + 16 * mt + g, rows[mt][1] = w0 + 16 * mt + g + 8;
  const int64_t base = (b * H + h) * S; // row index of (b, h, 0) in lse
  // The heads' row 0 in q and y, and in k and v; rows ldq and ldk apart.
  const int64_t qh = layout.head_offset(b, h, H, S, D),
                kvh = layout.head_offset(b, grp, Hkv, S, D);
  const int64_t ldq = layout.row_stride(H, D), ldk = layout.row_stride(Hkv, D);
  const float slope = form.slope_of(h);

  uint32_t qf[kShared ? 1 : KS][4];
  if constexpr (kShared)
    stage<C::kFwdQueryRows, DM, C::kThreads>(qs, q + qh, q0, S, D,
                                             ldq); // after a barrier
  else
    load_a<KS>(qf, q + qh, w0, S, D, ldq);
  float o[MT][NT][4] = {}; // the warp's output dims [col0, col0 + 8·NT)
  // A row's four lanes sum l: one of them counts the sink.
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      m[mt][r] = first_max2(form, h), l[mt][r] = form.first_sum(t == 0);

  const int64_t keys = min64(q0 + C::kFwdQueryRows, S);
  const int64_t first = first_key_tile(q0, range, BC);
  KeyTiles<BC, DM, C::kFwdKeyBuffers, C::kThreads> tiles(
      ks, vs, k + kvh, v + kvh, first, keys, S, D, ldk);
  for (int64_t j0 = first; j0 < keys; j0 += BC) {
    tiles.arrive(j0);
    if (warp_sees_none(w0, 16 * MT, j0, BC, range))
      continue;
    float s[MT][ST][4] = {};
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t aq[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        rows_a<DM, kShared>(aq[mt], qf, qs, place.row + 16 * mt, kk);
      mma_tile_t<DM>(s, aq, tiles.k(), kk);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      score_tile<ST>(s[mt], rows[mt], j0, range, scale, slope, form);
      raise_max(m[mt], l[mt], o[mt], s[mt]);
      float off[2];
      max_offsets(off, m[mt]);
#pragma unroll
      for (int nt = 0; nt < ST; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[mt][nt][e] = exp2_approx(s[mt][nt][e] - off[e / 2]);
          l[mt][e / 2] += s[mt][nt][e];
        }
    }
    mma_result_tile<DM>(o, s, tiles.v(), place.col0);
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    // One division a row: a division per element is an IEEE one, with a
    // slow-path call each.
    float inv_l[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(l[mt][r]);
      inv_l[r] = 1.f / sum;
      // The warps that share the row found the same; the first writes it.
      if (lse && t == 0 && place.col0 == 0 && rows[mt][r] < S)
        lse[base + rows[mt][r]] = kLn2 * (m[mt][r] + log2f(sum));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = rows[mt][e / 2],
                      col = place.col0 + nt * 8 + 2 * t + e % 2;
        if (i < S && col < D)
          y[qh + i * ldq + col] = f2bf(o[mt][nt][e] * inv_l[e / 2]);
      }
  }
}

/// dQ of a block's query rows, tiled as C, each weight exp(score − lse)
/// from the forward's log-sum-exp. Grid (ceil(S/kDqQueryRows), H, B),
/// C::kThreads threads, C::dq_shared() bytes.
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kDqMinBlocks)
    dq_kernel(bf16 *dq, const bf16 *dy, const bf16 *q, const bf16 *k,
              const bf16 *v, const float *delta, const float *lse, int64_t H,
              int64_t Hkv, int64_t S, int64_t D, float scale, KeyRange range,
              ScoreForm form, bool accumulate, HeadLayout layout) {
  constexpr int DM = C::kDM, MT = C::kDqRowTiles;
  constexpr bool kShared = C::kDqSharedQueries;
  using Place = WarpPlace<C::kWarps, DM, C::kQuerySplit, 16 * MT>;
  constexpr int BC = C::kDqKeys, KS = DM / 16, NT = Place::kCols / 8,
                ST = BC / 8;
  MT_DYNAMIC_SHARED(smem);
  auto *ks = reinterpret_cast<bf16(*)[DM + 8]>(smem);
  auto *vs = ks + C::kKeyBuffers * BC;
  auto *qs = vs + C::kKeyBuffers * BC; // the block's queries and dY, if shared
  auto *dys = qs + C::kDqQueryRows;
  const Place place;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t b = blockIdx.z, h = blockIdx.y, grp = h / (H / Hkv);
  const int64_t q0 = last_tile_first() * C::kDqQueryRows, w0 = q0 + place.row;
  int64_t rows[MT][2]; // the lane's two rows of each tile of 16
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    rows[mt][0] = w0 + 16 * mt + g, rows[mt][1] = w0 + 16 * mt + g + 8;
  const int64_t base = (b * H + h) * S; // row index of (b, h, 0) in lse
  // The heads' row 0 in q, dy and dq, and in k and v; rows ldq and ldk apart.
  const int64_t qh = layout.head_offset(b, h, H, S, D),
                kvh = layout.head_offset(b, grp, Hkv, S, D);
  const int64_t ldq = layout.row_stride(H, D), ldk = layout.row_stride(Hkv, D);
  const float slope = form.slope_of(h);

  uint32_t qf[kShared ? 1 : KS][4], dyf[kShared ? 1 : KS][4];
  if constexpr (kShared) {
    stage_pair<C::kDqQueryRows, DM, C::kThreads>(qs, q + qh, dys, dy + qh, q0,
                                                 S, D, ldq); // after a barrier
  } else {
    load_a<KS>(qf, q + qh, w0, S, D, ldq);
    load_a<KS>(dyf, dy + qh, w0, S, D, ldq);
  }
  // Each row's δ, and its log-sum-exp in base 2 (rows past S: any finite
  // value, they write nothing).
  float dl[MT][2], lse2[MT][2];
  // Σ_j p_ij (dP_ij − δ_i) k_j, the warp's output dims
  float acc[MT][NT][4] = {};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const bool in = rows[mt][r] < S;
      dl[mt][r] = in ? delta[base + rows[mt][r]] : 0.f;
      lse2[mt][r] = in ? kLog2e * lse[base + rows[mt][r]] : 0.f;
    }

  const int64_t keys = min64(q0 + C::kDqQueryRows, S);
  const int64_t first = first_key_tile(q0, range, BC);
  KeyTiles<BC, DM, C::kKeyBuffers, C::kThreads> tiles(ks, vs, k + kvh, v + kvh,
                                                      first, keys, S, D, ldk);
  for (int64_t j0 = first; j0 < keys; j0 += BC) {
    tiles.arrive(j0);
    if (warp_sees_none(w0, 16 * MT, j0, BC, range))
      continue;
    float s[MT][ST][4] = {}, dp[MT][ST][4] = {};
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      uint32_t aq[MT][4], ady[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        rows_a<DM, kShared>(aq[mt], qf, qs, place.row + 16 * mt, kk);
        rows_a<DM, kShared>(ady[mt], dyf, dys, place.row + 16 * mt, kk);
      }
      mma_tile_t<DM>(s, aq, tiles.k(), kk);
      mma_tile_t<DM>(dp, ady, tiles.v(), kk);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const bool plain =
          score_tile<ST>(s[mt], rows[mt], j0, range, scale, slope, form);
      // One branch a tile, not one a score: a plain tile has no mask, cap
      // or bias to undo.
      if (plain) {
#pragma unroll
        for (int nt = 0; nt < ST; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float p = exp2_approx(s[mt][nt][e] - lse2[mt][e / 2]);
            s[mt][nt][e] = p * (dp[mt][nt][e] - dl[mt][e / 2]);
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < ST; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t i = rows[mt][e / 2], j = j0 + nt * 8 + 2 * t + e % 2;
            // 2^-inf = 0 where the query does not see the key.
            const float p = exp2_approx(s[mt][nt][e] - lse2[mt][e / 2]);
            // The capped score, the bias taken off again (registers are
            // short).
            const float c = kLn2 * s[mt][nt][e] - slope * float(j - i);
            s[mt][nt][e] = p > 0.f ? p * (dp[mt][nt][e] - dl[mt][e / 2]) *
                                         form.cap_slope(c)
                                   : 0.f;
          }
      }
    }
    mma_result_tile<DM>(acc, s, tiles.k(), place.col0);
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = rows[mt][e / 2],
                      col = place.col0 + nt * 8 + 2 * t + e % 2;
        if (i < S && col < D)
          write_or_add(dq, qh + i * ldq + col, acc[mt][nt][e] * scale,
                       accumulate);
      }
}

/// A lane's fragments of a tile's dSᵀ (rows keys[0] and keys[1], columns
/// its queries i, i + 1 of each n-tile, i = i0 + 2·(lane % 4)) rounded to
/// bf16 into rows of `ld` (ds, the head's column 0): a word a pair where S
/// is even (the pair is then 4-byte aligned), else element by element;
/// nothing past S.
template <int ST>
__device__ __forceinline__ void
store_scores_t(bf16 *ds, int64_t ld, const float (&c)[ST][4],
               const int64_t (&keys)[2], int64_t i, int64_t S) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= S)
      continue;
    bf16 *row = ds + keys[r] * ld;
#pragma unroll
    for (int nt = 0; nt < ST; ++nt) {
      const int64_t at = i + nt * 8;
      if (S % 2 == 0 && at + 1 < S) {
        store_word(row + at, pack_f32(c[nt][2 * r], c[nt][2 * r + 1]));
      } else {
        if (at < S)
          row[at] = f2bf(c[nt][2 * r]);
        if (at + 1 < S)
          row[at + 1] = f2bf(c[nt][2 * r + 1]);
      }
    }
  }
}

/// dK and dV of C::kDkdvKeys key rows of one KV head, tiled as C. Grid
/// (ceil(S/kDkdvKeys), Hkv, B), C::kThreads threads, C::dkdv_shared() bytes.
/// Unless ds_t is null, each score's dS (without the scale) goes there too,
/// in bf16, as (B, Hkv) blocks of (S keys, group·S queries of the group's
/// heads in turn) row-major; a score the pass skips (no query of its tile
/// sees the key) is not written, so the caller zeroes ds_t first.
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    dkdv_kernel(bf16 *dk, bf16 *dv, bf16 *ds_t, const bf16 *dy, const bf16 *q,
                const bf16 *k, const bf16 *v, const float *lse,
                const float *delta, int64_t H, int64_t Hkv, int64_t S,
                int64_t D, float scale, KeyRange range, ScoreForm form,
                bool accumulate, HeadLayout layout) {
  constexpr int DM = C::kDM;
  using Place = WarpPlace<C::kWarps, DM, C::kKeySplit>;
  // KP: the k-steps of Sᵀ and dPᵀ a warp takes (sum_partials adds them up).
  constexpr int KEYS = C::kDkdvKeys, BQ = C::kQueryTile,
                KP = DM / 16 / C::kKeySplit, ST = BQ / 8,
                NTO = Place::kCols / 8;
  MT_DYNAMIC_SHARED(smem);
  auto *ks = reinterpret_cast<bf16(*)[DM + 8]>(smem);
  auto *vs = ks + KEYS;
  constexpr int QB = C::kQueryBuffers;
  auto *qs = vs + KEYS;
  auto *dys = qs + QB * BQ;
  auto *ls = reinterpret_cast<float *>(dys + QB * BQ), *dls = ls + QB * BQ;
  float *partials = dls + QB * BQ; // when warps split the keys' output dims
  const Place place;               // the warp's 16 key rows and output dims
  const int kr = place.row, col0 = place.col0;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t b = blockIdx.z, grp = blockIdx.y, group = H / Hkv;
  const int64_t j0 = int64_t(blockIdx.x) * KEYS, w0 = j0 + kr;
  const int64_t keys[2] = {w0 + g, w0 + g + 8};
  // The KV head's row 0 in k, v, dk and dv; rows ldk apart.
  const int64_t kvh = layout.head_offset(b, grp, Hkv, S, D),
                ldk = layout.row_stride(Hkv, D);
  const float scale2 = scale * kLog2e; // plain tiles' exponent, base 2
  stage_pair<KEYS, DM, C::kThreads>(ks, k + kvh, vs, v + kvh, j0, S, D, ldk);
  float dka[NTO][4] = {}, dva[NTO][4] = {};

  // The block's keys are read by the queries up to its last key's last.
  const int64_t readers = range.last_query(j0 + KEYS - 1, S) + 1;
  const int64_t h_end = (grp + 1) * group;
  QueryTiles<BQ, DM, QB, C::kThreads> tiles{qs,    dys, ls, dls, q, dy,    lse,
                                            delta, b,   H,  S,   D, layout};
  if (j0 < readers)
    tiles.start(grp * group, j0);
  for (int64_t h = grp * group; h < h_end; ++h) {
    const float slope = form.slope_of(h);
    for (int64_t i0 = j0; i0 < readers; i0 += BQ) {
      // The tile after this one: the next of this head, or the next head's
      // first.
      const bool head_done = i0 + BQ >= readers;
      const int64_t next_h = head_done ? h + 1 : h;
      tiles.arrive(h, i0, next_h < h_end, next_h, head_done ? j0 : i0 + BQ);
      const bf16(*qt)[DM + 8] = tiles.q_tile();
      const bf16(*dyt)[DM + 8] = tiles.dy_tile();
      const float *lt = tiles.lse_tile(), *dlt = tiles.delta_tile();
      // Skip when every query of the tile comes before the warp's keys or
      // after the last that sees them (a window's or chunk's end); the
      // warps that share the keys skip together.
      const bool skip = i0 + BQ - 1 < w0 || i0 > range.last_query(w0 + 15, S);
      float st[ST][4] = {}, dpt[ST][4] = {};
      if (!skip) {
#pragma unroll
        for (int step = 0; step < KP; ++step) {
          const int kk = KP * place.part + step;
          uint32_t ak[4], av[4];
          tile_a<DM>(ak, ks, kr, kk);
          tile_a<DM>(av, vs, kr, kk);
          mma_tile_t<DM>(st, ak, qt, kk);
          mma_tile_t<DM>(dpt, av, dyt, kk);
        }
      }
      if constexpr (C::kKeySplit > 1)
        sum_partials<C::kWarps, C::kKeySplit>(st, dpt, partials);
      if (skip)
        continue;
      // Most tiles: every query of the tile sees both of the lane's keys,
      // with neither cap nor bias: the general form's math without the
      // index tests per score.
      const bool plain = slope == 0.f && form.softcap <= 0.f && i0 + BQ <= S &&
                         keys[1] <= i0 &&
                         range.first_key(i0 + BQ - 1) <= keys[0];
      // One branch a tile, not one a score.
      if (plain) {
#pragma unroll
        for (int nt = 0; nt < ST; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) { // the lane's two queries of n-tile nt
            const int ii = nt * 8 + 2 * t + c;
            const float lse2 = kLog2e * lt[ii], d = dlt[ii];
#pragma unroll
            for (int e = c; e < 4; e += 2) {
              const float p = exp2_approx(scale2 * st[nt][e] - lse2);
              st[nt][e] = p;
              dpt[nt][e] = p * (dpt[nt][e] - d);
            }
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < ST; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int ii = nt * 8 + 2 * t + e % 2;
            const int64_t i = i0 + ii, j = keys[e / 2];
            const float c = form.capped(scale * st[nt][e]);
            const float p = i < S && range.visible(i, j)
                                ? expf(c + slope * float(j - i) - lt[ii])
                                : 0.f;
            st[nt][e] = p;
            dpt[nt][e] = p * (dpt[nt][e] - dlt[ii]) * form.cap_slope(c);
          }
      }
      if (ds_t && place.part == 0) // split warps hold the same dS
        store_scores_t<ST>(ds_t + (b * Hkv + grp) * S * group * S +
                               (h - grp * group) * S,
                           group * S, dpt, keys, i0 + 2 * t, S);
      mma_result_tile<DM>(dva, st, dyt, col0);
      mma_result_tile<DM>(dka, dpt, qt, col0);
    }
  }
#pragma unroll
  for (int nt = 0; nt < NTO; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t j = keys[e / 2], col = col0 + nt * 8 + 2 * t + e % 2;
      if (j >= S || col >= D)
        continue;
      if (dk)
        write_or_add(dk, kvh + j * ldk + col, scale * dka[nt][e], accumulate);
      if (dv)
        write_or_add(dv, kvh + j * ldk + col, dva[nt][e], accumulate);
    }
}

inline unsigned tiles_of(int64_t S, int rows) {
  return unsigned((S + rows - 1) / rows);
}

/// The forward on tiles C (a Tiles).
template <class C>
void forward_tiled(bf16 *y, float *lse, const bf16 *q, const bf16 *k,
                   const bf16 *v, int64_t Bn, int64_t H, int64_t Hkv, int64_t S,
                   int64_t D, float scale, KeyRange range,
                   const ScoreForm &form, HeadLayout layout,
                   cudaStream_t stream) {
  launch_kernel_shared(
      "attention_tc_forward_kernel", forward_kernel<C>,
      dim3(tiles_of(S, C::kFwdQueryRows), unsigned(H), unsigned(Bn)),
      dim3(C::kThreads), C::forward_shared(), stream, y, lse, q, k, v, H, Hkv,
      S, D, scale, range, form, layout);
}

/// dQ (written into dq, or added where accumulate), then dK and dV (the
/// same into dk and dv, unless both are null), on tiles C; δ from
/// attention_delta, lse from the forward, B·H·S floats each.
template <class C>
void dq_tiled(bf16 *dq, const bf16 *dy, const bf16 *q, const bf16 *k,
              const bf16 *v, const float *delta, const float *lse, int64_t Bn,
              int64_t H, int64_t Hkv, int64_t S, int64_t D, float scale,
              KeyRange range, const ScoreForm &form, bool accumulate,
              HeadLayout layout, cudaStream_t stream) {
  launch_kernel_shared(
      "attention_tc_dq_kernel", dq_kernel<C>,
      dim3(tiles_of(S, C::kDqQueryRows), unsigned(H), unsigned(Bn)),
      dim3(C::kThreads), C::dq_shared(), stream, dq, dy, q, k, v, delta, lse, H,
      Hkv, S, D, scale, range, form, accumulate, layout);
}
template <class C>
void dkdv_tiled(bf16 *dk, bf16 *dv, bf16 *ds_t, const bf16 *dy, const bf16 *q,
                const bf16 *k, const bf16 *v, const float *delta,
                const float *lse, int64_t Bn, int64_t H, int64_t Hkv, int64_t S,
                int64_t D, float scale, KeyRange range, const ScoreForm &form,
                bool accumulate, HeadLayout layout, cudaStream_t stream) {
  launch_kernel_shared(
      "attention_tc_dkdv_kernel", dkdv_kernel<C>,
      dim3(tiles_of(S, C::kDkdvKeys), unsigned(Hkv), unsigned(Bn)),
      dim3(C::kThreads), C::dkdv_shared(), stream, dk, dv, ds_t, dy, q, k, v,
      lse, delta, H, Hkv, S, D, scale, range, form, accumulate, layout);
}

/// The backward on tiles C: dQ (unless dq is null), then dK/dV; or, given
/// ds_t (zeroed, dkdv_kernel's layout), dK/dV and dSᵀ alone, for the
/// caller's dQ GEMM.
template <class C>
void backward_tiled(bf16 *dq, bf16 *dk, bf16 *dv, bf16 *ds_t, const bf16 *dy,
                    const bf16 *q, const bf16 *k, const bf16 *v,
                    const float *delta, const float *lse, int64_t Bn, int64_t H,
                    int64_t Hkv, int64_t S, int64_t D, float scale,
                    KeyRange range, const ScoreForm &form, bool accumulate,
                    HeadLayout layout, cudaStream_t stream) {
  if (dq && !ds_t)
    dq_tiled<C>(dq, dy, q, k, v, delta, lse, Bn, H, Hkv, S, D, scale, range,
                form, accumulate, layout, stream);
  if (dk || dv || ds_t)
    dkdv_tiled<C>(dk, dv, ds_t, dy, q, k, v, delta, lse, Bn, H, Hkv, S, D,
                  scale, range, form, accumulate, layout, stream);
}

} // namespace mtrt::MT_KNS::attn::tc

#endif // MEGATRAIN_RUNTIME_CUDA_ATTENTIONTENSORCORE_CUH
