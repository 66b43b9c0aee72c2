//===- AttentionTileVariants.cuh - a Tiles as an AttentionTiles ---*- C++
//-*-===//
//
// What AttentionTileVariants64.cu and AttentionTileVariants128.cu share
// (two files, so that their kernels compile in parallel):
// variants::tile_variant<C>() wraps the kernels of AttentionTensorCore.cuh on
// tiles C as the AttentionTiles that AttentionTileVariants.h hands out.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_ATTENTIONTILEVARIANTS_CUH
#define MEGATRAIN_RUNTIME_CUDA_ATTENTIONTILEVARIANTS_CUH

#include "runtime/cuda/AttentionTileVariants.h"

#include "runtime/cuda/AttentionTensorCore.cuh"
#include "runtime/exec/Error.h"

#include <string>
#include <type_traits>

namespace mtrt::MT_KNS::attn::tc::variants {

inline ScoreForm form_of(const AttentionCall &c) {
  ScoreForm f;
  f.softcap = c.softcap;
  if (c.alibi_slopes) {
    if (c.H > kMaxAlibiHeads)
      fail("attention tiles: ALiBi over ", c.H,
           " heads; the kernels take at most ", kMaxAlibiHeads);
    f.heads = int(c.H);
    for (int64_t h = 0; h < c.H; ++h)
      f.slope[h] = c.alibi_slopes[h];
  }
  f.sinks = static_cast<const bf16 *>(c.sinks);
  return f;
}

inline const bf16 *B(const void *p) { return static_cast<const bf16 *>(p); }
inline bf16 *B(void *p) { return static_cast<bf16 *>(p); }

template <class C> void forward(const AttentionCall &c) {
  forward_tiled<C>(B(c.y), c.lse, B(c.q), B(c.k), B(c.v), c.B, c.H, c.Hkv, c.S,
                   c.D, c.scale, c.range, form_of(c), c.layout,
                   cudaStream_t(c.stream));
}
// The gradients are added into what the caller holds there.
template <class C> void dq(const AttentionCall &c) {
  dq_tiled<C>(B(c.dq), B(c.dy), B(c.q), B(c.k), B(c.v), c.delta, c.lse, c.B,
              c.H, c.Hkv, c.S, c.D, c.scale, c.range, form_of(c), true,
              c.layout, cudaStream_t(c.stream));
}
template <class C> void dkdv(const AttentionCall &c) {
  dkdv_tiled<C>(B(c.dk), B(c.dv), nullptr, B(c.dy), B(c.q), B(c.k), B(c.v),
                c.delta, c.lse, c.B, c.H, c.Hkv, c.S, c.D, c.scale, c.range,
                form_of(c), true, c.layout, cudaStream_t(c.stream));
}

/// A register floor's blocks an SM, "free" where there is none.
inline std::string floor_of(int blocks) {
  return blocks ? std::to_string(blocks) : "free";
}

template <class C> AttentionTiles tile_variant() {
  const std::string name =
      "warps " + std::to_string(C::kWarps) + ", forward keys " +
      std::to_string(C::kFwdKeys) + ", dQ keys " + std::to_string(C::kDqKeys) +
      ", dK/dV queries " + std::to_string(C::kQueryTile) +
      ", blocks/SM forward " + floor_of(C::kFwdMinBlocks) + ", dQ " +
      floor_of(C::kDqMinBlocks) + ", dK/dV " + floor_of(C::kMinBlocks) +
      ", forward rows/warp " + std::to_string(16 * C::kFwdRowTiles) +
      ", forward key buffers " + std::to_string(C::kFwdKeyBuffers) +
      ", dQ rows/warp " + std::to_string(16 * C::kDqRowTiles);
  return {name, std::is_same_v<C, Tiles<C::kDM>>, forward<C>, dq<C>, dkdv<C>};
}

} // namespace mtrt::MT_KNS::attn::tc::variants

#endif // MEGATRAIN_RUNTIME_CUDA_ATTENTIONTILEVARIANTS_CUH
