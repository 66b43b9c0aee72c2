//===- AttentionTileVariants128.cu - attention tiles, head dim 128 --------===//
//
// The choices AttentionTileVariants.h lists for head dims up to 128, each a
// Tiles of AttentionTensorCore.cuh that changes one thing from the
// runtime's.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/AttentionTileVariants.cuh"

namespace mtrt::MT_KNS {

std::vector<AttentionTiles> attention_tile_variants_128() {
  using attn::tc::Tiles;
  using attn::tc::variants::tile_variant;
  return {tile_variant<Tiles<128>>(), tile_variant<Tiles<128, 8>>(),
          tile_variant<Tiles<128, 4, 32, 16>>(),     // smaller key tiles
          tile_variant<Tiles<128, 4, 64, 16>>(),     // dQ's key tile alone
          tile_variant<Tiles<128, 4, 64, 32, 32>>(), // dK/dV's query tile 32
          // 3 blocks an SM of the forward: its key tile of 32 fits 168
          // registers a thread (64 would spill 120 bytes).
          tile_variant<Tiles<128, 4, 32, 32, 16, 1, 3>>(),
          // FlashAttention 2's layout in the forward and dQ: 32 query rows
          // a warp, 128 a block, with key tiles of 32 and 16 (the
          // forward's of 64 would spill 172 bytes).
          tile_variant<Tiles<128, 4, 32, 16, 16, 1, 0, 0, 2, 2, 2>>()};
}

} // namespace mtrt::MT_KNS
