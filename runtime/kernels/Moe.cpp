//===- Moe.cpp - a mixture of SwiGLU experts with top-k routing -----------===//
//
// Token by token (docs/primitives.md, moe): softmax routing over E experts,
// the k largest probabilities (ties to the lower index), optionally
// renormalized, weigh their experts' SwiGLU MLPs. The backward recomputes
// the routing and each chosen expert's activations, then adds the weight
// gradients expert by expert in token order: the same bits on any thread
// count.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"

#include "runtime/kernels/Dot.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mtrt::cpu {
namespace {

float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

/// One token's routing: p = softmax(router · x) [E]; the k chosen experts
/// (the largest p_e + bias_e, in descending order) and their weights
/// (renormalized when asked); raw: the chosen probabilities before
/// renormalization.
struct Routing {
  std::vector<float> p, w, raw;
  std::vector<int64_t> expert;

  Routing(const float *x, const float *router, const float *bias, int64_t H,
          int64_t E, int64_t k, bool normalize)
      : p(E), w(k), raw(k), expert(k) {
    float m = -INFINITY;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = dot(router + e * H, x, H);
      m = std::max(m, p[e]);
    }
    float sum = 0.f;
    for (int64_t e = 0; e < E; ++e)
      sum += p[e] = std::exp(p[e] - m);
    for (int64_t e = 0; e < E; ++e)
      p[e] /= sum;
    std::vector<float> score(p);
    if (bias)
      for (int64_t e = 0; e < E; ++e)
        score[e] += bias[e];
    std::vector<bool> taken(E, false);
    float total = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)
        if (!taken[e] && (best < 0 || score[e] > score[best]))
          best = e;
      taken[best] = true;
      expert[j] = best;
      total += raw[j] = p[best];
    }
    for (int64_t j = 0; j < k; ++j)
      w[j] = normalize ? raw[j] / total : raw[j];
  }
};

/// One expert on one token: (g; u) = gate_up[e] · x, a = silu(g) ⊙ u.
void expertHidden(const float *gate_up, const float *x, int64_t H, int64_t I,
                  float *gu, float *a) {
  for (int64_t r = 0; r < 2 * I; ++r)
    gu[r] = dot(gate_up + r * H, x, H);
  for (int64_t i = 0; i < I; ++i)
    a[i] = gu[i] * sigmoid(gu[i]) * gu[I + i];
}

} // namespace

void moe_forward(float *y, const float *x, const float *router,
                 const float *gate_up, const float *down, const float *bias,
                 int64_t T, int64_t H, int64_t E, int64_t I, int64_t k,
                 bool normalize) {
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    const float *xt = x + t * H;
    const Routing route(xt, router, bias, H, E, k, normalize);
    std::vector<float> gu(2 * I), a(I);
    float *yt = y + t * H;
    for (int64_t h = 0; h < H; ++h)
      yt[h] = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = route.expert[j];
      expertHidden(gate_up + e * 2 * I * H, xt, H, I, gu.data(), a.data());
      const float *D = down + e * H * I;
      for (int64_t h = 0; h < H; ++h)
        yt[h] += route.w[j] * dot(D + h * I, a.data(), I);
    }
  }
}

void moe_backward(float *dx, float *drouter, float *dgate_up, float *ddown,
                  const float *dy, const float *x, const float *router,
                  const float *gate_up, const float *down, const float *bias,
                  int64_t T, int64_t H, int64_t E, int64_t I, int64_t k,
                  bool normalize) {
  const int64_t slots = T * k;
  // Per slot (token t, choice j): the expert, a, (dg; du) and the expert's
  // output gradient w_j·dy; per token the router logits' gradient.
  std::vector<int64_t> expert(slots);
  std::vector<float> A(slots * I), DGU(slots * 2 * I), DOUT(slots * H),
      DL(T * E);
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    const float *xt = x + t * H, *dyt = dy + t * H;
    const Routing route(xt, router, bias, H, E, k, normalize);
    std::vector<float> gu(2 * I), da(I), dw(k);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = t * k + j, e = route.expert[j];
      const float *G = gate_up + e * 2 * I * H, *D = down + e * H * I;
      float *a = &A[s * I], *dgu = &DGU[s * 2 * I], *dout = &DOUT[s * H];
      expert[s] = e;
      expertHidden(G, xt, H, I, gu.data(), a);
      // d(weight) = dy · expert output.
      float dwj = 0.f;
      for (int64_t h = 0; h < H; ++h) {
        dwj += dyt[h] * dot(D + h * I, a, I);
        dout[h] = route.w[j] * dyt[h];
      }
      dw[j] = dwj;
      for (int64_t i = 0; i < I; ++i)
        da[i] = 0.f;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < I; ++i)
          da[i] += D[h * I + i] * dout[h];
      for (int64_t i = 0; i < I; ++i) {
        const float g = gu[i], u = gu[I + i], sg = sigmoid(g);
        dgu[i] = da[i] * u * sg * (1.f + g * (1.f - sg));
        dgu[I + i] = da[i] * g * sg;
      }
      if (dx)
        for (int64_t r = 0; r < 2 * I; ++r)
          for (int64_t c = 0; c < H; ++c)
            dx[t * H + c] += G[r * H + c] * dgu[r];
    }
    // Through the renormalization, then the softmax.
    std::vector<float> dp(E, 0.f);
    float mean = 0.f;
    if (normalize)
      for (int64_t j = 0; j < k; ++j)
        mean += dw[j] * route.w[j];
    float total = 0.f;
    for (int64_t j = 0; j < k; ++j)
      total += route.raw[j];
    for (int64_t j = 0; j < k; ++j)
      dp[route.expert[j]] = normalize ? (dw[j] - mean) / total : dw[j];
    float dot_dp = 0.f;
    for (int64_t e = 0; e < E; ++e)
      dot_dp += dp[e] * route.p[e];
    float *dl = &DL[t * E];
    for (int64_t e = 0; e < E; ++e)
      dl[e] = route.p[e] * (dp[e] - dot_dp);
    if (dx)
      for (int64_t e = 0; e < E; ++e)
        for (int64_t c = 0; c < H; ++c)
          dx[t * H + c] += router[e * H + c] * dl[e];
  }
#pragma omp parallel for schedule(dynamic, 1) if (E > 1)
  for (int64_t e = 0; e < E; ++e) {
    if (drouter)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < H; ++c)
          drouter[e * H + c] += DL[t * E + e] * x[t * H + c];
    for (int64_t s = 0; s < slots; ++s) {
      if (expert[s] != e)
        continue;
      const float *xt = x + (s / k) * H;
      if (ddown)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < I; ++i)
            ddown[(e * H + h) * I + i] += DOUT[s * H + h] * A[s * I + i];
      if (dgate_up)
        for (int64_t r = 0; r < 2 * I; ++r)
          for (int64_t c = 0; c < H; ++c)
            dgate_up[(e * 2 * I + r) * H + c] += DGU[s * 2 * I + r] * xt[c];
    }
  }
}

} // namespace mtrt::cpu
