//===- HeadLayout.h - where attention's rows of D elements lie -----------===//
//
// An attention tensor of `heads` heads holds the row (b, h, i) of D
// elements either heads-major, (B, heads, S, D), or sequence-major,
// (B, S, heads, D): the layout a projection's output has before its heads
// and positions are swapped, so attention that reads and writes it spares
// those transposes (mt.attention's `layout`). The row statistics
// (log-sum-exp, δ) are (B, H, S) in both. Shared by the CPU and CUDA
// kernels.
//
//===----------------------------------------------------------------------===//

#ifndef MEGATRAIN_RUNTIME_KERNELS_HEADLAYOUT_H
#define MEGATRAIN_RUNTIME_KERNELS_HEADLAYOUT_H

#include <cstdint>

#if defined(__CUDACC__)
#define MT_HEAD_LAYOUT_FN __host__ __device__ __forceinline__
#else
#define MT_HEAD_LAYOUT_FN inline
#endif

namespace mtrt {

struct HeadLayout {
  bool seq_major = false; // (B, S, heads, D) rather than (B, heads, S, D)

  /// Elements from row i of a head to row i + 1.
  MT_HEAD_LAYOUT_FN int64_t row_stride(int64_t heads, int64_t D) const {
    return seq_major ? heads * D : D;
  }
  /// The offset of row (b, h, 0) in a tensor of `heads` heads.
  MT_HEAD_LAYOUT_FN int64_t head_offset(int64_t b, int64_t h, int64_t heads,
                                        int64_t S, int64_t D) const {
    return b * heads * S * D + h * (seq_major ? D : S * D);
  }
  /// The offset of row (b, h, i).
  MT_HEAD_LAYOUT_FN int64_t row_offset(int64_t b, int64_t h, int64_t i,
                                       int64_t heads, int64_t S,
                                       int64_t D) const {
    return head_offset(b, h, heads, S, D) + i * row_stride(heads, D);
  }
};

} // namespace mtrt

#undef MT_HEAD_LAYOUT_FN

#endif // MEGATRAIN_RUNTIME_KERNELS_HEADLAYOUT_H
