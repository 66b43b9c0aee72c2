//===- AttentionTileVariants.h - other tiles for the attention kernels -*- C++
//-*-===//
//
// The tensor-core attention's kernels (AttentionTensorCore.cuh) on tiles
// other than the runtime's, each changing one thing: a block of 8 warps,
// smaller or larger key tiles, dK/dV's query tile, its register cap. The
// tile benchmark (attention_bench --tiles) times them beside the runtime's
// on the card at hand and compares their outputs with the runtime's; the
// kernel tests check them against the CPU reference. A choice faster there
// becomes Tiles<DM>'s default; the runtime itself never calls these.
//
// Built into its own library (mtrt_cuda_tiles; the emulated build into the
// kernel tests), not into the runtime. No CUDA types here.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_ATTENTIONTILEVARIANTS_H
#define MEGATRAIN_RUNTIME_CUDA_ATTENTIONTILEVARIANTS_H

#include "runtime/cuda/KernelNamespace.h"
#include "runtime/kernels/HeadLayout.h"
#include "runtime/kernels/KeyRange.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mtrt::MT_KNS {

/// One attention call's operands, as CudaKernels takes them: device
/// pointers (bf16 unless said), δ from attention_delta, lse B·H·S floats
/// that the forward writes and dq and dkdv read. alibi_slopes: H host floats,
/// or null; sinks: H bf16 on the device, or null. stream: a cudaStream_t.
/// layout: how q, k, v, y and their gradients lie (HeadLayout.h).
struct AttentionCall {
  void *y, *dq, *dk, *dv;
  const void *q, *k, *v, *dy;
  const float *delta;
  float *lse;
  int64_t B, H, Hkv, S, D;
  float scale;
  KeyRange range;
  float softcap;
  const float *alibi_slopes;
  const void *sinks;
  void *stream;
  HeadLayout layout = {};
};

/// The kernels on one choice of tiles. forward writes y and the
/// log-sum-exp; dq adds dQ and dkdv dK and dV, as the runtime's backward
/// does.
struct AttentionTiles {
  std::string name; // the choice, e.g. "warps 4, forward keys 64, ..."
  bool runtime;     // the runtime's own (Tiles<DM>)
  void (*forward)(const AttentionCall &);
  void (*dq)(const AttentionCall &);
  void (*dkdv)(const AttentionCall &);
};

/// The choices for head dims up to 64 and up to 128, the runtime's first
/// (AttentionTileVariants64.cu and AttentionTileVariants128.cu).
std::vector<AttentionTiles> attention_tile_variants_64();
std::vector<AttentionTiles> attention_tile_variants_128();

/// The choices for a head dim: none past 128.
inline std::vector<AttentionTiles> attention_tile_variants(int64_t head_dim) {
  if (head_dim <= 64)
    return attention_tile_variants_64();
  if (head_dim <= 128)
    return attention_tile_variants_128();
  return {};
}

} // namespace mtrt::MT_KNS

#endif // MEGATRAIN_RUNTIME_CUDA_ATTENTIONTILEVARIANTS_H
