//===- GroupedGemm.cuh - one GEMM per expert, on tensor cores -----*- C++
//-*-===//
//
// The products of a mixture of experts: each expert's rows of the tokens
// (its "positions": the slots routed to it, in token order, contiguous after
// the expert before it) against that expert's matrices. Two kinds:
//
//  - grouped M: C[p, n] = Σ_k A[p, k] · B_e[n, k] over the positions p of
//    each expert e (the forward, and the backward's input side); the grid's
//    row tiles are laid out expert after expert (tile starts `tiles`), so
//    one launch covers every expert without the host knowing the counts.
//  - grouped K: C_e[m, n] += Σ_p A[p, m] · B[p, n] over the positions of
//    expert e (the weight gradients): a block per output tile and expert,
//    summing its positions in order.
//
// Operands are bf16 in global memory, in whichever layout they live in:
// stored with K contiguous ("rows"), or with K along the stored rows
// (`k_rows`), rows optionally gathered (a slot's token row: gather[p] / div).
// Tiles are staged into shared memory in the stored layout with 16-byte
// copies and reach the MMA through ldmatrix, transposed where K runs along
// the tile's rows (Mma.cuh). Accumulation is f32; every output element is
// one block's fixed-order sum, so results are deterministic.
//
// A block is 8 warps over a 128 × 128 output tile (warps 2 × 4, each
// 64 × 32), K in steps of 32 through two shared-memory buffers: the next
// step's tile goes global → registers before the current step's products
// and registers → shared after them, one barrier a step.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_GROUPEDGEMM_CUH
#define MEGATRAIN_RUNTIME_CUDA_GROUPEDGEMM_CUH

#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/cuda/Mma.cuh"

