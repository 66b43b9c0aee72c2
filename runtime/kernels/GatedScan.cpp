//===- GatedScan.cpp - gated linear attention, with or without delta ------===//
//
// Gated DeltaNet's and Mamba-2's recurrence: a Dk × Dv state per (batch,
// value head), decayed, written (through the delta rule's correction, or
// not) and read by the query at each position in turn (Kernels.h,
// gated_scan_forward). The recurrence is sequential in time, so the
// parallelism is over heads.
//
// The backward runs time in reverse and needs every state: it stores one
// every kChunk positions on a forward pass, then recomputes each chunk's
// states from its checkpoint, O((T / kChunk + kChunk) · Dk · Dv) floats
// per head instead of O(T · Dk · Dv). dq and dk sum the value heads that
// share a key head; a thread owns a (batch, key head) and adds them in head
// order, so the bits do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mtrt::cpu {
namespace {

constexpr int64_t kChunk = 64;

/// Where one (batch, position, head) row starts in each layout.
struct Rows {
  int64_t T, Hk, Hv, Dk, Dv;
  int64_t qk(int64_t b, int64_t t, int64_t h) const {
    return ((b * T + t) * Hk + h / (Hv / Hk)) * Dk;
  }
  int64_t vo(int64_t b, int64_t t, int64_t h) const {
    return ((b * T + t) * Hv + h) * Dv;
  }
  int64_t gb(int64_t b, int64_t t, int64_t h) const {
    return (b * T + t) * Hv + h;
  }
};

/// The decays of position t's key channels: g [B, T, Hv] or, with
/// key_decay, [B, T, Hv, Dk].
struct Decay {
  const float *g;
  int64_t Dk;
  bool key_decay;
  const float *at(const Rows &r, int64_t b, int64_t t, int64_t h) const {
    return g + r.gb(b, t, h) * (key_decay ? Dk : 1);
  }
  float of(const float *gt, int64_t i) const {
    return std::exp(gt[key_decay ? i : 0]);
  }
};

/// One step of the recurrence on S [Dk, Dv]: S ← e^g·S (row i by its own
/// decay where the decay is per key channel); u = Sᵀk (0 without the delta
/// rule); delta = beta·(v − u); S += k·deltaᵀ. Leaves u and delta (Dv
/// each).
void advance(float *S, float *u, float *delta, const float *k, const float *v,
             const Decay &dec, const float *gt, float beta, int64_t Dk,
             int64_t Dv, bool with_delta) {
  for (int64_t j = 0; j < Dv; ++j)
    u[j] = 0.f;
  for (int64_t i = 0; i < Dk; ++i) {
    float *Si = S + i * Dv;
    const float decay = dec.of(gt, i);
    for (int64_t j = 0; j < Dv; ++j)
      Si[j] *= decay;
    if (with_delta)
      for (int64_t j = 0; j < Dv; ++j)
        u[j] += Si[j] * k[i];
  }
  for (int64_t j = 0; j < Dv; ++j)
    delta[j] = beta * (v[j] - u[j]);
  for (int64_t i = 0; i < Dk; ++i)
    for (int64_t j = 0; j < Dv; ++j)
      S[i * Dv + j] += k[i] * delta[j];
}

} // namespace

void gated_scan_forward(float *o, const float *q, const float *k,
                        const float *v, const float *g, const float *beta,
                        int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                        int64_t Dk, int64_t Dv, bool with_delta,
                        bool key_decay) {
  const Rows at{T, Hk, Hv, Dk, Dv};
  const Decay dec{g, Dk, key_decay};
#pragma omp parallel for schedule(static) if (B * Hv > 1)
  for (int64_t bh = 0; bh < B * Hv; ++bh) {
    const int64_t b = bh / Hv, h = bh % Hv;
    std::vector<float> S(Dk * Dv, 0.f), u(Dv), delta(Dv);
    for (int64_t t = 0; t < T; ++t) {
      const float *qt = q + at.qk(b, t, h);
      advance(S.data(), u.data(), delta.data(), k + at.qk(b, t, h),
              v + at.vo(b, t, h), dec, dec.at(at, b, t, h),
              beta[at.gb(b, t, h)], Dk, Dv, with_delta);
      float *ot = o + at.vo(b, t, h);
      for (int64_t j = 0; j < Dv; ++j)
        ot[j] = 0.f;
      for (int64_t i = 0; i < Dk; ++i)
        for (int64_t j = 0; j < Dv; ++j)
          ot[j] += S[i * Dv + j] * qt[i];
    }
  }
}

