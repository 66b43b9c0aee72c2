//===- Kernels.h - CPU forward/backward kernels of every primitive -*- C++
//-*-===//
//
// The readable reference implementation of the mt primitives (see
// docs/primitives.md for the math), llm.c style: contiguous row-major fp32
// buffers, a forward `op_forward(out, in..., dims)` and a backward
// `op_backward(d_in..., d_out, in..., dims)` per primitive.
//
// Conventions every kernel follows:
//  - Backward kernels ACCUMULATE (+=) into every gradient they write, so
//    fan-out and gradient accumulation need no extra adds; callers zero
//    buffers first. The dx of linear, the norms and rope, swiglu's two
//    results, attention's dq, dk and dv and cross-entropy's dlogits are
//    written (=) unless asked to accumulate: zeroing them first would cost
//    a pass over each, and the add a read of it.
//    linear_forward too adds its product into y where asked (a residual
//    built in place).
//  - A null gradient pointer means "not needed" and is skipped.
//  - Backward kernels get the forward's inputs and recompute what they need
//    (norm statistics, softmax): nothing is saved between the two.
//  - Results are deterministic: no atomics, reduction order independent of
//    thread timing, so two runs give bitwise-equal results.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_KERNELS_KERNELS_H
#define MEGATRAIN_RUNTIME_KERNELS_KERNELS_H

#include "runtime/kernels/HeadLayout.h"
#include "runtime/kernels/KeyRange.h"

#include <cstdint>