namespace mtrt::MT_KNS::grouped {

constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kWarpsM = 2, kWarpsN = 4, kGemmThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN; // a warp's 64 × 32
constexpr int kMT = kWM / 16, kNT = kWN / 8;            // its MMA tiles

/// A bf16 matrix operand: element (i, k) — i along M for A, along N for
/// B — at stored row r(i), column k, or, with k_rows, stored row r(k),
/// column i; r(j) = gather ? gather[j] / gather_div : j. An expert's matrix
/// starts group_stride elements after the one before.
struct Operand {
  const bf16 *base;
  int64_t ld;
  int64_t group_stride;
  const int *gather;
  int gather_div;
  bool k_rows;
};

enum class Store { Bf16, F32, F32Add };

/// The output: element (i, n) at base + e·group_stride + i·ld + n.
struct Output {
  void *base;
  int64_t ld;
  int64_t group_stride;
};

/// Experts' positions: expert e holds [offsets[e], offsets[e + 1]); for
/// grouped M, its row tiles are [tiles[e], tiles[e + 1]).
struct Groups {
  const int *offsets;
  const int *tiles;
  int experts;
};

/// Row tiles a grouped-M launch needs at most for `positions` rows over
/// `experts` groups (each group's last tile may be partial).
inline int64_t max_row_tiles(int64_t positions, int64_t experts) {
  return (positions + kBM - 1) / kBM + experts;
}

namespace detail {

/// A shared-memory tile of 128 (i) × 32 (k) elements: [i][k + 8] for
/// rows, [k][i + 8] for k_rows; the pad keeps ldmatrix rows on distinct
/// banks and 16-byte aligned.
constexpr int kTileElems = kBM * (kBK + 8) > kBK *(kBM + 8) ? kBM *(kBK + 8)
                                                            : kBK *(kBM + 8);

/// Eight bf16 (16 bytes).
struct Chunk {
  uint32_t w[4];
};

__device__ __forceinline__ int64_t stored_row(const Operand &o, int64_t j) {
  return o.gather ? int64_t(o.gather[j] / o.gather_div) : j;
}

/// Chunk c of a tile (2 per thread): its eight elements from global memory,
/// zero outside [i0, i_end) × [k0, k_end). Rows: chunk (i, k..k+7);
/// k_rows: chunk (k, i..i+7).
__device__ __forceinline__ Chunk fetch(const Operand &o, const bf16 *m, int c,
                                       int64_t i0, int64_t i_end, int64_t k0,
                                       int64_t k_end) {
  Chunk out{{0u, 0u, 0u, 0u}};
  int64_t row, col, valid; // stored row, first column, columns in range
  if (!o.k_rows) {
    const int64_t i = i0 + c / (kBK / 8), k = k0 + c % (kBK / 8) * 8;
    if (i >= i_end || k >= k_end)
      return out;
    row = stored_row(o, i), col = k, valid = min64(8, k_end - k);
  } else {
    const int64_t k = k0 + c / (kBM / 8), i = i0 + c % (kBM / 8) * 8;
    if (k >= k_end || i >= i_end)
      return out;
    row = stored_row(o, k), col = i, valid = min64(8, i_end - i);
  }
  const bf16 *src = m + row * o.ld + col;
  if (valid == 8 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
#ifdef MEGATRAIN_CUDA_EMULATION
    std::memcpy(out.w, src, 16);
#else
    const uint4 v = *reinterpret_cast<const uint4 *>(src);
    out.w[0] = v.x, out.w[1] = v.y, out.w[2] = v.z, out.w[3] = v.w;
#endif
    return out;
  }
  bf16 e[8];
  for (int j = 0; j < 8; ++j)
    e[j] = j < valid ? src[j] : f2bf(0.f);
  for (int j = 0; j < 4; ++j)
    out.w[j] = pack_bf16(e[2 * j], e[2 * j + 1]);
  return out;
}

/// Chunk c into its place in the shared tile.
__device__ __forceinline__ void put(bf16 *tile, bool k_rows, int c,
                                    const Chunk &v) {
  bf16 *dst = !k_rows ? tile + (c / (kBK / 8)) * (kBK + 8) + c % (kBK / 8) * 8
                      : tile + (c / (kBM / 8)) * (kBM + 8) + c % (kBM / 8) * 8;
#ifdef MEGATRAIN_CUDA_EMULATION
  std::memcpy(dst, v.w, 16);
#else
  *reinterpret_cast<uint4 *>(dst) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#endif
}

constexpr int kChunks = kBM * kBK / 8 / kGemmThreads; // per thread and tile

/// A fragments (16 rows at i, 16 k at k) of a tile.
__device__ __forceinline__ void frag_a(uint32_t (&f)[4], const bf16 *tile,
                                       bool k_rows, int i, int k) {
  const int l = threadIdx.x % 32, j = l / 8;
  if (!k_rows)
    ldmatrix_x4<false>(f, tile + (i + l % 16) * (kBK + 8) + k + (l / 16) * 8);
  else
    ldmatrix_x4<true>(f, tile + (k + l % 8 + (j / 2) * 8) * (kBM + 8) + i +
                             (j % 2) * 8);
}

/// B fragments of two n-tiles (16 n at i, 16 k at k): f[0..1] the first's,
/// f[2..3] the second's.
__device__ __forceinline__ void frag_b(uint32_t (&f)[4], const bf16 *tile,
                                       bool k_rows, int i, int k) {
  const int l = threadIdx.x % 32, j = l / 8;
  if (!k_rows)
    ldmatrix_x4<false>(f, tile + (i + (j / 2) * 8 + l % 8) * (kBK + 8) + k +
                              (j % 2) * 8);
  else
    ldmatrix_x4<true>(f, tile + (k + (j % 2) * 8 + l % 8) * (kBM + 8) + i +
                             (j / 2) * 8);
}

template <Store S>
__device__ __forceinline__ void store(const Output &c, int64_t e, int64_t i,
                                      int64_t n, float v) {
  const int64_t at = e * c.group_stride + i * c.ld + n;
  if constexpr (S == Store::Bf16)
    static_cast<bf16 *>(c.base)[at] = f2bf(v);
  else if constexpr (S == Store::F32)
    static_cast<float *>(c.base)[at] = v;
  else
    static_cast<float *>(c.base)[at] += v;
}

} // namespace detail

/// One 128 × 128 tile of C for the rows [i0, i_end) of A and the columns
/// [n0, n_end) of B over k in [k0, k_end); output row i + out_row0.
template <Store S>
__device__ void tile_product(const Operand &a, const bf16 *am, const Operand &b,
                             const bf16 *bm, const Output &c, int64_t e,
                             int64_t i0, int64_t i_end, int64_t n0,
                             int64_t n_end, int64_t k0, int64_t k_end) {
  using namespace detail;
  __shared__ __align__(16) bf16 tiles[2][2][kTileElems]; // [buffer][A, B]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / kWarpsN) * kWM, wn = (warp % kWarpsN) * kWN;
  float acc[kMT][kNT][4] = {};
  Chunk ra[kChunks], rb[kChunks];
  auto fetch_step = [&](int64_t k) {
    for (int j = 0; j < kChunks; ++j) {
      const int ch = threadIdx.x + j * kGemmThreads;
      ra[j] = fetch(a, am, ch, i0, i_end, k, k_end);
      rb[j] = fetch(b, bm, ch, n0, n_end, k, k_end);
    }
  };
  auto put_step = [&](int buf) {
    for (int j = 0; j < kChunks; ++j) {
      const int ch = threadIdx.x + j * kGemmThreads;
      put(tiles[buf][0], a.k_rows, ch, ra[j]);
      put(tiles[buf][1], b.k_rows, ch, rb[j]);
    }
  };
  const int64_t steps = (k_end - k0 + kBK - 1) / kBK;
  if (steps > 0) {
    fetch_step(k0);
    put_step(0);
  }
  __syncthreads();
  for (int64_t s = 0; s < steps; ++s) {
    const int buf = int(s % 2);
    if (s + 1 < steps)
      fetch_step(k0 + (s + 1) * kBK);
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t fa[kMT][4], fb[kNT / 2][4];
      for (int mt = 0; mt < kMT; ++mt)
        frag_a(fa[mt], tiles[buf][0], a.k_rows, wm + 16 * mt, kk);
      for (int np = 0; np < kNT / 2; ++np)
        frag_b(fb[np], tiles[buf][1], b.k_rows, wn + 16 * np, kk);
      for (int mt = 0; mt < kMT; ++mt)
        for (int nt = 0; nt < kNT; ++nt) {
          const uint32_t bb[2] = {fb[nt / 2][2 * (nt % 2)],
                                  fb[nt / 2][2 * (nt % 2) + 1]};
          mma_bf16(acc[mt][nt], fa[mt], bb);
        }
    }
    if (s + 1 < steps)
      put_step(1 - buf);
    __syncthreads();
  }
  const int g = lane / 4, t = lane % 4;
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < kNT; ++nt)
      for (int h = 0; h < 2; ++h) {
        const int64_t i = i0 + wm + 16 * mt + g + 8 * h;
        if (i >= i_end)
          continue;
        for (int q = 0; q < 2; ++q) {
          const int64_t n = n0 + wn + 8 * nt + 2 * t + q;
          if (n < n_end)
            store<S>(c, e, i, n, acc[mt][nt][2 * h + q]);
        }
      }
}

