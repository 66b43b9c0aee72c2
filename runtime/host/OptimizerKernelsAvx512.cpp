//===- OptimizerKernelsAvx512.cpp - AVX-512F optimizer inner loops --------===//
//
// Compiled for AVX-512F through function attributes only, so the rest of the
// library still runs on CPUs without it; callers check cpu_features() first.
//
//===----------------------------------------------------------------------===//

#include "runtime/host/OptimizerKernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define MT_AVX512 __attribute__((target("avx512f")))

namespace mtrt::host::detail {

namespace {
// Software prefetch 2 KiB ahead on every stream: with the arithmetic in the
// loop, the hardware prefetcher alone left ~12% of the bandwidth unused
// (measured with bench/adamw_bench).
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

struct Coeffs16 {
  __m512 grad_scale, decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
      sqrt_bc2, eps, neg_step_size;
};

// The update of 16 lanes from loaded values: new p, m and v.
struct Update16 {
  __m512 p, m, v;
};
MT_AVX512 inline Update16 update16(__m512 p, __m512 m, __m512 v, __m512 g,
                                   const Coeffs16 &c) {
  __m512 gi = _mm512_mul_ps(g, c.grad_scale);
  __m512 pi = _mm512_mul_ps(p, c.decay);
  __m512 mi = _mm512_add_ps(_mm512_mul_ps(m, c.beta1),
                            _mm512_mul_ps(c.one_minus_beta1, gi));
  __m512 vi = _mm512_add_ps(_mm512_mul_ps(v, c.beta2),
                            _mm512_mul_ps(_mm512_mul_ps(c.one_minus_beta2, gi), gi));
  __m512 denom =
      _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), c.sqrt_bc2), c.eps);
  pi = _mm512_add_ps(pi,
                     _mm512_div_ps(_mm512_mul_ps(c.neg_step_size, mi), denom));
  return {pi, mi, vi};
}

// Masked-off lanes load zeros, compute harmless values and are not stored,
// which is how the tail stays on the vector path.
MT_AVX512 inline void adamw16(float *p, float *m, float *v, const float *g,
                              __mmask16 k, const Coeffs16 &c) {
  Update16 u = update16(_mm512_maskz_loadu_ps(k, p), _mm512_maskz_loadu_ps(k, m),
                        _mm512_maskz_loadu_ps(k, v), _mm512_maskz_loadu_ps(k, g), c);
  _mm512_mask_storeu_ps(p, k, u.p);
  _mm512_mask_storeu_ps(m, k, u.m);
  _mm512_mask_storeu_ps(v, k, u.v);
}

MT_AVX512 inline __m512 widen_bf16(const uint16_t *x) {
  __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// rounding_noise of index ^ key for the 16 lanes.
MT_AVX512 inline __m512i noise16(__m512i index, __m512i key) {
  __m512i x = _mm512_xor_si512(index, key);
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int(0x846ca68bu)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  return _mm512_srli_epi32(x, 16);
}

// bf16_stochastic on 16 lanes.
MT_AVX512 inline __m256i narrow_stochastic(__m512 f, __m512i noise) {
  __m512i u = _mm512_castps_si512(f);
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, noise), 16);
  __m512i quiet = _mm512_srli_epi32(
      _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), 16);
  __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

MT_AVX512 inline void adamw_bf16_16(uint16_t *p, float *m, float *v,
                                    const uint16_t *g, __m512i noise,
                                    const Coeffs16 &c) {
  Update16 u = update16(widen_bf16(p), _mm512_loadu_ps(m), _mm512_loadu_ps(v),
                        widen_bf16(g), c);
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(p),
                      narrow_stochastic(u.p, noise));
  _mm512_storeu_ps(m, u.m);
  _mm512_storeu_ps(v, u.v);
}

MT_AVX512 Coeffs16 broadcast(const AdamWCoeffs &c) {
  return {_mm512_set1_ps(c.grad_scale),   _mm512_set1_ps(c.decay),
          _mm512_set1_ps(c.beta1),        _mm512_set1_ps(c.one_minus_beta1),
          _mm512_set1_ps(c.beta2),        _mm512_set1_ps(c.one_minus_beta2),
          _mm512_set1_ps(c.sqrt_bc2),     _mm512_set1_ps(c.eps),
          _mm512_set1_ps(c.neg_step_size)};
}
} // namespace

MT_AVX512 void adamw_avx512(float *p, float *m, float *v, const float *g,
                            int64_t n, const AdamWCoeffs &c) {
  const Coeffs16 c16 = broadcast(c);
  const __mmask16 all = 0xFFFF;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    prefetch_ahead(p + i, m + i, v + i, g + i);
    adamw16(p + i, m + i, v + i, g + i, all, c16);
  }
  if (i < n)
    adamw16(p + i, m + i, v + i, g + i,
            static_cast<__mmask16>((1u << (n - i)) - 1), c16);
}

