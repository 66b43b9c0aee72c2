//===- CpuKernels.h - DeviceKernels on the CPU reference kernels -*- C++
//-*-===//
//
// The CPU backend's kernels: runtime/kernels with storage = f32. With bf16
// on, every storage output is rounded to bf16 after the op (f32 gradients
// and the loss are not), which is how the GPU's storage rounds. Token ids
// and targets out of [0, V) (stress mode's poison) give NaN instead of an
// out-of-bounds read, so a missing wait shows up as NaN, not a crash.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_CPUKERNELS_H
#define MEGATRAIN_RUNTIME_EXEC_CPUKERNELS_H

#include "runtime/exec/DeviceKernels.h"

namespace mtrt {

class CpuKernels final : public DeviceKernels {
public:
  explicit CpuKernels(bool bf16) : bf16_(bf16) {}

  int64_t storage_size() const override { return 4; }

  void zero(void *x, int64_t n) override;
  void zero_f32(float *x, int64_t n) override;
  void copy(void *y, const void *x, int64_t n) override;
  void accumulate_f32(float *g, const void *x, int64_t n) override;

  void linear_forward(void *y, const void *x, const void *w, const void *b,
                      int64_t M, int64_t K, int64_t N, bool w_in_out,
                      bool accumulate) override;
  void linear_backward(void *dx, float *dw, float *db, const void *dy,
                       const void *x, const void *w, int64_t M, int64_t K,
                       int64_t N, bool w_in_out, bool accumulate_dx) override;
  void rms_norm_forward(void *y, const void *x, const void *w, int64_t M,
                        int64_t D, float eps) override;
  void rms_norm_backward(void *dx, float *dw, const void *dy, const void *x,
                         const void *w, int64_t M, int64_t D, float eps,
                         bool accumulate_dx) override;
  void layer_norm_forward(void *y, const void *x, const void *w, const void *b,
                          int64_t M, int64_t D, float eps) override;
  void layer_norm_backward(void *dx, float *dw, float *db, const void *dy,
                           const void *x, const void *w, int64_t M, int64_t D,
                           float eps, bool accumulate_dx) override;
  void rope_forward(void *y, const void *x, const void *cos, const void *sin,
                    int64_t B, int64_t H, int64_t S, int64_t D, int64_t R,
                    int seq_axis, bool interleaved) override;
  void rope_backward(void *dx, const void *dy, const void *cos, const void *sin,
                     int64_t B, int64_t H, int64_t S, int64_t D, int64_t R,
                     int seq_axis, bool interleaved, bool accumulate) override;
  void attention_forward(void *y, float *lse, const void *q, const void *k,
                         const void *v, int64_t B, int64_t H, int64_t Hkv,
                         int64_t S, int64_t D, float scale,
                         const KeyRange &range, float softcap,
                         const float *alibi_slopes, const void *sinks,
                         HeadLayout layout) override;
  void attention_delta(float *delta, const void *dy, const void *y, int64_t B,
                       int64_t H, int64_t S, int64_t D,
                       HeadLayout layout) override;
  void attention_backward(void *dq, void *dk, void *dv, const void *dy,
                          const void *q, const void *k, const void *v,
                          const void *y, const float *delta, const float *lse,
                          int64_t B, int64_t H, int64_t Hkv, int64_t S,
                          int64_t D, float scale, const KeyRange &range,
                          float softcap, const float *alibi_slopes,
                          const void *sinks, float *dsinks, bool accumulate,
                          HeadLayout layout) override;
  void relu_forward(void *y, const void *x, int64_t n) override;
  void relu_backward(void *dx, const void *dy, const void *x,
                     int64_t n) override;
  void sigmoid_forward(void *y, const void *x, int64_t n) override;
  void exp_forward(void *y, const void *x, int64_t n) override;
  void softplus_forward(void *y, const void *x, int64_t n) override;
  void softplus_backward(void *dx, const void *dy, const void *x,
                         int64_t n) override;
  void sigmoid_backward(void *dx, const void *dy, const void *x,
                        int64_t n) override;
  void silu_forward(void *y, const void *x, int64_t n) override;
  void silu_backward(void *dx, const void *dy, const void *x,
                     int64_t n) override;
  void gelu_forward(void *y, const void *x, int64_t n,
                    bool approximate_tanh) override;
  void gelu_backward(void *dx, const void *dy, const void *x, int64_t n,
                     bool approximate_tanh) override;
  void moe_forward(void *y, const void *x, const void *router_x,
                   const MoeParams &w, int64_t T, int64_t H, int64_t E,
                   int64_t I, int64_t k, const MoeRouting &routing,
                   const MoeExperts &experts) override;
  void moe_backward(void *dx, void *drouter_x, const MoeWeightGrads &g,
                    const void *dy, const void *x, const void *router_x,
                    const MoeParams &w, int64_t T, int64_t H, int64_t E,
                    int64_t I, int64_t k, const MoeRouting &routing,
                    const MoeExperts &experts) override;
  void causal_conv_forward(void *y, const void *x, const void *w,
                           const void *bias, int64_t B, int64_t C, int64_t S,
                           int64_t K) override;
  void causal_conv_backward(void *dx, float *dw, float *db, const void *dy,
                            const void *x, const void *w, int64_t B, int64_t C,
                            int64_t S, int64_t K) override;
  void gated_scan_forward(void *o, const void *q, const void *k, const void *v,
                          const void *g, const void *beta, int64_t B, int64_t T,
                          int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                          bool delta, bool key_decay) override;
  void gated_scan_backward(void *dq, void *dk, void *dv, void *dg, void *dbeta,
                           const void *dout, const void *q, const void *k,
                           const void *v, const void *g, const void *beta,
                           int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                           int64_t Dk, int64_t Dv, bool delta,
                           bool key_decay) override;
  void xielu_forward(void *y, const void *x, const void *alpha_p,
                     const void *alpha_n, int64_t n, float beta, float eps,
                     bool softplus) override;
  void xielu_backward(void *dx, float *dalpha_p, float *dalpha_n,
                      const void *dy, const void *x, const void *alpha_p,
                      const void *alpha_n, int64_t n, float beta, float eps,
                      bool softplus) override;
  void softcap_forward(void *y, const void *x, int64_t n, float cap) override;
  void softcap_backward(void *dx, const void *dy, const void *x, int64_t n,
                        float cap) override;
  void swiglu_forward(void *y, const void *gate, const void *up,
                      int64_t n) override;
  void swiglu_backward(void *dgate, void *dup, const void *dy, const void *gate,
                       const void *up, int64_t n, bool accumulate) override;
  void scale_forward(void *y, const void *x, int64_t n, float factor) override;
  void add_forward(void *y, const void *a, const void *b,
                   const Broadcast &bc) override;
  void add_backward(void *da, void *db, const void *dy,
                    const Broadcast &bc) override;
  void mul_forward(void *y, const void *a, const void *b,
                   const Broadcast &bc) override;
  void mul_backward(void *da, void *db, const void *dy, const void *a,
                    const void *b, const Broadcast &bc) override;
  void embed_forward(void *y, const int32_t *ids, const void *table, int64_t N,
                     int64_t V, int64_t D) override;
  void embed_backward(float *dtable, const void *dy, const int32_t *ids,
                      int64_t N, int64_t V, int64_t D) override;
  void embed_forward_piece(void *y, const int32_t *ids, const void *table,
                           int64_t N, int64_t Vp, int64_t D, int64_t v0,
                           int64_t V, bool first, float scale) override;
  void embed_backward_piece(float *dtable, const void *dy, const int32_t *ids,
                            int64_t N, int64_t Vp, int64_t D, int64_t v0,
                            float scale) override;
  void position_embed_forward(void *y, const void *table, int64_t S, int64_t D,
                              int64_t offset) override;
  void position_embed_backward(float *dtable, const void *dy, int64_t S,
                               int64_t D, int64_t offset) override;
  void cross_entropy_forward(float *loss, const void *logits,
                             const int32_t *targets, int64_t N, int64_t V,
                             int64_t total_rows, bool accumulate) override;
  void cross_entropy_backward(void *dlogits, const void *logits,
                              const int32_t *targets, int64_t N, int64_t V,
                              float dloss, bool accumulate) override;
  void cross_entropy_stats(float *stats, const void *logits,
                           const int32_t *targets, int64_t N, int64_t Vp,
                           int64_t v0, int64_t V, bool first) override;
  void cross_entropy_stats_loss(float *loss, const float *stats, int64_t N,
                                int64_t total_rows, bool accumulate) override;
  void cross_entropy_backward_piece(void *dlogits, const void *logits,
                                    const int32_t *targets, const float *stats,
                                    int64_t N, int64_t Vp, int64_t v0,
                                    float dloss, bool accumulate) override;
  void transpose_forward(void *y, const void *x, const int64_t *x_shape,
                         const int64_t *perm, int rank) override;
  void transpose_backward(void *dx, const void *dy, const int64_t *x_shape,
                          const int64_t *perm, int rank) override;
  void slice_forward(void *y, const void *x, int64_t outer, int64_t dim,
                     int64_t inner, int64_t start, int64_t n) override;
  void slice_backward(void *dx, const void *dy, int64_t outer, int64_t dim,
                      int64_t inner, int64_t start, int64_t n) override;

private:
  /// Rounds a storage output to bf16 when emulating the GPU.
  void store(void *x, int64_t n) const;

  bool bf16_;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_CPUKERNELS_H
