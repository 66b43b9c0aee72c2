//===- CpuKernels.cpp - DeviceKernels on the CPU reference kernels --------===//

#include "runtime/exec/CpuKernels.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace mtrt {

namespace {
float *F(void *p) { return static_cast<float *>(p); }
const float *F(const void *p) { return static_cast<const float *>(p); }

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t product(const int64_t *shape, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    n *= shape[i];
  return n;
}

/// Elements of a broadcast operand: the output's dims it does not broadcast.
int64_t operand_elems(const Broadcast &bc, const int64_t *stride) {
  int64_t n = 1;
  for (int i = 0; i < bc.rank; ++i)
    if (stride[i] != 0)
      n *= bc.shape[i];
  return n;
}

bool all_in_range(const int32_t *ids, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      return false;
  return true;
}
} // namespace

void CpuKernels::store(void *x, int64_t n) const {
  if (bf16_ && x)
    cpu::round_to_bf16(F(x), n);
}

void CpuKernels::zero(void *x, int64_t n) {
  std::memset(x, 0, size_t(n) * sizeof(float));
}
void CpuKernels::zero_f32(float *x, int64_t n) {
  std::memset(x, 0, size_t(n) * sizeof(float));
}
void CpuKernels::copy(void *y, const void *x, int64_t n) {
  std::memcpy(y, x, size_t(n) * sizeof(float));
}
void CpuKernels::accumulate_f32(float *g, const void *x, int64_t n) {
  const float *s = F(x);
  for (int64_t i = 0; i < n; ++i)
    g[i] += s[i];
}

void CpuKernels::linear_forward(void *y, const void *x, const void *w,
                                const void *b, int64_t M, int64_t K, int64_t N,
                                bool w_in_out, bool accumulate) {
  cpu::linear_forward(F(y), F(x), F(w), F(b), M, K, N, w_in_out, accumulate);
  store(y, M * N);
}
void CpuKernels::linear_backward(void *dx, float *dw, float *db, const void *dy,
                                 const void *x, const void *w, int64_t M,
                                 int64_t K, int64_t N, bool w_in_out,
                                 bool accumulate_dx) {
  cpu::linear_backward(F(dx), dw, db, F(dy), F(x), F(w), M, K, N, w_in_out,
                       accumulate_dx);
  store(dx, M * K);
}
void CpuKernels::rms_norm_forward(void *y, const void *x, const void *w,
                                  int64_t M, int64_t D, float eps) {
  cpu::rms_norm_forward(F(y), F(x), F(w), M, D, eps);
  store(y, M * D);
}
void CpuKernels::rms_norm_backward(void *dx, float *dw, const void *dy,
                                   const void *x, const void *w, int64_t M,
                                   int64_t D, float eps, bool accumulate_dx) {
  cpu::rms_norm_backward(F(dx), dw, F(dy), F(x), F(w), M, D, eps,
                         accumulate_dx);
  store(dx, M * D);
}
void CpuKernels::layer_norm_forward(void *y, const void *x, const void *w,
                                    const void *b, int64_t M, int64_t D,
                                    float eps) {
  cpu::layer_norm_forward(F(y), F(x), F(w), F(b), M, D, eps);
  store(y, M * D);
}
void CpuKernels::layer_norm_backward(void *dx, float *dw, float *db,
                                     const void *dy, const void *x,
                                     const void *w, int64_t M, int64_t D,
                                     float eps, bool accumulate_dx) {
  cpu::layer_norm_backward(F(dx), dw, db, F(dy), F(x), F(w), M, D, eps,
                           accumulate_dx);
  store(dx, M * D);
}
void CpuKernels::rope_forward(void *y, const void *x, const void *cos,
                              const void *sin, int64_t B, int64_t H, int64_t S,
                              int64_t D, int64_t R, int seq_axis,
                              bool interleaved) {
  cpu::rope_forward(F(y), F(x), F(cos), F(sin), B, H, S, D, R, seq_axis,
                    interleaved);
  store(y, B * H * S * D);
}
void CpuKernels::rope_backward(void *dx, const void *dy, const void *cos,
                               const void *sin, int64_t B, int64_t H, int64_t S,
                               int64_t D, int64_t R, int seq_axis,
                               bool interleaved, bool accumulate) {
  cpu::rope_backward(F(dx), F(dy), F(cos), F(sin), B, H, S, D, R, seq_axis,
                     interleaved, accumulate);
  store(dx, B * H * S * D);
}
void CpuKernels::attention_forward(void *y, float *lse, const void *q,
                                   const void *k, const void *v, int64_t B,
                                   int64_t H, int64_t Hkv, int64_t S, int64_t D,
                                   float scale, const KeyRange &range,
                                   float softcap, const float *alibi_slopes,
                                   const void *sinks, HeadLayout layout) {
  cpu::attention_forward(F(y), lse, F(q), F(k), F(v), B, H, Hkv, S, D, scale,
                         range, softcap, alibi_slopes, F(sinks), layout);
  store(y, B * H * S * D);
}
void CpuKernels::attention_delta(float *delta, const void *dy, const void *y,
                                 int64_t B, int64_t H, int64_t S, int64_t D,
                                 HeadLayout layout) {
  cpu::attention_delta(delta, F(dy), F(y), B, H, S, D, layout);
}
void CpuKernels::attention_backward(
    void *dq, void *dk, void *dv, const void *dy, const void *q, const void *k,
    const void *v, const void * /*y: δ carries it*/, const float *delta,
    const float *lse, int64_t B, int64_t H, int64_t Hkv, int64_t S, int64_t D,
    float scale, const KeyRange &range, float softcap,
    const float *alibi_slopes, const void *sinks, float *dsinks,
    bool accumulate, HeadLayout layout) {
  cpu::attention_backward(F(dq), F(dk), F(dv), F(dy), F(q), F(k), F(v), delta,
                          lse, B, H, Hkv, S, D, scale, range, softcap,
                          alibi_slopes, F(sinks), dsinks, accumulate, layout);
  store(dq, B * H * S * D);
  store(dk, B * Hkv * S * D);
  store(dv, B * Hkv * S * D);
}
void CpuKernels::relu_forward(void *y, const void *x, int64_t n) {
  cpu::relu_forward(F(y), F(x), n);
  store(y, n);
}
void CpuKernels::relu_backward(void *dx, const void *dy, const void *x,
                               int64_t n) {
  cpu::relu_backward(F(dx), F(dy), F(x), n);
  store(dx, n);
}
void CpuKernels::exp_forward(void *y, const void *x, int64_t n) {
  cpu::exp_forward(F(y), F(x), n);
  store(y, n);
}
void CpuKernels::softplus_forward(void *y, const void *x, int64_t n) {
  cpu::softplus_forward(F(y), F(x), n);
  store(y, n);
}

