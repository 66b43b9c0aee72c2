//===- AttentionTileVariants.cu - other tiles for the attention kernels --===//
//
// The choices AttentionTileVariants.h lists, each a Tiles of
// AttentionTensorCore.cuh that changes one thing from the runtime's. Only
// head dims up to 128 (the decoders we train: 64 and 128), where the kernels
// hold a warp's rows in registers and tiles have the most room to move.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/AttentionTileVariants.h"

#include "runtime/cuda/AttentionTensorCore.cuh"
#include "runtime/exec/Error.h"

#include <type_traits>

namespace mtrt::MT_KNS {

namespace {

using attn::tc::Tiles;

attn::ScoreForm form_of(const AttentionCall &c) {
  attn::ScoreForm f;
  f.softcap = c.softcap;
  if (c.alibi_slopes) {
    if (c.H > attn::kMaxAlibiHeads)
      fail("attention tiles: ALiBi over ", c.H,
           " heads; the kernels take at most ", attn::kMaxAlibiHeads);
    f.heads = int(c.H);
    for (int64_t h = 0; h < c.H; ++h)
      f.slope[h] = c.alibi_slopes[h];
  }
  f.sinks = static_cast<const bf16 *>(c.sinks);
  return f;
}

const bf16 *B(const void *p) { return static_cast<const bf16 *>(p); }
bf16 *B(void *p) { return static_cast<bf16 *>(p); }

template <class C> void forward(const AttentionCall &c) {
  attn::tc::forward_tiled<C>(B(c.y), B(c.q), B(c.k), B(c.v), c.B, c.H, c.Hkv,
                             c.S, c.D, c.scale, c.range, form_of(c),
                             cudaStream_t(c.stream));
}
template <class C> void dq(const AttentionCall &c) {
  attn::tc::dq_tiled<C>(B(c.dq), B(c.dy), B(c.q), B(c.k), B(c.v), c.delta,
                        c.lse, c.B, c.H, c.Hkv, c.S, c.D, c.scale, c.range,
                        form_of(c), cudaStream_t(c.stream));
}
template <class C> void dkdv(const AttentionCall &c) {
  attn::tc::dkdv_tiled<C>(B(c.dk), B(c.dv), B(c.dy), B(c.q), B(c.k), B(c.v),
                          c.delta, c.lse, c.B, c.H, c.Hkv, c.S, c.D, c.scale,
                          c.range, form_of(c), cudaStream_t(c.stream));
}

/// A register floor's blocks an SM, "free" where there is none.
std::string floor_of(int blocks) {
  return blocks ? std::to_string(blocks) : "free";
}

template <class C> AttentionTiles variant() {
  const std::string name =
      "warps " + std::to_string(C::kWarps) + ", forward keys " +
      std::to_string(C::kFwdKeys) + ", dQ keys " + std::to_string(C::kDqKeys) +
      ", dK/dV queries " + std::to_string(C::kQueryTile) +
      ", blocks/SM forward " + floor_of(C::kFwdMinBlocks) + ", dQ " +
      floor_of(C::kDqMinBlocks) + ", dK/dV " + floor_of(C::kMinBlocks) +
      ", forward rows/warp " + std::to_string(16 * C::kFwdRowTiles) +
      ", forward key buffers " + std::to_string(C::kFwdKeyBuffers);
  return {name, std::is_same_v<C, Tiles<C::kDM>>, forward<C>, dq<C>, dkdv<C>};
}

} // namespace

std::vector<AttentionTiles> attention_tile_variants(int64_t head_dim) {
  // 8 warps: blocks of 128 query (or key) rows share each staged tile
  // between twice the warps. dK/dV's register cap then allows 1 block an SM
  // (3 blocks of 256 threads would leave it 80 registers a thread).
  if (head_dim <= 64)
    return {variant<Tiles<64>>(), variant<Tiles<64, 8, 64, 32, 32, 1>>(),
            variant<Tiles<64, 4, 32, 16>>(),        // smaller key tiles
            variant<Tiles<64, 4, 128, 64>>(),       // larger key tiles
            variant<Tiles<64, 4, 64, 32, 16>>(),    // dK/dV's query tile 16
            variant<Tiles<64, 4, 64, 32, 32, 2>>(), // dK/dV uncapped
            // 4 blocks an SM of the forward and dQ: 128 registers a thread
            // (dQ spills 8 bytes), with key tiles of 32 and 16.
            variant<Tiles<64, 4, 32, 16, 32, 3, 4, 4>>(),
            // FlashAttention 2's forward: 32 query rows a warp, 128 a block.
            variant<Tiles<64, 4, 64, 32, 32, 3, 0, 0, 2>>()};
  if (head_dim <= 128)
    return {variant<Tiles<128>>(), variant<Tiles<128, 8>>(),
            variant<Tiles<128, 4, 32, 16>>(),     // smaller key tiles
            variant<Tiles<128, 4, 64, 16>>(),     // dQ's key tile alone
            variant<Tiles<128, 4, 64, 32, 32>>(), // dK/dV's query tile 32
            // 3 blocks an SM of the forward: its key tile of 32 fits 168
            // registers a thread (64 would spill 120 bytes).
            variant<Tiles<128, 4, 32, 32, 16, 1, 3>>(),
            // FlashAttention 2's forward: 32 query rows a warp, 128 a block,
            // with key tiles of 32 (255 registers, 8 bytes spilled; key
            // tiles of 64 would spill 172).
            variant<Tiles<128, 4, 32, 32, 16, 1, 0, 0, 2>>()};
  return {};
}

} // namespace mtrt::MT_KNS