MT_AVX512 void adamw_bf16_avx512(uint16_t *p, float *m, float *v,
                                 const uint16_t *g, int64_t n,
                                 const AdamWCoeffs &c, uint32_t noise_key,
                                 uint32_t index0) {
  const Coeffs16 c16 = broadcast(c);
  const __m512i key = _mm512_set1_epi32(int(noise_key));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                         11, 12, 13, 14, 15);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // The bf16 streams move half the bytes: one prefetch covers two steps.
    if ((i & 31) == 0) {
      _mm_prefetch(reinterpret_cast<const char *>(p + i + kPrefetchFloats),
                   _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(g + i + kPrefetchFloats),
                   _MM_HINT_T0);
    }
    _mm_prefetch(reinterpret_cast<const char *>(m + i + kPrefetchFloats),
                 _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char *>(v + i + kPrefetchFloats),
                 _MM_HINT_T0);
    __m512i index = _mm512_add_epi32(
        _mm512_set1_epi32(int(index0 + static_cast<uint32_t>(i))), lane);
    adamw_bf16_16(p + i, m + i, v + i, g + i, noise16(index, key), c16);
  }
  adamw_bf16_scalar(p + i, m + i, v + i, g + i, n - i, c, noise_key,
                    index0 + static_cast<uint32_t>(i));
}

MT_AVX512 void sum_squares_avx512(const float *x, int64_t n, double *lanes) {
  // Two accumulators of eight doubles hold lanes 0-7 and 8-15.
  __m512d acc0 = _mm512_loadu_pd(lanes), acc1 = _mm512_loadu_pd(lanes + 8);
  int64_t i = 0;
  for (; i + kSumSquaresLanes <= n; i += kSumSquaresLanes) {
    _mm_prefetch(reinterpret_cast<const char *>(x + i + kPrefetchFloats),
                 _MM_HINT_T0);
    __m512d x0 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    __m512d x1 = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    acc0 = _mm512_add_pd(acc0, _mm512_mul_pd(x0, x0));
    acc1 = _mm512_add_pd(acc1, _mm512_mul_pd(x1, x1));
  }
  _mm512_storeu_pd(lanes, acc0);
  _mm512_storeu_pd(lanes + 8, acc1);
  // i is a multiple of the lane count, so the tail keeps the lane layout.
  sum_squares_scalar(x + i, n - i, lanes);
}

MT_AVX512 void sum_squares_bf16_avx512(const uint16_t *x, int64_t n,
                                       double *lanes) {
  __m512d acc0 = _mm512_loadu_pd(lanes), acc1 = _mm512_loadu_pd(lanes + 8);
  int64_t i = 0;
  for (; i + kSumSquaresLanes <= n; i += kSumSquaresLanes) {
    _mm_prefetch(reinterpret_cast<const char *>(x + i + 2 * kPrefetchFloats),
                 _MM_HINT_T0);
    __m512 f = widen_bf16(x + i);
    __m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    __m512d x1 = _mm512_cvtps_pd(_mm256_castpd_ps(
        _mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
    acc0 = _mm512_add_pd(acc0, _mm512_mul_pd(x0, x0));
    acc1 = _mm512_add_pd(acc1, _mm512_mul_pd(x1, x1));
  }
  _mm512_storeu_pd(lanes, acc0);
  _mm512_storeu_pd(lanes + 8, acc1);
  sum_squares_bf16_scalar(x + i, n - i, lanes);
}

} // namespace mtrt::host::detail

#else // no x86: never selected, present so the dispatch table links.

namespace mtrt::host::detail {
void adamw_avx512(float *p, float *m, float *v, const float *g, int64_t n,
                  const AdamWCoeffs &c) {
  adamw_scalar(p, m, v, g, n, c);
}
void sum_squares_avx512(const float *x, int64_t n, double *lanes) {
  sum_squares_scalar(x, n, lanes);
}
void adamw_bf16_avx512(uint16_t *p, float *m, float *v, const uint16_t *g,
                       int64_t n, const AdamWCoeffs &c, uint32_t noise_key,
                       uint32_t index0) {
  adamw_bf16_scalar(p, m, v, g, n, c, noise_key, index0);
}
void sum_squares_bf16_avx512(const uint16_t *x, int64_t n, double *lanes) {
  sum_squares_bf16_scalar(x, n, lanes);
}
} // namespace mtrt::host::detail

#endif