void CpuKernels::softplus_backward(void *dx, const void *dy, const void *x,
                                   int64_t n) {
  cpu::softplus_backward(F(dx), F(dy), F(x), n);
  store(dx, n);
}

void CpuKernels::sigmoid_forward(void *y, const void *x, int64_t n) {
  cpu::sigmoid_forward(F(y), F(x), n);
  store(y, n);
}
void CpuKernels::sigmoid_backward(void *dx, const void *dy, const void *x,
                                  int64_t n) {
  cpu::sigmoid_backward(F(dx), F(dy), F(x), n);
  store(dx, n);
}
void CpuKernels::silu_forward(void *y, const void *x, int64_t n) {
  cpu::silu_forward(F(y), F(x), n);
  store(y, n);
}
void CpuKernels::silu_backward(void *dx, const void *dy, const void *x,
                               int64_t n) {
  cpu::silu_backward(F(dx), F(dy), F(x), n);
  store(dx, n);
}
void CpuKernels::gelu_forward(void *y, const void *x, int64_t n,
                              bool approximate_tanh) {
  cpu::gelu_forward(F(y), F(x), n, approximate_tanh);
  store(y, n);
}
void CpuKernels::gelu_backward(void *dx, const void *dy, const void *x,
                               int64_t n, bool approximate_tanh) {
  cpu::gelu_backward(F(dx), F(dy), F(x), n, approximate_tanh);
  store(dx, n);
}
static cpu::MoeWeights weights(const MoeParams &w) {
  return {F(w.router),    F(w.gate_up),     F(w.down),
          F(w.bias),      F(w.router_bias), F(w.gate_up_bias),
          F(w.down_bias), F(w.expert_scale)};
}
void CpuKernels::moe_forward(void *y, const void *x, const void *router_x,
                             const MoeParams &w, int64_t T, int64_t H,
                             int64_t E, int64_t I, int64_t k,
                             const MoeRouting &routing,
                             const MoeExperts &experts) {
  cpu::moe_forward(F(y), F(x), F(router_x), weights(w), T, H, E, I, k, routing,
                   experts);
  store(y, T * H);
}
void CpuKernels::moe_backward(void *dx, void *drouter_x,
                              const MoeWeightGrads &g, const void *dy,
                              const void *x, const void *router_x,
                              const MoeParams &w, int64_t T, int64_t H,
                              int64_t E, int64_t I, int64_t k,
                              const MoeRouting &routing,
                              const MoeExperts &experts) {
  cpu::moe_backward(F(dx), F(drouter_x), g, F(dy), F(x), F(router_x),
                    weights(w), T, H, E, I, k, routing, experts);
  store(dx, T * H);
  store(drouter_x, T * H);
}
void CpuKernels::causal_conv_forward(void *y, const void *x, const void *w,
                                     const void *bias, int64_t B, int64_t C,
                                     int64_t S, int64_t K) {
  cpu::causal_conv_forward(F(y), F(x), F(w), F(bias), B, C, S, K);
  store(y, B * C * S);
}
void CpuKernels::causal_conv_backward(void *dx, float *dw, float *db,
                                      const void *dy, const void *x,
                                      const void *w, int64_t B, int64_t C,
                                      int64_t S, int64_t K) {
  cpu::causal_conv_backward(F(dx), dw, db, F(dy), F(x), F(w), B, C, S, K);
  store(dx, B * C * S);
}
void CpuKernels::gated_scan_forward(void *o, const void *q, const void *k,
                                    const void *v, const void *g,
                                    const void *beta, int64_t B, int64_t T,
                                    int64_t Hk, int64_t Hv, int64_t Dk,
                                    int64_t Dv, bool delta, bool key_decay) {
  cpu::gated_scan_forward(F(o), F(q), F(k), F(v), F(g), F(beta), B, T, Hk, Hv,
                          Dk, Dv, delta, key_decay);
  store(o, B * T * Hv * Dv);
}
void CpuKernels::gated_scan_backward(void *dq, void *dk, void *dv, void *dg,
                                     void *dbeta, const void *dout,
                                     const void *q, const void *k,
                                     const void *v, const void *g,
                                     const void *beta, int64_t B, int64_t T,
                                     int64_t Hk, int64_t Hv, int64_t Dk,
                                     int64_t Dv, bool delta, bool key_decay) {
  cpu::gated_scan_backward(F(dq), F(dk), F(dv), F(dg), F(dbeta), F(dout), F(q),
                           F(k), F(v), F(g), F(beta), B, T, Hk, Hv, Dk, Dv,
                           delta, key_decay);
  store(dq, B * T * Hk * Dk);
  store(dk, B * T * Hk * Dk);
  store(dv, B * T * Hv * Dv);
  store(dg, B * T * Hv * (key_decay ? Dk : 1));
  store(dbeta, B * T * Hv);
}
void CpuKernels::xielu_forward(void *y, const void *x, const void *alpha_p,
                               const void *alpha_n, int64_t n, float beta,
                               float eps, bool softplus) {
  const cpu::XieluAlphas a =
      cpu::xielu_alphas(*F(alpha_p), *F(alpha_n), beta, softplus);
  cpu::xielu_forward(F(y), F(x), n, a.ap, a.an, beta, eps);
  store(y, n);
}
void CpuKernels::xielu_backward(void *dx, float *dalpha_p, float *dalpha_n,
                                const void *dy, const void *x,
                                const void *alpha_p, const void *alpha_n,
                                int64_t n, float beta, float eps,
                                bool softplus) {
  const cpu::XieluAlphas a =
      cpu::xielu_alphas(*F(alpha_p), *F(alpha_n), beta, softplus);
  float dap = 0.f, dan = 0.f;
  cpu::xielu_backward(F(dx), dalpha_p ? &dap : nullptr,
                      dalpha_n ? &dan : nullptr, F(dy), F(x), n, a.ap, a.an,
                      beta, eps);
  if (dalpha_p)
    *dalpha_p += a.dap * dap;
  if (dalpha_n)
    *dalpha_n += a.dan * dan;
  store(dx, n);
}
void CpuKernels::softcap_forward(void *y, const void *x, int64_t n, float cap) {
  cpu::softcap_forward(F(y), F(x), n, cap);
  store(y, n);
}
void CpuKernels::softcap_backward(void *dx, const void *dy, const void *x,
                                  int64_t n, float cap) {
  cpu::softcap_backward(F(dx), F(dy), F(x), n, cap);
  store(dx, n);
}
void CpuKernels::swiglu_forward(void *y, const void *gate, const void *up,
                                int64_t n) {
  cpu::swiglu_forward(F(y), F(gate), F(up), n);
  store(y, n);
}
void CpuKernels::swiglu_backward(void *dgate, void *dup, const void *dy,
                                 const void *gate, const void *up, int64_t n,
                                 bool accumulate) {
  cpu::swiglu_backward(F(dgate), F(dup), F(dy), F(gate), F(up), n, accumulate);
  store(dgate, n);
  store(dup, n);
}
void CpuKernels::scale_forward(void *y, const void *x, int64_t n,
                               float factor) {
  cpu::scale_forward(F(y), F(x), n, factor);
  store(y, n);
}
void CpuKernels::add_forward(void *y, const void *a, const void *b,
                             const Broadcast &bc) {
  cpu::add_forward(F(y), F(a), F(b), bc);
  store(y, product(bc.shape, bc.rank));
}
void CpuKernels::add_backward(void *da, void *db, const void *dy,
                              const Broadcast &bc) {
  cpu::add_backward(F(da), F(db), F(dy), bc);
  store(da, operand_elems(bc, bc.lhs_stride));
  store(db, operand_elems(bc, bc.rhs_stride));
}
void CpuKernels::mul_forward(void *y, const void *a, const void *b,
                             const Broadcast &bc) {
  cpu::mul_forward(F(y), F(a), F(b), bc);
  store(y, product(bc.shape, bc.rank));
}
void CpuKernels::mul_backward(void *da, void *db, const void *dy, const void *a,
                              const void *b, const Broadcast &bc) {
  cpu::mul_backward(F(da), F(db), F(dy), F(a), F(b), bc);
  store(da, operand_elems(bc, bc.lhs_stride));
  store(db, operand_elems(bc, bc.rhs_stride));
}

