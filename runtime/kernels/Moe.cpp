//===- Moe.cpp - a mixture of SwiGLU experts with top-k routing -----------===//
//
// Token by token (docs/primitives.md, moe): softmax or sigmoid scores over
// E experts, the k largest (ties to the lower index; among the best groups
// of experts when grouped), optionally renormalized and scaled (and each
// by its expert's trained scale), weigh their experts' gated MLPs (SwiGLU,
// gpt-oss's clamped form with biases, or GeGLU). The router may read its
// own copy of the token (router_x). The
// backward recomputes the routing and each chosen expert's activations,
// then adds the weight gradients expert by expert in token order: the same
// bits on any thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"

#include "runtime/kernels/Dot.h"
#include "runtime/kernels/Gelu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mtrt::cpu {
namespace {

float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

/// One token's routing (MoeRouting): p, the scores [E]; the k chosen
/// experts (the largest p_e + bias_e among the competing groups, in
/// descending order, ties to the lower index) and their weights; raw: the
/// chosen scores before renormalization and scaling; n: after the
/// renormalization (raw without it).
struct Routing {
  std::vector<float> p, w, raw, n;
  std::vector<int64_t> expert;

  Routing(const float *x, const MoeWeights &wt, int64_t H, int64_t E, int64_t k,
          const MoeRouting &r)
      : p(E), w(k), raw(k), n(k), expert(k) {
    const float *bias = wt.bias;
    float m = -INFINITY;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = dot(wt.router + e * H, x, H) +
             (wt.router_bias ? wt.router_bias[e] : 0.f);
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
    for (int64_t j = 0; j < k; ++j) {
      n[j] = r.normalize ? raw[j] / total : raw[j];
      w[j] =
          n[j] * (wt.expert_scale ? wt.expert_scale[expert[j]] : 1.f) * r.scale;
    }
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

/// Where one expert's values live (MoeExperts' layouts), and what its
/// hidden units compute.
struct Expert {
  const MoeExperts &form;
  int64_t H, I;

  /// Hidden unit r's place along gate_up's 2I: g_i is unit i, u_i unit I + i.
  int64_t place(int64_t r) const {
    return form.interleaved ? (r < I ? 2 * r : 2 * (r - I) + 1) : r;
  }
  /// Offsets in an expert's gate_up of unit r's weight on input c, and in
  /// its down of output h's weight on unit i.
  int64_t gate_up_at(int64_t r, int64_t c) const {
    return form.in_out ? c * 2 * I + place(r) : place(r) * H + c;
  }
  int64_t down_at(int64_t h, int64_t i) const {
    return form.in_out ? i * H + h : h * I + i;
  }

  /// gu[r] = gate_up row r · x + bias (units in the math's order).
  void hidden(const float *G, const float *b, const float *x, float *gu) const {
    if (form.in_out) {
      std::fill(gu, gu + 2 * I, 0.f);
      for (int64_t c = 0; c < H; ++c)
        for (int64_t r = 0; r < 2 * I; ++r)
          gu[r] += G[c * 2 * I + place(r)] * x[c];
    } else {
      for (int64_t r = 0; r < 2 * I; ++r)
        gu[r] = dot(G + place(r) * H, x, H);
    }
    if (b)
      for (int64_t r = 0; r < 2 * I; ++r)
        gu[r] += b[place(r)];
  }
  /// a[i] from (g; u).
  void activate(const float *gu, float *a) const {
    for (int64_t i = 0; i < I; ++i)
      a[i] = activation(gu[i], gu[I + i]);
  }
  float activation(float g, float u) const {
    if (form.gelu)
      return gelu(g, true) * u;
    if (form.limit > 0.f) {
      g = std::min(g, form.limit);
      u = std::clamp(u, -form.limit, form.limit);
    }
    return g * sigmoid(form.alpha * g) * (u + form.up_shift);
  }
  /// (dg, du) from da; a clamp passes the gradient where its input is
  /// within the bounds, ends included (as torch's clamp).
  void activation_grad(float g, float u, float da, float &dg, float &du) const {
    if (form.gelu) {
      dg = da * u * gelu_grad(g, true);
      du = da * gelu(g, true);
      return;
    }
    bool g_in = true, u_in = true;
    if (form.limit > 0.f) {
      g_in = g <= form.limit;
      u_in = u >= -form.limit && u <= form.limit;
      g = std::min(g, form.limit);
      u = std::clamp(u, -form.limit, form.limit);
    }
    const float sg = sigmoid(form.alpha * g);
    dg = g_in ? da * (u + form.up_shift) * sg *
                    (1.f + form.alpha * g * (1.f - sg))
              : 0.f;
    du = u_in ? da * g * sg : 0.f;
  }
  /// o[h] = down row h · a + bias.
  void output(const float *D, const float *b, const float *a, float *o) const {
    if (form.in_out) {
      std::fill(o, o + H, 0.f);
      for (int64_t i = 0; i < I; ++i)
        for (int64_t h = 0; h < H; ++h)
          o[h] += D[i * H + h] * a[i];
    } else {
      for (int64_t h = 0; h < H; ++h)
        o[h] = dot(D + h * I, a, I);
    }
    if (b)
      for (int64_t h = 0; h < H; ++h)
        o[h] += b[h];
  }
};

} // namespace

void moe_forward(float *y, const float *x, const float *router_x,
                 const MoeWeights &wt, int64_t T, int64_t H, int64_t E,
                 int64_t I, int64_t k, const MoeRouting &routing,
                 const MoeExperts &experts) {
  const float *rx = router_x ? router_x : x;
  const Expert ex{experts, H, I};
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    const float *xt = x + t * H;
    const Routing route(rx + t * H, wt, H, E, k, routing);
    std::vector<float> gu(2 * I), a(I), o(H), xw(H);
    float *yt = y + t * H;
    std::fill(yt, yt + H, 0.f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = route.expert[j];
      // The expert's input and output weights: w_j on one of them.
      const float in_w = routing.weigh_inputs ? route.w[j] : 1.f;
      const float out_w = routing.weigh_inputs ? 1.f : route.w[j];
      for (int64_t c = 0; c < H; ++c)
        xw[c] = in_w * xt[c];
      ex.hidden(wt.gate_up + e * 2 * I * H,
                wt.gate_up_bias ? wt.gate_up_bias + e * 2 * I : nullptr,
                xw.data(), gu.data());
      ex.activate(gu.data(), a.data());
      ex.output(wt.down + e * H * I,
                wt.down_bias ? wt.down_bias + e * H : nullptr, a.data(),
                o.data());
      for (int64_t h = 0; h < H; ++h)
        yt[h] += out_w * o[h];
    }
  }
}

void moe_backward(float *dx, float *drouter_x, const MoeWeightGrads &g,
                  const float *dy, const float *x, const float *router_x,
                  const MoeWeights &wt, int64_t T, int64_t H, int64_t E,
                  int64_t I, int64_t k, const MoeRouting &routing,
                  const MoeExperts &experts) {
  const Expert ex{experts, H, I};
  const float *rx = router_x ? router_x : x;
  float *drx = router_x ? drouter_x : dx;
  const int64_t slots = T * k;
  const bool weigh_inputs = routing.weigh_inputs;
  // Per slot (token t, choice j): the expert, its input weight, a, (dg;
  // du), the expert's output gradient (w_j·dy, or dy when the weight is
  // on the input) and its scale's gradient; per token the router logits'
  // gradient.
  std::vector<int64_t> expert(slots);
  std::vector<float> IN_W(slots), A(slots * I), DGU(slots * 2 * I),
      DOUT(slots * H), DS(slots), DL(T * E);
#pragma omp parallel for schedule(dynamic, 1) if (T > 1)
  for (int64_t t = 0; t < T; ++t) {
    const float *xt = x + t * H, *dyt = dy + t * H;
    const Routing route(rx + t * H, wt, H, E, k, routing);
    std::vector<float> gu(2 * I), da(I), dw(k), o(H), xw(H), dxw(H);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = t * k + j, e = route.expert[j];
      const float *G = wt.gate_up + e * 2 * I * H, *D = wt.down + e * H * I;
      float *a = &A[s * I], *dgu = &DGU[s * 2 * I], *dout = &DOUT[s * H];
      const float in_w = weigh_inputs ? route.w[j] : 1.f;
      const float out_w = weigh_inputs ? 1.f : route.w[j];
      expert[s] = e;
      IN_W[s] = in_w;
      for (int64_t c = 0; c < H; ++c)
        xw[c] = in_w * xt[c];
      ex.hidden(G, wt.gate_up_bias ? wt.gate_up_bias + e * 2 * I : nullptr,
                xw.data(), gu.data());
      ex.activate(gu.data(), a);
      ex.output(D, wt.down_bias ? wt.down_bias + e * H : nullptr, a, o.data());
      // On the output, d(weight) = dy · expert output.
      float dwj = 0.f;
      for (int64_t h = 0; h < H; ++h) {
        dwj += dyt[h] * o[h];
        dout[h] = out_w * dyt[h];
      }
      std::fill(da.begin(), da.end(), 0.f);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < I; ++i)
          da[i] += D[ex.down_at(h, i)] * dout[h];
      for (int64_t i = 0; i < I; ++i)
        ex.activation_grad(gu[i], gu[I + i], da[i], dgu[i], dgu[I + i]);
      // The gradient of the expert's input w·x: to x times w, and on the
      // input, d(weight) = it · x.
      std::fill(dxw.begin(), dxw.end(), 0.f);
      for (int64_t r = 0; r < 2 * I; ++r)
        for (int64_t c = 0; c < H; ++c)
          dxw[c] += G[ex.gate_up_at(r, c)] * dgu[r];
      if (weigh_inputs)
        dwj = dot(dxw.data(), xt, H);
      dw[j] = dwj;
      if (dx)
        for (int64_t c = 0; c < H; ++c)
          dx[t * H + c] += in_w * dxw[c];
    }
    // Through the scalings (w = n · expert scale · scale), the
    // renormalization, then the softmax or the sigmoid.
    std::vector<float> dp(E, 0.f), dn(k);
    float mean = 0.f, total = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = route.expert[j];
      const float es = wt.expert_scale ? wt.expert_scale[e] : 1.f;
      DS[t * k + j] = dw[j] * route.n[j] * routing.scale;
      dn[j] = dw[j] * es * routing.scale;
      mean += dn[j] * route.n[j];
      total += route.raw[j];
    }
    for (int64_t j = 0; j < k; ++j)
      dp[route.expert[j]] = routing.normalize ? (dn[j] - mean) / total : dn[j];
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
    if (drx)
      for (int64_t e = 0; e < E; ++e)
        for (int64_t c = 0; c < H; ++c)
          drx[t * H + c] += wt.router[e * H + c] * dl[e];
  }
