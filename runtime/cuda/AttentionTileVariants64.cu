//===- AttentionTileVariants64.cu - attention tiles, head dim 64 ----------===//
//
// The choices AttentionTileVariants.h lists for head dims up to 64, each a
// Tiles of AttentionTensorCore.cuh that changes one thing from the
// runtime's.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/AttentionTileVariants.cuh"

namespace mtrt::MT_KNS {

std::vector<AttentionTiles> attention_tile_variants_64() {
  using attn::tc::Tiles;
  using attn::tc::variants::tile_variant;
  // 8 warps: blocks of 128 query (or key) rows share each staged tile
  // between twice the warps. dK/dV's register cap then allows 1 block an SM
  // (3 blocks of 256 threads would leave it 80 registers a thread).
  return {tile_variant<Tiles<64>>(),
          tile_variant<Tiles<64, 8, 64, 32, 32, 1>>(),
          tile_variant<Tiles<64, 4, 32, 16>>(),        // smaller key tiles
          tile_variant<Tiles<64, 4, 128, 64>>(),       // larger key tiles
          tile_variant<Tiles<64, 4, 64, 32, 16>>(),    // dK/dV's query tile 16
          tile_variant<Tiles<64, 4, 64, 32, 32, 2>>(), // dK/dV uncapped
          // 4 blocks an SM of the forward and dQ: 128 registers a thread
          // (dQ spills 8 bytes), with key tiles of 32 and 16.
          tile_variant<Tiles<64, 4, 32, 16, 32, 3, 4, 4>>(),
          // FlashAttention 2's layout in the forward and dQ: 32 query rows
          // a warp, 128 a block.
          tile_variant<Tiles<64, 4, 64, 32, 32, 3, 0, 0, 2, 2, 2>>()};
}

} // namespace mtrt::MT_KNS
