//===- Mma.cuh - a warp's tensor-core multiply-add and its loads --*- C++
//-*-===//
//
// D += A · B for A 16×16 (row-major), B 16×8 (column-major), bf16 inputs and
// f32 accumulators: PTX `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`
// (sm_80 and later). Each lane of the warp holds a fixed piece of every
// operand; with g = lane / 4 and t = lane % 4 (PTX ISA, "Matrix Fragments
// for mma.m16n8k16 with floating point type"):
//
//   A: a[0] = A[g][2t..2t+1]      a[1] = A[g+8][2t..2t+1]
//      a[2] = A[g][2t+8..2t+9]    a[3] = A[g+8][2t+8..2t+9]
//   B: b[0] = B[2t..2t+1][g]      b[1] = B[2t+8..2t+9][g]
//   D: d[0..1] = D[g][2t..2t+1]   d[2..3] = D[g+8][2t..2t+1]
//
// each a[] and b[] word holding two bf16, the lower index in the low half.
// D's layout is A's for half the columns, which is what lets a product's
// result (scores) feed the next product's A operand without a trip through
// shared memory.
//
// ldmatrix_x4 loads such fragments from shared memory. The emulated build
// computes both from every lane's fragments or row addresses
// (CudaEmulator.cpp), the products in f32, k in order.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_MMA_CUH
#define MEGATRAIN_RUNTIME_CUDA_MMA_CUH

#include "runtime/cuda/CudaCompat.h"

#include <cstdint>
#include <cstring>

namespace mtrt::MT_KNS {

/// Two bf16 in one word, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(bf16 lo, bf16 hi) {
#ifdef MEGATRAIN_CUDA_EMULATION
  return uint32_t(lo.bits) | uint32_t(hi.bits) << 16;
#else
  return uint32_t(__bfloat16_as_ushort(lo)) | uint32_t(__bfloat16_as_ushort(hi))
                                                  << 16;
#endif
}

/// Two neighbouring bf16 in one word (p 4-byte aligned), p[0] in the low
/// half: as pack_bf16(p[0], p[1]).
__device__ __forceinline__ uint32_t load_word(const bf16 *p) {
#ifdef MEGATRAIN_CUDA_EMULATION
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
#else
  return *reinterpret_cast<const uint32_t *>(p);
#endif
}

/// Stores a word of two bf16 (as pack_bf16 makes it) at p, 4-byte aligned.
__device__ __forceinline__ void store_word(bf16 *p, uint32_t w) {
#ifdef MEGATRAIN_CUDA_EMULATION
  std::memcpy(p, &w, sizeof w);
#else
  *reinterpret_cast<uint32_t *>(p) = w;
#endif
}

/// Two f32 rounded to bf16 (to nearest even) in one word.
__device__ __forceinline__ uint32_t pack_f32(float lo, float hi) {
  return pack_bf16(f2bf(lo), f2bf(hi));
}

/// Four 8×8 bf16 matrices from shared memory into one register each
/// (PTX `ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16`): lane l passes
/// the address of row l % 8 of matrix l / 8 (8 bf16, 16-byte aligned);
/// register i of lane l receives matrix i's row l / 4, elements 2·(l % 4)
/// and 2·(l % 4) + 1 — with Trans, its column l / 4, rows 2·(l % 4) and
/// 2·(l % 4) + 1. So one call loads an A fragment, or B fragments for two
/// n-tiles, in the layout above. All 32 lanes must call it together.
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16 *row) {
#ifdef MEGATRAIN_CUDA_EMULATION
  emu::ldmatrix_x4(r, row, Trans);
#else
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
#endif
}

/// d += a · b over the warp; all 32 lanes must call it together.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
#ifdef MEGATRAIN_CUDA_EMULATION
  emu::mma_m16n8k16_bf16(d, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]));
#endif
}

} // namespace mtrt::MT_KNS

#endif // MEGATRAIN_RUNTIME_CUDA_MMA_CUH