#pragma omp parallel for schedule(dynamic, 1) if (E > 1)
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t t = 0; t < T; ++t) {
      if (g.router)
        for (int64_t c = 0; c < H; ++c)
          g.router[e * H + c] += DL[t * E + e] * rx[t * H + c];
      if (g.router_bias)
        g.router_bias[e] += DL[t * E + e];
    }
    for (int64_t s = 0; s < slots; ++s) {
      if (expert[s] != e)
        continue;
      const float *xt = x + (s / k) * H;
      const float in_w = IN_W[s];
      const float *dout = &DOUT[s * H], *dgu = &DGU[s * 2 * I];
      if (g.expert_scale)
        g.expert_scale[e] += DS[s];
      if (g.down)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < I; ++i)
            g.down[e * H * I + ex.down_at(h, i)] += dout[h] * A[s * I + i];
      if (g.down_bias)
        for (int64_t h = 0; h < H; ++h)
          g.down_bias[e * H + h] += dout[h];
      if (g.gate_up)
        for (int64_t r = 0; r < 2 * I; ++r)
          for (int64_t c = 0; c < H; ++c)
            g.gate_up[e * 2 * I * H + ex.gate_up_at(r, c)] +=
                dgu[r] * (in_w * xt[c]);
      if (g.gate_up_bias)
        for (int64_t r = 0; r < 2 * I; ++r)
          g.gate_up_bias[e * 2 * I + ex.place(r)] += dgu[r];
    }
  }
}

} // namespace mtrt::cpu
