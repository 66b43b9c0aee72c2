//===- AdamW.cpp - Host AdamW update --------------------------------------===//

#include "runtime/host/AdamW.h"

#include "runtime/host/OptimizerKernels.h"
#include "runtime/host/ThreadPool.h"

#include <cmath>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace mtrt::host {

namespace {
// Elements per part at least: ~450 KB of traffic, well above the cost of
// waking a worker. Also a multiple of 16 floats, so parts split on cache lines
// of aligned buffers.
constexpr int64_t kAdamWGrain = 16384;

using AdamWKernel = void (*)(float *, float *, float *, const float *, int64_t,
                             const detail::AdamWCoeffs &);

AdamWKernel kernel_for(SimdPath path) {
  switch (path) {
  case SimdPath::Avx512:
    return detail::adamw_avx512;
  case SimdPath::Avx2:
    return detail::adamw_avx2;
  case SimdPath::Scalar:
    break;
  }
  return detail::adamw_scalar;
}

// Moments of weights whose gradient stays zero (unused vocabulary rows) decay
// into denormals and stay there: 0.9 times the smallest denormal rounds back
// to it. x86 takes ~10-25x longer per element on denormal operands. Values
// that small cannot move a weight (sqrt(v) is far below eps), so the update
// runs with flush-to-zero and denormals-are-zero, set here on every thread
// that runs a part whatever its caller's mode, and restored afterwards.
class FlushDenormals {
public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
  }
  ~FlushDenormals() { _mm_setcsr(saved_); }

private:
  static constexpr unsigned kFlushToZero = 0x8000;
  static constexpr unsigned kDenormalsAreZero = 0x0040;
  unsigned saved_;
#endif
};

using AdamWBf16Kernel = void (*)(uint16_t *, float *, float *,
                                 const uint16_t *, int64_t,
                                 const detail::AdamWCoeffs &, uint32_t,
                                 uint32_t);

AdamWBf16Kernel bf16_kernel_for(SimdPath path) {
  switch (path) {
  case SimdPath::Avx512:
    return detail::adamw_bf16_avx512;
  case SimdPath::Avx2:
    return detail::adamw_bf16_avx2;
  case SimdPath::Scalar:
    break;
  }
  return detail::adamw_bf16_scalar;
}

void check_arguments(const AdamWHyper &hyper, int64_t n, SimdPath path) {
  if (hyper.step < 1)
    throw std::invalid_argument("error: AdamW step must be >= 1 (got " +
                                std::to_string(hyper.step) + ")");
  if (n < 0)
    throw std::invalid_argument("error: AdamW element count is negative (" +
                                std::to_string(n) + ")");
  if (!simd_path_supported(path))
    throw std::invalid_argument(std::string("error: this CPU cannot run the ") +
                                simd_path_name(path) + " AdamW path");
}

detail::AdamWCoeffs coeffs_for(const AdamWHyper &h, float grad_scale) {
  double t = static_cast<double>(h.step);
  double bc1 = 1.0 - std::pow(h.beta1, t);
  double bc2 = 1.0 - std::pow(h.beta2, t);
  detail::AdamWCoeffs c;
  c.grad_scale = grad_scale;
  c.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  c.beta1 = static_cast<float>(h.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  c.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  c.eps = static_cast<float>(h.eps);
  c.neg_step_size = static_cast<float>(-(h.lr / bc1));
  return c;
}
} // namespace

void adamw_update(float *param, float *m, float *v, const float *grad,
                  int64_t n, const AdamWHyper &hyper, float grad_scale,
                  ThreadPool *pool) {
  adamw_update(param, m, v, grad, n, hyper, grad_scale, pool,
               active_simd_path());
}

void adamw_update(float *param, float *m, float *v, const float *grad,
                  int64_t n, const AdamWHyper &hyper, float grad_scale,
                  ThreadPool *pool, SimdPath path) {
  check_arguments(hyper, n, path);
  const detail::AdamWCoeffs c = coeffs_for(hyper, grad_scale);
  const AdamWKernel kernel = kernel_for(path);
  auto part = [&](int64_t lo, int64_t hi) {
    [[maybe_unused]] FlushDenormals flush;
    kernel(param + lo, m + lo, v + lo, grad + lo, hi - lo, c);
  };
  if (pool)
    pool->parallel_for(n, kAdamWGrain, part);
  else
    part(0, n);
}

void adamw_update_bf16(uint16_t *param, float *m, float *v,
                       const uint16_t *grad, int64_t n,
                       const AdamWHyper &hyper, float grad_scale,
                       uint32_t noise_key, uint32_t index0, ThreadPool *pool) {
  adamw_update_bf16(param, m, v, grad, n, hyper, grad_scale, noise_key, index0,
                    pool, active_simd_path());
}

void adamw_update_bf16(uint16_t *param, float *m, float *v,
                       const uint16_t *grad, int64_t n,
                       const AdamWHyper &hyper, float grad_scale,
                       uint32_t noise_key, uint32_t index0, ThreadPool *pool,
                       SimdPath path) {
  check_arguments(hyper, n, path);
  const detail::AdamWCoeffs c = coeffs_for(hyper, grad_scale);
  const AdamWBf16Kernel kernel = bf16_kernel_for(path);
  auto part = [&](int64_t lo, int64_t hi) {
    [[maybe_unused]] FlushDenormals flush;
    kernel(param + lo, m + lo, v + lo, grad + lo, hi - lo, c, noise_key,
           index0 + static_cast<uint32_t>(lo));
  };
  if (pool)
    pool->parallel_for(n, kAdamWGrain, part);
  else
    part(0, n);
}

} // namespace mtrt::host