namespace mtrt::cpu {

// ---- linear ---------------------------------------------------------------
// x (M, K); w (N, K) when !w_in_out (y = x·wᵀ), (K, N) when w_in_out (y = x·w);
// b (N) or null; y (M, N), written or, where accumulate, added into.
void linear_forward(float *y, const float *x, const float *w, const float *b,
                    int64_t M, int64_t K, int64_t N, bool w_in_out,
                    bool accumulate);
void linear_backward(float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *w, int64_t M, int64_t K,
                     int64_t N, bool w_in_out, bool accumulate_dx);

// ---- norms over the last dim ----------------------------------------------
// x, y (M, D); w, b (D) or null. dx is written, or added into where
// accumulate_dx; dw, db are added into.
void rms_norm_forward(float *y, const float *x, const float *w, int64_t M,
                      int64_t D, float eps);
void rms_norm_backward(float *dx, float *dw, const float *dy, const float *x,
                       const float *w, int64_t M, int64_t D, float eps,
                       bool accumulate_dx);
void layer_norm_forward(float *y, const float *x, const float *w,
                        const float *b, int64_t M, int64_t D, float eps);
void layer_norm_backward(float *dx, float *dw, float *db, const float *dy,
                         const float *x, const float *w, int64_t M, int64_t D,
                         float eps, bool accumulate_dx);

// ---- rotary embedding, full or partial -------------------------------------
// x, y (B, H, S, D) when seq_axis == 2, (B, S, H, D) when seq_axis == 1;
// cos, sin (S, R), R even, R <= D. Dims past R pass through. Dims a and b
// of a pair rotate together: (i, i + R/2) (rotate-half), or (2i, 2i + 1)
// when interleaved (GPT-J's rotate-every-two). The backward writes dx, or
// adds into it where accumulate.
void rope_forward(float *y, const float *x, const float *cos, const float *sin,
                  int64_t B, int64_t H, int64_t S, int64_t D, int64_t R,
                  int seq_axis, bool interleaved);
void rope_backward(float *dx, const float *dy, const float *cos,
                   const float *sin, int64_t B, int64_t H, int64_t S, int64_t D,
                   int64_t R, int seq_axis, bool interleaved, bool accumulate);

// ---- mixture of experts (T tokens of H; E experts of intermediate I) ------
// docs/primitives.md, moe: router [E, H]; gate_up [E, 2I, H] and down
// [E, H, I], or [E, H, 2I] and [E, I, H] (MoeExperts::in_out).

/// How a token's experts are chosen and weighed: scores p = softmax or
/// sigmoid of the router logits; with groups > 1 the experts form `groups`
/// equal groups and only the top_groups groups with the largest sums of
/// their two best biased scores compete; the k best biased scores among
/// them choose; their p, renormalized to sum 1 when normalize, times
/// scale, weigh them: their outputs, or with weigh_inputs their inputs
/// (Llama 4: y = Σ_j f_j(w_j · x); experts without biases).
struct MoeRouting {
  bool sigmoid = false;
  bool normalize = false;
  int64_t groups = 1, top_groups = 1;
  float scale = 1.f;
  bool weigh_inputs = false;
};

/// What each expert computes, and how its matrices are stored:
/// (g; u) = gate_up[e] · x + gate_up_bias[e], a = g'·σ(alpha·g')·(u' +
/// up_shift) with g' = min(g, limit), u' = clamp(u, −limit, limit) when
/// limit > 0 (else g, u), and o = down[e] · a + down_bias[e]. SwiGLU is the
/// default; gpt-oss has alpha 1.702, limit 7, up_shift 1. gelu: a =
/// gelu_tanh(g)·u instead (GeGLU, Gemma 4; alpha 1, limit and up_shift 0).
/// in_out: the matrices are stored transposed (x · W: gate_up [E, H, 2I],
/// down [E, I, H]); interleaved: g and u alternate along gate_up's 2I (and
/// its bias), else g is the first half.
struct MoeExperts {
  bool in_out = false, interleaved = false;
  float alpha = 1.f, limit = 0.f, up_shift = 0.f;
  bool gelu = false;
};

/// The params of a mixture of experts; null where absent. bias [E], the
/// frozen selection bias, shifts the scores that choose the experts;
/// router_bias [E] (added to the logits), gate_up_bias [E, 2I] and
/// down_bias [E, H] are trained; expert_scale [E] (trained; Gemma 4's
/// per-expert scale) multiplies each chosen expert's weight after the
/// renormalization, before `scale`.
struct MoeWeights {
  const float *router, *gate_up, *down;
  const float *bias, *router_bias, *gate_up_bias, *down_bias, *expert_scale;
};
/// Their gradients, added to; each may be null.
struct MoeWeightGrads {
  float *router, *gate_up, *down, *router_bias, *gate_up_bias, *down_bias,
      *expert_scale;
};

/// x [T, H] goes through the experts; the router reads router_x [T, H]
/// (Gemma 4 routes on a differently normed copy of the token), or x where
/// router_x is null.
void moe_forward(float *y, const float *x, const float *router_x,
                 const MoeWeights &w, int64_t T, int64_t H, int64_t E,
                 int64_t I, int64_t k, const MoeRouting &routing,
                 const MoeExperts &experts);
// Adds to dx (unless null), to drouter_x (the router's input gradient;
// with router_x null it goes to dx and drouter_x must be null) and to each
// param gradient that is not null.
void moe_backward(float *dx, float *drouter_x, const MoeWeightGrads &g,
                  const float *dy, const float *x, const float *router_x,
                  const MoeWeights &w, int64_t T, int64_t H, int64_t E,
                  int64_t I, int64_t k, const MoeRouting &routing,
                  const MoeExperts &experts);

// ---- causal attention with grouped KV heads -------------------------------
// q, y (B, H, S, D); k, v (B, Hkv, S, D), H % Hkv == 0, or each with its
// heads and positions swapped where layout.seq_major (HeadLayout.h); query
// head h reads KV head h / (H / Hkv). Memory beyond the inputs is O(S) per
// worker thread. range: the keys each query sees (a sliding window, chunks;
// KeyRange.h). softcap > 0: each scaled score s becomes softcap · tanh(s /
// softcap). alibi_slopes (H values, or null): head h adds m_h · (j − i) to the
// score of query i and key j. sinks (H values, or null): head h's softmax has
// one more logit, sinks[h], that weighs no value (gpt-oss); attention_backward
// adds its gradient to dsinks when that is not null. lse (B·H·S, or null): each
// row's log-sum-exp, log Σ_j exp(score_ij) with the sink's logit where there is
// one; attention_backward reads it back. attention_backward writes dq, dk and
// dv, or adds into them where accumulate (dsinks it always adds into).
void attention_forward(float *y, float *lse, const float *q, const float *k,
                       const float *v, int64_t B, int64_t H, int64_t Hkv,
                       int64_t S, int64_t D, float scale, const KeyRange &range,
                       float softcap, const float *alibi_slopes,
                       const float *sinks, HeadLayout layout);
// δ(b, h, i) = dy · y over the row (b, h, i) of D (y the forward's output),
// in (B, H, S) order: the row term of the softmax's backward, which
// attention_backward reads.
void attention_delta(float *delta, const float *dy, const float *y, int64_t B,
                     int64_t H, int64_t S, int64_t D, HeadLayout layout);
void attention_backward(float *dq, float *dk, float *dv, const float *dy,
                        const float *q, const float *k, const float *v,
                        const float *delta, const float *lse, int64_t B,
                        int64_t H, int64_t Hkv, int64_t S, int64_t D,
                        float scale, const KeyRange &range, float softcap,
                        const float *alibi_slopes, const float *sinks,
                        float *dsinks, bool accumulate, HeadLayout layout);

// ---- activations (n elements) ---------------------------------------------
void relu_forward(float *y, const float *x, int64_t n);
void relu_backward(float *dx, const float *dy, const float *x, int64_t n);
void sigmoid_forward(float *y, const float *x, int64_t n);
// y = exp(x); its gradient is ȳ · y, a product (mt.mul).
void exp_forward(float *y, const float *x, int64_t n);
void sigmoid_backward(float *dx, const float *dy, const float *x, int64_t n);
// y = log(1 + exp(x)), computed as max(x, 0) + log1p(exp(−|x|)).
void softplus_forward(float *y, const float *x, int64_t n);
void softplus_backward(float *dx, const float *dy, const float *x, int64_t n);
void silu_forward(float *y, const float *x, int64_t n);
void silu_backward(float *dx, const float *dy, const float *x, int64_t n);
// approximate_tanh: GELU's tanh form instead of the exact erf form.
void gelu_forward(float *y, const float *x, int64_t n, bool approximate_tanh);
void gelu_backward(float *dx, const float *dy, const float *x, int64_t n,
                   bool approximate_tanh);
// y = cap · tanh(x / cap)
void softcap_forward(float *y, const float *x, int64_t n, float cap);
void softcap_backward(float *dx, const float *dy, const float *x, int64_t n,
                      float cap);
// xIELU (Apertus): y = ap·x² + beta·x for x > 0, an·(expm1(min(x, eps)) − x)
// + beta·x elsewhere; ap and an are one-element params. The backward adds
// to dx and to *dap, *dan (either may be null), summing in double.
void xielu_forward(float *y, const float *x, int64_t n, float ap, float an,
                   float beta, float eps);
// ap and an from xIELU's params p and n: themselves, or with `softplus`
// softplus(p) and beta + softplus(n) (torch's softplus: x past 20); dap and
// dan are their derivatives in p and n.
struct XieluAlphas {
  float ap, an, dap, dan;
};
XieluAlphas xielu_alphas(float p, float n, float beta, bool softplus);
void xielu_backward(float *dx, float *dap, float *dan, const float *dy,
                    const float *x, int64_t n, float ap, float an, float beta,
                    float eps);
// Depthwise causal convolution along the sequence (LFM2's short conv,
// Mamba's with a bias): x, y [B, C, S], w [C, K], bias [C] or null;
// y[b, c, s] = bias[c] + Σ_{j<K} w[c, j] · x[b, c, s − (K−1) + j],
// positions before 0 reading 0. The backward adds to dx, dw and db (or
// skips each when null), each sum in a fixed order.
void causal_conv_forward(float *y, const float *x, const float *w,
                         const float *bias, int64_t B, int64_t C, int64_t S,
                         int64_t K);
void causal_conv_backward(float *dx, float *dw, float *db, const float *dy,
                          const float *x, const float *w, int64_t B, int64_t C,
                          int64_t S, int64_t K);
// The gated linear-attention scan (the query already scaled, q and k not
// normalized here): q, k [B, T, Hk, Dk]; v, o [B, T, Hv, Dv]; beta [B, T,
// Hv]; g [B, T, Hv], or with key_decay [B, T, Hv, Dk], a decay per key
// channel that scales row i of S by e^g[i] (Kimi Delta Attention); value
// head h reads key head h / (Hv / Hk). Per (b, h) a state S [Dk, Dv]
// starts at 0 and for t = 0 .. T − 1:
//   delta:  S ← e^g·S;  S += k·(beta·(v − Sᵀk))ᵀ;  o = Sᵀq
//           (the gated delta rule: Qwen3.5, Qwen3-Next);
//   !delta: S ← e^g·S;  S += k·(beta·v)ᵀ;          o = Sᵀq
//           (Mamba-2's state space model: k = B, q = C, beta = dt).
// The backward adds to each gradient (or skips it when null); dq and dk sum
// the value heads of their key head in a fixed order.
void gated_scan_forward(float *o, const float *q, const float *k,
                        const float *v, const float *g, const float *beta,
                        int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                        int64_t Dk, int64_t Dv, bool delta, bool key_decay);
void gated_scan_backward(float *dq, float *dk, float *dv, float *dg,
                         float *dbeta, const float *dout, const float *q,
                         const float *k, const float *v, const float *g,
                         const float *beta, int64_t B, int64_t T, int64_t Hk,
                         int64_t Hv, int64_t Dk, int64_t Dv, bool delta,
                         bool key_decay);
// y = silu(gate) · up
void swiglu_forward(float *y, const float *gate, const float *up, int64_t n);
// dgate and dup are written (=) unless accumulate, as linear_backward's dx.
void swiglu_backward(float *dgate, float *dup, const float *dy,
                     const float *gate, const float *up, int64_t n,
                     bool accumulate);
void scale_forward(float *y, const float *x, int64_t n, float factor);
void scale_backward(float *dx, const float *dy, int64_t n, float factor);

// ---- broadcasting elementwise binaries ------------------------------------
// NumPy broadcasting, described by the output shape (rank <= kMaxRank) and
// each operand's strides in elements over the output's dims (0 on a dim the
// operand broadcasts over). Backward reduces over broadcast dims.
constexpr int kMaxRank = 6;
struct Broadcast {
  int rank;
  int64_t shape[kMaxRank];
  int64_t lhs_stride[kMaxRank];
  int64_t rhs_stride[kMaxRank];
};
/// Builds the description from the two operand shapes (right-aligned, as in
/// NumPy); returns false when they do not broadcast or the rank exceeds
/// kMaxRank.
bool make_broadcast(Broadcast &bc, const int64_t *lhs_shape, int lhs_rank,
                    const int64_t *rhs_shape, int rhs_rank);
void add_forward(float *y, const float *a, const float *b, const Broadcast &bc);
void add_backward(float *da, float *db, const float *dy, const Broadcast &bc);
void mul_forward(float *y, const float *a, const float *b, const Broadcast &bc);
void mul_backward(float *da, float *db, const float *dy, const float *a,
                  const float *b, const Broadcast &bc);

// ---- embeddings -----------------------------------------------------------
// ids (N) with 0 <= id < V (the caller validates); table (V, D); y (N, D).
void embed_forward(float *y, const int32_t *ids, const float *table, int64_t N,
                   int64_t V, int64_t D);
void embed_backward(float *dtable, const float *dy, const int32_t *ids,
                    int64_t N, int64_t V, int64_t D);
// y (S, D) = table[offset : offset + S].
void position_embed_forward(float *y, const float *table, int64_t S, int64_t D,
                            int64_t offset);
void position_embed_backward(float *dtable, const float *dy, int64_t S,
                             int64_t D, int64_t offset);
// The table in vocabulary pieces: table (Vp, D) holds rows [v0, v0 + Vp) of
// the whole (V, D). Ids may lie anywhere, since a piece reads only its own
// rows. Rows of y whose id is in the piece get its table row times `scale`
// (Gemma's √D); the others are left alone, except that with `first` an id
// outside [0, V) gives a NaN row (stress mode's poison must show).
void embed_forward_piece(float *y, const int32_t *ids, const float *table,
                         int64_t N, int64_t Vp, int64_t D, int64_t v0,
                         int64_t V, bool first, float scale);
// dtable (Vp, D) row id - v0 += scale · dy row n for each id in the piece,
// each row summed in token order as embed_backward does.
void embed_backward_piece(float *dtable, const float *dy, const int32_t *ids,
                          int64_t N, int64_t Vp, int64_t D, int64_t v0,
                          float scale);

// ---- loss -----------------------------------------------------------------
// logits (N, V), targets (N). Returns sum over rows of -log softmax(row)[t];
// the caller divides by the number of targets of the step. Rows are processed
// independently, so the loss over a sequence may be computed in chunks.
double cross_entropy_forward(const float *logits, const int32_t *targets,
                             int64_t N, int64_t V);
// dlogits (+)= dloss · (softmax(row) - onehot(t)), added where accumulate;
// dloss is d(step loss)/d(sum), i.e. 1 / (targets in the step) for a mean
// loss.
void cross_entropy_backward(float *dlogits, const float *logits,
                            const int32_t *targets, int64_t N, int64_t V,
                            float dloss, bool accumulate);
// The same loss over a vocabulary in pieces, with an online log-sum-exp.
// stats (N, 3): per row the running max m, s = Σ exp(logit - m) over the
// pieces seen, and the target's logit t. logits (N, Vp) hold vocabulary
// entries [v0, v0 + Vp); targets may lie anywhere (a piece reads only its
// own entries). `first` starts the stats fresh (m = -inf, s = 0, t = 0, or
// t = NaN for a target outside [0, V): stress mode's poison); each piece
// then merges in its own max and sum, and sets t when it holds the target.
void cross_entropy_stats(float *stats, const float *logits,
                         const int32_t *targets, int64_t N, int64_t Vp,
                         int64_t v0, int64_t V, bool first);
// Σ over the N rows of complete stats of m + log s - t (= -log softmax[t]).
double cross_entropy_stats_loss(const float *stats, int64_t N);
// dlogits (N, Vp) (+)= dloss · (softmax - onehot(t)) over the piece, added
// where accumulate, the softmax exp(logit - m) / s from complete stats; a
// row whose stats hold a NaN is set to NaN.
void cross_entropy_backward_piece(float *dlogits, const float *logits,
                                  const int32_t *targets, const float *stats,
                                  int64_t N, int64_t Vp, int64_t v0,
                                  float dloss, bool accumulate);

// ---- layout ---------------------------------------------------------------
// y.shape[i] = x.shape[perm[i]], rank <= kMaxRank.
void transpose_forward(float *y, const float *x, const int64_t *x_shape,
                       const int64_t *perm, int rank);
// dx += transpose of dy by the inverse permutation.
void transpose_backward(float *dx, const float *dy, const int64_t *x_shape,
                        const int64_t *perm, int rank);
// x viewed as (outer, dim, inner) around the sliced axis; y (outer, n, inner)
// = x[:, start : start + n, :], start + n <= dim.
void slice_forward(float *y, const float *x, int64_t outer, int64_t dim,
                   int64_t inner, int64_t start, int64_t n);
// dx[:, start : start + n, :] += dy; the rest of dx is left alone.
void slice_backward(float *dx, const float *dy, int64_t outer, int64_t dim,
                    int64_t inner, int64_t start, int64_t n);

// ---- numerics helpers -----------------------------------------------------
/// Rounds each value to the nearest bfloat16 (ties to even), in place; NaN
/// stays NaN. This is how --precision bf16 emulates the GPU's storage.
void round_to_bf16(float *x, int64_t n);
/// Sum of squares, accumulated in double in a fixed order.
double sum_squares(const float *x, int64_t n);

} // namespace mtrt::cpu

#endif // MEGATRAIN_RUNTIME_KERNELS_KERNELS_H
