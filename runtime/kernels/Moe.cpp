//===- Moe.cpp - a mixture of SwiGLU experts with top-k routing -----------===//
//
// Token by token (docs/primitives.md, moe): softmax or sigmoid scores over
// E experts, the k largest (ties to the lower index; among the best groups
// of experts when grouped), optionally renormalized and scaled, weigh their
// experts' SwiGLU MLPs. The backward recomputes
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

/// One token's routing (MoeRouting): p, the scores [E]; the k chosen
/// experts (the largest p_e + bias_e among the competing groups, in
/// descending order, ties to the lower index) and their weights; raw: the
/// chosen scores before renormalization and scaling.
struct Routing {
  std::vector<float> p, w, raw;
  std::vector<int64_t> expert;

  Routing(const float *x, const float *router, const float *bias, int64_t H,
          int64_t E, int64_t k, const MoeRouting &r)
      : p(E), w(k), raw(k), expert(k) {
    float m = -INFINITY;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = dot(router + e * H, x, H);
      m = std::max(m, p[e]);
    }
    if (r.sigmoid) {
      for (int64_t e = 0; e < E; ++e)
        p[e] = sigmoid(p[e]);
    } else {
      float sum = 0.f;
      for (int64_t e = 0; e < E; ++e)
        sum += p[e] = std::exp(p[e] - m);
      for (int64_t e = 0; e < E; ++e)
        p[e] /= sum;
    }
    std::vector<float> score(p);
    if (bias)
      for (int64_t e = 0; e < E; ++e)
        score[e] += bias[e];
    std::vector<bool> taken(E, false);
    if (r.groups > 1)
      excludeGroups(score, r, taken);
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
      w[j] = (r.normalize ? raw[j] / total : raw[j]) * r.scale;
  }

  /// Marks taken every expert outside the top_groups groups whose two best
  /// scores sum largest (ties to the lower group).
  static void excludeGroups(const std::vector<float> &score,
                            const MoeRouting &r, std::vector<bool> &taken) {
    const int64_t n = int64_t(score.size()) / r.groups;
    std::vector<float> gs(r.groups);
    for (int64_t g = 0; g < r.groups; ++g) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int64_t e = g * n; e < (g + 1) * n; ++e)
        if (score[e] > b1)
          b2 = b1, b1 = score[e];
        else if (score[e] > b2)
          b2 = score[e];
      gs[g] = b1 + b2;
    }
    std::vector<bool> chosen(r.groups, false);
    for (int64_t j = 0; j < r.top_groups; ++j) {
      int64_t best = -1;
      for (int64_t g = 0; g < r.groups; ++g)
        if (!chosen[g] && (best < 0 || gs[g] > gs[best]))
          best = g;
      chosen[best] = true;
    }
    for (int64_t e = 0; e < int64_t(score.size()); ++e)
      taken[e] = !chosen[e / n];
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
                 const MoeRouting &routing) {
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    const float *xt = x + t * H;
    const Routing route(xt, router, bias, H, E, k, routing);
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
                  const MoeRouting &routing) {
  const int64_t slots = T * k;
  // Per slot (token t, choice j): the expert, a, (dg; du) and the expert's
  // output gradient w_j·dy; per token the router logits' gradient.
  std::vector<int64_t> expert(slots);
  std::vector<float> A(slots * I), DGU(slots * 2 * I), DOUT(slots * H),
      DL(T * E);
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    const float *xt = x + t * H, *dyt = dy + t * H;
    const Routing route(xt, router, bias, H, E, k, routing);
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
    // Through the scaling and renormalization, then the softmax or the
    // sigmoid.
    std::vector<float> dp(E, 0.f);
    float mean = 0.f;
    if (routing.normalize)
      for (int64_t j = 0; j < k; ++j)
        mean += dw[j] * route.w[j];
    float total = 0.f;
    for (int64_t j = 0; j < k; ++j)
      total += route.raw[j];
    for (int64_t j = 0; j < k; ++j) {
      const float d = routing.scale * dw[j];
      dp[route.expert[j]] = routing.normalize ? (d - mean) / total : d;
    }
    float *dl = &DL[t * E];
    if (routing.sigmoid) {
      for (int64_t e = 0; e < E; ++e)
        dl[e] = dp[e] * route.p[e] * (1.f - route.p[e]);
    } else {
      float dot_dp = 0.f;
      for (int64_t e = 0; e < E; ++e)
        dot_dp += dp[e] * route.p[e];
      for (int64_t e = 0; e < E; ++e)
        dl[e] = route.p[e] * (dp[e] - dot_dp);
    }
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