void CpuKernels::embed_forward(void *y, const int32_t *ids, const void *table,
                               int64_t N, int64_t V, int64_t D) {
  if (all_in_range(ids, N, V)) {
    cpu::embed_forward(F(y), ids, F(table), N, V, D);
  } else {
    for (int64_t n = 0; n < N; ++n) {
      float *row = F(y) + n * D;
      if (ids[n] >= 0 && ids[n] < V)
        std::copy(F(table) + ids[n] * D, F(table) + (ids[n] + 1) * D, row);
      else
        std::fill(row, row + D, kNaN);
    }
  }
  store(y, N * D);
}
void CpuKernels::embed_backward(float *dtable, const void *dy,
                                const int32_t *ids, int64_t N, int64_t V,
                                int64_t D) {
  if (all_in_range(ids, N, V)) {
    cpu::embed_backward(dtable, F(dy), ids, N, V, D);
    return;
  }
  for (int64_t n = 0; n < N; ++n) {
    bool ok = ids[n] >= 0 && ids[n] < V;
    float *row = dtable + (ok ? ids[n] : 0) * D;
    for (int64_t j = 0; j < D; ++j)
      row[j] += ok ? F(dy)[n * D + j] : kNaN;
  }
}
// The piece kernels read only the rows or entries a piece holds, so a
// poisoned id or target needs no range check here: the reference kernels
// turn it into NaN themselves.
void CpuKernels::embed_forward_piece(void *y, const int32_t *ids,
                                     const void *table, int64_t N, int64_t Vp,
                                     int64_t D, int64_t v0, int64_t V,
                                     bool first, float scale) {
  cpu::embed_forward_piece(F(y), ids, F(table), N, Vp, D, v0, V, first,
                           scale);
  store(y, N * D);
}
void CpuKernels::embed_backward_piece(float *dtable, const void *dy,
                                      const int32_t *ids, int64_t N, int64_t Vp,
                                      int64_t D, int64_t v0, float scale) {
  cpu::embed_backward_piece(dtable, F(dy), ids, N, Vp, D, v0, scale);
}
void CpuKernels::position_embed_forward(void *y, const void *table, int64_t S,
                                        int64_t D, int64_t offset) {
  cpu::position_embed_forward(F(y), F(table), S, D, offset);
  store(y, S * D);
}
void CpuKernels::position_embed_backward(float *dtable, const void *dy,
                                         int64_t S, int64_t D, int64_t offset) {
  cpu::position_embed_backward(dtable, F(dy), S, D, offset);
}
void CpuKernels::cross_entropy_forward(float *loss, const void *logits,
                                       const int32_t *targets, int64_t N,
                                       int64_t V, int64_t total_rows,
                                       bool accumulate) {
  const float before = accumulate ? *loss : 0.f;
  if (!all_in_range(targets, N, V)) {
    *loss = kNaN;
    return;
  }
  double sum = cpu::cross_entropy_forward(F(logits), targets, N, V);
  *loss = before + static_cast<float>(sum / double(total_rows));
}
void CpuKernels::cross_entropy_backward(void *dlogits, const void *logits,
                                        const int32_t *targets, int64_t N,
                                        int64_t V, float dloss,
                                        bool accumulate) {
  if (all_in_range(targets, N, V)) {
    cpu::cross_entropy_backward(F(dlogits), F(logits), targets, N, V, dloss,
                                accumulate);
  } else {
    for (int64_t n = 0; n < N; ++n) {
      if (targets[n] >= 0 && targets[n] < V)
        cpu::cross_entropy_backward(F(dlogits) + n * V, F(logits) + n * V,
                                    targets + n, 1, V, dloss, accumulate);
      else
        std::fill(F(dlogits) + n * V, F(dlogits) + (n + 1) * V, kNaN);
    }
  }
  store(dlogits, N * V);
}
void CpuKernels::cross_entropy_stats(float *stats, const void *logits,
                                     const int32_t *targets, int64_t N,
                                     int64_t Vp, int64_t v0, int64_t V,
                                     bool first) {
  cpu::cross_entropy_stats(stats, F(logits), targets, N, Vp, v0, V, first);
}
void CpuKernels::cross_entropy_stats_loss(float *loss, const float *stats,
                                          int64_t N, int64_t total_rows,
                                          bool accumulate) {
  const float before = accumulate ? *loss : 0.f;
  const double sum = cpu::cross_entropy_stats_loss(stats, N);
  *loss = before + static_cast<float>(sum / double(total_rows));
}
void CpuKernels::cross_entropy_backward_piece(void *dlogits, const void *logits,
                                              const int32_t *targets,
                                              const float *stats, int64_t N,
                                              int64_t Vp, int64_t v0,
                                              float dloss, bool accumulate) {
  cpu::cross_entropy_backward_piece(F(dlogits), F(logits), targets, stats, N,
                                    Vp, v0, dloss, accumulate);
  store(dlogits, N * Vp);
}
void CpuKernels::transpose_forward(void *y, const void *x,
                                   const int64_t *x_shape, const int64_t *perm,
                                   int rank) {
  cpu::transpose_forward(F(y), F(x), x_shape, perm, rank);
  store(y, product(x_shape, rank));
}
void CpuKernels::transpose_backward(void *dx, const void *dy,
                                    const int64_t *x_shape, const int64_t *perm,
                                    int rank) {
  cpu::transpose_backward(F(dx), F(dy), x_shape, perm, rank);
  store(dx, product(x_shape, rank));
}
void CpuKernels::slice_forward(void *y, const void *x, int64_t outer,
                               int64_t dim, int64_t inner, int64_t start,
                               int64_t n) {
  cpu::slice_forward(F(y), F(x), outer, dim, inner, start, n);
  store(y, outer * n * inner);
}
void CpuKernels::slice_backward(void *dx, const void *dy, int64_t outer,
                                int64_t dim, int64_t inner, int64_t start,
                                int64_t n) {
  cpu::slice_backward(F(dx), F(dy), outer, dim, inner, start, n);
  store(dx, outer * dim * inner);
}

} // namespace mtrt
