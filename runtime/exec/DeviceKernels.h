//===- DeviceKernels.h - the kernels a template function calls --*- C++ -*-===//
//
// Generated template functions call these, one per primitive direction, with
// static shapes. A backend implements them on its compute stream: the CPU
// backend with the reference kernels of runtime/kernels (storage = f32,
// optionally rounded to bf16 after each op), CUDA with its own.
//
// Types: activations, activation gradients and weights are in the storage
// type (void*); param gradients are f32 (the gradient slot); token ids and
// targets are i32. Backward kernels accumulate (+=) into every gradient, as
// in runtime/kernels/Kernels.h (the dx of linear, the norms and rope,
// swiglu_backward's results and attention's dq, dk and dv where they are
// asked to; linear_forward adds into y where asked); generated code zeroes
// what must start at 0.
// Param gradients of add and mul go through storage scratch and
// accumulate_f32, since those operands may be activations or params.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_DEVICEKERNELS_H
#define MEGATRAIN_RUNTIME_EXEC_DEVICEKERNELS_H

#include "runtime/kernels/Kernels.h"

#include <cstdint>

namespace mtrt {

using Broadcast = cpu::Broadcast;
using MoeRouting = cpu::MoeRouting;
using MoeExperts = cpu::MoeExperts;
using MoeWeightGrads = cpu::MoeWeightGrads;

/// A mixture of experts' params in storage, in cpu::MoeWeights' roles;
/// null where absent.
struct MoeParams {
  const void *router, *gate_up, *down;
  const void *bias, *router_bias, *gate_up_bias, *down_bias, *expert_scale;
};

class DeviceKernels {
public:
  virtual ~DeviceKernels() = default;

  /// Bytes per storage element (4 on the CPU backend, 2 for bf16).
  virtual int64_t storage_size() const = 0;
  void *at(void *base, int64_t elems) const {
    return static_cast<char *>(base) + elems * storage_size();
  }
  const void *at(const void *base, int64_t elems) const {
    return static_cast<const char *>(base) + elems * storage_size();
  }

  virtual void zero(void *x, int64_t n) = 0;
  virtual void zero_f32(float *x, int64_t n) = 0;
  virtual void copy(void *y, const void *x, int64_t n) = 0;
  /// g += x, converting storage to f32.
  virtual void accumulate_f32(float *g, const void *x, int64_t n) = 0;

