//===- OptimizerKernelsAvx2.cpp - AVX2 optimizer inner loops --------------===//
//
// Compiled for AVX2 through function attributes only, so the rest of the
// library still runs on CPUs without it; callers check cpu_features() first.
//
//===----------------------------------------------------------------------===//

#include "runtime/host/OptimizerKernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define MT_AVX2 __attribute__((target("avx2")))

namespace mtrt::host::detail {

namespace {
// Software prefetch 2 KiB ahead on every stream, one cache line per stream
// per 16 elements; see OptimizerKernelsAvx512.cpp for why.
constexpr int64_t kPrefetchFloats = 512;

inline void prefetch_ahead(const float *p, const float *m, const float *v,
                           const float *g) {
  _mm_prefetch(reinterpret_cast<const char *>(p + kPrefetchFloats),
               _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char *>(m + kPrefetchFloats),
               _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char *>(v + kPrefetchFloats),
               _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char *>(g + kPrefetchFloats),
               _MM_HINT_T0);
}

struct Coeffs8 {
  __m256 grad_scale, decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
      sqrt_bc2, eps, neg_step_size;
};

// The update of 8 lanes from loaded values: new p, m and v.
struct Update8 {
  __m256 p, m, v;
};
MT_AVX2 inline Update8 update8(__m256 p, __m256 m, __m256 v, __m256 g,
                               const Coeffs8 &c) {
  __m256 gi = _mm256_mul_ps(g, c.grad_scale);
  __m256 pi = _mm256_mul_ps(p, c.decay);
  __m256 mi = _mm256_add_ps(_mm256_mul_ps(m, c.beta1),
                            _mm256_mul_ps(c.one_minus_beta1, gi));
  __m256 vi = _mm256_add_ps(_mm256_mul_ps(v, c.beta2),
                            _mm256_mul_ps(_mm256_mul_ps(c.one_minus_beta2, gi), gi));
  __m256 denom =
      _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), c.sqrt_bc2), c.eps);
  pi = _mm256_add_ps(pi,
                     _mm256_div_ps(_mm256_mul_ps(c.neg_step_size, mi), denom));
  return {pi, mi, vi};
}

MT_AVX2 inline void adamw8(float *p, float *m, float *v, const float *g,
                           const Coeffs8 &c) {
  Update8 u = update8(_mm256_loadu_ps(p), _mm256_loadu_ps(m),
                      _mm256_loadu_ps(v), _mm256_loadu_ps(g), c);
  _mm256_storeu_ps(p, u.p);
  _mm256_storeu_ps(m, u.m);
  _mm256_storeu_ps(v, u.v);
}

MT_AVX2 inline __m256 widen_bf16(const uint16_t *x) {
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}

// rounding_noise of index ^ key for the 8 lanes.
MT_AVX2 inline __m256i noise8(__m256i index, __m256i key) {
  __m256i x = _mm256_xor_si256(index, key);
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0x846ca68bu)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  return _mm256_srli_epi32(x, 16);
}

// bf16_stochastic on 8 lanes.
MT_AVX2 inline __m128i narrow_stochastic(__m256 f, __m256i noise) {
  __m256i u = _mm256_castps_si256(f);
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, noise), 16);
  __m256i quiet = _mm256_srli_epi32(
      _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), 16);
  __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  __m256i bits = _mm256_castps_si256(_mm256_blendv_ps(
      _mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
  // Every lane is below 2^16, so the unsigned saturating pack only narrows;
  // it packs within 128-bit halves, which the permute puts back in order.
  __m256i packed = _mm256_packus_epi32(bits, bits);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0xd8));
}

MT_AVX2 inline void adamw_bf16_8(uint16_t *p, float *m, float *v,
                                 const uint16_t *g, __m256i noise,
                                 const Coeffs8 &c) {
  Update8 u = update8(widen_bf16(p), _mm256_loadu_ps(m), _mm256_loadu_ps(v),
                      widen_bf16(g), c);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                   narrow_stochastic(u.p, noise));
  _mm256_storeu_ps(m, u.m);
  _mm256_storeu_ps(v, u.v);
}

MT_AVX2 Coeffs8 broadcast(const AdamWCoeffs &c) {
  return {_mm256_set1_ps(c.grad_scale),   _mm256_set1_ps(c.decay),
          _mm256_set1_ps(c.beta1),        _mm256_set1_ps(c.one_minus_beta1),
          _mm256_set1_ps(c.beta2),        _mm256_set1_ps(c.one_minus_beta2),
          _mm256_set1_ps(c.sqrt_bc2),     _mm256_set1_ps(c.eps),
          _mm256_set1_ps(c.neg_step_size)};
}
} // namespace