/// Grouped M: grid (max_row_tiles, ⌈N / 128⌉). C's rows are positions.
template <Store S>
__global__ void __launch_bounds__(kGemmThreads)
    grouped_m_kernel(Operand a, Operand b, Output c, Groups g, int64_t N,
                     int64_t K) {
  const int64_t tile = blockIdx.x;
  if (tile >= g.tiles[g.experts])
    return;
  int lo = 0, hi = g.experts - 1; // the expert whose tiles hold `tile`
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (g.tiles[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int64_t i0 = g.offsets[lo] + (tile - g.tiles[lo]) * kBM;
  const int64_t n0 = int64_t(blockIdx.y) * kBN;
  tile_product<S>(a, a.base, b, b.base + lo * b.group_stride, c, 0, i0,
                  g.offsets[lo + 1], n0, min64(n0 + kBN, N), 0, K);
}

/// Grouped K: grid (⌈M / 128⌉ · ⌈N / 128⌉, experts); C_e is M × N.
template <Store S>
__global__ void __launch_bounds__(kGemmThreads)
    grouped_k_kernel(Operand a, Operand b, Output c, Groups g, int64_t M,
                     int64_t N) {
  const int64_t e = blockIdx.y, k0 = g.offsets[e], k_end = g.offsets[e + 1];
  if (k0 == k_end)
    return;
  const int64_t tiles_n = (N + kBN - 1) / kBN;
  const int64_t i0 = int64_t(blockIdx.x) / tiles_n * kBM,
                n0 = int64_t(blockIdx.x) % tiles_n * kBN;
  tile_product<S>(a, a.base, b, b.base, c, e, i0, min64(i0 + kBM, M), n0,
                  min64(n0 + kBN, N), k0, k_end);
}

} // namespace mtrt::MT_KNS::grouped

#endif // MEGATRAIN_RUNTIME_CUDA_GROUPEDGEMM_CUH