  /// y is written, or added into where accumulate.
  virtual void linear_forward(void *y, const void *x, const void *w,
                              const void *b, int64_t M, int64_t K, int64_t N,
                              bool w_in_out, bool accumulate) = 0;
  /// dx is written, or added into where accumulate_dx (cpu::linear_backward).
  virtual void linear_backward(void *dx, float *dw, float *db, const void *dy,
                               const void *x, const void *w, int64_t M,
                               int64_t K, int64_t N, bool w_in_out,
                               bool accumulate_dx) = 0;
  virtual void rms_norm_forward(void *y, const void *x, const void *w,
                                int64_t M, int64_t D, float eps) = 0;
  /// dx, as linear_backward's; dw added into.
  virtual void rms_norm_backward(void *dx, float *dw, const void *dy,
                                 const void *x, const void *w, int64_t M,
                                 int64_t D, float eps, bool accumulate_dx) = 0;
  virtual void layer_norm_forward(void *y, const void *x, const void *w,
                                  const void *b, int64_t M, int64_t D,
                                  float eps) = 0;
  virtual void layer_norm_backward(void *dx, float *dw, float *db,
                                   const void *dy, const void *x, const void *w,
                                   int64_t M, int64_t D, float eps,
                                   bool accumulate_dx) = 0;
  virtual void rope_forward(void *y, const void *x, const void *cos,
                            const void *sin, int64_t B, int64_t H, int64_t S,
                            int64_t D, int64_t R, int seq_axis,
                            bool interleaved) = 0;
  virtual void rope_backward(void *dx, const void *dy, const void *cos,
                             const void *sin, int64_t B, int64_t H, int64_t S,
                             int64_t D, int64_t R, int seq_axis,
                             bool interleaved, bool accumulate) = 0;
  // q, y, dy, dq: B·H·S rows of D, k, v, dk, dv: B·Hkv·S, laid out as
  // `layout` says (HeadLayout.h).
  // range: the keys j ≤ i that query i sees (a window, chunks; KeyRange.h).
  // softcap > 0: each scaled score s becomes softcap · tanh(s / softcap).
  // alibi_slopes: H host floats (query head h adds m_h · (j − i) to its
  // scores), or null. sinks: H values of a param (head h's softmax has one
  // more logit, weighing no value), or null. lse: B·H·S floats, each query
  // row's log-sum-exp (log Σ_j exp(score_ij), the sink's logit included),
  // or null where no backward reads it.
  virtual void attention_forward(void *y, float *lse, const void *q,
                                 const void *k, const void *v, int64_t B,
                                 int64_t H, int64_t Hkv, int64_t S, int64_t D,
                                 float scale, const KeyRange &range,
                                 float softcap, const float *alibi_slopes,
                                 const void *sinks, HeadLayout layout) = 0;
  // δ(b, h, i) = dy · y over the row (b, h, i) of D: the row term of the
  // softmax's backward, from the forward's output y; B·H·S floats in
  // (B, H, S) order whatever the layout, f32 whatever the storage.
  virtual void attention_delta(float *delta, const void *dy, const void *y,
                               int64_t B, int64_t H, int64_t S, int64_t D,
                               HeadLayout layout) = 0;
  // y, lse: the forward's for the same q, k, v; delta: attention_delta's
  // from y, B·H·S floats. A backend reads δ or y, whichever its kernel
  // takes. dq, dk, dv are written, or added into where accumulate; dsinks
  // (H floats, or null) gets the sinks' gradient added.
  virtual void attention_backward(void *dq, void *dk, void *dv, const void *dy,
                                  const void *q, const void *k, const void *v,
                                  const void *y, const float *delta,
                                  const float *lse, int64_t B, int64_t H,
                                  int64_t Hkv, int64_t S, int64_t D,
                                  float scale, const KeyRange &range,
                                  float softcap, const float *alibi_slopes,
                                  const void *sinks, float *dsinks,
                                  bool accumulate, HeadLayout layout) = 0;
  virtual void relu_forward(void *y, const void *x, int64_t n) = 0;
  virtual void relu_backward(void *dx, const void *dy, const void *x,
                             int64_t n) = 0;
  virtual void sigmoid_forward(void *y, const void *x, int64_t n) = 0;
  virtual void exp_forward(void *y, const void *x, int64_t n) = 0;
  virtual void softplus_forward(void *y, const void *x, int64_t n) = 0;
  virtual void softplus_backward(void *dx, const void *dy, const void *x,
                                 int64_t n) = 0;
  virtual void sigmoid_backward(void *dx, const void *dy, const void *x,
                                int64_t n) = 0;
  virtual void silu_forward(void *y, const void *x, int64_t n) = 0;
  virtual void silu_backward(void *dx, const void *dy, const void *x,
                             int64_t n) = 0;
  virtual void gelu_forward(void *y, const void *x, int64_t n,
                            bool approximate_tanh) = 0;
  virtual void gelu_backward(void *dx, const void *dy, const void *x, int64_t n,
                             bool approximate_tanh) = 0;
  virtual void softcap_forward(void *y, const void *x, int64_t n,
                               float cap) = 0;
  virtual void softcap_backward(void *dx, const void *dy, const void *x,
                                int64_t n, float cap) = 0;
  /// T tokens of H through E experts (cpu::moe_forward's layouts); the
  /// router reads router_x, or x where it is null.
  virtual void moe_forward(void *y, const void *x, const void *router_x,
                           const MoeParams &w, int64_t T, int64_t H, int64_t E,
                           int64_t I, int64_t k, const MoeRouting &routing,
                           const MoeExperts &experts) = 0;
  /// dx and drouter_x may be null (drouter_x is, where router_x is); the
  /// param gradients are added to, each may be null.
  virtual void moe_backward(void *dx, void *drouter_x, const MoeWeightGrads &g,
                            const void *dy, const void *x, const void *router_x,
                            const MoeParams &w, int64_t T, int64_t H, int64_t E,
                            int64_t I, int64_t k, const MoeRouting &routing,
                            const MoeExperts &experts) = 0;
  /// x, y [B, C, S], w [C, 1, K], bias [C] (cpu::causal_conv_forward); bias,
  /// dx, dw and db may be null.
  virtual void causal_conv_forward(void *y, const void *x, const void *w,
                                   const void *bias, int64_t B, int64_t C,
                                   int64_t S, int64_t K) = 0;
  virtual void causal_conv_backward(void *dx, float *dw, float *db,
                                    const void *dy, const void *x,
                                    const void *w, int64_t B, int64_t C,
                                    int64_t S, int64_t K) = 0;
  /// The gated scan, with or without the delta rule (cpu::gated_scan_forward):
  /// q, k [B, T, Hk, Dk], v, o [B, T, Hv, Dv], beta [B, T, Hv], g [B, T, Hv]
  /// or, with key_decay, [B, T, Hv, Dk]; every gradient is storage, added
  /// to, and may be null.
  virtual void gated_scan_forward(void *o, const void *q, const void *k,
                                  const void *v, const void *g,
                                  const void *beta, int64_t B, int64_t T,
                                  int64_t Hk, int64_t Hv, int64_t Dk,
                                  int64_t Dv, bool delta, bool key_decay) = 0;
  virtual void gated_scan_backward(void *dq, void *dk, void *dv, void *dg,
                                   void *dbeta, const void *dout, const void *q,
                                   const void *k, const void *v, const void *g,
                                   const void *beta, int64_t B, int64_t T,
                                   int64_t Hk, int64_t Hv, int64_t Dk,
                                   int64_t Dv, bool delta, bool key_decay) = 0;
  /// alpha_p, alpha_n: one-element weights, cpu::xielu_forward's ap and an
  /// themselves, or with `softplus` ap = softplus(alpha_p) and an = beta +
  /// softplus(alpha_n) (transformers' parametrization); dalpha_p and
  /// dalpha_n are then gradients of alpha_p and alpha_n through it.
  virtual void xielu_forward(void *y, const void *x, const void *alpha_p,
                             const void *alpha_n, int64_t n, float beta,
                             float eps, bool softplus) = 0;
  virtual void xielu_backward(void *dx, float *dalpha_p, float *dalpha_n,
                              const void *dy, const void *x,
                              const void *alpha_p, const void *alpha_n,
                              int64_t n, float beta, float eps,
                              bool softplus) = 0;
  virtual void swiglu_forward(void *y, const void *gate, const void *up,
                              int64_t n) = 0;
  /// dgate and dup are written, or added into where accumulate.
  virtual void swiglu_backward(void *dgate, void *dup, const void *dy,
                               const void *gate, const void *up, int64_t n,
                               bool accumulate) = 0;
  virtual void scale_forward(void *y, const void *x, int64_t n,
                             float factor) = 0;
  virtual void add_forward(void *y, const void *a, const void *b,
                           const Broadcast &bc) = 0;
  /// da, db (either may be null) += dy summed over their broadcast dims.
  virtual void add_backward(void *da, void *db, const void *dy,
                            const Broadcast &bc) = 0;
  virtual void mul_forward(void *y, const void *a, const void *b,
                           const Broadcast &bc) = 0;
  virtual void mul_backward(void *da, void *db, const void *dy, const void *a,
                            const void *b, const Broadcast &bc) = 0;
  virtual void embed_forward(void *y, const int32_t *ids, const void *table,
                             int64_t N, int64_t V, int64_t D) = 0;
  virtual void embed_backward(float *dtable, const void *dy, const int32_t *ids,
                              int64_t N, int64_t V, int64_t D) = 0;
  /// Rows of y (N x D) whose id lies in [v0, v0 + Vp) get table row id - v0
  /// (table: Vp x D) times `scale`; other rows are left as they are. first:
  /// rows whose id is outside [0, V) are set to NaN (a poisoned id must
  /// show, as in embed_forward).
  virtual void embed_forward_piece(void *y, const int32_t *ids,
                                   const void *table, int64_t N, int64_t Vp,
                                   int64_t D, int64_t v0, int64_t V, bool first,
                                   float scale) = 0;
  /// dtable (Vp x D, f32) row id - v0 += scale · dy row n for every n whose
  /// id is in [v0, v0 + Vp); deterministic (same summation order as
  /// embed_backward).
  virtual void embed_backward_piece(float *dtable, const void *dy,
                                    const int32_t *ids, int64_t N, int64_t Vp,
                                    int64_t D, int64_t v0, float scale) = 0;
  virtual void position_embed_forward(void *y, const void *table, int64_t S,
                                      int64_t D, int64_t offset) = 0;
  virtual void position_embed_backward(float *dtable, const void *dy, int64_t S,
                                       int64_t D, int64_t offset) = 0;
  /// The cross-entropy of N rows of logits summed and divided by
  /// total_rows, written to *loss (f32) or, with accumulate, added to it:
  /// a launch's rows may come in chunks. The backward writes
  /// dloss · (softmax - onehot) into dlogits, or adds it where accumulate.
  virtual void cross_entropy_forward(float *loss, const void *logits,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t total_rows,
                                     bool accumulate) = 0;
  virtual void cross_entropy_backward(void *dlogits, const void *logits,
                                      const int32_t *targets, int64_t N,
                                      int64_t V, float dloss,
                                      bool accumulate) = 0;
  /// Cross-entropy over a vocabulary in pieces. stats: 3 floats per row
  /// (running max m, running sum s of exp(z - m), the target's logit t),
  /// f32. logits: the N x Vp logits of vocabulary entries [v0, v0 + Vp).
  /// first: the stats start fresh (m = -inf, s = 0, t = 0, and t = NaN for
  /// a row whose target is outside [0, V)); else they are merged with the
  /// piece's: m' = max(m, mp), s' = s·exp(m - m') + sp·exp(mp - m'); t is
  /// set when the target falls in the piece. stats may be read and written
  /// in place.
  virtual void cross_entropy_stats(float *stats, const void *logits,
                                   const int32_t *targets, int64_t N,
                                   int64_t Vp, int64_t v0, int64_t V,
                                   bool first) = 0;
  /// The loss from complete stats: sum over the N rows of (m + log s - t),
  /// divided by total_rows, written to *loss or, with accumulate, added.
  virtual void cross_entropy_stats_loss(float *loss, const float *stats,
                                        int64_t N, int64_t total_rows,
                                        bool accumulate) = 0;
  /// Writes (adds, where accumulate) dloss · (softmax - onehot) of the
  /// piece into dlogits (N x Vp), the softmax taken from complete stats:
  /// exp(z - m) / s. A row whose stats are NaN gets NaN.
  virtual void cross_entropy_backward_piece(void *dlogits, const void *logits,
                                            const int32_t *targets,
                                            const float *stats, int64_t N,
                                            int64_t Vp, int64_t v0, float dloss,
                                            bool accumulate) = 0;
  virtual void transpose_forward(void *y, const void *x, const int64_t *x_shape,
                                 const int64_t *perm, int rank) = 0;
  virtual void transpose_backward(void *dx, const void *dy,
                                  const int64_t *x_shape, const int64_t *perm,
                                  int rank) = 0;
  virtual void slice_forward(void *y, const void *x, int64_t outer, int64_t dim,
                             int64_t inner, int64_t start, int64_t n) = 0;
  virtual void slice_backward(void *dx, const void *dy, int64_t outer,
                              int64_t dim, int64_t inner, int64_t start,
                              int64_t n) = 0;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_DEVICEKERNELS_H