MT_AVX2 void adamw_avx2(float *p, float *m, float *v, const float *g, int64_t n,
                        const AdamWCoeffs &c) {
  const Coeffs8 c8 = broadcast(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(p + i, m + i, v + i, g + i);
    adamw8(p + i, m + i, v + i, g + i, c8);
    adamw8(p + i + 8, m + i + 8, v + i + 8, g + i + 8, c8);
  }
  for (; i + 8 <= n; i += 8)
    adamw8(p + i, m + i, v + i, g + i, c8);
  adamw_scalar(p + i, m + i, v + i, g + i, n - i, c);
}

MT_AVX2 void adamw_bf16_avx2(uint16_t *p, float *m, float *v,
                             const uint16_t *g, int64_t n,
                             const AdamWCoeffs &c, uint32_t noise_key,
                             uint32_t index0) {
  const Coeffs8 c8 = broadcast(c);
  const __m256i key = _mm256_set1_epi32(int(noise_key));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if ((i & 15) == 0) { // one cache line of m and v per 16 elements
      _mm_prefetch(reinterpret_cast<const char *>(m + i + kPrefetchFloats),
                   _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(v + i + kPrefetchFloats),
                   _MM_HINT_T0);
    }
    __m256i index = _mm256_add_epi32(
        _mm256_set1_epi32(int(index0 + static_cast<uint32_t>(i))), lane);
    adamw_bf16_8(p + i, m + i, v + i, g + i, noise8(index, key), c8);
  }
  adamw_bf16_scalar(p + i, m + i, v + i, g + i, n - i, c, noise_key,
                    index0 + static_cast<uint32_t>(i));
}

MT_AVX2 void sum_squares_avx2(const float *x, int64_t n, double *lanes) {
  // Four accumulators of four doubles hold lanes 0-3, 4-7, 8-11, 12-15.
  __m256d acc0 = _mm256_loadu_pd(lanes), acc1 = _mm256_loadu_pd(lanes + 4),
          acc2 = _mm256_loadu_pd(lanes + 8), acc3 = _mm256_loadu_pd(lanes + 12);
  int64_t i = 0;
  for (; i + kSumSquaresLanes <= n; i += kSumSquaresLanes) {
    _mm_prefetch(reinterpret_cast<const char *>(x + i + kPrefetchFloats),
                 _MM_HINT_T0);
    __m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    __m256d x1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    __m256d x2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8));
    __m256d x3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
    acc0 = _mm256_add_pd(acc0, _mm256_mul_pd(x0, x0));
    acc1 = _mm256_add_pd(acc1, _mm256_mul_pd(x1, x1));
    acc2 = _mm256_add_pd(acc2, _mm256_mul_pd(x2, x2));
    acc3 = _mm256_add_pd(acc3, _mm256_mul_pd(x3, x3));
  }
  _mm256_storeu_pd(lanes, acc0);
  _mm256_storeu_pd(lanes + 4, acc1);
  _mm256_storeu_pd(lanes + 8, acc2);
  _mm256_storeu_pd(lanes + 12, acc3);
  // i is a multiple of the lane count, so the tail keeps the lane layout.
  sum_squares_scalar(x + i, n - i, lanes);
}

MT_AVX2 void sum_squares_bf16_avx2(const uint16_t *x, int64_t n,
                                   double *lanes) {
  __m256d acc[4];
  for (int k = 0; k < 4; ++k)
    acc[k] = _mm256_loadu_pd(lanes + 4 * k);
  int64_t i = 0;
  for (; i + kSumSquaresLanes <= n; i += kSumSquaresLanes) {
    __m256 f[2] = {widen_bf16(x + i), widen_bf16(x + i + 8)};
    for (int k = 0; k < 4; ++k) {
      __m128 q = (k & 1) ? _mm256_extractf128_ps(f[k / 2], 1)
                         : _mm256_castps256_ps128(f[k / 2]);
      __m256d d = _mm256_cvtps_pd(q);
      acc[k] = _mm256_add_pd(acc[k], _mm256_mul_pd(d, d));
    }
  }
  for (int k = 0; k < 4; ++k)
    _mm256_storeu_pd(lanes + 4 * k, acc[k]);
  sum_squares_bf16_scalar(x + i, n - i, lanes);
}

} // namespace mtrt::host::detail

#else // no x86: never selected, present so the dispatch table links.

namespace mtrt::host::detail {
void adamw_avx2(float *p, float *m, float *v, const float *g, int64_t n,
                const AdamWCoeffs &c) {
  adamw_scalar(p, m, v, g, n, c);
}
void sum_squares_avx2(const float *x, int64_t n, double *lanes) {
  sum_squares_scalar(x, n, lanes);
}
void adamw_bf16_avx2(uint16_t *p, float *m, float *v, const uint16_t *g,
                     int64_t n, const AdamWCoeffs &c, uint32_t noise_key,
                     uint32_t index0) {
  adamw_bf16_scalar(p, m, v, g, n, c, noise_key, index0);
}
void sum_squares_bf16_avx2(const uint16_t *x, int64_t n, double *lanes) {
  sum_squares_bf16_scalar(x, n, lanes);
}
} // namespace mtrt::host::detail

#endif
