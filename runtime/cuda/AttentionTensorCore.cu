//===- AttentionTensorCore.cu - the tensor-core attention's launches ----===//
//
// The kernels of AttentionTensorCore.cuh on the tiles the runtime uses,
// chosen by the head dim padded to 64, 128, 256 or 512.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/AttentionTensorCore.cuh"

namespace mtrt::MT_KNS::attn {

void tensor_core_forward(bf16 *y, float *lse, const bf16 *q, const bf16 *k,
                         const bf16 *v, int64_t Bn, int64_t H, int64_t Hkv,
                         int64_t S, int64_t D, float scale, KeyRange range,
                         const ScoreForm &form, HeadLayout layout,
                         cudaStream_t stream) {
  if (D <= 64)
    tc::forward_tiled<tc::Tiles<64>>(y, lse, q, k, v, Bn, H, Hkv, S, D, scale,
                                     range, form, layout, stream);
  else if (D <= 128)
    tc::forward_tiled<tc::Tiles<128>>(y, lse, q, k, v, Bn, H, Hkv, S, D, scale,
                                      range, form, layout, stream);
  else if (D <= 256)
    tc::forward_tiled<tc::Tiles<256>>(y, lse, q, k, v, Bn, H, Hkv, S, D, scale,
                                      range, form, layout, stream);
  else
    tc::forward_tiled<tc::Tiles<512>>(y, lse, q, k, v, Bn, H, Hkv, S, D, scale,
                                      range, form, layout, stream);
}

void tensor_core_backward(bf16 *dq, bf16 *dk, bf16 *dv, bf16 *ds_t,
                          const bf16 *dy, const bf16 *q, const bf16 *k,
                          const bf16 *v, const float *delta, const float *lse,
                          int64_t Bn, int64_t H, int64_t Hkv, int64_t S,
                          int64_t D, float scale, KeyRange range,
                          const ScoreForm &form, bool accumulate,
                          HeadLayout layout, cudaStream_t stream) {
  if (D <= 64)
    tc::backward_tiled<tc::Tiles<64>>(dq, dk, dv, ds_t, dy, q, k, v, delta, lse,
                                      Bn, H, Hkv, S, D, scale, range, form,
                                      accumulate, layout, stream);
  else if (D <= 128)
    tc::backward_tiled<tc::Tiles<128>>(dq, dk, dv, ds_t, dy, q, k, v, delta,
                                       lse, Bn, H, Hkv, S, D, scale, range,
                                       form, accumulate, layout, stream);
  else if (D <= 256)
    tc::backward_tiled<tc::Tiles<256>>(dq, dk, dv, ds_t, dy, q, k, v, delta,
                                       lse, Bn, H, Hkv, S, D, scale, range,
                                       form, accumulate, layout, stream);
  else
    tc::backward_tiled<tc::Tiles<512>>(dq, dk, dv, ds_t, dy, q, k, v, delta,
                                       lse, Bn, H, Hkv, S, D, scale, range,
                                       form, accumulate, layout, stream);
}

} // namespace mtrt::MT_KNS::attn
