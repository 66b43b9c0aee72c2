//===- Attention.cpp - causal attention with grouped KV heads -------------===//
//
// Flash-style on the CPU: the forward keeps one query row's running max, sum
// and output (online softmax over key tiles) and may keep the row's
// log-sum-exp, from which the backward recomputes each row's probabilities
// in one pass. Neither stores an S x S matrix. ALiBi adds
// m_h · (j − i) to each score: 0 on the diagonal, so the scores keep their
// scale however long the sequence. A sliding window or chunks start each
// row's keys at range.first_key(i), so a window's cost is O(S · window).
// Soft-capping (Gemma 2) squashes each scaled score s to cap · tanh(s / cap)
// before the bias. A sink (gpt-oss) is one more logit per head in each row's
// softmax, with no value: the row's running max and sum start from it, not from
// -inf and 0, and its gradient is −Σ p_sink · δ over the head's rows.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"

#include "runtime/kernels/Dot.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mtrt::cpu {
namespace {

constexpr int64_t kKeyTile = 64;

// y += alpha · x
void axpy(float *y, float alpha, const float *x, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d)
    y[d] += alpha * x[d];
}

// The score of query q_i and key k_j before its ALiBi bias; with `dcap`,
// also d score / d (scale · q_i · k_j).
float score_of(const float *qi, const float *kj, int64_t D, float scale,
               float softcap, float *dcap = nullptr) {
  float s = scale * dot(qi, kj, D);
  if (softcap <= 0.f) {
    if (dcap)
      *dcap = 1.f;
    return s;
  }
  const float t = std::tanh(s / softcap);
  if (dcap)
    *dcap = 1.f - t * t;
  return softcap * t;
}

} // namespace

void attention_forward(float *y, float *lse, const float *q, const float *k,
                       const float *v, int64_t B, int64_t H, int64_t Hkv,
                       int64_t S, int64_t D, float scale, const KeyRange &range,
                       float softcap, const float *alibi_slopes,
                       const float *sinks, HeadLayout layout) {
  const int64_t group = H / Hkv;
  const int64_t ldk = layout.row_stride(Hkv, D);
#pragma omp parallel
  {
    std::vector<float> out(D);          // (D) unnormalized output row
    std::vector<float> score(kKeyTile); // (kKeyTile)
    // Row r = (b, h, i) costs O(i): dynamic chunks even the load out.
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < B * H * S; ++r) {
      const int64_t i = r % S, b = r / S / H, h = r / S % H;
      const int64_t kv = layout.head_offset(b, h / group, Hkv, S, D);
      const int64_t row = layout.row_offset(b, h, i, H, S, D);
      const float *qi = q + row, *kh = k + kv, *vh = v + kv;
      const float slope = alibi_slopes ? alibi_slopes[h] : 0.f;
      // The sink's exp(sink - running_max) is 1.
      float running_max = sinks ? sinks[h] : -INFINITY;
      float sum = sinks ? 1.f : 0.f;
      std::fill(out.begin(), out.end(), 0.f);
      const int64_t first = range.first_key(i);
      for (int64_t j0 = first; j0 <= i; j0 += kKeyTile) {
        const int64_t n = std::min(kKeyTile, i + 1 - j0);
        float tile_max = -INFINITY;
        for (int64_t t = 0; t < n; ++t) {
          score[t] = score_of(qi, kh + (j0 + t) * ldk, D, scale, softcap) +
                     slope * float(j0 + t - i);
          tile_max = std::max(tile_max, score[t]);
        }
        // Rescale what was summed under the old max (exp(-inf) = 0 at first).
        const float new_max = std::max(running_max, tile_max);
        const float correction = std::exp(running_max - new_max);
        sum *= correction;
        for (int64_t d = 0; d < D; ++d)
          out[d] *= correction;
        for (int64_t t = 0; t < n; ++t) {
          const float p = std::exp(score[t] - new_max);
          sum += p;
          axpy(out.data(), p, vh + (j0 + t) * ldk, D);
        }
        running_max = new_max;
      }
      float *yi = y + row;
      for (int64_t d = 0; d < D; ++d)
        yi[d] = out[d] / sum;
      if (lse)
        lse[r] = running_max + std::log(sum);
    }
  }
}