void gated_scan_backward(float *dq, float *dk, float *dv, float *dg,
                         float *dbeta, const float *dout, const float *q,
                         const float *k, const float *v, const float *g,
                         const float *beta, int64_t B, int64_t T, int64_t Hk,
                         int64_t Hv, int64_t Dk, int64_t Dv, bool with_delta,
                         bool key_decay) {
  const Rows at{T, Hk, Hv, Dk, Dv};
  const Decay dec{g, Dk, key_decay};
  const int64_t G = Hv / Hk, SZ = Dk * Dv, chunks = (T + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (B * Hk > 1)
  for (int64_t bk = 0; bk < B * Hk; ++bk) {
    const int64_t b = bk / Hk, hk = bk % Hk;
    // ckpt[c]: the state before position c·kChunk; prev[τ]: before position
    // c·kChunk + τ of the chunk being differentiated.
    std::vector<float> ckpt(chunks * SZ), prev(kChunk * SZ), S(SZ), Sp(SZ),
        dS(SZ), u(Dv), delta(Dv), ddelta(Dv);
    for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
      std::fill(S.begin(), S.end(), 0.f);
      for (int64_t t = 0; t < T; ++t) {
        if (t % kChunk == 0)
          std::copy(S.begin(), S.end(), ckpt.begin() + t / kChunk * SZ);
        advance(S.data(), u.data(), delta.data(), k + at.qk(b, t, h),
                v + at.vo(b, t, h), dec, dec.at(at, b, t, h),
                beta[at.gb(b, t, h)], Dk, Dv, with_delta);
      }
      std::fill(dS.begin(), dS.end(), 0.f);
      for (int64_t c = chunks - 1; c >= 0; --c) {
        const int64_t t0 = c * kChunk, len = std::min(kChunk, T - t0);
        std::copy(ckpt.begin() + c * SZ, ckpt.begin() + (c + 1) * SZ,
                  S.begin());
        for (int64_t tau = 0; tau < len; ++tau) {
          const int64_t t = t0 + tau;
          std::copy(S.begin(), S.end(), prev.begin() + tau * SZ);
          advance(S.data(), u.data(), delta.data(), k + at.qk(b, t, h),
                  v + at.vo(b, t, h), dec, dec.at(at, b, t, h),
                  beta[at.gb(b, t, h)], Dk, Dv, with_delta);
        }
        for (int64_t tau = len - 1; tau >= 0; --tau) {
          const int64_t t = t0 + tau;
          const float *qt = q + at.qk(b, t, h), *kt = k + at.qk(b, t, h);
          const float *vt = v + at.vo(b, t, h), *dot = dout + at.vo(b, t, h);
          const float *gt = dec.at(at, b, t, h);
          const float bt = beta[at.gb(b, t, h)];
          // Sp = e^g·S_{t−1} (the decayed state), u = Spᵀk (or 0), delta.
          for (int64_t j = 0; j < Dv; ++j)
            u[j] = 0.f;
          for (int64_t i = 0; i < Dk; ++i)
            for (int64_t j = 0; j < Dv; ++j) {
              Sp[i * Dv + j] = dec.of(gt, i) * prev[tau * SZ + i * Dv + j];
              if (with_delta)
                u[j] += Sp[i * Dv + j] * kt[i];
            }
          for (int64_t j = 0; j < Dv; ++j)
            delta[j] = bt * (vt[j] - u[j]);
          // o_t = S_tᵀq with S_t = Sp + k·deltaᵀ: dS += q·doᵀ, dq = S_t·do.
          for (int64_t j = 0; j < Dv; ++j)
            ddelta[j] = 0.f;
          for (int64_t i = 0; i < Dk; ++i) {
            float dqi = 0.f;
            for (int64_t j = 0; j < Dv; ++j) {
              float &d = dS[i * Dv + j];
              d += qt[i] * dot[j];
              dqi += (Sp[i * Dv + j] + kt[i] * delta[j]) * dot[j];
              ddelta[j] += d * kt[i];
            }
            if (dq)
              dq[at.qk(b, t, h) + i] += dqi;
          }
          // S_t = Sp + k·deltaᵀ, delta = beta·(v − Spᵀk) (beta·v without
          // the delta rule, where Sp's gradient is dS alone).
          const float corr = with_delta ? bt : 0.f;
          float db = 0.f, dgs = 0.f;
          for (int64_t j = 0; j < Dv; ++j) {
            db += ddelta[j] * (vt[j] - u[j]);
            if (dv)
              dv[at.vo(b, t, h) + j] += bt * ddelta[j];
          }
          // dg = ⟨Sp, dSp⟩, over a row where the decay is per key channel.
          float *dgt = dg ? dg + (gt - g) : nullptr;
          for (int64_t i = 0; i < Dk; ++i) {
            float dki = 0.f, dgi = 0.f;
            const float decay = dec.of(gt, i);
            for (int64_t j = 0; j < Dv; ++j) {
              float &d = dS[i * Dv + j];
              dki += d * delta[j] - corr * Sp[i * Dv + j] * ddelta[j];
              d -= kt[i] * corr * ddelta[j]; // dSp
              dgi += Sp[i * Dv + j] * d;
              d *= decay; // dS_{t−1}
            }
            if (dk)
              dk[at.qk(b, t, h) + i] += dki;
            if (key_decay && dgt)
              dgt[i] += dgi;
            dgs += dgi;
          }
          if (dbeta)
            dbeta[at.gb(b, t, h)] += db;
          if (!key_decay && dgt)
            *dgt += dgs;
        }
      }
    }
  }
}

} // namespace mtrt::cpu
