//===- Bf16Convert.cpp - fp32 to bf16, scalar and vector paths ------------===//
//
// The vector paths are compiled through function attributes only (as the
// optimizer kernels are), so the library runs on any x86-64.
//
//===----------------------------------------------------------------------===//

#include "runtime/host/Bf16Convert.h"

#include "runtime/host/Bf16.h"

#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MT_AVX2 __attribute__((target("avx2")))
#define MT_AVX512 __attribute__((target("avx512f")))
#endif

namespace mtrt::host {

namespace {

void convert_scalar(uint16_t *dst, const float *src, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    dst[k] = bf16_nearest(src[k]);
}

void add_scalar(uint16_t *acc, const float *g, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    acc[k] = bf16_nearest(bf16_widen(acc[k]) + g[k]);
}

#if defined(__x86_64__) || defined(__i386__)
// bf16_nearest on 8 lanes: u + 0x7fff + (bit 16 of u), or u with the quiet
// bit set where u is a NaN; then the top halves, in order.
MT_AVX2 inline __m128i nearest_avx2(__m256i u) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff),
                inf = _mm256_set1_epi32(0x7f800000),
                quiet = _mm256_set1_epi32(0x00400000),
                half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), inf);
  const __m256i even = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, half), even);
  r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
  r = _mm256_srli_epi32(r, 16); // 0..0xffff: packus keeps it as is
  // packus works within 128-bit halves: [r0-3 r0-3 | r4-7 r4-7].
  return _mm256_castsi256_si128(
      _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}

MT_AVX2 void convert_avx2(uint16_t *dst, const float *src, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + k),
                     nearest_avx2(_mm256_loadu_si256(
                         reinterpret_cast<const __m256i *>(src + k))));
  convert_scalar(dst + k, src + k, n - k);
}

MT_AVX2 void add_avx2(uint16_t *acc, const float *g, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256i a =
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                              reinterpret_cast<const __m128i *>(acc + k))),
                          16);
    const __m256 sum =
        _mm256_add_ps(_mm256_castsi256_ps(a), _mm256_loadu_ps(g + k));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(acc + k),
                     nearest_avx2(_mm256_castps_si256(sum)));
  }
  add_scalar(acc + k, g + k, n - k);
}

// The same on 16 lanes.
MT_AVX512 inline __m256i nearest_avx512(__m512i u) {
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff),
                inf = _mm512_set1_epi32(0x7f800000),
                quiet = _mm512_set1_epi32(0x00400000),
                half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __mmask16 nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, magnitude), inf);
  const __m512i even = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, half), even);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, quiet));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

MT_AVX512 void convert_avx512(uint16_t *dst, const float *src, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + k),
                        nearest_avx512(_mm512_loadu_si512(src + k)));
  convert_scalar(dst + k, src + k, n - k);
}

MT_AVX512 void add_avx512(uint16_t *acc, const float *g, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i a =
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                              reinterpret_cast<const __m256i *>(acc + k))),
                          16);
    const __m512 sum =
        _mm512_add_ps(_mm512_castsi512_ps(a), _mm512_loadu_ps(g + k));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(acc + k),
                        nearest_avx512(_mm512_castps_si512(sum)));
  }
  add_scalar(acc + k, g + k, n - k);
}
#endif

} // namespace

void to_bf16_nearest(uint16_t *dst, const float *src, int64_t n,
                     SimdPath path) {
  if (!simd_path_supported(path))
    throw std::invalid_argument(std::string("error: this CPU cannot run the ") +
                                simd_path_name(path) + " bf16 conversion");
  switch (path) {
#if defined(__x86_64__) || defined(__i386__)
  case SimdPath::Avx512:
    return convert_avx512(dst, src, n);
  case SimdPath::Avx2:
    return convert_avx2(dst, src, n);
#endif
  default:
    return convert_scalar(dst, src, n);
  }
}

void to_bf16_nearest(uint16_t *dst, const float *src, int64_t n) {
  to_bf16_nearest(dst, src, n, active_simd_path());
}

void add_to_bf16(uint16_t *acc, const float *g, int64_t n, SimdPath path) {
  if (!simd_path_supported(path))
    throw std::invalid_argument(std::string("error: this CPU cannot run the ") +
                                simd_path_name(path) + " bf16 accumulation");
  switch (path) {
#if defined(__x86_64__) || defined(__i386__)
  case SimdPath::Avx512:
    return add_avx512(acc, g, n);
  case SimdPath::Avx2:
    return add_avx2(acc, g, n);
#endif
  default:
    return add_scalar(acc, g, n);
  }
}

void add_to_bf16(uint16_t *acc, const float *g, int64_t n) {
  add_to_bf16(acc, g, n, active_simd_path());
}

} // namespace mtrt::host