void attention_delta(float *delta, const float *dy, const float *y, int64_t B,
                     int64_t H, int64_t S, int64_t D, HeadLayout layout) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * H * S; ++r) {
    const int64_t row = layout.row_offset(r / S / H, r / S % H, r % S, H, S, D);
    delta[r] = dot(dy + row, y + row, D);
  }
}

void attention_backward(float *dq, float *dk, float *dv, const float *dy,
                        const float *q, const float *k, const float *v,
                        const float *delta, const float *lse, int64_t B,
                        int64_t H, int64_t Hkv, int64_t S, int64_t D,
                        float scale, const KeyRange &range, float softcap,
                        const float *alibi_slopes, const float *sinks,
                        float *dsinks, bool accumulate, HeadLayout layout) {
  if (!dq && !dk && !dv && !dsinks)
    return;
  const int64_t group = H / Hkv;
  const int64_t ldk = layout.row_stride(Hkv, D);
  // dsink of each (b, h), written by the task owning it, summed over b after.
  std::vector<double> dsink(dsinks ? B * H : 0, 0.0);
#pragma omp parallel
  {
    std::vector<float> prob(S);  // (S) softmax row
    std::vector<float> dprob(S); // (S) dy_i · v_j
    std::vector<float> dcap(S);  // (S) the soft-cap's slope at each score
    std::vector<float> dqi(D);   // (D)
    // A task owns one KV head and every query head reading it, hence its dk
    // and dv slices: they are summed in a fixed order without atomics.
#pragma omp for schedule(dynamic)
    for (int64_t bg = 0; bg < B * Hkv; ++bg) {
      const int64_t b = bg / Hkv, g = bg % Hkv;
      const int64_t kv = layout.head_offset(b, g, Hkv, S, D);
      const float *kh = k + kv, *vh = v + kv;
      if (!accumulate) // the rows this task sums into; dq rows are set
        for (float *d : {dk, dv})
          if (d)
            for (int64_t j = 0; j < S; ++j)
              std::fill_n(d + kv + j * ldk, D, 0.f);
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t i = 0; i < S; ++i) {
          const int64_t r = (b * H + h) * S + i; // row statistics
          const int64_t row = layout.row_offset(b, h, i, H, S, D);
          const float *qi = q + row, *dyi = dy + row;
          const float slope = alibi_slopes ? alibi_slopes[h] : 0.f;
          const int64_t first = range.first_key(i);
          const float li = lse[r];   // the forward's log Σ exp(score)
          const float di = delta[r]; // Σ_j p_j (dy_i · v_j) = dy_i · y_i
          if (dsinks) // the sink's value is 0: its dp is 0, its ds −p · δ
            dsink[b * H + h] -= std::exp(double(sinks[h]) - li) * di;
          for (int64_t j = first; j <= i; ++j) {
            prob[j] = std::exp(
                score_of(qi, kh + j * ldk, D, scale, softcap, &dcap[j]) +
                slope * float(j - i) - li);
            dprob[j] = dot(dyi, vh + j * ldk, D);
          }
          std::fill(dqi.begin(), dqi.end(), 0.f);
          for (int64_t j = first; j <= i; ++j) {
            // ds_j = d loss / d (scale · q_i · k_j)
            const float ds = prob[j] * (dprob[j] - di) * dcap[j];
            if (dq)
              axpy(dqi.data(), ds, kh + j * ldk, D);
            if (dk)
              axpy(dk + kv + j * ldk, scale * ds, qi, D);
            if (dv)
              axpy(dv + kv + j * ldk, prob[j], dyi, D);
          }
          if (dq && accumulate)
            axpy(dq + row, scale, dqi.data(), D);
          else if (dq)
            for (int64_t d = 0; d < D; ++d)
              dq[row + d] = scale * dqi[d];
        }
    }
  }
  if (dsinks)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t b = 0; b < B; ++b)
        dsinks[h] += float(dsink[b * H + h]);
}

} // namespace mtrt::cpu
